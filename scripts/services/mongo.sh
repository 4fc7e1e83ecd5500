# shellcheck shell=bash
# MongoDB-wire test server for checkpoint-mongo. Sourced by scripts/test.sh (under
# `set -euo pipefail`, from the repository root, after scripts/lib.sh).
#
# * SecantusDB (a MongoDB-wire server on WiredTiger, pinned in mongo.requirements.txt; a
#   separate process, never linked) is installed into a virtualenv when missing. It reports
#   itself as the primary of a one-node replica set, so sessions and transactions work.
# * If something already answers `ping` on 127.0.0.1:27017 (a mongod, or a server this script
#   started earlier), it is used as is; otherwise SecantusDB is started there with a fresh
#   storage directory, and the command that stops it and removes its storage is appended to
#   the bash array `cleanup_cmds`.
# * Exports CHECKPOINT_TEST_MONGO_URL=mongodb://127.0.0.1:27017 once `ping` answers.
#
# Environment: CHECKPOINT_MONGO_VENV (default: .venv-secantus in the repository root),
# CHECKPOINT_MONGO_START_TIMEOUT (seconds to wait for `ping`, default 90). Exports
# CHECKPOINT_TEST_MONGO_URL and CHECKPOINT_TEST_SECANTUSD (the server's executable).

_checkpoint_mongo_service() {
  local host=127.0.0.1 port=27017
  local venv="${CHECKPOINT_MONGO_VENV:-$PWD/.venv-secantus}"
  local timeout="${CHECKPOINT_MONGO_START_TIMEOUT:-90}"
  local reqs
  reqs="$(dirname "${BASH_SOURCE[0]}")/mongo.requirements.txt"
  checkpoint_venv "$venv" "$reqs" || {
    echo "mongo: could not install the test server's virtualenv" >&2
    return 1
  }
  # `ping` with the driver the server's package brings (pymongo).
  _checkpoint_mongo_ping() {
    "$venv/bin/python" - "$host" "$port" <<'PY' >/dev/null 2>&1
import sys
import pymongo
client = pymongo.MongoClient(sys.argv[1], int(sys.argv[2]), directConnection=True,
                             serverSelectionTimeoutMS=2000, connectTimeoutMS=2000)
sys.exit(0 if client.admin.command("ping").get("ok") == 1 else 1)
PY
  }
  # The server itself, for the tests that start private instances (restarts under load).
  export CHECKPOINT_TEST_SECANTUSD="$venv/bin/secantusd-py"
  if _checkpoint_mongo_ping; then
    echo "mongo: a server already answers ping on $host:$port; using it"
    export CHECKPOINT_TEST_MONGO_URL="mongodb://$host:$port"
    return 0
  fi
  local storage log pid
  storage="$(mktemp -d "${TMPDIR:-/tmp}/checkpoint-mongo-test.XXXXXX")"
  log="$storage.log"
  echo "mongo: starting SecantusDB on $host:$port (storage $storage, log $log)"
  "$venv/bin/secantusd-py" --host "$host" --port "$port" --storage-path "$storage/data" \
    --log-level WARNING >"$log" 2>&1 &
  pid=$!
  # Stop it (TERM, then KILL after 10 s) and remove its storage when the run ends.
  cleanup_cmds+=("kill $pid 2>/dev/null; for _ in \$(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill -9 $pid 2>/dev/null; rm -rf '$storage' '$log'")
  _checkpoint_mongo_alive_and_pinging() {
    kill -0 "$pid" 2>/dev/null || return 0 # exited: stop waiting, reported below
    _checkpoint_mongo_ping
  }
  if ! checkpoint_wait "$timeout" _checkpoint_mongo_alive_and_pinging || ! kill -0 "$pid" 2>/dev/null; then
    echo "mongo: SecantusDB did not answer ping within ${timeout}s; its log:" >&2
    tail -n 40 "$log" >&2 || true
    return 1
  fi
  echo "mongo: SecantusDB answers ping on $host:$port (pid $pid)"
  export CHECKPOINT_TEST_MONGO_URL="mongodb://$host:$port"
}

if ! _checkpoint_mongo_service; then
  checkpoint_service_unavailable mongo "no MongoDB test server on 127.0.0.1:27017"
fi
