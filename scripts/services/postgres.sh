# shellcheck shell=bash
# PostgreSQL for checkpoint-postgres. Sourced by scripts/test.sh (after scripts/lib.sh).
# Makes sure PostgreSQL answers on 127.0.0.1:5432 (starting it, or installing it from
# Debian's packages, when needed) and exports CHECKPOINT_TEST_POSTGRES_URL. The Python
# LangGraph the interoperability tests need comes from langgraph.sh.

_checkpoint_pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

_checkpoint_pg_service() {
  if ! _checkpoint_pg_up; then
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
      echo "postgres: not installed; installing it from Debian's packages"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
        >/dev/null 2>&1 || echo "postgres: apt-get install postgresql failed" >&2
    fi
    if command -v pg_ctlcluster >/dev/null 2>&1; then
      local version
      for version in $(ls /etc/postgresql 2>/dev/null); do
        pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || true
      done
    fi
    checkpoint_wait 30 _checkpoint_pg_up || return 1
  fi
  # The test database, for a fresh install that lacks it (this machine kind has it, with
  # trust access for user postgres).
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test" 2>/dev/null || true
  export CHECKPOINT_TEST_POSTGRES_URL="${CHECKPOINT_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
  echo "postgres: up at 127.0.0.1:5432"
}

if ! _checkpoint_pg_service; then
  checkpoint_service_unavailable postgres "nothing answers on 127.0.0.1:5432"
fi
