"""PostgreSQL interop: a thread moves between checkpoint_rs and LangGraph's own
PostgresSaver (langgraph-checkpoint-postgres) on the same tables, in both directions, with a
real graph whose state holds LangChain message objects."""

from __future__ import annotations

from typing import Annotated, TypedDict

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver as LangGraphPostgresSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from conftest import server_url


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph():
    def bot(state: ChatState) -> ChatState:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(content=f"echo: {last}")]}

    builder = StateGraph(ChatState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder


def say(graph, thread_id: str, text: str) -> list:
    config = {"configurable": {"thread_id": thread_id}}
    return graph.invoke({"messages": [HumanMessage(content=text)]}, config)["messages"]


def test_a_thread_moves_between_checkpoint_rs_and_langgraph_postgres(make_store) -> None:
    store = make_store("postgres")
    ours = chat_graph().compile(checkpointer=store.saver())
    schema = store.options["schema"]
    # LangGraph's saver finds the same tables through the connection's search_path.
    with psycopg.connect(
        server_url("postgres"),
        autocommit=True,
        prepare_threshold=0,
        options=f"-c search_path={schema}",
    ) as conn:
        theirs_saver = LangGraphPostgresSaver(conn)
        theirs_saver.setup()  # finds its migrations already applied: a no-op
        theirs = chat_graph().compile(checkpointer=theirs_saver)

        say(ours, "shared", "hello from rust")
        messages = say(theirs, "shared", "hello from python")
        assert [m.content for m in messages] == [
            "hello from rust",
            "echo: hello from rust",
            "hello from python",
            "echo: hello from python",
        ]
        assert [type(m) for m in messages] == [HumanMessage, AIMessage] * 2

        messages = say(ours, "shared", "rust again")
        assert [m.content for m in messages][-2:] == ["rust again", "echo: rust again"]
        assert len(messages) == 6
        assert all(isinstance(m, (HumanMessage, AIMessage)) for m in messages)

        # Both list the same history, newest first, with the same metadata.
        config = {"configurable": {"thread_id": "shared"}}
        mine = [(t.config["configurable"]["checkpoint_id"], t.metadata) for t in store.saver().list(config)]
        lg = [(t.config["configurable"]["checkpoint_id"], t.metadata) for t in theirs_saver.list(config)]
        assert mine == lg
        assert len(mine) == 9  # three turns of input, start and bot steps

        # A thread LangGraph started, continued by checkpoint_rs.
        say(theirs, "theirs-first", "python starts")
        messages = say(ours, "theirs-first", "rust continues")
        assert [m.content for m in messages] == [
            "python starts",
            "echo: python starts",
            "rust continues",
            "echo: rust continues",
        ]
