"""How many WAL pages a put and a put_writes of the standard workload's W1 write, against a
bare INSERT+COMMIT of a row of the same bytes (the benchmark's put floor).

Runs with Python's own sqlite3 module on a fresh file whose schema is this crate's
migrations, read from `src/schema.rs`; the rows go through the same views the saver writes
(`checkpoint_put`, `checkpoint_put_writes`), with W1's shapes (50 threads, 20 steps, a 64 KB
value at step 0, a message list growing by ~540 bytes a step, a 1 KB scratch value, two 1 KB
pending writes, three metadata entries). WAL checkpoints are off, so the WAL's growth is
what each commit wrote; pages are attributed to tables and indexes with `dbstat`.

    python3 checkpoint-sqlite/tools/wal_pages.py
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import sqlite3
import struct
import tempfile

SCHEMA_RS = pathlib.Path(__file__).resolve().parent.parent / "src" / "schema.rs"
NOW_MS = "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
T, S = 50, 20
PAGE = 4096


def schema() -> str:
    src = SCHEMA_RS.read_text()
    body = src.split("const MIGRATIONS: &[&str] = &[", 1)[1].split("\n];", 1)[0]
    # The migrations in order, each a string literal of the array (no escapes inside).
    migrations = re.findall(r'"([^"\\]*)"', body)
    return "\n".join(migrations).replace("NOW_MS", NOW_MS)


def main() -> None:
    tmp = tempfile.mkdtemp()
    db = os.path.join(tmp, "w1.db")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute("PRAGMA wal_autocheckpoint=0")
    c.executescript(schema())
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = db + "-wal"
    size = lambda: os.path.getsize(wal) if os.path.exists(wal) else 0  # noqa: E731

    big = os.urandom(65_539)
    messages = [os.urandom(540) for _ in range(S)]
    heads: dict[str, str] = {}
    put_frames = writes_frames = 0
    n = 0
    for step in range(S):
        for th in range(T):
            thread = f"thread-{th:05d}"
            n += 1
            cid = f"1f1e{n // 65536:04x}-{n % 65536:04x}-6000-8000-{th:012x}"
            version = lambda c: "s%032d.%016d" % (step + 1, th * 10 + c)  # noqa: E731
            cv = {"messages": version(1), "scratch": version(2), "big_doc": "s%032d.%016d" % (1, th)}
            checkpoint = json.dumps({
                "v": 4, "id": cid, "ts": "2026-11-23T21:18:44.808785+00:00", "cv": cv,
                "vs": {} if step == 0 else {"agent": {"messages": "s" + "0" * 48, "scratch": "s" + "0" * 48}},
                "uc": ["messages", "scratch"],
            })
            values = [("messages", b"".join(messages[: step + 1])), ("scratch", os.urandom(1027))]
            if step == 0:
                values.append(("big_doc", big))
            index, packed = [], bytearray()
            for channel, data in values:
                index.append([channel, cv[channel], "msgpack", len(packed) + 1, len(data)])
                packed += data
            entries = ['"parents"{}', '"source""loop"', f'"step"{step}.0']
            before = size()
            c.execute(
                "INSERT INTO checkpoint_put VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (thread, "", cid, heads.get(thread), 0, None, checkpoint,
                 json.dumps({"source": "loop", "step": step, "parents": {}}), json.dumps(entries),
                 json.dumps(index), bytes(packed), None),
            )
            put_frames += (size() - before) // (PAGE + 24)
            heads[thread] = cid
            w = [os.urandom(1027), os.urandom(1027)]
            before = size()
            c.execute(
                "INSERT INTO checkpoint_put_writes VALUES (?,?,?,?,?,?,?,?,?,?)",
                (thread, "", cid, f"task-{step}", "", 0, None,
                 json.dumps([[0, "messages", "msgpack", 1, 1027], [1, "scratch", "msgpack", 1028, 1027]]),
                 w[0] + w[1], None),
            )
            writes_frames += (size() - before) // (PAGE + 24)

    # Which b-trees the puts and writes touched.
    names = dict(c.execute("SELECT pageno, name FROM dbstat"))
    tally: collections.Counter = collections.Counter()
    with open(wal, "rb") as f:
        f.read(32)
        while header := f.read(24):
            page = struct.unpack(">I", header[:4])[0]
            f.read(PAGE)
            tally[names.get(page, "?")] += 1

    c.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, payload BLOB)")
    row = os.urandom(len(messages[0]) * (S // 2 + 1) + 1027)
    before = size()
    for _ in range(500):
        c.execute("INSERT INTO floor (payload) VALUES (?)", (row,))
    floor_frames = (size() - before) // (PAGE + 24)
    c.close()

    print(f"WAL pages per put:        {put_frames / (T * S):.1f}")
    print(f"WAL pages per put_writes: {writes_frames / (T * S):.1f}")
    print(f"WAL pages per floor row:  {floor_frames / 500:.1f} ({len(row)} bytes)")
    print("pages per W1 step (a put and a put_writes), by b-tree:")
    for name, count in tally.most_common():
        print(f"  {name:40} {count / (T * S):.2f}")


if __name__ == "__main__":
    main()
