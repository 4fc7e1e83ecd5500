"""The standard workload W1-W4 (docs/workload.md) from Python, through LangGraph's
checkpointer API (aput, aput_writes, aget_tuple, alist): checkpoint_rs's savers and
LangGraph's own savers on the same servers, interleaved in one run, median of the
repetitions, each on a fresh store. Writes one JSON document.

Usage: python workload.py --out FILE [--backends postgres,sqlite,mongodb,redis]
                          [--threads 50] [--steps 20] [--reps 3] [--private-mongo]
Servers: CHECKPOINT_TEST_POSTGRES_URL, CHECKPOINT_TEST_REDIS_URL, CHECKPOINT_TEST_MONGO_URL.
With --private-mongo, every MongoDB run gets a private MongoDB-wire test server of its own
(CHECKPOINT_TEST_SECANTUSD, which scripts/services/mongo.sh exports) instead of the one at
CHECKPOINT_TEST_MONGO_URL: that server slows down as its operation log grows (a
contender's W1 went from 9 s to 44 s between two repetitions on one server), which would
favour whoever runs first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

from langgraph.checkpoint.base.id import uuid6

import checkpoint_rs

# -- payloads (§2-§4) ---------------------------------------------------------------------

MASK = (1 << 64) - 1
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ."
SEED = 42


class SplitMix64:
    def __init__(self, tn: int) -> None:
        self.state = ((SEED & 0xFFFFFFFF) << 32) | (tn & 0xFFFFFFFF)

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def text(self, n: int) -> str:
        out = []
        for _ in range((n + 7) // 8):
            z = self.next()
            for _ in range(8):
                out.append(ALPHABET[z & 63])
                z >>= 8
        return "".join(out[:n])

    def uuid4(self) -> str:
        v = (self.next() << 64) | self.next()
        v = (v & ~(0xF << 76)) | (0x4 << 76)
        v = (v & ~(0x3 << 62)) | (0x2 << 62)
        return str(uuid.UUID(int=v))

    def suffix(self) -> int:
        return self.next() % 10**16


def version(counter: int, suffix: int) -> str:
    return "%032d.%016d" % (counter, suffix)


class Thread:
    """Every payload of one thread, drawn in the spec's order before timing starts."""

    def __init__(self, thread_id: str, tn: int, steps: int) -> None:
        rng = SplitMix64(tn)
        self.thread_id = thread_id
        self.big_doc = rng.text(65536)
        self.steps = []
        counters = {"messages": 0, "scratch": 0, "big_doc": 0}
        current: dict[str, str] = {}
        messages: list[dict[str, str]] = []
        for n in range(steps):
            msg, scratch, wmsg, wscr = rng.text(480), rng.text(1024), rng.text(1024), rng.text(1024)
            task_id = rng.uuid4()
            changed = ["messages", "scratch", "big_doc"] if n == 0 else ["messages", "scratch"]
            seen = {} if n == 0 else {"agent": {c: current[c] for c in ("messages", "scratch")}}
            new_versions = {}
            for channel in changed:
                counters[channel] += 1
                new_versions[channel] = version(counters[channel], rng.suffix())
            current.update(new_versions)
            messages = messages + [
                {"type": "human" if n % 2 == 0 else "ai", "id": "msg-%04d" % n, "content": msg}
            ]
            self.steps.append(
                {
                    "values": {"messages": messages, "scratch": scratch, "big_doc": self.big_doc},
                    "channel_versions": dict(current),
                    "versions_seen": seen,
                    "updated_channels": sorted(changed),
                    "new_versions": new_versions,
                    "writes": [("messages", wmsg), ("scratch", wscr)],
                    "task_id": task_id,
                }
            )
        self.ids: list[str] = []


def checkpoint_of(step: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 4,
        "id": str(uuid6(clock_seq=-1)),
        "ts": datetime.now(timezone.utc).isoformat(),
        "channel_values": step["values"],
        "channel_versions": step["channel_versions"],
        "versions_seen": step["versions_seen"],
        "updated_channels": step["updated_channels"],
    }


