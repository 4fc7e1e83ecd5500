"""Stores for the tests: every backend, each test on its own isolated store (its own SQLite
file, PostgreSQL schema, Redis key prefix or MongoDB collection prefix), removed afterwards.

Servers come from CHECKPOINT_TEST_{POSTGRES,REDIS,MONGO}_URL (scripts/test.sh starts them and
exports these). Without one, its tests skip; under CI=true or CHECKPOINT_TEST_REQUIRE=1 they
fail instead.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

import checkpoint_rs

BACKENDS = ["memory", "sqlite", "postgres", "redis", "mongodb"]
# The backends a second process can open: the in-memory saver dies with its process.
PERSISTENT = ["sqlite", "postgres", "redis", "mongodb"]

_CLASSES = {
    "memory": checkpoint_rs.InMemorySaver,
    "sqlite": checkpoint_rs.SqliteSaver,
    "postgres": checkpoint_rs.PostgresSaver,
    "redis": checkpoint_rs.RedisSaver,
    "mongodb": checkpoint_rs.MongoSaver,
}


def servers_required() -> bool:
    truthy = {"1", "true"}
    return (
        os.environ.get("CI", "").lower() in truthy
        or os.environ.get("CHECKPOINT_TEST_REQUIRE", "").lower() in truthy
    )


def server_url(name: str) -> str:
    url = os.environ.get(f"CHECKPOINT_TEST_{name.upper()}_URL")
    if not url:
        message = f"CHECKPOINT_TEST_{name.upper()}_URL is not set (run bash scripts/test.sh)"
        if servers_required():
            pytest.fail(message + "; required under CI=true or CHECKPOINT_TEST_REQUIRE=1")
        pytest.skip(message)
    return url


class Store:
    """One isolated store of one backend. `saver()` opens it (again: as another process
    would); `spec()` is what a child process needs to open it (see `open_spec`)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        tag = uuid.uuid4().hex[:10]
        self.options: dict[str, Any] = {}
        if kind == "memory":
            self.target = ""
        elif kind == "sqlite":
            self.target = str(tmp_path / "checkpoints.db")
        elif kind == "postgres":
            self.target = server_url("postgres")
            self.options = {"schema": f"cprs_py_{tag}"}
        elif kind == "redis":
            self.target = server_url("redis")
            self.options = {"key_prefix": f"cprs-py-{tag}"}
        elif kind == "mongodb":
            self.target = server_url("mongo")
            self.options = {"database": "cprs_py", "collection_prefix": f"t{tag}_"}
        self._opened: list[checkpoint_rs.RustCheckpointSaver] = []
        self._memory: checkpoint_rs.InMemorySaver | None = None

    def saver(self, **options: Any) -> checkpoint_rs.RustCheckpointSaver:
        if self.kind == "memory":
            # One process, one memory: "opening again" is the same saver.
            if self._memory is None:
                self._memory = checkpoint_rs.InMemorySaver(**options)
            return self._memory
        saver = _CLASSES[self.kind](self.target, **self.options, **options)
        self._opened.append(saver)
        return saver

    def spec(self, **options: Any) -> str:
        return json.dumps(
            {"kind": self.kind, "target": self.target, "options": {**self.options, **options}}
        )

    def destroy(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.target, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.options["schema"]}" CASCADE')
        elif self.kind == "redis":
            self.saver().purge()
        elif self.kind == "mongodb":
            self.saver().drop_collections()


def open_spec(spec: str) -> checkpoint_rs.RustCheckpointSaver:
    """Opens the store a `Store.spec()` describes (in a child process)."""
    s = json.loads(spec)
    return _CLASSES[s["kind"]](s["target"], **s["options"])


@pytest.fixture
def make_store(tmp_path: Path):
    """A factory of isolated stores, all removed when the test ends."""
    made: list[Store] = []

    def make(kind: str) -> Store:
        store = Store(kind, tmp_path / f"{kind}-{len(made)}")
        (tmp_path / f"{kind}-{len(made)}").mkdir(exist_ok=True)
        made.append(store)
        return store

    yield make
    for store in made:
        store.destroy()


def _free_cluster_ports(count: int, start: int = 7301) -> list[int]:
    """`count` consecutive loopback ports, each with its Cluster bus port (+10000) free."""
    import socket

    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    for base in range(start, start + 600, count):
        ports = list(range(base, base + count))
        if all(free(p) and free(p + 10000) for p in ports):
            return ports
    raise RuntimeError(f"no {count} free Cluster ports from {start} on")


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A Redis Cluster of 3 primaries on loopback ports, every node requiring a password
    (one with `,`, `@` and a space, which URLs must escape), started for the session and
    stopped after it: `(nodes as "host:port", password)`."""
    import shutil
    import subprocess
    import time

    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        message = "redis-server and redis-cli are not installed (scripts/services/redis.sh)"
        if servers_required():
            pytest.fail(message + "; required under CI=true or CHECKPOINT_TEST_REQUIRE=1")
        pytest.skip(message)
    password = "cl,ust@r pw"
    directory = tmp_path_factory.mktemp("redis-cluster")
    ports = _free_cluster_ports(3)
    nodes = [f"127.0.0.1:{port}" for port in ports]
    processes = []

    def ask(port: int, *args: str, timeout: float = 10) -> str:
        out = subprocess.run(
            [cli, "-h", "127.0.0.1", "-p", str(port), "-a", password, "--no-auth-warning", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return out.stdout + out.stderr

    def wait(what: str, ready) -> None:
        deadline = time.monotonic() + 30
        while not ready():
            if time.monotonic() > deadline:
                pytest.fail(f"the test Redis Cluster: {what} within 30 s")
            time.sleep(0.1)

    try:
        for port in ports:
            processes.append(
                subprocess.Popen(
                    [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
                     "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                     "--cluster-node-timeout", "5000", "--appendonly", "no", "--save", "",
                     "--requirepass", password, "--masterauth", password],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for port in ports:
            wait(f"node {port} answers PING", lambda port=port: "PONG" in ask(port, "ping"))
        created = ask(
            ports[0], "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes",
            timeout=60,
        )
        if "All 16384 slots covered" not in created:
            pytest.fail(f"redis-cli --cluster create failed:\n{created}")
        for port in ports:
            wait(
                f"node {port} reports cluster_state:ok",
                lambda port=port: "cluster_state:ok" in ask(port, "cluster", "info"),
            )
        yield nodes, password
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
