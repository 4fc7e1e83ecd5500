# shellcheck shell=bash
# Redis for checkpoint-redis. Sourced by scripts/test.sh (after scripts/lib.sh). Makes sure
# a Redis server answers on 127.0.0.1:6379 (starting it, or installing it from Debian's
# packages, when needed) and exports CHECKPOINT_TEST_REDIS_URL. The Cluster and AOF servers
# of the Redis tests are started (and stopped) by those tests themselves.

_checkpoint_redis_up() {
  command -v redis-cli >/dev/null 2>&1 &&
    [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null || true)" = "PONG" ]
}

_checkpoint_redis_service() {
  if ! _checkpoint_redis_up; then
    if ! command -v redis-server >/dev/null 2>&1; then
      echo "redis: redis-server not found; installing it from Debian's packages"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
        >/dev/null 2>&1 || echo "redis: apt-get install redis-server failed" >&2
    fi
    command -v redis-server >/dev/null 2>&1 || return 1
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null 2>&1 ||
      redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null 2>&1 || true
    checkpoint_wait 15 _checkpoint_redis_up || return 1
  fi
  export CHECKPOINT_TEST_REDIS_URL=redis://127.0.0.1:6379
  echo "redis: $(redis-server --version | awk '{print $3}') on 127.0.0.1:6379"
}

if ! _checkpoint_redis_service; then
  checkpoint_service_unavailable redis "nothing answers on 127.0.0.1:6379 (see /var/log/redis/ci.log)"
fi
