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
