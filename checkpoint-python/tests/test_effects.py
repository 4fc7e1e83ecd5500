"""Seed 002's P0 list with a real LangGraph graph: side effects that a retry, a crash or a
resume never repeats (`once`, keyed by the task), and one run per thread at a time across
processes (`lock_thread`), whose fencing token keeps a stalled holder from writing."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage

import checkpoint_rs
from checkpoint_rs import InvalidInputError, UnavailableError, UnsupportedError
from conftest import BACKENDS, PERSISTENT
from langgraph.types import Command

from graphs import case_graph, effects_of, record, review_graph
from test_graphs import run_worker_until, start_worker


@pytest.mark.parametrize("kind", PERSISTENT)
def test_a_resumed_run_does_not_send_the_email_again(kind, make_store, tmp_path):
    """A worker sends the case's email and dies before the node returns. LangGraph resumes
    the thread from the step's start and runs the node again: a plain node sends a second
    email (the runtime's failure, reproduced first); through `once`, keyed by the task, the
    resumed node gets the first send's result and nothing is sent again."""
    store = make_store(kind)
    config = {"configurable": {"thread_id": "case-1"}}

    plain = tmp_path / "plain"
    run_worker_until(store.spec(), "case-1", plain, "HANGING in send_email", "send_email", "case")
    graph = case_graph(plain).compile(checkpointer=store.saver())
    assert graph.get_state(config).next == ("send_email",)
    graph.invoke(None, config)
    assert effects_of(plain) == ["draft", "email", "email", "close"]

    config = {"configurable": {"thread_id": "case-2"}}
    once = tmp_path / "once"
    spec = store.spec(idempotent=True)
    run_worker_until(spec, "case-2", once, "HANGING in send_email", "send_email", "case-once")
    saver = store.saver(idempotent=True)
    graph = case_graph(once, saver).compile(checkpointer=saver)
    assert graph.get_state(config).next == ("send_email",)
    result = graph.invoke(None, config)
    assert effects_of(once) == ["draft", "email", "close"]
    # The message id the killed worker's send returned, replayed from the ledger.
    assert result["sent"] == "msg-2"
    assert result["steps"] == ["draft", "send_email", "close"]


@pytest.mark.parametrize("kind", PERSISTENT)
async def test_lazy_recovery_shows_an_interrupts_question_once(kind, make_store, tmp_path):
    """Seed 000: the side effect that shows the user an interrupt's question runs after the
    checkpoint is stored, so a crash in between leaves a paused graph nobody is asked
    about. Recovery on read: every read of the thread ensures the question was shown,
    through `once` keyed by the checkpoint. A worker killed in that window: two readers at
    once and a later one show it once. A run that showed it itself: readers show nothing."""
    store = make_store(kind)
    effects = tmp_path / "effects"
    run_worker_until(store.spec(), "review-7", effects, "INTERRUPTED")
    readers = [store.saver(idempotent=True) for _ in range(2)]

    def ensure_question_shown(saver, thread_id: str) -> None:
        graph = review_graph(effects).compile(checkpointer=saver)
        state = graph.get_state({"configurable": {"thread_id": thread_id}})
        for pending in state.interrupts:
            key = saver.effect_key(state.config, "show_question")
            assert pending.value["question"] == "Rebalance the portfolio?"
            saver.once(key, lambda: record(effects, "question-shown"))

    await asyncio.gather(
        *(asyncio.to_thread(ensure_question_shown, r, "review-7") for r in readers)
    )
    ensure_question_shown(readers[0], "review-7")
    assert effects_of(effects) == ["classify", "question-shown"]

    # A run that reaches the interrupt and shows the question itself, as it normally does.
    saver = readers[0]
    graph = review_graph(effects).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "review-8"}}
    graph.invoke({"request": "rebalance?", "steps": []}, config)
    ensure_question_shown(saver, "review-8")
    ensure_question_shown(readers[1], "review-8")
    assert effects_of(effects)[2:] == ["classify", "question-shown"]

    # Answered: nothing is pending, nothing more is shown.
    graph.invoke(Command(resume="hold"), config)
    ensure_question_shown(readers[1], "review-8")
    assert effects_of(effects)[4:] == ["present", "act"]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_racing_callers_run_an_effect_once_and_share_its_outcome(kind, make_store):
    """Two savers on one store (two services) call the same effect at once: one runs it,
    the other waits for its outcome; later calls replay it, LangGraph types included."""
    store = make_store(kind)
    first, second = store.saver(idempotent=True), store.saver(idempotent=True)
    runs = []

    async def effect():
        runs.append(1)
        await asyncio.sleep(0.3)
        return {
            "reply": AIMessage(content="refund issued", id="m-1"),
            "at": datetime(2026, 11, 29, 4, 0, tzinfo=timezone.utc),
        }

    a, b = await asyncio.gather(
        first.aonce("refund:order-1001", effect), second.aonce("refund:order-1001", effect)
    )
    assert len(runs) == 1
    assert a == b
    assert a["reply"] == AIMessage(content="refund issued", id="m-1")
    assert a["at"] == datetime(2026, 11, 29, 4, 0, tzinfo=timezone.utc)
    # The synchronous API sees the same record, and never runs the effect.
    assert second.once("refund:order-1001", lambda: pytest.fail("ran again")) == a

    # Threads of one process (a thread pool serving requests) too.
    sent = []

    def send() -> str:
        sent.append(1)
        time.sleep(0.2)
        return "sent"

    results: list[str] = []
    workers = [
        threading.Thread(target=lambda: results.append(first.once("email:case-9", send)))
        for _ in range(4)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert results == ["sent"] * 4
    assert len(sent) == 1


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_failed_effect_runs_again_and_a_busy_one_is_transient(kind, make_store):
    store = make_store(kind)
    saver = store.saver(idempotent={"pending_wait": 0.3, "claim_ttl": 60})

    def fails():
        raise TimeoutError("smtp timed out")

    with pytest.raises(TimeoutError):
        saver.once("email:case-3", fails)
    # The claim was given up: the retry runs the effect at once.
    assert saver.once("email:case-3", lambda: "sent") == "sent"
    assert saver.once("email:case-3", lambda: "again") == "sent"

    # A holder still running the effect: the other caller waits `pending_wait`, then gets
    # a transient error; the holder's outcome is recorded.
    started = asyncio.Event()

    async def slow():
        started.set()
        await asyncio.sleep(1.0)
        return "slow result"

    holder = asyncio.create_task(saver.aonce("email:case-4", slow))
    await started.wait()
    with pytest.raises(UnavailableError, match="another holder"):
        await store.saver(idempotent={"pending_wait": 0.3}).aonce("email:case-4", slow)
    assert await holder == "slow result"
    assert await saver.aonce("email:case-4", slow) == "slow result"


@pytest.mark.parametrize("kind", BACKENDS)
async def test_an_effect_that_outlives_its_claim_runs_again_and_is_reported(
    kind, make_store, caplog
):
    """The documented bound: an effect running past `claim_ttl` loses its claim to the next
    caller, which runs it again; the first one's outcome is not recorded, and that is
    logged (its result still reaches its caller). The second outcome is the record."""
    store = make_store(kind)
    saver = store.saver(idempotent={"claim_ttl": 0.3, "pending_wait": 5})
    runs = []

    async def effect(name: str, seconds: float) -> str:
        runs.append(name)
        await asyncio.sleep(seconds)
        return name

    async def later():
        await asyncio.sleep(0.5)  # the first claim has expired
        return await saver.aonce("email:case-10", lambda: effect("second", 0.0))

    with caplog.at_level("WARNING", logger="checkpoint_rs"):
        first, second = await asyncio.gather(
            saver.aonce("email:case-10", lambda: effect("first", 1.0)), later()
        )
    assert (first, second) == ("first", "second")
    assert runs == ["first", "second"]
    assert any("could not be recorded" in r.getMessage() for r in caplog.records), caplog.text
    assert await saver.aonce("email:case-10", lambda: effect("third", 0.0)) == "second"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_bad_effect_and_lock_calls_get_typed_errors(kind, make_store):
    store = make_store(kind)

    def fresh(**options):
        # The store's in-memory saver is one per test, whatever the options.
        if kind == "memory":
            return checkpoint_rs.InMemorySaver(**options)
        return store.saver(**options)

    plain = fresh()
    with pytest.raises(UnsupportedError, match="idempotent=True"):
        plain.once("k", lambda: 1)
    with pytest.raises(UnsupportedError, match="idempotent=True"):
        with plain.lock_thread("t"):
            pass
    with pytest.raises(InvalidInputError, match="unknown setting"):
        fresh(idempotent={"lease_tll": 3})
    with pytest.raises(InvalidInputError, match="positive"):
        fresh(idempotent={"lease_ttl": 0})
    saver = fresh(idempotent=True)
    with pytest.raises(InvalidInputError, match="empty"):
        saver.once("", lambda: 1)
    with pytest.raises(InvalidInputError, match="node or task"):
        saver.effect_key({"configurable": {"thread_id": "t"}}, "send_email")
    with pytest.raises(InvalidInputError, match="empty"):
        with saver.lock_thread(""):
            pass
    lock = saver.lock_thread("t")
    with lock:
        with pytest.raises(RuntimeError, match="entered once"):
            lock.__enter__()


@pytest.mark.parametrize("kind", PERSISTENT)
async def test_one_run_per_thread_at_a_time_across_savers(kind, make_store):
    """Two services (two savers on one store) run the same case: the second waits for the
    first's lock, and gets it once the first is done."""
    store = make_store(kind)
    first = store.saver(idempotent=True)
    second = store.saver(idempotent={"lease_wait": 0.3})
    config = {"configurable": {"thread_id": "case-5"}}
    with first.lock_thread("case-5") as held:
        assert held.fence is not None and not held.lost
        graph = case_graph(Path(os.devnull), first).compile(checkpointer=first)
        graph.invoke({"case": "case-5", "steps": []}, config)
        with pytest.raises(UnavailableError, match="leased by another holder"):
            with second.lock_thread("case-5"):
                pass
    async with second.lock_thread("case-5") as next_holder:
        assert next_holder.fence > held.fence
        graph = case_graph(Path(os.devnull), second).compile(checkpointer=second)
        await graph.ainvoke({"case": "case-5", "steps": []}, config)
    assert len(list(first.list(config))) == 10


# Not on the MongoDB-wire test server: a worker stopped while its lease renewal (one
# single-document update) is in flight there can leave the lease document locked, and the
# next holder's update retries on write conflicts for minutes (seen in 1 of 7 runs; the
# server's log: "_update_matching_single_txn retrying on write conflicts"). MongoDB
# finishes a single-document command without its client; the Rust conformance suite
# checks MongoDB's fencing of stale tokens.
@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_a_holder_that_stalled_past_its_lease_cannot_write(kind, make_store, tmp_path):
    """A worker holds case-6 and stalls (SIGSTOP) in its first step past its lease; another
    service takes the case over and finishes it. When the stalled worker wakes up, its
    lease is gone: its writes are refused with StaleFenceError and the thread holds only
    the new holder's run."""
    store = make_store(kind)
    effects = tmp_path / "effects"
    spec = store.spec(idempotent={"lease_ttl": 0.6})
    proc = start_worker(spec, "case-locked", "case-6", effects)
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        locked = proc.stdout.readline().split()
        assert locked[0] == "LOCKED", locked + [proc.stderr.read()]
        assert proc.stdout.readline().strip() == "DRAFTING"
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(1.5)  # the stopped worker cannot renew: its lease expires

        saver = store.saver(idempotent={"lease_wait": 10})
        config = {"configurable": {"thread_id": "case-6"}}
        with saver.lock_thread("case-6") as lock:
            assert lock.fence > int(locked[1])
            graph = case_graph(tmp_path / "takeover", saver).compile(checkpointer=saver)
            graph.invoke({"case": "case-6", "steps": []}, config, durability="sync")

        Path(f"{effects}.go").touch()
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
    assert out.startswith("STALE"), out + err
    assert "fenc" in out.lower(), out
    # The stalled worker sent nothing, and wrote nothing to the thread.
    assert effects_of(effects) == ["draft"]
    assert effects_of(tmp_path / "takeover") == ["draft", "email", "close"]
    state = case_graph(tmp_path / "x", saver).compile(checkpointer=saver).get_state(config)
    assert state.values["steps"] == ["draft", "send_email", "close"]
    assert state.next == ()
