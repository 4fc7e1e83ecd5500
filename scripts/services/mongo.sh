# shellcheck shell=bash
# MongoDB-wire test server for checkpoint-mongo. Sourced by scripts/test.sh (under
# `set -euo pipefail`, from the repository root); safe to source by hand too:
#
#   cleanup_cmds=(); source scripts/services/mongo.sh
#
# * If something already answers `ping` on 127.0.0.1:27017 (a mongod, or a server this
#   script started earlier), it is used as is.
# * Otherwise SecantusDB (a GPL MongoDB-wire server on WiredTiger; run only as a separate
#   process, never linked) is installed when missing into a virtualenv, pinned to
#   SecantusDB==0.7.0b3, and started on 127.0.0.1:27017 with a fresh storage directory.
#   It reports itself as the primary of a one-node replica set, so sessions and
#   multi-document transactions work. The command that stops it and removes its storage is
#   appended to the bash array `cleanup_cmds`.
# * Exports CHECKPOINT_TEST_MONGO_URL=mongodb://127.0.0.1:27017 once `ping` answers.
#
# Under CI=true or CHECKPOINT_TEST_REQUIRE=1 any failure returns 1 (the test run fails);
# otherwise it prints why and returns 0, and the MongoDB tests skip themselves.
#
# Environment: CHECKPOINT_MONGO_VENV (default: .venv-secantus in the repository root),
# CHECKPOINT_MONGO_START_TIMEOUT (seconds to wait for `ping`, default 90).

_checkpoint_mongo_ping() {
  # ping over the wire protocol (OP_MSG) with nothing but the Python standard library,
  # so it works before the virtualenv exists. Exit status 0 when the reply has ok: 1.
  "$1" - "$2" "$3" <<'PY'
import socket, struct, sys

host, port = sys.argv[1], int(sys.argv[2])

def cstring(s):
    return s.encode() + b"\x00"

def bson(elements):
    body = b"".join(elements) + b"\x00"
    return struct.pack("<i", len(body) + 4) + body

def top_level(doc):
    """Yields (name, type, raw value bytes) of a BSON document's top-level elements."""
    sizes = {0x01: 8, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16,
             0x7F: 0, 0xFF: 0}
    i, end = 4, struct.unpack_from("<i", doc)[0] - 1
    while i < end:
        kind = doc[i]
        name_end = doc.index(b"\x00", i + 1)
        name = doc[i + 1:name_end].decode()
        j = name_end + 1
        if kind in sizes:
            n = sizes[kind]
        elif kind in (0x02, 0x0D, 0x0E):
            n = 4 + struct.unpack_from("<i", doc, j)[0]
        elif kind in (0x03, 0x04):
            n = struct.unpack_from("<i", doc, j)[0]
        elif kind == 0x05:
            n = 5 + struct.unpack_from("<i", doc, j)[0]
        else:
            raise ValueError("unexpected BSON type %d" % kind)
        yield name, kind, doc[j:j + n]
        i = j + n

command = bson([b"\x10" + cstring("ping") + struct.pack("<i", 1),
                b"\x02" + cstring("$db") + struct.pack("<i", 6) + cstring("admin")])
payload = struct.pack("<I", 0) + b"\x00" + command
message = struct.pack("<iiii", 16 + len(payload), 1, 0, 2013) + payload
try:
    with socket.create_connection((host, port), timeout=2) as s:
        s.settimeout(5)
        s.sendall(message)
        header = b""
        while len(header) < 16:
            chunk = s.recv(16 - len(header))
            if not chunk:
                sys.exit(1)
            header += chunk
        length = struct.unpack_from("<i", header)[0]
        body = b""
        while len(body) < length - 16:
            chunk = s.recv(length - 16 - len(body))
            if not chunk:
                sys.exit(1)
            body += chunk
except OSError:
    sys.exit(1)
if struct.unpack_from("<i", header, 12)[0] != 2013 or body[4] != 0:
    sys.exit(1)
for name, kind, raw in top_level(body[5:]):
    if name == "ok":
        value = {0x01: lambda r: struct.unpack("<d", r)[0], 0x10: lambda r: struct.unpack("<i", r)[0],
                 0x12: lambda r: struct.unpack("<q", r)[0], 0x08: lambda r: r[0]}.get(kind)
        sys.exit(0 if value and value(raw) == 1 else 1)
sys.exit(1)
PY
}

_checkpoint_mongo_service() {
  local host=127.0.0.1 port=27017 version=0.7.0b3
  local venv="${CHECKPOINT_MONGO_VENV:-$PWD/.venv-secantus}"
  local timeout="${CHECKPOINT_MONGO_START_TIMEOUT:-90}"
  local python
  python="$(command -v python3 || true)"
  if [ -z "$python" ]; then
    echo "mongo: python3 is not installed; it is needed to run the MongoDB test server" >&2
    return 1
  fi

  if _checkpoint_mongo_ping "$python" "$host" "$port"; then
    echo "mongo: a server already answers ping on $host:$port; using it"
    export CHECKPOINT_TEST_MONGO_URL="mongodb://$host:$port"
    return 0
  fi

  # Install (or repair) the pinned server in its own virtualenv.
  if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('SecantusDB') != '$version')" 2>/dev/null \
    || [ ! -x "$venv/bin/secantusd-py" ]; then
    echo "mongo: installing SecantusDB==$version into $venv"
    rm -rf "$venv"
    if ! "$python" -m venv "$venv"; then
      echo "mongo: could not create the virtualenv $venv" >&2
      return 1
    fi
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "SecantusDB==$version"; then
      echo "mongo: could not install SecantusDB==$version" >&2
      return 1
    fi
  fi

  local storage log pid waited=0
  storage="$(mktemp -d "${TMPDIR:-/tmp}/checkpoint-mongo-test.XXXXXX")"
  log="$storage.log"
  echo "mongo: starting SecantusDB $version on $host:$port (storage $storage, log $log)"
  "$venv/bin/secantusd-py" --host "$host" --port "$port" --storage-path "$storage/data" \
    --log-level WARNING >"$log" 2>&1 &
  pid=$!
  # Stop it (TERM, then KILL after 10 s) and remove its storage when the run ends.
  cleanup_cmds+=("kill $pid 2>/dev/null; for _ in \$(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill -9 $pid 2>/dev/null; rm -rf '$storage' '$log'")

  while ! _checkpoint_mongo_ping "$python" "$host" "$port"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "mongo: SecantusDB exited during start-up; its log:" >&2
      tail -n 40 "$log" >&2 || true
      return 1
    fi
    if [ "$waited" -ge "$((timeout * 4))" ]; then
      echo "mongo: SecantusDB did not answer ping within ${timeout}s; its log:" >&2
      tail -n 40 "$log" >&2 || true
      return 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
  echo "mongo: SecantusDB answers ping on $host:$port (pid $pid)"
  export CHECKPOINT_TEST_MONGO_URL="mongodb://$host:$port"
}

if ! _checkpoint_mongo_service; then
  case "${CI:-}:${CHECKPOINT_TEST_REQUIRE:-}" in
    true:* | TRUE:* | 1:* | *:1 | *:true)
      echo "mongo: FAILED to provide the MongoDB test server, which this run requires" >&2
      return 1
      ;;
    *)
      echo "mongo: no MongoDB test server; checkpoint-mongo's server tests will be skipped" >&2
      ;;
  esac
fi
