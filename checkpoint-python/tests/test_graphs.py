"""Real LangGraph graphs on every backend: the field reports' failures, reproduced with the
runtime and shown impossible (or repairable) with checkpoint_rs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from langgraph.types import Command

import checkpoint_rs
from checkpoint_rs import ConflictError, errors
from conftest import BACKENDS, PERSISTENT, servers_required
from langchain_core.messages import HumanMessage, ToolMessage

from graphs import (
    ProviderRejected,
    check_tool_calls_answered,
    effects_of,
    record,
    review_graph,
    slow_graph,
    team_graph,
    tool_agent_graph,
)

HERE = Path(__file__).parent


def start_worker(spec: str, graph: str, thread_id: str, effects: Path, *args: str):
    """agent.py running `graph` on the store `spec` describes, its output piped (text)."""
    return subprocess.Popen(
        [sys.executable, str(HERE / "agent.py"), spec, graph, thread_id, str(effects), *args],
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_worker_until(
    spec: str,
    thread_id: str,
    effects: Path,
    marker: str,
    hang_in: str | None = None,
    graph: str = "review",
) -> None:
    """Starts agent.py, waits until it prints `marker`, then kills it with SIGKILL."""
    proc = start_worker(spec, graph, thread_id, effects, *([hang_in] if hang_in else []))
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == marker:
                break
        else:
            proc.wait()
            pytest.fail(
                f"the worker ended before {marker!r}: {''.join(lines)}{proc.stderr.read()}"
            )
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    finally:
        watchdog.cancel()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("kind", PERSISTENT)
async def test_interrupt_survives_sigkill_and_resumes_elsewhere(kind, make_store, tmp_path):
    """Seeds 000 and 003: a worker reaches an interrupt and is killed (SIGKILL) before it
    shows the question. Another process finds the paused graph with its interrupt payload,
    shows the question (recovery on read), and resumes it with Command(resume=...) without
    re-running the steps before the interrupt."""
    store = make_store(kind)
    effects = tmp_path / "effects"
    run_worker_until(store.spec(), "review-1", effects, "INTERRUPTED")
    assert effects_of(effects) == ["classify"]

    saver = store.saver()
    graph = review_graph(effects).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "review-1"}}
    state = await graph.aget_state(config)
    assert state.next == ("present",)
    (pending,) = state.interrupts
    assert pending.value == {
        "question": "Rebalance the portfolio?",
        "options": ["hold", "rebalance"],
    }
    assert state.values["classification"]["kind"] == "rebalance"
    record(effects, "question-shown")  # the side effect the killed worker never ran

    result = await graph.ainvoke(Command(resume="rebalance"), config)
    assert result["decision"] == "rebalance"
    assert result["steps"] == ["classify", "present", "act"]
    assert effects_of(effects) == ["classify", "question-shown", "present", "act"]
    assert (await graph.aget_state(config)).next == ()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_worker_killed_mid_step_continues_from_its_input(kind, make_store, tmp_path):
    """A worker is killed in the middle of the first step. The thread keeps the input
    checkpoint: another process continues it with invoke(None) (the input is not sent
    again), re-runs only the unfinished step and reaches the interrupt."""
    store = make_store(kind)
    effects = tmp_path / "effects"
    run_worker_until(store.spec(), "review-2", effects, "HANGING in classify", "classify")

    graph = review_graph(effects).compile(checkpointer=store.saver())
    config = {"configurable": {"thread_id": "review-2"}}
    state = graph.get_state(config)
    assert state.next == ("classify",)
    assert state.values["request"] == "rebalance my portfolio"

    result = graph.invoke(None, config)
    assert "__interrupt__" in result
    result = graph.invoke(Command(resume="hold"), config)
    assert result["decision"] == "hold"
    assert effects_of(effects) == ["classify", "classify", "present", "act"]


def _forks(saver, thread_id: str) -> list[str | None]:
    """Parents with more than one child in the root namespace (None: several roots)."""
    parents = Counter(
        t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        for t in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    )
    return [p for p, n in parents.items() if n > 1]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_concurrent_invocations_cannot_fork_with_compare_and_set(kind, make_store):
    """Seed 002 (LangGraph issue #8796): two messages for one thread are processed at once.
    Without compare-and-set both runs commit and the thread's history forks silently; with
    it, exactly one run wins, the other gets ConflictError, and the history stays a line."""
    store = make_store(kind)
    graph = slow_graph().compile(checkpointer=store.saver())
    config = {"configurable": {"thread_id": "chat-forked"}}
    results = await asyncio.gather(
        graph.ainvoke({"log": ["message 1"]}, config),
        graph.ainvoke({"log": ["message 2"]}, config),
        return_exceptions=True,
    )
    assert not any(isinstance(r, BaseException) for r in results), results
    assert _forks(store.saver(), "chat-forked"), "the unguarded runs should have forked"

    guarded = make_store(kind)
    saver = guarded.saver(compare_and_set=True)
    graph = slow_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat-guarded"}}
    results = await asyncio.gather(
        graph.ainvoke({"log": ["message 1"]}, config),
        graph.ainvoke({"log": ["message 2"]}, config),
        return_exceptions=True,
    )
    conflicts = [r for r in results if isinstance(r, ConflictError)]
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(conflicts) == 1 and len(winners) == 1, results
    assert conflicts[0].thread_id == "chat-guarded"
    assert _forks(saver, "chat-guarded") == []
    # The loser retries on the new head: the thread now holds both messages, in order.
    final = await graph.ainvoke({"log": ["retry"]}, config)
    assert final["log"][-2:] == ["retry", "work"]
    assert _forks(saver, "chat-guarded") == []


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_run_chooses_compare_and_set_for_its_own_puts(kind, make_store):
    """Time travel on a guarded saver. An update_state on an older checkpoint forks the
    thread: its put names a parent that is no longer the head, which compare-and-set
    refuses like a racing writer's. A run that means to fork says so (`compare_and_set:
    False` in its configurable). Branches LangGraph itself starts with a checkpoint it marks
    `source: "fork"` (a replay from an older checkpoint, a `__copy__`) are deliberate and
    stored without. Every other run stays guarded; and an unguarded saver guards the runs
    that ask for it."""
    saver = make_store(kind).saver(compare_and_set=True)
    graph = slow_graph(delay=0.3).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}}
    await graph.ainvoke({"log": ["message 1"]}, config)
    before_work = next(s for s in graph.get_state_history(config) if s.next == ("work",))
    stored = len(list(saver.list(config)))

    with pytest.raises(ConflictError):
        await graph.aupdate_state(before_work.config, {"log": ["edited"]})
    forking = {"configurable": {**before_work.config["configurable"], "compare_and_set": False}}
    garbled = {"configurable": {**forking["configurable"], "compare_and_set": "no"}}
    with pytest.raises(checkpoint_rs.InvalidInputError, match="compare_and_set"):
        await graph.ainvoke(None, garbled)
    assert len(list(saver.list(config))) == stored, "a refused call wrote checkpoints"

    # With the key, the edit forks from `before_work` and becomes the thread's head.
    edited = await graph.aupdate_state(forking, {"log": ["edited"]})
    assert _forks(saver, "chat") == [before_work.config["configurable"]["checkpoint_id"]]
    head = saver.get_tuple(config)
    assert head.config["configurable"]["checkpoint_id"] == edited["configurable"]["checkpoint_id"]
    assert "compare_and_set" not in head.metadata
    assert (await graph.ainvoke(None, config))["log"] == ["message 1", "edited", "work"]

    # A replay from the old checkpoint, without the key: LangGraph's fork checkpoint starts
    # the branch, the rest of the run continues it.
    assert (await graph.ainvoke(None, before_work.config))["log"] == ["message 1", "work"]
    replayed = saver.get_tuple(config)
    assert replayed.parent_config is not None
    fork = saver.get_tuple(replayed.parent_config)
    assert fork.metadata["source"] == "fork"
    assert fork.parent_config["configurable"]["checkpoint_id"] == (
        before_work.config["configurable"]["checkpoint_id"]
    )

    # Runs that do not say otherwise are still guarded against each other.
    results = await asyncio.gather(
        graph.ainvoke({"log": ["message 2"]}, config),
        graph.ainvoke({"log": ["message 3"]}, config),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["ConflictError", "dict"], results

    # A copy of a checkpoint (which could not carry the key: LangGraph puts it with the
    # saved checkpoint's own address) is a fork too.
    copied = await graph.aupdate_state(before_work.config, None, as_node="__copy__")
    head = saver.get_tuple(config)
    assert head.config["configurable"]["checkpoint_id"] == copied["configurable"]["checkpoint_id"]
    assert head.metadata["source"] == "fork"

    # An unguarded saver guards the runs that ask for it.
    unguarded = make_store(kind).saver()
    graph = slow_graph(delay=0.3).compile(checkpointer=unguarded)
    asking = {"configurable": {"thread_id": "chat", "compare_and_set": True}}
    results = await asyncio.gather(
        graph.ainvoke({"log": ["message 1"]}, asking),
        graph.ainvoke({"log": ["message 2"]}, asking),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["ConflictError", "dict"], results
    assert _forks(unguarded, "chat") == []


# LangGraph's class names for each backend: (synchronous, asynchronous).
_LANGGRAPH_NAMES = {
    "sqlite": ("SqliteSaver", "AsyncSqliteSaver"),
    "postgres": ("PostgresSaver", "AsyncPostgresSaver"),
    "redis": ("RedisSaver", "AsyncRedisSaver"),
    "mongodb": ("MongoDBSaver", "AsyncMongoDBSaver"),
}


@pytest.mark.parametrize("kind", PERSISTENT)
async def test_code_written_for_langgraphs_savers_runs_with_the_import_swapped(
    kind, make_store, tmp_path
):
    """The way LangGraph's documentation opens its savers, with only the import changed:
    `from_conn_string` as a context manager (`with` and `async with`), `setup()` and
    `await asetup()`, the `Async...` class names. A graph pauses at its interrupt in one
    block and is resumed from the other; each block closes its saver."""
    store = make_store(kind)
    sync_class, async_class = (getattr(checkpoint_rs, n) for n in _LANGGRAPH_NAMES[kind])
    options = dict(store.options)
    if kind == "mongodb":
        options["db_name"] = options.pop("database")
    if kind in ("postgres", "mongodb"):
        # Nothing is created on opening: setup() must do it (PostgreSQL has no tables yet).
        options["setup"] = False
    effects = tmp_path / "effects"
    config = {"configurable": {"thread_id": "portfolio"}}

    with sync_class.from_conn_string(store.target, **options) as checkpointer:
        checkpointer.setup()
        if kind == "mongodb":
            # Works without indexes too: check setup() made them (and recorded the layout).
            import pymongo

            with pymongo.MongoClient(store.target) as client:
                db = client[options["db_name"]]
                prefix = options["collection_prefix"]
                assert "thread_ns_id" in db[f"{prefix}checkpoints"].index_information()
                assert db[f"{prefix}checkpoint_layout"].find_one({"_id": "layout"})["v"] == 2
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        assert "__interrupt__" in graph.invoke({"request": "rebalance?"}, config)
    assert checkpointer.closed

    async with async_class.from_conn_string(store.target, **options) as checkpointer:
        await checkpointer.asetup()
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        resumed = await graph.ainvoke(Command(resume="hold"), config)
        assert resumed["steps"] == ["classify", "present", "act"]
    assert checkpointer.closed
    assert effects_of(effects) == ["classify", "present", "act"]


async def test_langgraphs_psycopg_connections_and_pools_open_the_postgres_saver(
    make_store, tmp_path
):
    """LangGraph's documentation gives its PostgresSaver a psycopg connection or pool
    (`PostgresSaver(conn)`, `AsyncPostgresSaver(pool)`). With the import swapped, each opens
    the saver on the same database; a graph interrupts through one and resumes through the
    other."""
    import psycopg
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    store = make_store("postgres")
    schema = store.options["schema"]
    effects = tmp_path / "effects"
    config = {"configurable": {"thread_id": "portfolio"}}
    settings = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}

    with psycopg.Connection.connect(store.target, **settings) as conn:
        checkpointer = checkpoint_rs.PostgresSaver(conn, schema=schema, setup=False)
        checkpointer.setup()
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        assert "__interrupt__" in graph.invoke({"request": "rebalance?"}, config)
    # The saver never used the connection: it works after the connection closed.
    assert checkpointer.get_tuple(config) is not None

    # A pool given as libpq keywords, its password among the pool's arguments.
    info = psycopg.conninfo.conninfo_to_dict(store.target)
    keywords = f"host={info['host']} port={info.get('port', 5432)} dbname={info['dbname']}"
    with ConnectionPool(
        keywords, kwargs={**settings, "user": info["user"]}, min_size=1, max_size=3
    ) as pool:
        pooled = checkpoint_rs.PostgresSaver(pool, schema=schema)
        assert pooled.get_tuple(config) == checkpointer.get_tuple(config)

    # The saver's pool has the given pool's size: 12 threads reading at once open at most 3
    # connections (told apart by their application name; the given pool is never opened).
    app = f"sized-{schema}"
    pool = ConnectionPool(
        f"{keywords} application_name={app}",
        kwargs={"user": info["user"]},
        min_size=1,
        max_size=3,
        open=False,
    )
    sized = checkpoint_rs.PostgresSaver(pool, schema=schema)
    expected = sized.get_tuple(config)

    def reads(_: int) -> None:
        for _ in range(20):
            assert sized.get_tuple(config) == expected

    with concurrent.futures.ThreadPoolExecutor(12) as threads:
        list(threads.map(reads, range(12)))
    with psycopg.connect(store.target) as admin:
        (opened,) = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone()
    assert 1 <= opened <= 3, opened
    sized.close()

    async with AsyncConnectionPool(store.target, kwargs=settings, open=False) as pool:
        checkpointer = checkpoint_rs.AsyncPostgresSaver(pool, schema=schema)
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        resumed = await graph.ainvoke(Command(resume="hold"), config)
        assert resumed["steps"] == ["classify", "present", "act"]
    async with await psycopg.AsyncConnection.connect(store.target, **settings) as conn:
        checkpointer = checkpoint_rs.AsyncPostgresSaver(conn, schema=schema)
        assert (await checkpointer.aget_tuple(config)).metadata["step"] == 3
    assert effects_of(effects) == ["classify", "present", "act"]

    # A connection through the server's Unix socket, where it has one here.
    socket = Path("/var/run/postgresql")
    if (socket / f".s.PGSQL.{info.get('port', 5432)}").exists():
        with psycopg.connect(host=str(socket), user=info["user"], dbname=info["dbname"]) as conn:
            checkpointer = checkpoint_rs.PostgresSaver(conn, schema=schema)
            assert checkpointer.get_tuple(config).metadata["step"] == 3

    # Parameters the saver cannot honour are refused, not dropped.
    with ConnectionPool(
        f"{keywords} target_session_attrs=read-write", kwargs={"user": info["user"]}, open=False
    ) as pool:
        with pytest.raises(checkpoint_rs.InvalidInputError, match="target_session_attrs"):
            checkpoint_rs.PostgresSaver(pool, schema=schema)


async def test_langgraphs_redis_client_and_url_arguments_open_the_redis_saver(
    make_store, tmp_path
):
    """LangGraph's RedisSaver takes `redis_url=` or a redis-py client as `redis_client=`
    (`RedisSaver(redis_client=Redis.from_url(...))` is common in its users' code). With the
    import swapped, each opens the saver on that server: a graph interrupts through a sync
    client's saver and resumes through an asyncio client's."""
    import redis
    import redis.asyncio

    store = make_store("redis")
    prefix = store.options["key_prefix"]
    effects = tmp_path / "effects"
    config = {"configurable": {"thread_id": "portfolio"}}

    with redis.Redis.from_url(store.target) as client:
        checkpointer = checkpoint_rs.RedisSaver(redis_client=client, key_prefix=prefix)
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        assert "__interrupt__" in graph.invoke({"request": "rebalance?"}, config)
        # The saver's keys are on the client's server, under the prefix.
        assert any(k.startswith(prefix.encode()) for k in client.scan_iter(f"{prefix}*"))
    client = redis.asyncio.Redis.from_url(store.target)
    checkpointer = checkpoint_rs.AsyncRedisSaver(redis_client=client, key_prefix=prefix)
    await client.aclose()  # never used by the saver
    graph = review_graph(effects).compile(checkpointer=checkpointer)
    resumed = await graph.ainvoke(Command(resume="hold"), config)
    assert resumed["steps"] == ["classify", "present", "act"]
    by_url = checkpoint_rs.RedisSaver(redis_url=store.target, key_prefix=prefix)
    assert by_url.get_tuple(config).metadata["step"] == 3

    # What the saver connects to: the client's user, password, database and TLS.
    secured = redis.Redis(
        host="cache.internal", port=6380, db=2, username="app", password="p@ss:word", ssl=True
    )
    with pytest.raises(checkpoint_rs.UnavailableError, match="cache.internal"):
        checkpoint_rs.RedisSaver(redis_client=secured, timeout=2)
    assert (
        checkpoint_rs.saver._redis_client_url(secured)
        == "rediss://app:p%40ss%3Aword@cache.internal:6380/2"
    )
    with pytest.raises(TypeError, match="unix:///"):
        checkpoint_rs.RedisSaver(redis_client=redis.Redis(unix_socket_path="/tmp/r.sock"))
    with pytest.raises(TypeError, match="one of"):
        checkpoint_rs.RedisSaver(store.target, redis_client=client)
    with pytest.raises(TypeError, match="one of"):
        checkpoint_rs.RedisSaver()


async def test_langgraphs_redis_cluster_client_opens_the_redis_saver(redis_cluster, tmp_path):
    """LangGraph's RedisSaver also takes a redis-py `RedisCluster` as `redis_client=` (it
    switches to cluster mode by itself). With the import swapped, on a Cluster whose nodes
    require a password: a graph interrupts through a sync `RedisCluster`'s saver, resumes
    through an asyncio `RedisCluster`'s, and the thread reads back through the
    `redis+cluster://` URL, whose credentials apply to every node."""
    from urllib.parse import quote

    import redis.asyncio.cluster
    import redis.cluster
    import redis.credentials

    nodes, password = redis_cluster
    host, port = nodes[0].split(":")
    prefix = f"cprs-py-{uuid.uuid4().hex[:10]}"
    effects = tmp_path / "effects"
    config = {"configurable": {"thread_id": "portfolio"}}
    url = f"redis+cluster://:{quote(password, safe='')}@{','.join(nodes)}"
    try:
        with redis.cluster.RedisCluster(host=host, port=int(port), password=password) as client:
            checkpointer = checkpoint_rs.RedisSaver(redis_client=client, key_prefix=prefix)
            graph = review_graph(effects).compile(checkpointer=checkpointer)
            assert "__interrupt__" in graph.invoke({"request": "rebalance?"}, config)
            # The saver's keys are on the client's Cluster, under the prefix.
            assert client.keys(f"{prefix}*", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        client = redis.asyncio.cluster.RedisCluster(
            startup_nodes=[
                redis.asyncio.cluster.ClusterNode(h, int(p))
                for h, p in (node.split(":") for node in nodes[1:])
            ],
            password=password,
        )
        checkpointer = checkpoint_rs.AsyncRedisSaver(redis_client=client, key_prefix=prefix)
        await client.aclose()  # never used by the saver
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        resumed = await graph.ainvoke(Command(resume="hold"), config)
        assert resumed["steps"] == ["classify", "present", "act"]
        assert effects_of(effects) == ["classify", "present", "act"]
        by_url = checkpoint_rs.RedisSaver(url, key_prefix=prefix)
        assert by_url.get_tuple(config).metadata["step"] == 3

        # A wrong password is a BackendError (retrying will not fix it, unlike the
        # UnavailableError of a node that is down) naming the Cluster, not the password.
        wrong = f"redis+cluster://:n0pe@{','.join(nodes)}"
        with pytest.raises(checkpoint_rs.errors.BackendError) as refused:
            checkpoint_rs.RedisSaver(wrong, key_prefix=prefix, timeout=5)
        assert nodes[0] in str(refused.value) and "n0pe" not in str(refused.value)
    finally:
        checkpoint_rs.RedisSaver(url, key_prefix=prefix).purge()

    # What the saver connects to: the client's nodes, user, password and TLS.
    secured = redis.asyncio.cluster.RedisCluster(
        host="cache.internal", port=7000, username="app", password="p@ss,word", ssl=True
    )
    assert (
        checkpoint_rs.saver._redis_client_url(secured)
        == "rediss+cluster://app:p%40ss%2Cword@cache.internal:7000"
    )
    # Credentials the saver cannot read are refused, not dropped.
    provider = redis.credentials.UsernamePasswordCredentialProvider("app", "pw")
    with pytest.raises(TypeError, match="credential_provider"):
        checkpoint_rs.RedisSaver(
            redis_client=redis.asyncio.cluster.RedisCluster(
                host="cache.internal", port=7000, credential_provider=provider
            )
        )
    with pytest.raises(checkpoint_rs.InvalidInputError, match="different credentials"):
        checkpoint_rs.RedisSaver(f"redis+cluster://a:1@{nodes[0]},b:2@{nodes[1]}")


async def test_langgraphs_pymongo_client_opens_the_mongodb_saver(make_store, tmp_path):
    """LangGraph's MongoDBSaver takes a pymongo client and `db_name` (its documented usage is
    `MongoDBSaver(MongoClient(uri), db_name=...)`). With the import swapped, each opens the
    saver on the client's deployment, in that database: a graph interrupts through a
    `MongoClient`'s saver and resumes through an `AsyncMongoClient`'s."""
    import pymongo

    store = make_store("mongodb")
    prefix = store.options["collection_prefix"]
    db_name = store.options["database"]
    effects = tmp_path / "effects"
    config = {"configurable": {"thread_id": "portfolio"}}

    with pymongo.MongoClient(store.target) as client:
        checkpointer = checkpoint_rs.MongoDBSaver(
            client, db_name=db_name, collection_prefix=prefix
        )
        graph = review_graph(effects).compile(checkpointer=checkpointer)
        assert "__interrupt__" in graph.invoke({"request": "rebalance?"}, config)
        # The saver's collections are in db_name, on the client's server.
        assert client[db_name][f"{prefix}checkpoints"].count_documents({"t": "portfolio"}) > 0
    client = pymongo.AsyncMongoClient(store.target)
    checkpointer = checkpoint_rs.AsyncMongoDBSaver(
        client=client, db_name=db_name, collection_prefix=prefix
    )
    await client.close()  # never used by the saver
    graph = review_graph(effects).compile(checkpointer=checkpointer)
    resumed = await graph.ainvoke(Command(resume="hold"), config)
    assert resumed["steps"] == ["classify", "present", "act"]
    assert effects_of(effects) == ["classify", "present", "act"]
    # Without db_name, LangGraph's default database.
    with pymongo.MongoClient(store.target) as client:
        default_db = checkpoint_rs.MongoDBSaver(client, collection_prefix=prefix)
        assert default_db.get_tuple(config) is None
        default_db.drop_collections()

    # Where the saver connects: the client's hosts, credentials, replica set and TLS.
    secured = pymongo.MongoClient(
        "mongodb://app:p%40ss%3Aword@db1.internal:27018,db2.internal/?replicaSet=rs0"
        "&authSource=admin&authMechanism=SCRAM-SHA-256&tls=true&tlsAllowInvalidCertificates=true",
        connect=False,
    )
    assert checkpoint_rs.saver._mongo_client_url(secured) == (
        "mongodb://app:p%40ss%3Aword@db1.internal:27018,db2.internal:27017/"
        "?replicaSet=rs0&tls=true&tlsAllowInvalidCertificates=true&authSource=admin"
        "&authMechanism=SCRAM-SHA-256"
    )
    # The saver's driver takes that URL (opening without setup or a transaction probe
    # sends nothing to those hosts).
    checkpoint_rs.MongoDBSaver(secured, setup=False, transactions="disabled").close()
    with pytest.raises(checkpoint_rs.InvalidInputError, match="host-name check"):
        checkpoint_rs.MongoDBSaver(
            pymongo.MongoClient(
                "mongodb://db1.internal/?tls=true&tlsAllowInvalidHostnames=true", connect=False
            )
        )
    with pytest.raises(checkpoint_rs.InvalidInputError, match="GSSAPI"):
        checkpoint_rs.MongoDBSaver(
            pymongo.MongoClient(
                "mongodb://svc%40REALM@db1.internal/?authMechanism=GSSAPI", connect=False
            )
        )
    with pytest.raises(TypeError, match="one of"):
        checkpoint_rs.MongoDBSaver(store.target, client=secured)
    with pytest.raises(TypeError, match="one of"):
        checkpoint_rs.MongoDBSaver()


def test_langgraphs_mongodb_ttl_in_seconds_expires_checkpoints_by_index(make_store):
    """LangGraph's MongoDBSaver takes `ttl` as seconds: each checkpoint and pending write
    expires that long after it was written, removed by TTL indexes. The same argument gives
    this saver's documents that expiry and `setup` the TTL indexes; LangGraph's collection
    name arguments, which name collections this saver does not have, are refused."""
    import datetime as dt

    import pymongo
    from langgraph.checkpoint.base import empty_checkpoint

    store = make_store("mongodb")
    prefix = store.options["collection_prefix"]
    db_name = store.options["database"]
    config = {"configurable": {"thread_id": "short-lived", "checkpoint_ns": ""}}
    saver = checkpoint_rs.MongoDBSaver(
        store.target, db_name=db_name, collection_prefix=prefix, ttl=3600
    )
    before = dt.datetime.now(dt.timezone.utc)
    stored = saver.put(config, empty_checkpoint(), {"step": 0}, {})
    saver.put_writes(stored, [("messages", "hi")], "task-1")
    after = dt.datetime.now(dt.timezone.utc)
    with pymongo.MongoClient(store.target, tz_aware=True) as client:
        db = client[db_name]
        for name in ("checkpoints", "checkpoint_writes"):
            indexes = db[f"{prefix}{name}"].index_information()
            assert indexes["ttl"]["expireAfterSeconds"] == 0, name
            expiry = db[f"{prefix}{name}"].find_one({"t": "short-lived"})["x"]
            hour = dt.timedelta(hours=1)
            assert before + hour - dt.timedelta(seconds=1) <= expiry <= after + hour, name
    saver.drop_collections()
    # A timedelta is seconds too; nonsense is a typed error that opens nothing.
    checkpoint_rs.MongoDBSaver(
        store.target, db_name=db_name, collection_prefix=prefix, ttl=dt.timedelta(hours=1)
    ).drop_collections()
    for bad in (0, -5, True, "3600"):
        with pytest.raises(checkpoint_rs.InvalidInputError, match="ttl"):
            checkpoint_rs.MongoDBSaver(store.target, db_name=db_name, ttl=bad)
    with pytest.raises(checkpoint_rs.InvalidInputError, match="checkpoint_collection_name"):
        checkpoint_rs.MongoDBSaver(
            store.target, db_name=db_name, checkpoint_collection_name="checkpoints"
        )
    # Other classes' ttl is LangGraph's TTLConfig mapping; MongoDB's retention is per
    # document, so that mapping stays an error here.
    with pytest.raises(checkpoint_rs.InvalidInputError, match="ttl"):
        checkpoint_rs.MongoDBSaver(store.target, db_name=db_name, ttl={"default_ttl": 60})


def test_langgraphs_in_memory_saver_name_works_with_the_import_swapped(tmp_path):
    """`MemorySaver`, the name most LangGraph examples import, is the in-memory saver."""
    graph = review_graph(tmp_path / "effects").compile(checkpointer=checkpoint_rs.MemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"request": "rebalance?"}, config)
    assert graph.invoke(Command(resume="hold"), config)["steps"][-1] == "act"


class _ClockBehind:
    """LangGraph's id clock on a host whose clock is 30 s behind the one that wrote last."""

    @staticmethod
    def time_ns() -> int:
        return time.time_ns() - 30_000_000_000


def _on_a_host_whose_clock_is_behind(patch: pytest.MonkeyPatch) -> None:
    """Makes LangGraph's ids as another process on such a host would: from its clock, with
    no memory of the ids this process made (which it would otherwise never go below)."""
    import langgraph.checkpoint.base.id as langgraph_ids

    patch.setattr(langgraph_ids, "time", _ClockBehind)
    patch.setattr(langgraph_ids, "_last_v6_timestamp", None)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_resume_on_a_host_whose_clock_is_behind_fails_and_retries(
    kind, make_store, tmp_path, monkeypatch
):
    """A thread paused at an interrupt is resumed on a host whose clock is behind: LangGraph
    makes the next checkpoint's id from that clock, below its parent's, and "latest" is the
    greatest id. LangGraph's own saver stores that checkpoint and the thread's state silently
    stays at the interrupt; checkpoint_rs refuses the put naming the clock, and the same
    resume from a host with a good clock finishes without running a step twice
    (durability "sync")."""
    from langgraph.checkpoint.memory import InMemorySaver as LangGraphMemorySaver

    def paused(saver, effects: Path):
        graph = review_graph(effects).compile(checkpointer=saver)
        graph.invoke({"request": "rebalance?"}, config)
        return graph

    config = {"configurable": {"thread_id": "portfolio"}}
    graph = paused(LangGraphMemorySaver(), tmp_path / "langgraph-effects")
    with monkeypatch.context() as skewed:
        _on_a_host_whose_clock_is_behind(skewed)
        assert graph.invoke(Command(resume="hold"), config)["steps"][-1] == "act"
    assert graph.get_state(config).values["steps"] == ["classify", "present"]

    effects = tmp_path / "effects"
    saver = make_store(kind).saver()
    graph = paused(saver, effects)
    head = saver.get_tuple(config).config
    with monkeypatch.context() as skewed:
        _on_a_host_whose_clock_is_behind(skewed)
        with pytest.raises(checkpoint_rs.InvalidInputError, match=r"ms before its parent's.*clock"):
            graph.invoke(Command(resume="hold"), config, durability="sync")
    assert saver.get_tuple(config).config == head
    resumed = graph.invoke(Command(resume="hold"), config, durability="sync")
    assert resumed["steps"] == ["classify", "present", "act"]
    # `present` ran once: its writes were stored before the put was refused. (With
    # LangGraph's default durability, "async", `act` would already have run while the
    # refused put was in flight, as after a crash, and would run again on the retry.)
    assert effects_of(effects) == ["classify", "present", "act"]


@pytest.mark.parametrize("kind", PERSISTENT)
def test_tool_crash_leaves_no_orphan_tool_calls_with_sanitize_on_load(kind, make_store, tmp_path):
    """Seed 004: the agent asked for a tool and the process died while the tool ran. The
    stored history ends with an AIMessage whose tool_calls have no ToolMessage, and the next
    request sends that history to the model, which rejects it (a provider's HTTP 400). With
    sanitize_on_load the loaded history is repaired (a placeholder result answers the
    orphan call) and the conversation goes on, every message kept."""
    for guarded in (False, True):
        store = make_store(kind)
        effects = tmp_path / f"effects-{guarded}"
        run_worker_until(
            store.spec(), "chat", effects, "HANGING in lookup_order", "lookup_order", "tools"
        )
        saver = store.saver(sanitize_on_load=guarded)
        graph = tool_agent_graph(effects).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "chat"}}
        follow_up = {"messages": [HumanMessage(content="Are you still there?")]}
        if not guarded:
            with pytest.raises(ProviderRejected, match="call_1001"):
                graph.invoke(follow_up, config)
            continue
        messages = graph.invoke(follow_up, config)["messages"]
        check_tool_calls_answered(messages)
        assert messages[0].content == "Please refund order 1001"
        assert [c["id"] for c in messages[1].tool_calls] == ["call_1001"]
        assert isinstance(messages[2], ToolMessage) and messages[2].tool_call_id == "call_1001"
        assert messages[-1].content == "You said: Are you still there?"
        assert effects_of(effects) == ["lookup_order"]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_nested_workers_resume_where_they_interrupted(kind, make_store, tmp_path):
    """Seed 001: workers are subgraphs (each with its own checkpoint namespace) that
    interrupt for a human answer. Each resume, through a freshly opened saver, continues
    the worker at its interrupt: no worker restarts from its beginning, no question is asked
    twice."""
    store = make_store(kind)
    effects = tmp_path / "effects"
    config = {"configurable": {"thread_id": "team"}}

    def graph():
        return team_graph(effects).compile(checkpointer=store.saver())

    result = await graph().ainvoke({"request": "onboard Ada"}, config)
    questions = [result["__interrupt__"][0].value]
    for answer in ["laptop and payroll", "payroll in EUR", "a Linux laptop"]:
        result = await graph().ainvoke(Command(resume=answer), config)
        if "__interrupt__" in result:
            questions.append(result["__interrupt__"][0].value)
            # The paused worker's state lives in its own namespace.
            state = await graph().aget_state(config, subgraphs=True)
            (task,) = state.tasks
            assert task.state is not None and task.state.next == ("ask",)
    assert questions == [
        "intake: what do you need?",
        "hr: what should I do?",
        "it: what should I do?",
    ]
    assert result == {
        "request": "onboard Ada",
        "intake": "laptop and payroll",
        "hr": "payroll in EUR",
        "it": "a Linux laptop",
    }
    assert effects_of(effects) == [
        "intake",
        "hr.gather",
        "hr.ask",
        "hr.finish",
        "it.gather",
        "it.ask",
        "it.finish",
    ]
    namespaces = {
        t.config["configurable"]["checkpoint_ns"].split(":")[0]
        for t in store.saver().list({"configurable": {"thread_id": "team"}})
    }
    assert namespaces == {"", "hr", "it"}


