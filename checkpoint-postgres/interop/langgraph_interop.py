"""Interoperability driver: LangGraph's own PostgreSQL saver on the tables checkpoint-postgres uses.

Commands (all print one JSON document on stdout):

  write    --url URL --schema S --thread T   run a real LangGraph graph (messages with tool calls,
                                             primitive and non-primitive channels, an interrupt)
                                             on LangGraph's PostgresSaver; print what it stored
  read     --url URL --schema S --thread T   load every checkpoint of T with LangGraph's saver and
                                             print it in a JSON-comparable form
  continue --url URL --schema S --thread T   put a successor of T's latest root checkpoint with
                                             LangGraph's saver, changing only channel "note"
  fixture  --url URL --schema S              write a thread and dump the raw table rows plus the
                                             expectations (the committed fixture.json)
  delta-write --url URL --schema S --thread T  run a graph whose messages are a DeltaChannel
                                             (parallel writers, snapshots, a fork) on
                                             LangGraph's PostgresSaver; print the delta history
                                             of every checkpoint of T
  delta-read  --url URL --schema S --thread T  print the delta history LangGraph's saver gives
                                             for every checkpoint of T (channels: --channels)

Regenerate the committed fixture with:
  python langgraph_interop.py fixture --url postgres://postgres@127.0.0.1:5432/test \
      --schema lg_fixture > fixture.json
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from importlib.metadata import version
from typing import Annotated, Any, Optional, TypedDict

import psycopg
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph.message import add_messages
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


class State(MessagesState):
    counter: int
    note: str
    ratio: float
    flag: bool
    maybe: Optional[str]
    payload: bytes
    data: dict


def agent(state: State) -> dict:
    return {
        "messages": [
            AIMessage(
                content="Let me look that up.",
                tool_calls=[{"id": "call_1", "name": "lookup", "args": {"q": "refund policy"}}],
            )
        ],
        "counter": state.get("counter", 0) + 1,
        "note": "ñandú ✓ note",
        "ratio": 0.25,
        "flag": True,
        "maybe": None,
        "payload": b"\x00\x01\xfe\xff",
        "data": {"k": [1, "two", None], "nested": {"x": 1.5}},
    }


def tools(state: State) -> dict:
    return {"messages": [ToolMessage(content="30 days", tool_call_id="call_1")], "counter": state["counter"] + 1}


def approve(state: State) -> dict:
    answer = interrupt({"question": "approve refund?"})
    return {"note": f"answer={answer}"}


def saver_for(url: str, schema: str):
    conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, options=f"-c search_path={schema}")
    return conn, PostgresSaver(conn)


def jsonable(value: Any) -> Any:
    """A JSON form of a channel value for comparisons across languages."""
    if isinstance(value, BaseMessage):
        out = {"type": value.type, "content": value.content, "id": value.id}
        if isinstance(value, AIMessage):
            out["tool_calls"] = [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in value.tool_calls]
        if isinstance(value, ToolMessage):
            out["tool_call_id"] = value.tool_call_id
        return out
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": b64(bytes(value))}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"$repr": repr(value)}


def expectations(saver: PostgresSaver, thread: str) -> list[dict]:
    """Every checkpoint of the thread, values as LangGraph's serializer encodes them."""
    out = []
    for t in saver.list({"configurable": {"thread_id": thread}}):
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
                "channel_versions": t.checkpoint["channel_versions"],
                "versions_seen": t.checkpoint["versions_seen"],
                "values": values,
                "writes": writes,
            }
        )
    return out


def write(url: str, schema: str, thread: str) -> list[dict]:
    conn, saver = saver_for(url, schema)
    saver.setup()
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "approve")
    builder.add_edge("approve", END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage(content="Can I get a refund?", id="h1")]}, config)
    result = expectations(saver, thread)
    conn.close()
    return result


