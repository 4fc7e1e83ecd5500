"""checkpoint-rs for Python LangGraph: drop-in checkpointers on SQLite, PostgreSQL, Redis
(plain and Cluster), MongoDB and in memory, implemented in Rust."""

from checkpoint_rs import errors
from checkpoint_rs._native import __version__
from checkpoint_rs.errors import (
    CheckpointError,
    ClosedError,
    ConflictError,
    InvalidInputError,
    StaleFenceError,
    UnavailableError,
    UnsupportedError,
)
from checkpoint_rs.saver import (
    AsyncMongoDBSaver,
    AsyncPostgresSaver,
    AsyncRedisSaver,
    AsyncSqliteSaver,
    InMemorySaver,
    MemorySaver,
    MongoDBSaver,
    MongoSaver,
    PostgresSaver,
    RedisSaver,
    RustCheckpointSaver,
    SqliteSaver,
    ThreadLock,
)

__all__ = [
    "AsyncMongoDBSaver",
    "AsyncPostgresSaver",
    "AsyncRedisSaver",
    "AsyncSqliteSaver",
    "CheckpointError",
    "ClosedError",
    "ConflictError",
    "InMemorySaver",
    "InvalidInputError",
    "MemorySaver",
    "MongoDBSaver",
    "MongoSaver",
    "PostgresSaver",
    "RedisSaver",
    "RustCheckpointSaver",
    "StaleFenceError",
    "SqliteSaver",
    "ThreadLock",
    "UnavailableError",
    "UnsupportedError",
    "__version__",
    "errors",
]