def _start_pgbouncer(upstream: str, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A private PgBouncer in transaction mode with one server connection, in front of the
    test server, its files in `tmp_path` (readable by the user it runs as); returns it and
    the URL through it."""
    from urllib.parse import urlsplit
    import shutil
    import socket

    binary = os.environ.get("CHECKPOINT_TEST_PGBOUNCER") or shutil.which("pgbouncer")
    if not binary and Path("/usr/sbin/pgbouncer").exists():
        binary = "/usr/sbin/pgbouncer"
    if not binary:
        message = "pgbouncer is not installed (scripts/test.sh installs it)"
        if servers_required():
            pytest.fail(message)
        pytest.skip(message)
    url = urlsplit(upstream)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    user = url.username or "postgres"
    (tmp_path / "users.txt").write_text(f'"{user}" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={url.hostname} port={url.port or 5432}\n\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp_path / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 1\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {tmp_path / 'pgbouncer.log'}\n"
    )
    args = [binary]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root.
        subprocess.run(["chown", "-R", "postgres", str(tmp_path)], check=True)
        args += ["-u", "postgres"]
    proc = subprocess.Popen(
        [*args, str(tmp_path / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"PgBouncer did not listen: {(tmp_path / 'pgbouncer.log').read_text()}")
    through = url._replace(netloc=f"{user}@127.0.0.1:{port}").geturl()
    return proc, through


async def test_graphs_run_through_a_transaction_pooler(make_store, tmp_path):
    """A transaction-mode pooler (PgBouncer, one server connection for every client) hands
    each transaction to whichever server connection is free. With transaction_pooling=True,
    concurrent graphs on eight threads and a human-in-the-loop interrupt run through it, in
    the configured schema."""
    import shutil
    import tempfile

    store = make_store("postgres")
    # Not under tmp_path: PgBouncer, run as another user when the tests run as root, could
    # not reach it.
    bouncer_dir = Path(tempfile.mkdtemp(prefix="cp-pgbouncer-"))
    os.chmod(bouncer_dir, 0o755)
    proc, through = _start_pgbouncer(store.target, bouncer_dir)
    try:
        saver = checkpoint_rs.PostgresSaver(
            through, **store.options, transaction_pooling=True, max_connections=4
        )
        graph = slow_graph(delay=0.05).compile(checkpointer=saver)
        configs = [{"configurable": {"thread_id": f"pooled-{i}"}} for i in range(8)]
        for round_ in range(3):
            results = await asyncio.gather(
                *(graph.ainvoke({"log": [f"{c['configurable']['thread_id']}/{round_}"]}, c)
                  for c in configs)
            )
            for config, result in zip(configs, results):
                thread = config["configurable"]["thread_id"]
                assert result["log"][-2:] == [f"{thread}/{round_}", "work"], result
        for config in configs:
            history = [s async for s in graph.aget_state_history(config)]
            # Three invocations of input + one step each.
            assert len(history) == 9, len(history)
            thread = config["configurable"]["thread_id"]
            assert history[0].values["log"] == [
                entry for r in range(3) for entry in (f"{thread}/{r}", "work")
            ]

        effects = tmp_path / "effects"
        review = review_graph(effects).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "pooled-review"}}
        await review.ainvoke({"request": "rebalance"}, config)
        assert (await review.aget_state(config)).next == ("present",)
        result = await review.ainvoke(Command(resume="hold"), config)
        assert result["decision"] == "hold"
        assert result["steps"] == ["classify", "present", "act"]
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(bouncer_dir, ignore_errors=True)
    # Everything is in the store's schema, read directly from the server.
    threads = {t.config["configurable"]["thread_id"] for t in store.saver().list(None)}
    assert threads == {c["configurable"]["thread_id"] for c in configs} | {"pooled-review"}


# -- a server outage (retries) -------------------------------------------------------------


def _reset(sock: socket.socket) -> None:
    """Ends `sock` with a reset (RST), waking a thread blocked reading it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class OutageProxy:
    """A TCP proxy on 127.0.0.1 in front of a server, which `outage` makes unreachable for a
    while: open connections are reset and new ones reset at once, as when a server crashes
    or fails over."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _reset(client)
                continue
            with self.lock:
                self.open += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def outage(self, seconds: float) -> None:
        self.down.set()
        with self.lock:
            cut, self.open = self.open, []
        for sock in cut:
            _reset(sock)
        time.sleep(seconds)
        self.down.clear()

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            cut, self.open = self.open, []
        for sock in cut:
            _reset(sock)


async def test_retries_carry_a_graph_through_a_server_outage(make_store):
    """PostgreSQL is unreachable for 1.5 s while a conversation runs, one graph run after
    another. Through a saver without retries, runs fail with UnavailableError; with
    `retries=6`, every run completes and the thread holds each run's work once (a put whose
    answer was lost and was made again is stored once)."""
    store = make_store("postgres")
    server = urlsplit(store.target)
    proxy = OutageProxy(server.hostname or "127.0.0.1", server.port or 5432)
    user = server.netloc.rpartition("@")[0]
    through = server._replace(
        netloc=f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}"
    ).geturl()
    try:
        for retries in (0, 6):
            saver = checkpoint_rs.PostgresSaver(through, **store.options, retries=retries)
            graph = slow_graph(delay=0.02).compile(checkpointer=saver)
            config = {"configurable": {"thread_id": f"outage-{retries}"}}
            completed, failed = 0, []
            outage = threading.Timer(0.3, proxy.outage, args=(1.5,))
            started = time.monotonic()
            outage.start()
            while time.monotonic() - started < 2.5:
                try:
                    await graph.ainvoke({"log": []}, config)
                    completed += 1
                except errors.UnavailableError as e:
                    failed.append(e)
            outage.join()
            if retries == 0:
                assert failed, "the outage failed no run: it tests nothing"
            else:
                assert failed == [], failed
                state = await graph.aget_state(config)
                assert completed > 0
                assert state.values["log"] == ["work"] * completed
            saver.close()
    finally:
        proxy.close()
