# Sourced by scripts/test.sh (bash, set -euo pipefail): makes sure a Redis server answers on
# 127.0.0.1:6379, installing and starting it when needed, and exports
# CHECKPOINT_TEST_REDIS_URL. Under CI=true or CHECKPOINT_TEST_REQUIRE=1 a server that cannot
# be started fails the run; otherwise the Redis tests skip with a reason. The Cluster and
# AOF servers of the Redis tests are started (and stopped) by those tests themselves.

redis_service_required() {
  case "${CI:-}:${CHECKPOINT_TEST_REQUIRE:-}" in
    true:* | TRUE:* | 1:* | *:1 | *:true | *:TRUE) return 0 ;;
    *) return 1 ;;
  esac
}

redis_service_up() {
  command -v redis-cli >/dev/null 2>&1 &&
    [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null || true)" = "PONG" ]
}

redis_service_start() {
  if redis_service_up; then
    return 0
  fi
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis: redis-server not found; installing it with apt-get"
    if command -v apt-get >/dev/null 2>&1; then
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
        >/dev/null 2>&1 || echo "redis: apt-get install redis-server failed" >&2
    fi
  fi
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis: redis-server is not available" >&2
    return 1
  fi
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null 2>&1 ||
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null 2>&1 || true
  for _ in $(seq 1 50); do
    if redis_service_up; then
      echo "redis: started on 127.0.0.1:6379"
      return 0
    fi
    sleep 0.1
  done
  echo "redis: could not start redis-server (see /var/log/redis/ci.log)" >&2
  return 1
}

if redis_service_start; then
  echo "redis: $(redis-server --version | awk '{print $3}') on 127.0.0.1:6379"
  export CHECKPOINT_TEST_REDIS_URL=redis://127.0.0.1:6379
elif redis_service_required; then
  echo "redis: required (CI=true or CHECKPOINT_TEST_REQUIRE=1) but unavailable" >&2
  return 1
else
  echo "redis: unavailable; the Redis tests will be skipped" >&2
fi
