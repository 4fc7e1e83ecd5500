"""LangGraph's own SQLite saver, for the tests of checkpoint-sqlite's LangGraph file reader.

Commands (each prints one JSON document on stdout):

  write   DB          run real LangGraph graphs on LangGraph's SqliteSaver at file DB (a tool
                      call, an interrupt left pending, a resumed interrupt, a subgraph, a
                      Send fan-out, a manual state update, non-primitive values) and print
                      what LangGraph reads back from it (see `expectations`)
  check   DB FILE     FILE holds what checkpoint-sqlite read from DB (the same form as
                      `expectations`); load every value of it with LangGraph's serializer
                      and compare with what LangGraph's saver loads from DB; print a summary
  same-in-postgres DB URL
                      every checkpoint LangGraph's SqliteSaver reads from DB, read back by
                      LangGraph's PostgresSaver from the PostgreSQL database at URL (where
                      `checkpoint migrate` copied it): print the differences
  fixture             write a fresh database and print {"sql": its dump, "expected": ...}
                      (the committed interop/fixture.json)

Regenerate the committed fixture with:
  python langgraph_sqlite.py fixture > fixture.json
"""

from __future__ import annotations

import base64
import datetime
import json
import operator
import os
import sqlite3
import sys
import tempfile
from importlib.metadata import version
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


class MainState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    counter: Annotated[int, operator.add]
    results: Annotated[list[str], operator.add]
    note: str
    when: datetime.datetime
    tags: set
    payload: bytes


class SubState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    counter: Annotated[int, operator.add]


def agent(state: MainState) -> dict:
    return {
        "messages": [
            AIMessage(
                content="Let me look that up.",
                id="ai-1",
                tool_calls=[{"id": "call_1", "name": "lookup", "args": {"q": "refund policy"}}],
            )
        ],
        "counter": 1,
        "note": "ñandú ✓",
        "when": datetime.datetime(2026, 11, 23, 12, 30, tzinfo=datetime.timezone.utc),
        "tags": {"refund", "vip"},
        "payload": b"\x00\x01\xfe\xff",
    }


def tools(state: MainState) -> dict:
    return {"messages": [ToolMessage(content="30 days", tool_call_id="call_1", id="tool-1")], "counter": 1}


def fan_out(state: MainState) -> list[Send]:
    return [Send("worker", {"item": item}) for item in ("a", "b", "c")]


def worker(arg: dict) -> dict:
    return {"results": [f"done {arg['item']}"]}


def sub_node(state: SubState) -> dict:
    return {"messages": [AIMessage(content="from the subgraph", id="sub-1")], "counter": 10}


def approve(state: MainState) -> dict:
    answer = interrupt({"question": "approve the refund?", "counter": state["counter"]})
    return {"messages": [HumanMessage(content=f"human said {answer}", id="h-answer")], "counter": 1}


