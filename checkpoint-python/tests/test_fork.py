"""Savers across os.fork(): what gunicorn's --preload, Celery's prefork pool and
multiprocessing's default start method on Linux do to a process that already opened one.
Before, every call in a forked child hung for good (the child had the parent's tokio runtime
without its threads), even on a saver the child opened itself."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
import traceback
from typing import Callable

import pytest

from checkpoint_rs import errors
from conftest import open_spec
from graphs import CounterState
from test_api import put_chain

NETWORK = ["postgres", "redis", "mongodb"]


def in_child(body: Callable[[], None], timeout: float = 60.0) -> None:
    """Runs `body` in a forked child; fails with the child's traceback if it raised, and
    kills it if it has not finished within `timeout` seconds (a hang)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            body()
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(write)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child still ran after {timeout} s")
        time.sleep(0.02)
    with os.fdopen(read, "rb") as pipe:
        report = pipe.read().decode()
    assert os.waitstatus_to_exitcode(status) == 0, report or f"child status {status}"


def latest_count(saver, thread_id: str):
    t = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    return None if t is None else t.checkpoint["channel_values"]["count"]


@pytest.mark.parametrize("kind", ["memory", *NETWORK])
def test_a_forked_child_uses_the_saver_its_parent_opened(kind, make_store) -> None:
    """The child's first call opens the saver again in the child (the in-memory saver keeps
    the child's copy of the data); the parent's saver goes on unaffected."""
    store = make_store(kind)
    saver = store.saver()
    put_chain(saver, "before-fork", 3)
    started = saver.list({"configurable": {"thread_id": "before-fork"}})
    assert next(started).metadata["step"] == 2

    def child() -> None:
        assert latest_count(saver, "before-fork") == 2
        put_chain(saver, "from-child", 2)
        assert asyncio.run(saver.aget_tuple({"configurable": {"thread_id": "from-child"}}))
        assert len(list(saver.list({"configurable": {"thread_id": "before-fork"}}))) == 3
        # A list the parent started runs on the parent's connections: its next batch.
        with pytest.raises(errors.ClosedError, match="call list\\(\\) again"):
            list(started)
        if kind != "memory":
            assert latest_count(open_spec(store.spec()), "from-child") == 1

    in_child(child)
    assert [t.metadata["step"] for t in started] == [1, 0]
    # The in-memory saver's child wrote to its own copy.
    assert latest_count(saver, "from-child") == (None if kind == "memory" else 1)
    put_chain(saver, "after-fork", 1)
    assert latest_count(saver, "after-fork") == 0


@pytest.mark.parametrize("kind", NETWORK)
def test_a_forked_child_opens_savers_of_its_own(kind, make_store) -> None:
    store = make_store(kind)
    saver = store.saver()
    put_chain(saver, "t", 1)

    def child() -> None:
        own = open_spec(store.spec())
        put_chain(own, "child", 2)
        own.close()

    in_child(child)
    assert latest_count(saver, "child") == 1


def test_a_sqlite_saver_is_refused_in_a_forked_child_which_opens_its_own(make_store) -> None:
    """SQLite connections, and the locks SQLite keeps for them in the process's memory,
    belong to the parent: the inherited saver raises a ClosedError that says what to do
    instead of hanging; a saver the child opens works."""
    store = make_store("sqlite")
    saver = store.saver()
    put_chain(saver, "parent", 2)

    def child() -> None:
        with pytest.raises(errors.ClosedError, match="opened by process .* which forked"):
            saver.get_tuple({"configurable": {"thread_id": "parent"}})
        with pytest.raises(errors.ClosedError, match="which forked"):
            asyncio.run(saver.aget_tuple({"configurable": {"thread_id": "parent"}}))
        assert saver.closed
        own = open_spec(store.spec())
        assert latest_count(own, "parent") == 1
        put_chain(own, "child", 3)
        own.close()
        saver.close()

    in_child(child)
    assert not saver.closed
    assert latest_count(saver, "child") == 2
    put_chain(saver, "parent", 1)


# -- a graph run by forked workers ----------------------------------------------------------

_GRAPH = None


def _count(state: CounterState) -> CounterState:
    return {"log": [f"step {len(state.get('log', []))}"]}


def _run_thread(thread_id: str) -> int:
    config = {"configurable": {"thread_id": thread_id}}
    for _ in range(3):
        _GRAPH.invoke({"log": []}, config)
    return len(_GRAPH.get_state(config).values["log"])


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_forked_pool_workers_run_a_graph_compiled_before_the_fork(kind, make_store) -> None:
    """A module-level graph with its checkpointer, then a fork-started multiprocessing
    pool (Linux's default) whose workers invoke it, as a preloaded web server does. A SQLite
    saver must be opened after the fork: the workers open their own."""
    global _GRAPH
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(CounterState)
    builder.add_node("count", _count)
    builder.add_edge(START, "count")
    builder.add_edge("count", END)
    store = make_store(kind)
    parent = store.saver()
    _GRAPH = builder.compile(checkpointer=parent)
    assert _run_thread("in-parent") == 3
    if kind == "sqlite":
        # What a worker's initializer does: its own saver, opened after the fork.
        spec = store.spec()

        def initializer() -> None:
            global _GRAPH
            _GRAPH = builder.compile(checkpointer=open_spec(spec))
    else:
        initializer = None
    threads = [f"worker-{n}" for n in range(6)]
    with multiprocessing.get_context("fork").Pool(3, initializer=initializer) as pool:
        counts = pool.map_async(_run_thread, threads).get(timeout=120)
    assert counts == [3] * len(threads)
    for thread_id in threads:
        state = _GRAPH.get_state({"configurable": {"thread_id": thread_id}})
        assert state.values["log"] == ["step 0", "step 1", "step 2"]
    assert _run_thread("in-parent") == 6