# -- statistics -----------------------------------------------------------------------------


class Timings:
    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def add(self, op: str, seconds: float) -> None:
        self.samples.setdefault(op, []).append(seconds * 1000.0)

    def summary(self) -> dict[str, Any]:
        out = {}
        for op, xs in self.samples.items():
            s = sorted(xs)
            out[op] = {
                "calls": len(s),
                "ops_per_s": len(s) / (sum(s) / 1000.0) if sum(s) else None,
                "p50_ms": s[(len(s) - 1) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2,
                "p99_ms": s[max(0, -(-99 * len(s) // 100) - 1)],
            }
        return out


async def timed(timings: Timings, op: str, awaitable):
    start = time.perf_counter()
    result = await awaitable
    timings.add(op, time.perf_counter() - start)
    return result


async def timed_list(timings: Timings, op: str, saver, config, **kw) -> list:
    start = time.perf_counter()
    out = [t async for t in saver.alist(config, **kw)]
    timings.add(op, time.perf_counter() - start)
    return out


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the workload (§5) --------------------------------------------------------------------


def config_of(thread: Thread, n: int) -> dict[str, Any]:
    configurable = {"thread_id": thread.thread_id, "checkpoint_ns": ""}
    if n > 0:
        configurable["checkpoint_id"] = thread.ids[n - 1]
    return {"configurable": configurable}


async def run_step(saver, thread: Thread, n: int, timings: Timings) -> None:
    step = thread.steps[n]
    checkpoint = checkpoint_of(step)
    metadata = {"source": "loop", "step": n, "parents": {}}
    cfg = await timed(
        timings, "put", saver.aput(config_of(thread, n), checkpoint, metadata, step["new_versions"])
    )
    thread.ids.append(cfg["configurable"]["checkpoint_id"])
    await timed(timings, "put_writes", saver.aput_writes(cfg, step["writes"], step["task_id"]))


def check(thread: Thread, n: int, tup) -> None:
    step = thread.steps[n]
    problems = []
    if tup is None:
        raise AssertionError(f"{thread.thread_id} step {n}: missing")
    if tup.config["configurable"]["checkpoint_id"] != thread.ids[n]:
        problems.append("id")
    values = tup.checkpoint["channel_values"]
    if len(values.get("messages", [])) != n + 1 or values["messages"] != step["values"]["messages"]:
        problems.append("messages")
    if values.get("big_doc") != thread.big_doc:
        problems.append("big_doc")
    if values.get("scratch") != step["values"]["scratch"]:
        problems.append("scratch")
    if len(tup.pending_writes or []) != 2:
        problems.append(f"{len(tup.pending_writes or [])} pending writes")
    if tup.metadata.get("step") != n:
        problems.append("metadata.step")
    if problems:
        raise AssertionError(f"{thread.thread_id} step {n}: {', '.join(problems)}")


async def workload(saver, store_bytes, T: int, S: int) -> dict[str, Any]:
    w1 = [Thread("thread-%05d" % i, i, S) for i in range(T)]
    w4 = [Thread("w4thread-%05d" % j, 1_000_000 + j, S) for j in range(64)]
    timings = Timings()
    rss_before = rss_mb()

    start = time.perf_counter()
    for n in range(S):
        for thread in w1:
            await run_step(saver, thread, n, timings)
    w1_wall = time.perf_counter() - start
    stored = await store_bytes()

    mid = S // 2
    for thread in w1:
        latest = await timed(
            timings, "get_tuple_latest",
            saver.aget_tuple({"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": ""}}),
        )
        by_id = await timed(timings, "get_tuple_by_id", saver.aget_tuple(config_of(thread, mid + 1)))
        check(thread, S - 1, latest)
        check(thread, mid, by_id)

    full_times = []
    for thread in w1:
        cfg = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": ""}}
        ten = await timed_list(timings, "list_limit_10", saver, cfg, limit=10)
        assert [t.config["configurable"]["checkpoint_id"] for t in ten] == thread.ids[::-1][:10]
        start = time.perf_counter()
        full = await timed_list(timings, "list_full", saver, cfg)
        full_times.append(time.perf_counter() - start)
        assert len(full) == S
        for n, tup in zip(range(S - 1, -1, -1), full):
            check(thread, n, tup)
    for _ in range(5):
        hits = await timed_list(
            timings, "list_filtered", saver, None, filter={"source": "loop", "step": 5}
        )
        assert len(hits) == T, f"filtered list: {len(hits)} tuples, expected {T}"

    w4_timings = Timings()

    async def worker(w: int) -> None:
        for j in range(w, 64, 8):
            for n in range(S):
                await run_step(saver, w4[j], n, w4_timings)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(8)))
    w4_wall = time.perf_counter() - start
    return {
        "ops": timings.summary(),
        "w1_wall_s": w1_wall,
        "full_list_sum_s": sum(full_times),
        "w4": {
            "steps_per_s": 64 * S / w4_wall,
            "ops_per_s": 2 * 64 * S / w4_wall,
            "ops": w4_timings.summary(),
        },
        "bytes_after_w1": stored,
        "rss_before_w1_mb": rss_before,
    }


# -- the contenders -------------------------------------------------------------------------


def pg_bytes(url: str, schema: str):
    async def measure() -> int:
        import psycopg

        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            )
            return int((await cur.fetchone())[0])

    return measure


