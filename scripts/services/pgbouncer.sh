# shellcheck shell=bash
# PgBouncer for checkpoint-postgres's pooler tests. Sourced by scripts/test.sh (after
# scripts/lib.sh). Only makes sure the `pgbouncer` binary exists (installing it from
# Debian's packages when needed) and exports CHECKPOINT_TEST_PGBOUNCER; each test starts
# (and stops) its own PgBouncer in front of the test server.

_checkpoint_pgbouncer_binary() {
  command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }
}

_checkpoint_pgbouncer_service() {
  if [ -z "$(_checkpoint_pgbouncer_binary)" ]; then
    echo "pgbouncer: not found; installing it from Debian's packages"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer; } \
      >/dev/null 2>&1 || echo "pgbouncer: apt-get install pgbouncer failed" >&2
  fi
  local binary
  binary="$(_checkpoint_pgbouncer_binary)" || return 1
  [ -n "$binary" ] || return 1
  # The package's own service is not needed: the tests run private ones.
  if command -v service >/dev/null 2>&1; then service pgbouncer stop >/dev/null 2>&1 || true; fi
  export CHECKPOINT_TEST_PGBOUNCER="$binary"
  echo "pgbouncer: $("$binary" --version 2>/dev/null | head -1)"
}

if ! _checkpoint_pgbouncer_service; then
  checkpoint_service_unavailable pgbouncer "pgbouncer is not installed and could not be"
fi
