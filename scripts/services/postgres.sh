# Sourced by scripts/test.sh. Makes sure PostgreSQL answers on 127.0.0.1:5432 (starting or
# installing it when needed), exports CHECKPOINT_TEST_POSTGRES_URL, and prepares the Python
# LangGraph environment the interoperability test needs (CHECKPOINT_TEST_LANGGRAPH_PYTHON).

pg_url="${CHECKPOINT_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
pg_required() { [ "${CI:-}" = "true" ] || [ "${CHECKPOINT_TEST_REQUIRE:-}" = "1" ]; }

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

if ! pg_up; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "postgres: not installed; installing from Debian packages"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) || true
  fi
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    for version in $(ls /etc/postgresql 2>/dev/null); do
      pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || true
    done
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi

if pg_up; then
  # The test database and trust access are what this machine kind provides; create the
  # database if a fresh install lacks it.
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test" 2>/dev/null || true
  export CHECKPOINT_TEST_POSTGRES_URL="$pg_url"
  echo "postgres: up at 127.0.0.1:5432"
else
  echo "postgres: NOT available on 127.0.0.1:5432" >&2
  if pg_required; then return 1; fi
fi

# Python LangGraph, pinned, for tests/interop.rs (both directions, against the real library).
lg_venv="${CHECKPOINT_LANGGRAPH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/checkpoint-rs/venv-langgraph}"
lg_reqs="$(dirname "${BASH_SOURCE[0]}")/../../checkpoint-postgres/interop/requirements.txt"
lg_stamp="$lg_venv/.requirements"
if [ ! -x "$lg_venv/bin/python" ] || ! cmp -s "$lg_reqs" "$lg_stamp"; then
  echo "postgres: installing the Python LangGraph interop environment into $lg_venv"
  if python3 -m venv "$lg_venv" && "$lg_venv/bin/pip" install -q --disable-pip-version-check -r "$lg_reqs"; then
    cp "$lg_reqs" "$lg_stamp"
  else
    echo "postgres: could not install the Python LangGraph environment" >&2
    if pg_required; then return 1; fi
  fi
fi
if [ -x "$lg_venv/bin/python" ] && cmp -s "$lg_reqs" "$lg_stamp"; then
  export CHECKPOINT_TEST_LANGGRAPH_PYTHON="$lg_venv/bin/python"
fi