def redis_used_memory() -> int:
    out = subprocess.run(["redis-cli", "info", "memory"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise RuntimeError("no used_memory in INFO")


def mongo_bytes(url: str, database: str, prefix: str):
    async def measure() -> int:
        from pymongo import MongoClient

        client = MongoClient(url)
        try:
            db = client[database]
            total = 0
            for name in db.list_collection_names():
                if name.startswith(prefix):
                    stats = db.command("collStats", name)
                    total += stats["storageSize"] + stats["totalIndexSize"]
            return total
        finally:
            client.close()

    return measure


# Whether each MongoDB run gets a private server (`--private-mongo`).
PRIVATE_MONGO = False


@asynccontextmanager
async def mongo_server():
    """The URL of a MongoDB-wire server for one run: with `--private-mongo`, a private
    SecantusDB (CHECKPOINT_TEST_SECANTUSD) on a free port with fresh storage, stopped and
    removed afterwards; else CHECKPOINT_TEST_MONGO_URL."""
    if not PRIVATE_MONGO:
        yield os.environ["CHECKPOINT_TEST_MONGO_URL"]
        return
    import shutil
    import socket

    from pymongo import MongoClient

    executable = os.environ["CHECKPOINT_TEST_SECANTUSD"]
    storage = tempfile.mkdtemp(prefix="bench-py-mongo-")
    log_path = os.path.join(storage, "server.log")
    server = None
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(log_path, "wb") as log:
            server = subprocess.Popen(
                [executable, "--host", "127.0.0.1", "--port", str(port), "--storage-path",
                 os.path.join(storage, "data"), "--log-level", "WARNING"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        url = f"mongodb://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                with open(log_path, errors="replace") as log:
                    tail = "".join(log.readlines()[-20:])
                raise RuntimeError(
                    f"the private MongoDB-wire server on port {port} "
                    f"{'exited' if server.poll() is not None else 'did not answer in 90 s'}; "
                    f"its log ends:\n{tail}"
                )
            client = MongoClient(url, directConnection=True, serverSelectionTimeoutMS=1000)
            try:
                client.admin.command("ping")
                break
            except Exception:
                await asyncio.sleep(0.2)
            finally:
                client.close()
        yield url
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(storage, ignore_errors=True)


@asynccontextmanager
async def contender(name: str, backend: str):
    """(saver, store_bytes) on a fresh store of `backend`; removed afterwards."""
    tag = uuid.uuid4().hex[:10]
    if backend == "postgres":
        import psycopg

        url = os.environ["CHECKPOINT_TEST_POSTGRES_URL"]
        schema = f"bench_py_{tag}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            if name == "checkpoint_rs":
                yield checkpoint_rs.PostgresSaver(url, schema=schema), pg_bytes(url, schema)
            else:
                from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
                from psycopg.rows import dict_row
                from psycopg_pool import AsyncConnectionPool

                async with AsyncConnectionPool(
                    url,
                    min_size=1,
                    max_size=10,
                    open=False,
                    kwargs={
                        "autocommit": True,
                        "prepare_threshold": 0,
                        "row_factory": dict_row,
                        "options": f"-c search_path={schema}",
                    },
                ) as pool:
                    saver = AsyncPostgresSaver(pool)
                    await saver.setup()
                    yield saver, pg_bytes(url, schema)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.db")

            async def size() -> int:
                # The database's pages, the WAL's committed ones included (as
                # checkpoint-bench measures it): the file itself may lag behind the WAL.
                # Asked in another process: Python's sqlite3 is another copy of SQLite
                # than checkpoint_rs's, and two copies in one process must never open the
                # same file (closing one drops the other's POSIX locks, so it deletes the
                # write-ahead log under the saver; see checkpoint-python's README).
                query = (
                    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); print(c.execute("
                    "'SELECT page_count * page_size FROM pragma_page_count, pragma_page_size'"
                    ").fetchone()[0]); c.close()"
                )
                done = subprocess.run(
                    [sys.executable, "-c", query, path], capture_output=True, text=True
                )
                if done.returncode != 0:
                    raise RuntimeError(f"measuring {path}: {done.stderr.strip()}")
                return int(done.stdout)

            if name == "checkpoint_rs":
                yield checkpoint_rs.SqliteSaver(path), size
            else:
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

                async with AsyncSqliteSaver.from_conn_string(path) as saver:
                    yield saver, size
    elif backend == "redis":
        url = os.environ["CHECKPOINT_TEST_REDIS_URL"]
        base = redis_used_memory()

        async def used() -> int:
            return redis_used_memory() - base

        saver = checkpoint_rs.RedisSaver(url, key_prefix=f"bench-py-{tag}")
        try:
            yield saver, used
        finally:
            await saver.apurge()
    elif backend == "mongodb":
        async with mongo_server() as url:
            async with mongo_contender(name, url, tag) as got:
                yield got
    else:
        raise ValueError(backend)


@asynccontextmanager
async def mongo_contender(name: str, url: str, tag: str):
    """(saver, store_bytes) of `name` on the MongoDB-wire server at `url`."""
    database, prefix = "bench_py", f"b{tag}_"
    if name in ("checkpoint_rs", RELAXED):
        # RELAXED: LangGraph's durability (no transactions, the server's default write
        # concern) instead of the saver's default (transactions, majority, journaled).
        durability = (
            {"transactions": "disabled", "write_concern": "server-default"}
            if name == RELAXED
            else {}
        )
        saver = checkpoint_rs.MongoSaver(
            url, database=database, collection_prefix=prefix, **durability
        )
        try:
            yield saver, mongo_bytes(url, database, prefix)
        finally:
            await saver.adrop_collections()
    else:
        from langgraph.checkpoint.mongodb import MongoDBSaver
        from pymongo import MongoClient

        client = MongoClient(url)
        try:
            saver = MongoDBSaver(
                client,
                db_name=database,
                checkpoint_collection_name=prefix + "checkpoints",
                writes_collection_name=prefix + "checkpoint_writes",
            )
            yield saver, mongo_bytes(url, database, prefix)
        finally:
            for c in client[database].list_collection_names():
                if c.startswith(prefix):
                    client[database].drop_collection(c)
            client.close()


# checkpoint_rs at LangGraph's durability, where the two differ (MongoDB: LangGraph's saver
# writes without transactions, at the server's default write concern).
RELAXED = "checkpoint_rs_langgraph_durability"
RELAXED_BACKENDS = {"mongodb"}

# LangGraph's saver for each backend, where this machine can run it.
LANGGRAPH = {
    "postgres": "AsyncPostgresSaver",
    "sqlite": "AsyncSqliteSaver",
    "mongodb": "MongoDBSaver",
    # LangGraph's Redis saver needs the RediSearch and RedisJSON modules (Redis Stack or
    # Redis 8), which plain Redis 7 does not have.
    "redis": None,
}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repetitions of every figure (per operation too)."""

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    out: dict[str, Any] = {
        "w1_wall_s": med([r["w1_wall_s"] for r in runs]),
        "full_list_sum_s": med([r["full_list_sum_s"] for r in runs]),
        "bytes_after_w1": med([r["bytes_after_w1"] for r in runs]),
        "w4_steps_per_s": med([r["w4"]["steps_per_s"] for r in runs]),
        "w4_ops_per_s": med([r["w4"]["ops_per_s"] for r in runs]),
        "ops": {},
    }
    for op in runs[0]["ops"]:
        out["ops"][op] = {
            k: med([r["ops"][op][k] for r in runs]) for k in ("calls", "ops_per_s", "p50_ms", "p99_ms")
        }
    out["w4_put_p50_ms"] = med([r["w4"]["ops"]["put"]["p50_ms"] for r in runs])
    return out


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Ours to theirs: W4 throughput (above 1: ours is faster), W1 wall time, bytes and every
    operation's p50 latency (below 1: ours is faster or smaller)."""
    out = {
        "w4_steps_per_s": ours["w4_steps_per_s"] / theirs["w4_steps_per_s"],
        "w1_wall_s": ours["w1_wall_s"] / theirs["w1_wall_s"],
        "bytes_after_w1": ours["bytes_after_w1"] / theirs["bytes_after_w1"],
    }
    for op in ours["ops"]:
        out[f"{op}_p50"] = ours["ops"][op]["p50_ms"] / theirs["ops"][op]["p50_ms"]
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--backends", default="postgres,sqlite,mongodb,redis")
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--private-mongo",
        action="store_true",
        help="a private MongoDB-wire test server (CHECKPOINT_TEST_SECANTUSD) per MongoDB run",
    )
    args = parser.parse_args()
    global PRIVATE_MONGO
    PRIVATE_MONGO = args.private_mongo

    results: dict[str, Any] = {
        "workload": {"threads": args.threads, "steps": args.steps, "reps": args.reps},
        "mongodb_server": (
            "a private MongoDB-wire test server per run, fresh storage"
            if PRIVATE_MONGO
            else "CHECKPOINT_TEST_MONGO_URL, shared by every run"
        ),
        "python": platform.python_version(),
        "checkpoint_rs": checkpoint_rs.__version__,
        "langgraph_savers": {k: v for k, v in LANGGRAPH.items()},
        "backends": {},
    }
    for backend in args.backends.split(","):
        names = (
            ["checkpoint_rs"]
            + ([RELAXED] if backend in RELAXED_BACKENDS else [])
            + (["langgraph"] if LANGGRAPH[backend] else [])
        )
        runs: dict[str, list] = {n: [] for n in names}
        for rep in range(args.reps):
            for name in names:  # interleaved: ours, theirs, ours, theirs, ...
                async with contender(name, backend) as (saver, store_bytes):
                    r = await workload(saver, store_bytes, args.threads, args.steps)
                runs[name].append(r)
                print(
                    f"{backend:8} {name:34} rep {rep + 1}: W1 {r['w1_wall_s']:.2f} s, "
                    f"put p50 {r['ops']['put']['p50_ms']:.3f} ms, "
                    f"W4 {r['w4']['steps_per_s']:.0f} steps/s, "
                    f"{r['bytes_after_w1'] / 1e6:.2f} MB",
                    file=sys.stderr,
                    flush=True,
                )
        entry = {n: median_run(rs) for n, rs in runs.items()}
        if "langgraph" in entry:
            entry["ratios"] = ratios(entry["checkpoint_rs"], entry["langgraph"])
            if RELAXED in entry:
                entry["ratios_langgraph_durability"] = ratios(entry[RELAXED], entry["langgraph"])
        results["backends"][backend] = entry
    results["peak_rss_mb"] = peak_rss_mb()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    asyncio.run(main())
