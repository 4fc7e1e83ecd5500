"""The saver API beyond the conformance suite: the synchronous methods, streaming lists
longer than a batch, the delta history against LangGraph's own default walk, versions,
and typed errors."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import socket
import subprocess
import sqlite3
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint

import checkpoint_rs
from checkpoint_rs import errors
from conftest import BACKENDS, servers_required


def put_chain(saver, thread_id: str, n: int, ns: str = "") -> list[str]:
    """n checkpoints in a line, each with one pending write to `log` and a new `count`."""
    ids, config = [], {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    version = None
    for step in range(n):
        c = empty_checkpoint()
        version = saver.get_next_version(version, None)
        c["channel_values"] = {"count": step}
        c["channel_versions"] = {"count": version}
        config = saver.put(config, c, {"source": "loop", "step": step, "parents": {}}, {"count": version})
        saver.put_writes(config, [("log", f"wrote {step}")], f"task-{step}", task_path="~root")
        ids.append(config["configurable"]["checkpoint_id"])
    return ids


@pytest.mark.parametrize("kind", BACKENDS)
def test_sync_api_round_trip_and_long_lists(kind, make_store) -> None:
    saver = make_store(kind).saver()
    ids = put_chain(saver, "long", 150)
    config = {"configurable": {"thread_id": "long"}}
    latest = saver.get_tuple(config)
    assert latest.config["configurable"]["checkpoint_id"] == ids[-1]
    assert latest.checkpoint["channel_values"] == {"count": 149}
    assert latest.pending_writes == [("task-149", "log", "wrote 149")]
    assert latest.parent_config["configurable"]["checkpoint_id"] == ids[-2]
    # More than two batches of the stream, in order, synchronous and asynchronous.
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)]
    assert listed == ids[::-1]

    async def alist():
        return [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(config)]

    assert asyncio.run(alist()) == ids[::-1]
    assert [t.metadata["step"] for t in saver.list(config, limit=3)] == [149, 148, 147]
    before = {"configurable": {"thread_id": "long", "checkpoint_id": ids[100]}}
    assert len(list(saver.list(config, before=before))) == 100
    hits = list(saver.list(None, filter={"step": 7}))
    assert [t.config["configurable"]["checkpoint_id"] for t in hits] == [ids[7]]

    saver.copy_thread("long", "copy")
    assert len(list(saver.list({"configurable": {"thread_id": "copy"}}))) == 150
    saver.prune(["copy"], strategy="keep_latest")
    assert len(list(saver.list({"configurable": {"thread_id": "copy"}}))) == 1
    saver.delete_thread("long")
    assert saver.get_tuple(config) is None


@pytest.mark.parametrize("kind", BACKENDS)
async def test_list_threads_pages_through_the_thread_ids(kind, make_store) -> None:
    saver = make_store(kind).saver()
    ids = [f"t-{i:03d}" for i in range(150)]
    for thread_id in reversed(ids):
        put_chain(saver, thread_id, 1)
    # More than two batches of the stream, ascending.
    assert list(saver.list_threads()) == ids
    assert list(saver.list_threads(limit=10)) == ids[:10]
    assert list(saver.list_threads(limit=0)) == []
    pages, after = [], None
    while page := list(saver.list_threads(after=after, limit=40)):
        pages.append(page)
        after = page[-1]
    assert [len(p) for p in pages] == [40, 40, 40, 30]
    assert [t for p in pages for t in p] == ids
    # After a thread deleted since, or any string.
    saver.delete_thread("t-001")
    assert list(saver.list_threads(after="t-001", limit=1)) == ["t-002"]
    assert list(saver.list_threads(after="t-0005", limit=2)) == ["t-002", "t-003"]
    assert list(saver.list_threads(after="")) == ids[:1] + ids[2:]
    assert [t async for t in saver.alist_threads(after="t-147")] == ["t-148", "t-149"]
    assert [t async for t in saver.alist_threads(limit=2)] == ["t-000", "t-002"]
    assert len(list(saver.list_threads(limit=2**70))) == 149
    for bad in [{"limit": -1}, {"limit": 1.5}, {"limit": True}, {"after": 5}]:
        with pytest.raises(errors.InvalidInputError):
            list(saver.list_threads(**bad))


@pytest.mark.parametrize("kind", BACKENDS)
async def test_delta_history_matches_langgraphs_default_walk(kind, make_store) -> None:
    saver = make_store(kind).saver()
    ids = put_chain(saver, "delta", 12)
    target = {"configurable": {"thread_id": "delta", "checkpoint_ns": "", "checkpoint_id": ids[-1]}}
    channels = ["log", "count", "absent"]
    ours = await saver.aget_delta_channel_history(config=target, channels=channels)
    walked = await BaseCheckpointSaver.aget_delta_channel_history(
        saver, config=target, channels=channels
    )
    assert ours == walked
    assert ours["count"] == {"writes": [], "seed": 10}
    assert ours["log"]["writes"] == [(f"task-{i}", "log", f"wrote {i}") for i in range(11)]
    assert "seed" not in ours["absent"]
    assert saver.get_delta_channel_history(config=target, channels=channels) == ours
    assert await saver.aget_delta_channel_history(config=target, channels=[]) == {}


def test_versions_are_langgraphs_strings() -> None:
    saver = checkpoint_rs.InMemorySaver()
    v1 = saver.get_next_version(None, None)
    v2 = saver.get_next_version(v1, None)
    assert v1.startswith("0" * 31 + "1.") and v2.startswith("0" * 31 + "2.")
    assert v2 > v1
    assert saver.get_next_version(7, None).startswith("0" * 31 + "8.")


@pytest.mark.parametrize("kind", BACKENDS)
async def test_conflict_error_names_the_heads(kind, make_store) -> None:
    saver = make_store(kind).saver(compare_and_set=True)
    root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first = empty_checkpoint()
    stored = await saver.aput(root, first, {"step": 0}, {})
    second = empty_checkpoint()
    await saver.aput(stored, second, {"step": 1}, {})
    stale = empty_checkpoint()
    with pytest.raises(checkpoint_rs.ConflictError) as raised:
        await saver.aput(stored, stale, {"step": 1}, {})
    assert isinstance(raised.value, RuntimeError)
    assert (raised.value.thread_id, raised.value.checkpoint_ns) == ("t", "")
    assert raised.value.expected == first["id"] and raised.value.found == second["id"]
    assert (await saver.aget_tuple(root)).checkpoint["id"] == second["id"]


def test_bad_input_gets_typed_errors(tmp_path) -> None:
    saver = checkpoint_rs.SqliteSaver(str(tmp_path / "x.db"))
    with pytest.raises(errors.InvalidInputError) as raised:
        saver.put({"configurable": {"thread_id": ""}}, empty_checkpoint(), {}, {})
    assert isinstance(raised.value, ValueError) and "thread" in str(raised.value)
    with pytest.raises(ValueError, match="prune strategy"):
        saver.prune(["t"], strategy="keep_some")
    with pytest.raises(errors.InvalidInputError):
        checkpoint_rs.PostgresSaver("not a url")
    with pytest.raises(errors.InvalidInputError, match="no option"):
        checkpoint_rs.SqliteSaver(str(tmp_path / "y.db"), schema="s")
    with pytest.raises(errors.InvalidInputError, match="transaction_pooling"):
        checkpoint_rs.SqliteSaver(str(tmp_path / "y.db"), transaction_pooling=True)
    with pytest.raises(errors.InvalidInputError, match="database"):
        checkpoint_rs.MongoSaver("mongodb://127.0.0.1:1")
    with pytest.raises(TypeError, match="version"):
        c = empty_checkpoint()
        c["channel_versions"] = {"x": 1.5}
        saver.put({"configurable": {"thread_id": "t"}}, c, {}, {"x": 1.5})
    with pytest.raises(errors.UnavailableError) as raised:
        checkpoint_rs.RedisSaver("redis://127.0.0.1:1")
    assert isinstance(raised.value, ConnectionError)
    # Nothing was stored by any of the rejected calls.
    assert list(saver.list(None)) == []
    # Not a path (the object's repr once became a file name).
    with pytest.raises(TypeError, match="path or a sqlite3.Connection"):
        checkpoint_rs.SqliteSaver(object())
    with pytest.raises(TypeError, match="PostgresSaver takes a connection URL; got a Conn"):
        checkpoint_rs.PostgresSaver(type("Connection", (), {})())
    with pytest.raises(errors.InvalidInputError, match="in memory"):
        checkpoint_rs.SqliteSaver(sqlite3.connect(":memory:"))


def test_a_sqlite_saver_opens_the_file_of_a_sqlite3_connection(tmp_path) -> None:
    """LangGraph's SqliteSaver takes a sqlite3 connection; so does this one (the file it
    is connected to), and the caller's connection stays open and usable."""
    conn = sqlite3.connect(tmp_path / "agent.db", check_same_thread=False)
    with checkpoint_rs.SqliteSaver(conn) as saver:
        saver.put({"configurable": {"thread_id": "t"}}, empty_checkpoint(), {}, {})
    assert checkpoint_rs.SqliteSaver(tmp_path / "agent.db").get_tuple(
        {"configurable": {"thread_id": "t"}}
    )
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_redis_server_that_would_evict_threads_is_refused(tmp_path) -> None:
    server = shutil.which("redis-server")
    if server is None:
        if servers_required():
            pytest.fail("redis-server is required under CI=true or CHECKPOINT_TEST_REQUIRE=1")
        pytest.skip("no redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path),
         "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        with pytest.raises(errors.BackendError, match="allkeys-lru"):
            checkpoint_rs.RedisSaver(url)
        with checkpoint_rs.RedisSaver(url, allow_eviction=True) as saver:
            assert list(saver.list(None)) == []
        with pytest.raises(errors.InvalidInputError, match="allow_eviction"):
            checkpoint_rs.SqliteSaver(str(tmp_path / "z.db"), allow_eviction=True)
    finally:
        proc.kill()
        proc.wait()


TTL_BACKENDS = ["memory", "sqlite", "postgres", "redis"]


@pytest.mark.parametrize("kind", BACKENDS)
def test_thread_ttls(kind, make_store) -> None:
    """LangGraph's Redis-saver `ttl` option, per-thread TTLs and pins, refresh on read and
    sweeping, on every backend that has TTLs; typed refusals on the others."""
    store = make_store(kind)
    if kind not in TTL_BACKENDS:
        for ttl in ({"default_ttl": 1}, {"sweep_interval_minutes": 1}):
            with pytest.raises(errors.InvalidInputError, match="ttl"):
                store.saver(ttl=ttl)
        saver = store.saver(ttl={})  # an empty ttl asks for nothing
        assert saver.capabilities["ttl"] is False
        with pytest.raises(errors.UnsupportedError):
            saver.set_thread_ttl("t", "pinned")
        return

    def visible(saver, thread_id: str) -> bool:
        return saver.get_tuple({"configurable": {"thread_id": thread_id}}) is not None

    ttl = 3.0  # seconds; reads that must land before a deadline have 1.2 s to spare
    saver = store.saver(ttl={"default_ttl": ttl / 60})
    refreshing = make_store(kind).saver(ttl={"default_ttl": ttl / 60, "refresh_on_read": True})
    assert saver.capabilities["ttl"]
    for thread_id in ("short", "kept", "long"):
        put_chain(saver, thread_id, 2)
    put_chain(refreshing, "read", 2)
    saver.set_thread_ttl("kept", "pinned")
    saver.set_thread_ttl("long", timedelta(hours=1))
    assert saver.thread_ttl("kept") is None
    assert timedelta(minutes=59) < saver.thread_ttl("long") <= timedelta(hours=1)
    assert timedelta(0) < saver.thread_ttl("short") <= timedelta(seconds=ttl)

    time.sleep(ttl * 0.6)
    assert visible(refreshing, "read")  # restarts its TTL
    time.sleep(ttl * 0.6)
    assert not visible(saver, "short") and saver.thread_ttl("short") is None
    assert list(saver.list({"configurable": {"thread_id": "short"}})) == []
    assert visible(saver, "kept") and visible(saver, "long")
    assert visible(refreshing, "read"), "the read restarted the TTL"
    # The SQL backends delete the rows now; Redis expires keys itself, and the in-memory
    # saver deleted the thread when the reads above found its time passed.
    assert saver.sweep_expired(100) == {"sqlite": 1, "postgres": 1}.get(kind, 0)
    assert saver.sweep_expired(100) == 0

    async def back_to_default() -> timedelta | None:
        await saver.aset_thread_ttl("long", "default")
        assert await saver.asweep_expired(10) == 0
        return await saver.athread_ttl("long")

    assert timedelta(0) < asyncio.run(back_to_default()) <= timedelta(seconds=ttl)
    # A thread written after it expired starts afresh.
    put_chain(saver, "short", 1)
    assert len(list(saver.list({"configurable": {"thread_id": "short"}}))) == 1

    with pytest.raises(TypeError, match="timedelta"):
        saver.set_thread_ttl("short", 5)
    with pytest.raises(errors.InvalidInputError, match="1 ms"):
        saver.set_thread_ttl("short", timedelta(0))
    with pytest.raises(errors.InvalidInputError, match="non-negative"):
        saver.set_thread_ttl("short", timedelta(seconds=-1))
    # A sub-millisecond TTL is the backend's shortest (1 ms), as in Rust.
    put_chain(saver, "tiny", 1)
    saver.set_thread_ttl("tiny", timedelta(microseconds=500))
    time.sleep(0.1)
    assert not visible(saver, "tiny")
    # The in-memory store hands out one saver per process: open new ones to see refusals.
    def open_with(**options):
        if kind == "memory":
            return checkpoint_rs.InMemorySaver(**options)
        return store.saver(**options)

    with pytest.raises(errors.InvalidInputError, match="unknown keys"):
        open_with(ttl={"minutes": 5})
    with pytest.raises(errors.InvalidInputError, match="minutes"):
        open_with(ttl={"default_ttl": "5"})
    for bad in (0, -1, float("nan"), float("inf"), 10**400):
        with pytest.raises(errors.InvalidInputError, match="positive, finite"):
            open_with(ttl={"default_ttl": bad})
    with pytest.raises(errors.InvalidInputError, match="bool"):
        open_with(ttl={"default_ttl": 1, "refresh_on_read": "false"})
    saver.set_thread_ttl("short", timedelta(days=36_500))
    assert timedelta(days=36_499) < saver.thread_ttl("short") <= timedelta(days=36_500)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_background_sweeper_deletes_expired_threads(kind, make_store) -> None:
    """`sweep_interval_minutes` sweeps in the background while the saver lives. On these
    backends only sweeps and writes delete an expired thread's rows (test_thread_ttls's own
    sweep finds one); with the sweeper, a sweep made later finds nothing left."""
    store = make_store(kind)
    saver = store.saver(ttl={"sweep_interval_minutes": 0.5 / 60})
    put_chain(saver, "short", 2)
    put_chain(saver, "kept", 1)
    saver.set_thread_ttl("short", timedelta(seconds=1))
    started = datetime.now(timezone.utc)
    time.sleep(3.0)  # expired after 1 s; the sweeper ran every 0.5 s since
    assert saver.sweep_expired(100) == 0, "the background sweeper left an expired thread"
    assert saver.get_tuple({"configurable": {"thread_id": "kept"}}) is not None
    assert saver.get_tuple({"configurable": {"thread_id": "short"}}) is None
    report = saver.sweeper
    assert report["running"] and report["swept"] == 1 and report["failures"] == 0, report
    assert report["sweeps"] >= 3, report
    assert report["last_failure"] is None and report["last_error"] is None, report
    assert started - timedelta(seconds=1) <= report["last_sweep"] <= datetime.now(timezone.utc)
    saver.close()
    closed = saver.sweeper
    assert closed["swept"] == 1 and not closed["running"], "readable after closing"
    assert store.saver().sweeper is None
    for bad in (0, -1, float("nan"), float("inf"), 10**400, True):
        with pytest.raises(errors.InvalidInputError, match="sweep_interval_minutes"):
            store.saver(ttl={"sweep_interval_minutes": bad})


def test_the_background_sweeper_outwaits_the_timeout_with_idempotent(make_store) -> None:
    """The background sweeper finishes its batch however long it waits, also when
    `idempotent=True` puts the `timeout` between that wrapper and the store (the sweeper
    sweeps the backend itself). On PostgreSQL another session's lock on the checkpoint
    table holds the sweep up far longer than `timeout`."""
    import psycopg

    store = make_store("postgres")
    saver = store.saver(idempotent=True, timeout=0.3, ttl={"sweep_interval_minutes": 0.2 / 60})
    put_chain(saver, "short", 2)
    saver.set_thread_ttl("short", timedelta(seconds=0.5))
    with psycopg.connect(store.target) as locker:
        locker.execute("SET idle_in_transaction_session_timeout = '10s'")
        locker.execute(f'LOCK TABLE "{store.options["schema"]}".checkpoints IN ACCESS EXCLUSIVE MODE')
        time.sleep(2.0)  # expired after 0.5 s; the sweep deleting it waits on the lock
        locker.rollback()
    deadline = time.monotonic() + 5
    while saver.sweeper["swept"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    report = saver.sweeper
    assert report["swept"] == 1 and report["failures"] == 0, report
    assert saver.get_tuple({"configurable": {"thread_id": "short"}}) is None


async def test_timeout_bounds_calls_that_wait(make_store) -> None:
    """`timeout=`: a call (and each batch a list waits for) waiting longer raises the
    transient `UnavailableError`; the saver is usable again as soon as nothing blocks it,
    and a list consumed more slowly than the limit is not cut short. On PostgreSQL, another
    session's exclusive lock on the checkpoint table makes every read of it wait."""
    import psycopg

    store = make_store("postgres")
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    put_chain(store.saver(), "t", 150)
    timed = store.saver(timeout=1.0)
    with psycopg.connect(store.target) as locker:
        # Should a call not time out, the server ends the lock's session after 10 s, so the
        # test fails instead of waiting forever.
        locker.execute("SET idle_in_transaction_session_timeout = '10s'")
        locker.execute(f'LOCK TABLE "{store.options["schema"]}".checkpoints IN ACCESS EXCLUSIVE MODE')
        calls = {
            "get_tuple": lambda: timed.get_tuple(config),
            "list": lambda: list(timed.list(config)),
        }
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(errors.UnavailableError, match=f"{name} got no answer within"):
                call()
            assert 0.95 < time.monotonic() - started < 8, name
        started = time.monotonic()
        with pytest.raises(errors.UnavailableError, match="got no answer"):
            await timed.aget_tuple(config)
        assert 0.95 < time.monotonic() - started < 8
        locker.rollback()
    assert timed.get_tuple(config) is not None
    slowly = []
    for t in timed.list(config):  # three pages, 1.5 s in all
        slowly.append(t)
        time.sleep(0.01)
    assert len(slowly) == 150
    for bad in (0, -1, float("nan"), float("inf"), 10**400, 10**5000, True, "1", timedelta(0)):
        with pytest.raises(errors.InvalidInputError, match="timeout"):
            store.saver(timeout=bad)
    assert store.saver(timeout=timedelta(seconds=5)).get_tuple(config) is not None


def test_retries_take_a_whole_number() -> None:
    """`retries=`: 0 to 100 retries; anything else is refused with InvalidInputError (the
    calls it retries are tested with a real outage in test_graphs.py)."""
    for bad in (-1, 101, 1.5, True, "3", None, 10**400):
        with pytest.raises(errors.InvalidInputError, match="retries"):
            checkpoint_rs.InMemorySaver(retries=bad)
    saver = checkpoint_rs.InMemorySaver(retries=3)
    put_chain(saver, "t", 2)
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 2


def test_a_stalled_thread_leaves_the_pool_to_the_others(make_store) -> None:
    """`timeout=` on PostgreSQL bounds the saver's statements on the server too: calls on a
    thread whose rows another session holds (a stalled writer) time out, but calls on other
    threads go on, however many of the stalled thread's calls gave up. (Bounded on the
    client alone, each such statement kept its pooled connection waiting for the lock: two
    of them took this saver's whole pool, and every other thread's calls timed out.)"""
    import psycopg

    store = make_store("postgres")
    saver = store.saver(timeout=0.3, max_connections=2)
    put_chain(saver, "held", 1)
    held = saver.get_tuple({"configurable": {"thread_id": "held"}})
    head = {"configurable": {"thread_id": "held", "checkpoint_ns": ""}}
    with psycopg.connect(store.target) as locker:
        # Should the saver wait for good, the server ends the lock's session after 20 s.
        locker.execute("SET idle_in_transaction_session_timeout = '20s'")
        locker.execute(
            f'SELECT 1 FROM "{store.options["schema"]}".checkpoints WHERE thread_id = %s FOR UPDATE',
            ("held",),
        )
        for _ in range(4):
            # Storing the held checkpoint again waits for its row.
            with pytest.raises(errors.UnavailableError):
                saver.put(head, held.checkpoint, held.metadata, {})
        give_up = time.monotonic() + 5
        for n in range(4):
            while True:
                try:
                    put_chain(saver, f"free-{n}", 1)
                    break
                except errors.UnavailableError:
                    assert time.monotonic() < give_up, "the stalled thread took the pool"
                    time.sleep(0.05)
        locker.rollback()
    saver.put(head, held.checkpoint, held.metadata, {})


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C's handler, as in a terminal, for the test: Python keeps SIGINT ignored when it
    started ignored, as a shell's background job (`cmd &`) starts."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_interrupts_a_call_that_waits(make_store, ctrl_c_raises) -> None:
    """A blocking call waits without the GIL, yet the main thread's signal handlers still
    run: Ctrl-C raises KeyboardInterrupt in a call that waits on another session's lock
    (before, only once the lock was released, which may be never), and the saver works
    afterwards. The put cut short either took effect or did not: the head is one of the
    two checkpoints."""
    import psycopg

    store = make_store("postgres")
    saver = store.saver()
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    [first] = put_chain(saver, "t", 1)
    interrupted_at = []
    with psycopg.connect(store.target) as locker:
        # Should the interrupt not arrive, the lock's session ends after 20 s.
        locker.execute("SET idle_in_transaction_session_timeout = '20s'")
        locker.execute(f'LOCK TABLE "{store.options["schema"]}".checkpoints IN ACCESS EXCLUSIVE MODE')
        ctrl_c = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        ctrl_c.start()
        cut = empty_checkpoint()
        with pytest.raises(KeyboardInterrupt):
            try:
                saver.put(config, cut, {"source": "loop", "step": 1, "parents": {}}, {})
            finally:
                ctrl_c.join()
                # The locker's session (and so its lock) still lives: the put was
                # interrupted while it waited.
                interrupted_at.append(locker.execute("SELECT 1").fetchone())
        locker.rollback()
    assert interrupted_at == [(1,)]
    head = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert head.config["configurable"]["checkpoint_id"] in (first, cut["id"])
    assert put_chain(saver, "after", 1)


def test_only_the_main_thread_checks_for_signals_while_a_call_waits(make_store) -> None:
    """Python runs signal handlers in the main thread only. A call there that waits on a
    lock checks for them every 50 ms (the Ctrl-C test above relies on it); the same call in
    another thread waits without taking the GIL back to check, so a thread pool's waiting
    calls do not make the threads running Python hand the GIL over."""
    import psycopg
    from checkpoint_rs import _native

    store = make_store("postgres")
    saver = store.saver()
    put_chain(saver, "t", 1)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    meta = {"source": "loop", "step": 1, "parents": {}}

    def checks_while_locked(call) -> int:
        """The signal checks run while `call` waits on a lock held for 0.6 s."""
        with psycopg.connect(store.target) as locker:
            locker.execute("SET idle_in_transaction_session_timeout = '20s'")
            locker.execute(
                f'LOCK TABLE "{store.options["schema"]}".checkpoints IN ACCESS EXCLUSIVE MODE'
            )
            release = threading.Timer(0.6, locker.rollback)
            before = _native._signal_checks()
            release.start()
            call()
            release.join()
            return _native._signal_checks() - before

    def put_in_a_thread() -> None:
        raised: list[BaseException] = []

        def put() -> None:
            try:
                saver.put(config, empty_checkpoint(), meta, {})
            except BaseException as e:  # noqa: BLE001 - asserted below
                raised.append(e)

        worker = threading.Thread(target=put)
        worker.start()
        worker.join()
        assert raised == []

    assert checks_while_locked(put_in_a_thread) == 0
    assert checks_while_locked(lambda: saver.put(config, empty_checkpoint(), meta, {})) >= 3
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3


def open_descriptors_of(path: str) -> int:
    """How many of this process's file descriptors refer to `path` (Linux)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:
            pass  # closed meanwhile
    return count


@pytest.mark.parametrize("kind", BACKENDS)
async def test_with_blocks_close_the_saver(kind, make_store) -> None:
    """Leaving a `with` (or `async with`) block closes the saver: a list iterator opened
    before still finishes (70 checkpoints: its second page is fetched after the close), every
    later call raises `ClosedError`, closing again does nothing, and the store keeps what was
    written."""
    store = make_store(kind)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with store.saver() as saver:
        written = put_chain(saver, "t", 70)
        listed = saver.list(config)
        first = next(listed)
    assert saver.closed and repr(saver).endswith("(closed))")
    assert [first.checkpoint["id"], *(t.checkpoint["id"] for t in listed)] == written[::-1]
    del listed
    if kind == "sqlite" and sys.platform == "linux":
        # Every connection of the saver has the write-ahead log open (its file guard does
        # not); after the close, none does.
        wal, deadline = store.target + "-wal", time.monotonic() + 10
        while wal_users := open_descriptors_of(wal):
            assert time.monotonic() < deadline, f"the closed saver keeps {wal_users} open"
            time.sleep(0.05)
    calls = {
        "get_tuple": lambda: saver.get_tuple(config),
        "list": lambda: list(saver.list(config)),
        "put": lambda: saver.put(config, empty_checkpoint(), {}, {}),
        "put_writes": lambda: saver.put_writes(first.config, [("log", 1)], "task"),
        "delete_thread": lambda: saver.delete_thread("t"),
        "sweep_expired": lambda: saver.sweep_expired(10),
    }
    if kind == "redis":
        calls["purge"] = saver.purge
    if kind == "mongodb":
        calls["drop_collections"] = saver.drop_collections
    for name, call in calls.items():
        with pytest.raises(errors.ClosedError, match="closed"):
            call()
            pytest.fail(f"{name} ran on a closed saver")
    with pytest.raises(errors.ClosedError):
        await saver.aget_tuple(config)
    saver.close()
    await saver.aclose()
    assert saver.capabilities["ttl"] == (kind != "mongodb")  # fixed facts stay readable
    assert checkpoint_rs.ClosedError is errors.ClosedError
    assert issubclass(errors.ClosedError, errors.CheckpointError)
    assert issubclass(errors.ClosedError, RuntimeError)

    if kind == "memory":
        return  # its store was the closed saver itself
    async with store.saver() as again:
        assert len([t async for t in again.alist(config)]) == 70
        put_chain(again, "u", 1)
    assert again.closed
    with pytest.raises(errors.ClosedError):
        await again.aput(config, empty_checkpoint(), {}, {})
    assert store.saver().get_tuple({"configurable": {"thread_id": "u"}}) is not None


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_list_cancelled_mid_page_is_dropped_cleanly(kind, make_store) -> None:
    """An `alist` batch cancelled while its page is fetched leaves that fetch, and the pooled
    connection it holds, in the iterator; the garbage collector then drops it outside the
    Rust runtime, where handing the connection back must not fail."""
    saver = make_store(kind).saver()
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    put_chain(saver, "t", 70)
    unraisable: list = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        for _ in range(20):
            stream = saver.alist(config)
            task = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0.001)  # the first page is being fetched
            task.cancel()
            await asyncio.sleep(0.05)  # the cancelled batch let go of the iterator
            del stream, task
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert [u.exc_value for u in unraisable] == []
    assert len(list(saver.list(config))) == 70


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_closing_stops_the_background_sweeper(kind, make_store) -> None:
    """A closed saver's sweeper sweeps no more: a thread that expires after the close is
    still there for another saver's sweep to find."""
    store = make_store(kind)
    other = store.saver()
    store.saver(ttl={"sweep_interval_minutes": 0.5 / 60}).close()
    put_chain(other, "short", 1)
    other.set_thread_ttl("short", timedelta(seconds=1))
    time.sleep(2.5)  # expired after 1 s; a sweeper still running would have swept twice
    assert other.sweep_expired(100) == 1


@pytest.mark.skipif(sys.platform != "linux", reason="the saver's guard needs Linux's OFD locks")
def test_sqlite_keeps_its_log_when_pythons_sqlite3_opens_the_same_file(tmp_path) -> None:
    """Python's `sqlite3` module is another copy of SQLite, whose locks this process's saver
    cannot see: closing its connection, it would take itself for the file's last user and
    delete the saver's write-ahead log (before the saver held its own locks against it: 10 of
    400 checkpoints left). A child process puts 400 checkpoints, opening and closing a
    `sqlite3` connection on the file every 10, then dies without closing anything; another
    process finds every acknowledged checkpoint."""
    path = str(tmp_path / "shared.db")
    child = textwrap.dedent(
        f"""
        import os, sqlite3, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import checkpoint_rs
        from test_api import put_chain
        saver = checkpoint_rs.SqliteSaver({path!r})
        seen = []
        for batch in range(40):
            put_chain(saver, f"t{{batch}}", 10)
            other = sqlite3.connect({path!r})
            seen.append(other.execute("SELECT count(*) FROM checkpoints").fetchone()[0])
            other.close()
        print(seen[-1], flush=True)
        os._exit(0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["400"], "sqlite3 saw every checkpoint while the saver ran"
    saver = checkpoint_rs.SqliteSaver(path)
    assert len(list(saver.list(None))) == 400
    for batch in range(40):
        latest = saver.get_tuple({"configurable": {"thread_id": f"t{batch}"}})
        assert latest.checkpoint["channel_values"] == {"count": 9}


async def test_mongodb_durability_options(make_store) -> None:
    """LangGraph's durability (no transactions, the server's default write concern) stores
    and reads back like the default, without compare-and-set puts; unknown values are typed
    errors that open nothing."""
    store = make_store("mongodb")
    relaxed = store.saver(transactions="disabled", write_concern="server-default")
    root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first = empty_checkpoint()
    stored = await relaxed.aput(root, first, {"step": 0}, {})
    await relaxed.aput_writes(stored, [("messages", "hi")], "task-1")
    # Another saver on the same collections, at the default durability, reads it whole.
    got = await store.saver().aget_tuple(stored)
    assert got.checkpoint["id"] == first["id"] and got.metadata["step"] == 0
    assert [(w[1], w[2]) for w in got.pending_writes] == [("messages", "hi")]
    # The explicit spelling of the default, with transactions required: compare-and-set.
    strict = store.saver(transactions="required", write_concern="majority", compare_and_set=True)
    assert (await strict.aget_tuple(stored)).checkpoint["id"] == first["id"]
    with pytest.raises(ValueError, match="compare-and-set"):
        store.saver(transactions="disabled", compare_and_set=True)
    with pytest.raises(errors.InvalidInputError, match="transactions"):
        store.saver(transactions="sometimes")
    with pytest.raises(errors.InvalidInputError, match="write_concern"):
        store.saver(write_concern="w2")
    with pytest.raises(errors.InvalidInputError, match="no option"):
        checkpoint_rs.PostgresSaver("postgres://127.0.0.1:1/x", transactions="disabled")


async def test_async_calls_do_not_block_the_event_loop(make_store) -> None:
    """An awaited read that waits on the server (a table lock held by another session)
    leaves the event loop free: other coroutines run meanwhile, and one of them ends the
    wait. A read that blocked the loop would only end when the watchdog thread gives up."""
    import threading

    import psycopg

    store = make_store("postgres")
    saver = store.saver()
    put_chain(saver, "t", 1)
    locker = psycopg.connect(store.target)
    locker.execute(f'LOCK TABLE "{store.options["schema"]}".checkpoints IN ACCESS EXCLUSIVE MODE')
    fired = threading.Event()

    def give_up() -> None:
        fired.set()
        locker.rollback()

    watchdog = threading.Timer(20, give_up)
    watchdog.start()
    try:
        read = asyncio.create_task(saver.aget_tuple({"configurable": {"thread_id": "t"}}))
        await asyncio.sleep(0.2)  # the read reaches the server and waits for the lock
        ticks = 0
        for _ in range(10):
            await asyncio.sleep(0.01)
            ticks += 1
        assert not read.done() and ticks == 10
        locker.rollback()  # this coroutine, not the watchdog, ends the wait
        tup = await asyncio.wait_for(read, 20)
    finally:
        watchdog.cancel()
        locker.close()
    assert not fired.is_set()
    assert tup.checkpoint["channel_values"] == {"count": 0}
