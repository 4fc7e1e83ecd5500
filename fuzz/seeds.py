"""Writes the committed seed corpora of the fuzz targets (corpus/<target>/) from the test
fixtures: every value of checkpoint-sanitize/fixtures/cases (LangGraph, LangChain, OpenAI and
Anthropic message lists as MessagePack and JSON), the whole checkpoints of the LangGraph
SQLite fixture (checkpoint-sqlite/interop/fixture.json, read by the LangGraph decoders), plus
small hand-made stored forms for the Redis, MongoDB, PostgreSQL and SQLite targets (ours and
LangGraph's). Run from the repository root: python3 fuzz/seeds.py"""

import hashlib
import json
import struct
from pathlib import Path

root = Path(__file__).resolve().parent
cases = sorted((root.parent / "checkpoint-sanitize/fixtures/cases").glob("*.json"))


def write(target: str, data: bytes) -> None:
    d = root / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


for case in cases:
    fixture = json.loads(case.read_text())
    data = bytes.fromhex(fixture["hex"])
    write("messages", data)
    write("msgpack" if fixture["type"] == "msgpack" else "json", data)


# LangGraph's whole checkpoints, as its SqliteSaver (and MongoDBSaver) store them.
lg = json.loads((root.parent / "checkpoint-sqlite/interop/fixture.json").read_text())
lg_checkpoints = []
for line in lg["sql"]:
    if line.startswith('INSERT INTO "checkpoints"'):
        blob = bytes.fromhex(line.split("X'", 1)[1].split("'", 1)[0])
        lg_checkpoints.append(blob)
        write("msgpack", blob)


def resp(v) -> bytes:
    if isinstance(v, list):
        return b"*%d\r\n" % len(v) + b"".join(resp(x) for x in v)
    if isinstance(v, int):
        return b":%d\r\n" % v
    return b"$%d\r\n%s\r\n" % (len(v), v)


# A load_tuple reply shape: {tref, record, values, write members, write values}.
write("redis_stored", resp([b"1f1e-id", b"\x00\x01record", [b"\x01msgpack\x00\x91\x01"], [b"~a\x00task\x00\x00"], [b"\x01json\x00[]"]]))
write("redis_stored", resp([]))


def bson_doc(fields: list[tuple[str, object]]) -> bytes:
    body = b""
    for name, value in fields:
        key = name.encode() + b"\x00"
        if isinstance(value, str):
            raw = value.encode() + b"\x00"
            body += b"\x02" + key + struct.pack("<i", len(raw)) + raw
        elif isinstance(value, int):
            body += b"\x12" + key + struct.pack("<q", value)
        elif isinstance(value, bytes):
            body += b"\x05" + key + struct.pack("<i", len(value)) + b"\x00" + value
        elif isinstance(value, list):
            # An array: a document keyed "0", "1", ...
            inner = bson_doc([(str(i), x) for i, x in enumerate(value)])
            body += b"\x04" + key + inner
        elif isinstance(value, dict):
            body += b"\x03" + key + bson_doc(list(value.items()))
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


write("mongo_stored", bson_doc([("t", "thread"), ("n", ""), ("c", "1f1e"), ("ty", "msgpack"), ("v", b"\x91\x01")]))
write("mongo_stored", bson_doc([("k", "task"), ("r", 1), ("i", 0), ("ch", "messages"), ("p", "~a")]))
# LangGraph's own MongoDB documents (langgraph-checkpoint-mongodb): a checkpoint with
# typed metadata leaves, and a pending write.
write("mongo_stored", bson_doc([
    ("thread_id", "t"), ("checkpoint_ns", ""), ("checkpoint_id", "1f1e"), ("type", "msgpack"),
    ("checkpoint", lg_checkpoints[0]),
    ("metadata", {"source": ["msgpack", b"\xa4loop"], "step": ["msgpack", b"\x03"], "parents": {}}),
]))
write("mongo_stored", bson_doc([
    ("thread_id", "t"), ("checkpoint_ns", ""), ("checkpoint_id", "1f1e"), ("task_id", "k"),
    ("task_path", ""), ("idx", -3), ("channel", "__interrupt__"), ("type", "msgpack"), ("value", b"\x90"),
]))


# Stored rows of the SQL backends, parts split at 0xFF (see each crate's `fuzzing` module).
def row(*parts: bytes) -> bytes:
    return b"\xff".join(parts)


# PostgreSQL: checkpoint and metadata jsonb texts (ours, and LangGraph's with an inline
# value), a value type and blob.
pg_checkpoint = json.dumps({
    "v": 4, "id": "1f1e", "ts": "2026-11-24T00:00:00+00:00", "channel_values": {},
    "channel_versions": {"messages": "00000000000000000000000000000002.0.5", "n": 3},
    "versions_seen": {"agent": {"messages": "00000000000000000000000000000001.0.1"}},
    "updated_channels": ["messages"],
}).encode()
write("postgres_stored", row(pg_checkpoint, b'{"source": "loop", "step": 1}', b"msgpack", b"\x91\x01"))
write("postgres_stored", row(
    json.dumps({"v": 1, "id": "1f1d", "channel_values": {"count": 2, "name": "x"},
                "channel_versions": {"count": 1}}).encode(),
    b"{}", b"empty", b"",
))
# SQLite: checkpoint column (channel versions as version keys), metadata, the packed writes'
# index and bytes, and one value row (channel, version key, type, blob).
sqlite_checkpoint = json.dumps({
    "v": 4, "id": "c", "ts": "2026-11-24T00:00:00+00:00",
    "cv": {"messages": "s00000000000000000000000000000002.0.5", "n": "i3"},
    "vs": {}, "uc": None,
}).encode()
writes_index = json.dumps([["task", 0, "~a", "messages", "msgpack", 2], ["task", -3, "~a", "__interrupt__", "json", 2]]).encode()
write("sqlite_stored", row(
    sqlite_checkpoint, b'{"step": 1}', writes_index, b"\x91\x01[]",
    b"messages", b"s00000000000000000000000000000002.0.5", b"msgpack", b"\x91\x01",
))
write("sqlite_stored", row(sqlite_checkpoint, b"{}", b"", b"", b"n", b"i3", b"", b""))