def graph(saver):
    sub = StateGraph(SubState)
    sub.add_node("sub_node", sub_node)
    sub.add_edge(START, "sub_node")
    sub.add_edge("sub_node", END)

    builder = StateGraph(MainState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_node("worker", worker)
    builder.add_node("sub", sub.compile())
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_conditional_edges("tools", fan_out, ["worker"])
    builder.add_edge("worker", "sub")
    builder.add_edge("sub", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=saver)


def jsonable(value: Any) -> Any:
    """A JSON form of a value, for readable expectations."""
    if isinstance(value, BaseMessage):
        return {"type": value.type, "content": value.content, "id": value.id}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": b64(bytes(value))}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {"$set": sorted(jsonable(v) for v in value)}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"$repr": repr(value)}


def expectations(saver) -> list[dict]:
    """Every checkpoint in the file, newest first, as LangGraph's saver loads it; each value
    re-encoded with LangGraph's serializer."""
    out = []
    for t in saver.list(None):
        cfg = t.config["configurable"]
        values = {}
        for channel, value in t.checkpoint["channel_values"].items():
            ty, data = saver.serde.dumps_typed(value)
            values[channel] = {"type": ty, "b64": b64(data), "json": jsonable(value)}
        writes = []
        for task_id, channel, value in t.pending_writes:
            ty, data = saver.serde.dumps_typed(value)
            writes.append({"task_id": task_id, "channel": channel, "type": ty, "b64": b64(data), "json": jsonable(value)})
        out.append(
            {
                "thread_id": cfg["thread_id"],
                "checkpoint_ns": cfg["checkpoint_ns"],
                "checkpoint_id": cfg["checkpoint_id"],
                "parent_checkpoint_id": (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                "metadata": t.metadata,
                "v": t.checkpoint["v"],
                "ts": t.checkpoint["ts"],
                "channel_versions": t.checkpoint["channel_versions"],
                "versions_seen": t.checkpoint["versions_seen"],
                "updated_channels": t.checkpoint.get("updated_channels"),
                "values": values,
                "writes": writes,
            }
        )
    return out


def run_graphs(saver) -> None:
    """The threads every interop test reads, written through `saver` (any LangGraph saver)."""
    g = graph(saver)
    # A thread paused at the interrupt, then resumed to the end, then updated by hand.
    done = {"configurable": {"thread_id": "resumed"}, "metadata": {"user": "alice", "run_tag": "it's \"quoted\""}}
    g.invoke({"messages": [HumanMessage(content="Can I get a refund?", id="h-1")]}, done)
    g.invoke(Command(resume="yes"), done)
    g.update_state({"configurable": {"thread_id": "resumed"}}, {"note": "edited by hand"})
    # A thread left paused at the interrupt (its pending writes hold it).
    paused = {"configurable": {"thread_id": "paused"}, "metadata": {"user": "bob"}}
    g.invoke({"messages": [HumanMessage(content="Another refund?", id="h-2")]}, paused)


def write(db: str) -> list[dict]:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    run_graphs(saver)
    result = expectations(saver)
    conn.close()
    return result


def check(db: str, read_path: str) -> dict:
    """Loads every value checkpoint-sqlite read with LangGraph's serializer and compares it
    with what LangGraph's saver loads from the file."""
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        return compare(SqliteSaver(conn), read_path)
    finally:
        conn.close()


def compare(saver, read_path: str) -> dict:
    """Compares what a reader of ours read from LangGraph's store (FILE, in the form of
    `expectations`) with what LangGraph's own `saver` loads from it: every value loaded with
    LangGraph's serializer must be the very object LangGraph loads."""
    with open(read_path) as f:
        ours = json.load(f)
    problems: list[str] = []
    values = writes = 0
    for cp in ours:
        config = {
            "configurable": {
                "thread_id": cp["thread_id"],
                "checkpoint_ns": cp["checkpoint_ns"],
                "checkpoint_id": cp["checkpoint_id"],
            }
        }
        theirs = saver.get_tuple(config)
        where = f"{cp['thread_id']}/{cp['checkpoint_ns']}/{cp['checkpoint_id']}"
        if theirs is None:
            problems.append(f"{where}: LangGraph does not find it")
            continue
        expected_values = theirs.checkpoint["channel_values"]
        if set(cp["values"]) != set(expected_values):
            problems.append(f"{where}: channels {sorted(cp['values'])} != {sorted(expected_values)}")
        for channel, v in cp["values"].items():
            loaded = saver.serde.loads_typed((v["type"], base64.b64decode(v["b64"])))
            values += 1
            if loaded != expected_values.get(channel):
                problems.append(f"{where}: channel {channel}: {loaded!r} != {expected_values.get(channel)!r}")
        expected_writes = sorted_writes(saver, theirs.pending_writes)
        loaded_writes = sorted_writes(
            saver,
            [
                (w["task_id"], w["channel"], saver.serde.loads_typed((w["type"], base64.b64decode(w["b64"]))))
                for w in cp["writes"]
            ],
        )
        writes += len(loaded_writes)
        if loaded_writes != expected_writes:
            problems.append(f"{where}: writes {loaded_writes!r} != {expected_writes!r}")
        if cp["metadata"] != theirs.metadata:
            problems.append(f"{where}: metadata {cp['metadata']!r} != {theirs.metadata!r}")
        if cp["channel_versions"] != theirs.checkpoint["channel_versions"]:
            problems.append(f"{where}: versions {cp['channel_versions']!r} != {theirs.checkpoint['channel_versions']!r}")
    return {"checkpoints": len(ours), "values": values, "writes": writes, "problems": problems}


def sorted_writes(saver, writes) -> list:
    """Pending writes in one order whatever order a saver returns them in (LangGraph's
    MongoDB saver returns them in the collection's natural order): by task, channel and
    serialized value."""
    return sorted(writes, key=lambda w: (w[0], w[1], saver.serde.dumps_typed(w[2])))


def same_in_postgres(db: str, url: str) -> dict:
    from langgraph.checkpoint.postgres import PostgresSaver

    conn = sqlite3.connect(db, check_same_thread=False)
    lite = SqliteSaver(conn)
    problems: list[str] = []
    n = 0
    with PostgresSaver.from_conn_string(url) as pg:
        for t in lite.list(None):
            n += 1
            where = "/".join(t.config["configurable"][k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id"))
            theirs = pg.get_tuple(t.config)
            if theirs is None:
                problems.append(f"{where}: not found in PostgreSQL")
                continue
            for what, a, b in (
                ("checkpoint", t.checkpoint, theirs.checkpoint),
                ("metadata", t.metadata, theirs.metadata),
                ("parent", t.parent_config, theirs.parent_config),
                ("pending writes", t.pending_writes, theirs.pending_writes),
            ):
                if a != b:
                    problems.append(f"{where}: {what}: {a!r} != {b!r}")
    conn.close()
    return {"checkpoints": n, "problems": problems}


def fixture() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "langgraph.sqlite")
        expected = write(db)
        conn = sqlite3.connect(db)
        sql = list(conn.iterdump())
        conn.close()
    return {
        "generator": "interop/langgraph_sqlite.py fixture",
        "versions": {p: version(p) for p in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite")},
        "sql": sql,
        "expected": expected,
    }


def main() -> None:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "write":
        out: Any = write(args[0])
    elif cmd == "check":
        out = check(args[0], args[1])
    elif cmd == "same-in-postgres":
        out = same_in_postgres(args[0], args[1])
    elif cmd == "fixture":
        out = fixture()
    else:
        raise SystemExit(f"unknown command {cmd}")
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
