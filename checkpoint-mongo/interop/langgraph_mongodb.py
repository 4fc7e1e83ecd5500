"""LangGraph's own MongoDB saver, for the tests of checkpoint-mongo's LangGraph reader.

Runs the graphs of checkpoint-sqlite's `interop/langgraph_sqlite.py` (a tool call, an
interrupt left pending, a resumed interrupt, a subgraph, a Send fan-out, a manual state
update, non-primitive values) on LangGraph's `MongoDBSaver` instead. Commands (each prints
one JSON document on stdout):

  write   URI DB        drop database DB at URI, run the graphs on MongoDBSaver there and
                        print what LangGraph reads back from it (`expectations`)
  check   URI DB FILE   FILE holds what checkpoint-mongo read from DB (the same form as
                        `expectations`); load every value of it with LangGraph's serializer
                        and compare with what LangGraph's saver loads; print a summary
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "checkpoint-sqlite", "interop"))

from langgraph.checkpoint.mongodb import MongoDBSaver  # noqa: E402
from langgraph_sqlite import compare, expectations, run_graphs  # noqa: E402
from pymongo import MongoClient  # noqa: E402


def write(uri: str, db: str) -> list[dict]:
    client = MongoClient(uri)
    client.drop_database(db)
    saver = MongoDBSaver(client, db_name=db)
    run_graphs(saver)
    result = expectations(saver)
    client.close()
    return result


def check(uri: str, db: str, read_path: str) -> dict:
    client = MongoClient(uri)
    try:
        return compare(MongoDBSaver(client, db_name=db), read_path)
    finally:
        client.close()


def main() -> None:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "write":
        out: Any = write(args[0], args[1])
    elif cmd == "check":
        out = check(args[0], args[1], args[2])
    else:
        raise SystemExit(f"unknown command {cmd}")
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