def read(url: str, schema: str, thread: str) -> list[dict]:
    conn, saver = saver_for(url, schema)
    out = []
    for t in saver.list({"configurable": {"thread_id": thread}}):
        cfg = t.config["configurable"]
        out.append(
            {
                "checkpoint_ns": cfg["checkpoint_ns"],
                "checkpoint_id": cfg["checkpoint_id"],
                "parent_checkpoint_id": (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                "metadata": t.metadata,
                "channel_versions": t.checkpoint["channel_versions"],
                "values": {k: jsonable(v) for k, v in t.checkpoint["channel_values"].items()},
                "writes": [[tid, ch, jsonable(v)] for tid, ch, v in t.pending_writes],
            }
        )
    conn.close()
    return out


def continue_thread(url: str, schema: str, thread: str) -> dict:
    conn, saver = saver_for(url, schema)
    latest = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    checkpoint = dict(latest.checkpoint)
    values = dict(checkpoint["channel_values"])
    versions = dict(checkpoint["channel_versions"])
    values["note"] = "written by python"
    versions["note"] = saver.get_next_version(versions.get("note"), None)
    from langgraph.checkpoint.base import create_checkpoint

    successor = create_checkpoint(latest.checkpoint, None, 1)
    successor["channel_values"] = values
    successor["channel_versions"] = versions
    successor["updated_channels"] = ["note"]
    config = saver.put(latest.config, successor, {"source": "update", "step": 99, "writer": "python"}, {"note": versions["note"]})
    conn.close()
    return {"checkpoint_id": config["configurable"]["checkpoint_id"], "note_version": versions["note"]}


def fixture(url: str, schema: str) -> dict:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.execute(f'CREATE SCHEMA "{schema}"')
    expected = write(url, schema, "python-thread")
    rows: dict[str, list] = {}
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        rows["checkpoints"] = [
            {"thread_id": r[0], "checkpoint_ns": r[1], "checkpoint_id": r[2], "parent_checkpoint_id": r[3],
             "type": r[4], "checkpoint": r[5], "metadata": r[6]}
            for r in conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
                                  "checkpoint, metadata FROM checkpoints ORDER BY checkpoint_id")
        ]
        rows["checkpoint_blobs"] = [
            {"thread_id": r[0], "checkpoint_ns": r[1], "channel": r[2], "version": r[3], "type": r[4], "blob": b64(r[5])}
            for r in conn.execute("SELECT thread_id, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
                                  "ORDER BY channel, version")
        ]
        rows["checkpoint_writes"] = [
            {"thread_id": r[0], "checkpoint_ns": r[1], "checkpoint_id": r[2], "task_id": r[3], "idx": r[4],
             "channel": r[5], "type": r[6], "blob": b64(r[7]), "task_path": r[8]}
            for r in conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, "
                                  "task_path FROM checkpoint_writes ORDER BY checkpoint_id, task_id, idx")
        ]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    packages = ["langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "langchain-core", "ormsgpack"]
    return {
        "generated_by": "checkpoint-postgres/interop/langgraph_interop.py fixture",
        "packages": {p: version(p) for p in packages},
        "rows": rows,
        "expected": expected,
    }


def fold_messages(state: list, writes: list) -> list:
    """A batching-invariant reducer for a DeltaChannel of messages."""
    out = list(state or [])
    for w in writes:
        out = add_messages(out, w)
    return out


class DeltaState(TypedDict):
    messages: Annotated[list, DeltaChannel(fold_messages, snapshot_frequency=3)]
    turn: int


def delta_agent(state: DeltaState) -> dict:
    turn = state.get("turn", 0) + 1
    return {"messages": [AIMessage(content=f"turn {turn}", id=f"ai-{turn}")], "turn": turn}


def delta_search(state: DeltaState) -> dict:
    return {"messages": [HumanMessage(content=f"search {state['turn']}", id=f"search-{state['turn']}")]}


def delta_lookup(state: DeltaState) -> dict:
    return {"messages": [HumanMessage(content=f"lookup {state['turn']}", id=f"lookup-{state['turn']}")]}


def delta_route(state: DeltaState) -> list[str] | str:
    return END if state["turn"] >= 4 else ["search", "lookup"]


def delta_history(saver: PostgresSaver, thread: str, channels: list[str]) -> dict:
    """Per checkpoint of the thread, LangGraph's delta history of `channels`, values as its
    serializer encodes them."""
    out = {}
    # list() holds the saver's connection while it yields: collect before asking more.
    for t in list(saver.list({"configurable": {"thread_id": thread}})):
        cfg = t.config["configurable"]
        history = saver.get_delta_channel_history(config=t.config, channels=channels)
        entry = {}
        for channel, h in history.items():
            seed = None
            if "seed" in h:
                ty, data = saver.serde.dumps_typed(h["seed"])
                seed = {"type": ty, "b64": b64(data)}
            writes = []
            for task_id, ch, value in h["writes"]:
                ty, data = saver.serde.dumps_typed(value)
                writes.append({"task_id": task_id, "channel": ch, "type": ty, "b64": b64(data)})
            entry[channel] = {"seed": seed, "writes": writes}
        out[f"{cfg['checkpoint_ns']}|{cfg['checkpoint_id']}"] = entry
    return out


def delta_write(url: str, schema: str, thread: str) -> dict:
    conn, saver = saver_for(url, schema)
    saver.setup()
    builder = StateGraph(DeltaState)
    builder.add_node("agent", delta_agent)
    builder.add_node("search", delta_search)
    builder.add_node("lookup", delta_lookup)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", delta_route, ["search", "lookup", END])
    builder.add_edge("search", "agent")
    builder.add_edge("lookup", "agent")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage(content="start", id="h0")], "turn": 0}, config)
    # A fork: an update on an early checkpoint starts a second branch.
    early = list(graph.get_state_history(config))[-3]
    graph.update_state(early.config, {"messages": [HumanMessage(content="fork", id="fork-1")]})
    final = graph.get_state(config)
    result = {
        "history": delta_history(saver, thread, ["messages"]),
        "final_messages": [jsonable(m) for m in final.values["messages"]],
    }
    conn.close()
    return result


def delta_read(url: str, schema: str, thread: str, channels: list[str]) -> dict:
    conn, saver = saver_for(url, schema)
    result = delta_history(saver, thread, channels)
    conn.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["write", "read", "continue", "fixture", "delta-write", "delta-read"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--thread", default="python-thread")
    parser.add_argument("--channels", default="messages", help="comma-separated, for delta-read")
    args = parser.parse_args()
    if args.command == "write":
        out: Any = write(args.url, args.schema, args.thread)
    elif args.command == "read":
        out = read(args.url, args.schema, args.thread)
    elif args.command == "continue":
        out = continue_thread(args.url, args.schema, args.thread)
    elif args.command == "delta-write":
        out = delta_write(args.url, args.schema, args.thread)
    elif args.command == "delta-read":
        out = delta_read(args.url, args.schema, args.thread, args.channels.split(","))
    else:
        out = fixture(args.url, args.schema)
    json.dump(out, sys.stdout, indent=1, sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
