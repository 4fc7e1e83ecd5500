"""LangGraph checkpointers backed by checkpoint-rs.

Each class is a ``langgraph.checkpoint.base.BaseCheckpointSaver``: pass it to
``graph.compile(checkpointer=...)``. Values are serialized by the saver's ``serde``
(LangGraph's ``JsonPlusSerializer`` unless you pass another) and stored as the backend's typed
values, so the bytes stored are the ones LangGraph's own savers store. Synchronous methods
release the GIL while Rust works; asynchronous ones await a tokio future and never block the
event loop.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import random
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from checkpoint_rs import errors
from checkpoint_rs._native import NativeSaver, effect_key

_T = TypeVar("_T")
_log = logging.getLogger("checkpoint_rs")

# Tuples fetched per round of a `list`: one page of the backend is decoded at a time.
_LIST_BATCH = 64


def _address(config: RunnableConfig) -> tuple[str, str, str | None]:
    configurable = config["configurable"]
    return (
        str(configurable["thread_id"]),
        configurable.get("checkpoint_ns", ""),
        get_checkpoint_id(config),
    )


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _ttl_options(ttl: Mapping[str, Any] | None) -> dict[str, Any]:
    """The native options of a ``ttl`` mapping (the keys of LangGraph's ``TTLConfig``)."""
    if ttl is None:
        return {}
    known = ("default_ttl", "refresh_on_read", "sweep_interval_minutes")
    unknown = set(ttl) - set(known)
    if unknown:
        raise errors.InvalidInputError(
            f"ttl: unknown keys {sorted(unknown)} (expected {', '.join(known)})"
        )
    options: dict[str, Any] = {}
    for key, native in (
        ("default_ttl", "default_ttl_minutes"),
        ("sweep_interval_minutes", "sweep_interval_minutes"),
    ):
        minutes = ttl.get(key)
        if minutes is not None:
            options[native] = _positive(minutes, f"ttl: {key}", "minutes")
    if "refresh_on_read" in ttl:
        refresh = ttl["refresh_on_read"]
        if not isinstance(refresh, bool):
            raise errors.InvalidInputError(f"ttl: refresh_on_read is a bool; got {refresh!r}")
        options["refresh_on_read"] = refresh
    return options


def _timeout(timeout: float | timedelta | None) -> float | None:
    """The ``timeout`` option in seconds: positive and finite."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    return _positive(timeout, "timeout", "seconds")


def _retries(retries: Any) -> int:
    """The ``retries`` option: a whole number from 0 to 100."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise errors.InvalidInputError(
            f"retries is a whole number of retries from 0 to 100; got {retries!r}"
        )
    return retries


def _threads_args(after: Any, limit: Any) -> tuple[str | None, int | None]:
    """The arguments of ``list_threads``: a string or ``None``, a whole number from 0 or
    ``None``."""
    if after is not None and not isinstance(after, str):
        raise errors.InvalidInputError(f"after is a thread id, a string; got {after!r}")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
    ):
        raise errors.InvalidInputError(f"limit is a whole number from 0; got {limit!r}")
    # A limit above any count is none.
    return after, None if limit is not None and limit > sys.maxsize else limit


def _positive(value: Any, what: str, unit: str) -> float:
    """``value``, a number of ``unit``, as a float: positive and finite, or an
    ``InvalidInputError`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.InvalidInputError(f"{what} is {unit}, a number; got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not (math.isfinite(number) and number > 0):
        raise errors.InvalidInputError(
            f"{what} must be a positive, finite number of {unit}; got {number!r}"
        )
    return number


def _left(seconds: float | None) -> timedelta | None:
    """A native time left as a timedelta (capped at ``timedelta.max``)."""
    if seconds is None:
        return None
    if seconds >= timedelta.max.total_seconds():
        return timedelta.max
    return timedelta(seconds=seconds)


# psycopg's own arguments to `connect()` (and in a pool's `kwargs`): how LangGraph's saver
# uses the connection it is given, which this saver does not use (it opens its own pool).
_PSYCOPG_SETTINGS = frozenset(
    {"autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context"}
)
# libpq parameters the driver takes as URL query parameters.
_PG_URL_PARAMS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "application_name", "options")
# libpq parameters that choose a different server or session than the URL's would: refused
# (the other parameters are about how a connection is negotiated or kept, which the driver
# does itself, and are left out).
_PG_REFUSED = {
    "load_balance_hosts": "disable",
    "replication": None,
    "service": None,
    "target_session_attrs": "any",
}


def _postgres_target(target: Any) -> tuple[str, int | None] | None:
    """For a psycopg connection (sync or async) or a psycopg_pool pool, what LangGraph's
    ``PostgresSaver`` takes: the URL of the database it connects to, and the pool's
    ``max_size``. ``None`` for anything else."""
    module = type(target).__module__
    if module.startswith("psycopg_pool"):
        from psycopg.conninfo import conninfo_to_dict

        kwargs = {k: v for k, v in (target.kwargs or {}).items() if k not in _PSYCOPG_SETTINGS}
        return _postgres_url(conninfo_to_dict(target.conninfo, **kwargs)), target.max_size
    if module.startswith("psycopg") and hasattr(target, "info"):
        info = target.info
        params: dict[str, Any] = dict(info.get_parameters())
        # The values the connection was made with (defaults and environment included).
        params.update(host=info.host, port=info.port, dbname=info.dbname, user=info.user)
        params["password"] = info.password
        return _postgres_url(params), None
    return None


def _postgres_url(params: Mapping[str, Any]) -> str:
    """A libpq parameter set as a URL the saver's driver reads; ``InvalidInputError`` for
    one that would choose another server or session (several hosts,
    ``target_session_attrs``, ``service``, ...)."""
    from urllib.parse import quote, urlencode

    given = {k: str(v) for k, v in params.items() if v not in (None, "")}
    refused = sorted(k for k, default in _PG_REFUSED.items() if given.get(k, default) != default)
    host = given.get("host", "")
    if refused or "," in host:
        what = ", ".join(refused) if refused else f"host={host} (several hosts)"
        raise errors.InvalidInputError(
            f"PostgresSaver cannot connect with the connection's {what}: pass a URL "
            "(postgres://user:password@host:port/dbname?sslmode=...) instead"
        )
    left = {k: given[k] for k in _PG_URL_PARAMS if k in given}
    if not host and "hostaddr" in given:
        left["hostaddr"] = given["hostaddr"]
    if host.startswith("/"):
        host = quote(host, safe="")  # a socket directory: the driver decodes it
    elif ":" in host:
        host = f"[{host}]"
    user, password = given.get("user", ""), given.get("password", "")
    credentials = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    port = given.get("port", "")
    netloc = (credentials + "@" if credentials else "") + host + (":" + port if port else "")
    database = quote(given.get("dbname", ""), safe="")
    query = urlencode(left)
    return f"postgres://{netloc}/{database}" + ("?" + query if query else "")


def _redis_client_url(client: Any) -> Any:
    """The URL of the server or Cluster a redis-py client (``Redis``, ``RedisCluster``,
    sync or asyncio) connects to; anything else is returned as it is (the constructor says
    what it takes)."""
    if not type(client).__module__.startswith("redis."):
        return client
    from urllib.parse import quote

    cluster = _redis_cluster_nodes(client)
    if cluster is not None:
        kwargs = client.get_connection_kwargs()
        ssl = bool(kwargs.get("ssl")) or "SSL" in getattr(
            kwargs.get("connection_class"), "__name__", ""
        )
    else:
        pool = getattr(client, "connection_pool", None)
        if pool is None:
            raise TypeError(
                f"RedisSaver cannot read where a {type(client).__name__} connects: "
                "pass its URL (redis://host:port/db or redis+cluster://host:port,host:port)"
            )
        kwargs = pool.connection_kwargs
        if "path" in kwargs:
            raise TypeError("RedisSaver takes a Unix-socket server as a URL: unix:///path?db=N")
        ssl = "SSL" in pool.connection_class.__name__
    if kwargs.get("credential_provider") is not None:
        raise TypeError(
            "RedisSaver cannot read a redis-py credential_provider: pass the URL with the "
            "user and password instead"
        )
    # Escaped whole: ``@``, ``:`` and ``,`` (which separates a Cluster's nodes) included.
    user, password = kwargs.get("username") or "", kwargs.get("password") or ""
    credentials = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    userinfo = credentials + "@" if credentials else ""
    if cluster is not None:
        scheme = "rediss+cluster" if ssl else "redis+cluster"
        return f"{scheme}://{userinfo}{','.join(cluster)}"
    host = str(kwargs.get("host", "localhost"))
    if ":" in host:
        host = f"[{host}]"
    scheme = "rediss" if ssl else "redis"
    return f"{scheme}://{userinfo}{host}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def _redis_cluster_nodes(client: Any) -> list[str] | None:
    """``host:port`` of the nodes a redis-py ``RedisCluster`` (sync or asyncio) starts from
    and has found, or ``None`` for another client."""
    if not hasattr(client, "get_connection_kwargs") or not hasattr(client, "nodes_manager"):
        return None
    nodes: list[Any] = list(getattr(client, "startup_nodes", None) or [])
    manager = client.nodes_manager
    for known in (getattr(manager, "startup_nodes", None), getattr(manager, "nodes_cache", None)):
        if isinstance(known, Mapping):
            nodes.extend(known.values())
    seen: dict[str, None] = {}
    for node in nodes:
        host = str(node.host)
        if ":" in host:
            host = f"[{host}]"
        seen.setdefault(f"{host}:{node.port}", None)
    if not seen:
        raise TypeError(
            f"RedisSaver found no node in the {type(client).__name__}: pass its URL "
            "(redis+cluster://host:port,host:port)"
        )
    return list(seen)


# pymongo's options (lowercased, as pymongo keeps them) that choose the server, the
# session or the TLS of a connection, with their URL names; the others configure pymongo's
# own client, which this saver does not use.
_MONGO_URL_OPTIONS = {
    "replicaset": "replicaSet",
    "directconnection": "directConnection",
    "loadbalanced": "loadBalanced",
    "tls": "tls",
    "tlsinsecure": "tlsInsecure",
    "tlsallowinvalidcertificates": "tlsAllowInvalidCertificates",
    "tlscafile": "tlsCAFile",
    "tlscertificatekeyfile": "tlsCertificateKeyFile",
    "appname": "appName",
}
# pymongo's TLS options the saver's driver (on rustls) does not have, when set.
_MONGO_REFUSED = {
    "tlsallowinvalidhostnames": "skipping the host-name check alone",
    "tlscertificatekeyfilepassword": "an encrypted client key file",
}
# Authentication mechanisms a URL carries whole (user, password, source): others need
# properties or an environment the URL does not say.
_MONGO_URL_MECHANISMS = ("DEFAULT", "SCRAM-SHA-1", "SCRAM-SHA-256", "PLAIN", "MONGODB-X509")


def _mongo_client_url(client: Any) -> Any:
    """The URL of the deployment a pymongo client (``MongoClient`` or
    ``AsyncMongoClient``) connects to, with its user, password, authentication source and
    mechanism, replica set and TLS settings; anything else is returned as it is (the
    constructor says what it takes)."""
    if not type(client).__module__.startswith("pymongo."):
        return client
    from urllib.parse import quote, urlencode, urlsplit

    try:
        # pymongo keeps the seed list and the credentials private.
        seeds = sorted(client._topology_settings.seeds)
        credentials = client.options.pool_options._credentials
        given = dict(client.options._options)
        host = client._init_kwargs.get("host")
    except AttributeError as e:
        raise TypeError(
            "MongoSaver cannot read where this pymongo client connects (this pymongo "
            "version keeps it elsewhere): pass the URL it was opened with"
        ) from e
    refused = [what for key, what in _MONGO_REFUSED.items() if given.get(key)]
    if refused:
        raise errors.InvalidInputError(
            f"MongoSaver's driver does not support the client's TLS setting ({refused[0]}): "
            "connect with a certificate it verifies, or tlsAllowInvalidCertificates=true"
        )
    query = {
        name: str(given[key]).lower() if isinstance(given[key], bool) else str(given[key])
        for key, name in _MONGO_URL_OPTIONS.items()
        if given.get(key) is not None
    }
    userinfo = ""
    if credentials is not None:
        if credentials.mechanism not in _MONGO_URL_MECHANISMS:
            raise errors.InvalidInputError(
                f"MongoSaver cannot connect with the client's {credentials.mechanism} "
                "authentication: pass a URL (mongodb://...?authMechanism=...) instead"
            )
        if credentials.username:
            userinfo = quote(credentials.username, safe="")
            if credentials.password is not None:
                userinfo += ":" + quote(credentials.password, safe="")
            userinfo += "@"
        query["authSource"] = credentials.source
        if credentials.mechanism != "DEFAULT":
            query["authMechanism"] = credentials.mechanism
    if isinstance(host, str) and host.startswith("mongodb+srv://"):
        # The DNS name, resolved again by the saver's driver (and its TXT options with it).
        scheme, hosts = "mongodb+srv", urlsplit(host).hostname or ""
    else:
        scheme = "mongodb"
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in seeds)
    return f"{scheme}://{userinfo}{hosts}/" + ("?" + urlencode(query) if query else "")


def _idempotent(idempotent: bool | Mapping[str, float | timedelta]) -> dict[str, Any]:
    """The native form of the ``idempotent`` option: on or off, or on with its settings
    (seconds or timedeltas; the native side knows their names)."""
    if isinstance(idempotent, bool):
        return {"idempotent": idempotent}
    if not isinstance(idempotent, Mapping):
        raise TypeError(
            f"idempotent is True, False or a dict of settings; got {type(idempotent).__name__}"
        )
    settings = {}
    for name, value in idempotent.items():
        if isinstance(value, timedelta):
            value = value.total_seconds()
        settings[name] = _positive(value, f"idempotent[{name!r}]", "seconds")
    return {"idempotent": True, "idempotent_settings": settings}


def _unrecorded(ledger_key: str, origin: str) -> None:
    """Logs an effect that ran but whose outcome the ledger did not take (its claim expired
    and another caller took the key over, or the ledger kept failing): it may run again."""
    if origin == "ran_unrecorded":
        _log.warning(
            "effect %r ran but its outcome could not be recorded (its claim expired and was "
            "taken over, or the ledger failed): it may run again; raise claim_ttl above the "
            "effect's duration",
            ledger_key,
        )


def _thread_ttl(ttl: timedelta | str) -> tuple[str, float | None]:
    """The native form of a thread TTL: a duration, ``"default"`` or ``"pinned"``."""
    if isinstance(ttl, timedelta):
        return "expire", ttl.total_seconds()
    if ttl in ("default", "pinned"):
        return ttl, None
    raise TypeError(f'a thread TTL is a datetime.timedelta, "default" or "pinned"; got {ttl!r}')


def _sqlite_path(path: str | os.PathLike[str] | sqlite3.Connection) -> str:
    """The file a ``SqliteSaver`` opens: a path, or the main database of a connection."""
    if isinstance(path, sqlite3.Connection):
        databases = path.execute("PRAGMA database_list").fetchall()
        file = next((f for _, name, f in databases if name == "main"), "")
        if not file:
            raise errors.InvalidInputError(
                "this sqlite3 connection's database is in memory (or temporary), which "
                'another connection cannot open: pass a file, or ":memory:" for a private '
                "in-memory saver"
            )
        return file
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    raise TypeError(
        f"SqliteSaver takes a path or a sqlite3.Connection; got {type(path).__name__}"
    )


# The ``configurable`` key with which a run chooses compare-and-set for its own puts.
_RUN_COMPARE_AND_SET = "compare_and_set"


def _run_compare_and_set(config: RunnableConfig, metadata: CheckpointMetadata) -> bool | None:
    """The run's choice of compare-and-set (``None``: the saver's). A checkpoint LangGraph
    marks ``source: "fork"`` starts a deliberate branch (``update_state(...,
    as_node="__copy__")``, a resume addressed at an older checkpoint): no racing writer
    makes one, and its parent is not the head by design, so it is stored without."""
    value = config["configurable"].get(_RUN_COMPARE_AND_SET)
    if value is None and metadata.get("source") == "fork":
        return False
    if value is None or isinstance(value, bool):
        return value
    raise errors.InvalidInputError(
        f'configurable["{_RUN_COMPARE_AND_SET}"] must be True, False or None; got {value!r}'
    )


def _without_run_options(config: RunnableConfig) -> RunnableConfig:
    """``config`` without the run's choice of compare-and-set, which LangGraph would copy
    into the checkpoint's metadata (from ``configurable``, and from ``metadata``, where
    LangChain copies scalar ``configurable`` entries)."""
    configurable = config["configurable"]
    if _RUN_COMPARE_AND_SET not in configurable:
        return config
    value = configurable[_RUN_COMPARE_AND_SET]
    stripped: dict[str, Any] = {
        **config,
        "configurable": {k: v for k, v in configurable.items() if k != _RUN_COMPARE_AND_SET},
    }
    metadata = config.get("metadata")
    if isinstance(value, bool) and metadata and metadata.get(_RUN_COMPARE_AND_SET) is value:
        stripped["metadata"] = {k: v for k, v in metadata.items() if k != _RUN_COMPARE_AND_SET}
    return cast(RunnableConfig, stripped)


def _metadata_json(config: RunnableConfig, metadata: CheckpointMetadata) -> str:
    return json.dumps(
        get_serializable_checkpoint_metadata(_without_run_options(config), metadata),
        separators=(",", ":"),
        ensure_ascii=False,
    )


class RustCheckpointSaver(BaseCheckpointSaver[str]):
    """The checkpointer every backend class below is: construct one of those.

    Options common to every backend:

    * ``serde``: the serializer (default LangGraph's ``JsonPlusSerializer``).
    * ``compare_and_set``: every put stores only if its parent is still the head of the
      thread and namespace, so two processes continuing one thread cannot fork it: the
      loser gets :class:`checkpoint_rs.errors.ConflictError` and writes nothing. A run
      chooses for its own puts with ``"compare_and_set": True`` or ``False`` in its
      ``configurable``; time travel (replaying from, or updating, an older checkpoint forks
      the thread) needs ``False``, as compare-and-set refuses a parent that is not the head.
      Checkpoints LangGraph itself marks as forks (``source: "fork"``) are stored without.
    * ``sanitize_on_load``, ``pending_markers``, ``skip_unsafe_put``, ``idempotent``: the
      wrappers of checkpoint-sanitize (repair orphan tool calls when a thread is loaded,
      mark tool calls in flight, refuse puts that would store an invalid message history,
      run side effects once), in their canonical order. ``idempotent`` enables
      :meth:`once`, :meth:`aonce` and :meth:`lock_thread`; ``True``, or a dict of settings
      in seconds (or timedeltas): ``lease_ttl`` (30; a held thread lock's lease, renewed
      every third of it), ``lease_wait`` (120; how long :meth:`lock_thread` waits for
      another holder), ``claim_ttl`` (60; how long a running effect's claim protects it:
      keep it well above the effect's duration), ``pending_wait`` (120; how long
      :meth:`once` waits for another holder running the same effect).
    * ``ttl`` (every backend but MongoDB, whose ``ttl`` is seconds, as LangGraph's
      ``MongoDBSaver`` takes it), with the keys of LangGraph's ``TTLConfig``:
      ``{"default_ttl": minutes, "refresh_on_read": bool, "sweep_interval_minutes":
      minutes}``. A thread expires that long after its last write (or, with
      ``refresh_on_read``, its last ``get_tuple``) and is invisible at once;
      ``sweep_interval_minutes`` runs :meth:`sweep_expired` in the background until the
      saver is closed;
      :meth:`set_thread_ttl` gives one thread its own TTL or pins it, and
      :meth:`sweep_expired` reclaims expired threads' space (Redis and the in-memory saver
      delete expired threads themselves).
    * ``timeout``: seconds (or a ``timedelta``) that a call of the saver API may wait, and
      that a ``list`` may wait for each batch of tuples; a call still waiting then is
      dropped and raises :class:`checkpoint_rs.errors.UnavailableError` (transient: a retry
      may succeed). As when a connection breaks, a call cut short may have taken effect or
      not: read to find out. (Opening the saver, ``purge``, ``drop_collections`` and the
      background sweeper are not bounded.) On PostgreSQL the server bounds the saver's
      statements too (``statement_timeout``, a tenth longer than ``timeout`` plus 100 ms;
      ``setup`` and sweeps excepted), and a cut call's connection is closed, so a thread
      whose rows another session holds cannot take the pool from the other threads.
    * ``retries``: how many times (default 0) a call that raised
      :class:`checkpoint_rs.errors.UnavailableError` (a lost connection, a server restarting
      or failing over, the ``timeout``) is made again, waiting 100 ms before the first
      retry and twice as long before each next one, up to 3.2 s, with jitter: with 6, a
      server away for about 6 s costs no call an error. Each attempt gets the ``timeout``
      (a ``list``'s batch gets it once, its retries included).
      Every call is safe to repeat (a put whose answer was lost is stored once; a
      compare-and-set put retried while it is still the head succeeds again), except that
      :meth:`sweep_expired` is not retried; a ``list`` cut part-way resumes after the last
      tuple it yielded.
    """

    _kind: str = ""

    def __init__(
        self,
        target: str,
        *,
        serde: SerializerProtocol | None = None,
        compare_and_set: bool = False,
        sanitize_on_load: bool = False,
        pending_markers: bool = False,
        skip_unsafe_put: bool = False,
        idempotent: bool | Mapping[str, float | timedelta] = False,
        ttl: Mapping[str, Any] | None = None,
        timeout: float | timedelta | None = None,
        retries: int = 0,
        **backend_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(target, str):
            raise TypeError(
                f"{type(self).__name__} takes a connection URL; got a "
                f"{type(target).__name__} (where LangGraph's saver takes a driver's "
                "connection or pool, pass the URL it was opened with)"
            )
        self._native = NativeSaver(
            self._kind,
            target,
            compare_and_set=compare_and_set,
            sanitize_on_load=sanitize_on_load,
            pending_markers=pending_markers,
            skip_unsafe_put=skip_unsafe_put,
            **_idempotent(idempotent),
            timeout_seconds=_timeout(timeout),
            retries=_retries(retries),
            **_ttl_options(ttl),
            **backend_options,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._native!r})"

    def close(self) -> None:
        """Stops the background sweeper and lets go of the store: the saver's connections
        close once the calls still running and the ``list`` iterators still open are done
        with them. Every later call raises
        :class:`~checkpoint_rs.errors.ClosedError`; closing again does nothing. Leaving a
        ``with`` or ``async with`` block over the saver closes it."""
        self._native.close()

    async def aclose(self) -> None:
        """:meth:`close`, which does not wait: for ``async`` code that expects it."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._native.closed

    def setup(self) -> None:
        """Creates the backend's tables (PostgreSQL) or indexes (MongoDB) where they are
        missing; idempotent, and safe from many processes at once. Opening a saver already
        does it unless ``setup=False``: this is for code written against LangGraph's
        savers, which call it, and for savers opened with ``setup=False``. SQLite files,
        Redis and the in-memory saver need nothing."""
        self._native.setup(True)

    async def asetup(self) -> None:
        """Async version of :meth:`setup`."""
        await self._native.setup(False)

    @property
    def sweeper(self) -> dict[str, Any] | None:
        """What the background sweeper (``ttl={"sweep_interval_minutes": ...}``) has done so
        far, or ``None`` without one: ``running`` (whether its task still runs; ``False``
        after :meth:`close`), ``sweeps`` (each tick runs one), ``failures`` (sweeps that
        ended in an error and are retried at the next tick), ``swept`` (threads deleted),
        ``last_sweep`` and ``last_failure`` (aware UTC datetimes, or ``None``) and
        ``last_error`` (the last failure's message, kept after later sweeps succeed). For
        health checks, since the sweeper itself never raises: a ``last_sweep`` much older
        than the interval means a sweep is still waiting on the store. Readable after
        :meth:`close`."""
        raw = self._native.sweeper
        if raw is None:
            return None
        for key in ("last_sweep", "last_failure"):
            if raw[key] is not None:
                raw[key] = datetime.fromtimestamp(raw[key], timezone.utc)
        return raw

    def __enter__(self) -> RustCheckpointSaver:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    async def __aenter__(self) -> RustCheckpointSaver:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def capabilities(self) -> dict[str, bool]:
        """The optional operations of the backend (copy_thread, prune, delete_for_runs,
        compare_and_set, leases, ledger, ttl)."""
        return self._native.capabilities()

    # -- conversions ----------------------------------------------------------------------

    def _tuple(self, raw: tuple) -> CheckpointTuple:
        thread_id, checkpoint_ns, checkpoint_id, parent_id, checkpoint, metadata, writes = raw
        loads = self.serde.loads_typed
        checkpoint["channel_values"] = {
            k: loads(v) for k, v in checkpoint["channel_values"].items()
        }
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=json.loads(metadata),
            parent_config=(
                _config(thread_id, checkpoint_ns, parent_id) if parent_id else None
            ),
            pending_writes=[(task, channel, loads(v)) for task, channel, v in writes],
        )

    def _put_args(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple:
        thread_id, checkpoint_ns, parent_id = _address(config)
        values = checkpoint["channel_values"]
        dumps = self.serde.dumps_typed
        stored = dict(checkpoint)
        stored["channel_values"] = {k: dumps(values[k]) for k in new_versions if k in values}
        return (
            thread_id,
            checkpoint_ns,
            parent_id,
            stored,
            _metadata_json(config, metadata),
            new_versions,
            _run_compare_and_set(config, metadata),
        )

    def _writes_args(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple:
        thread_id, checkpoint_ns, checkpoint_id = _address(config)
        dumps = self.serde.dumps_typed
        return (
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            [(channel, dumps(value)) for channel, value in writes],
            task_id,
            task_path,
        )

    def _list_stream(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Any:
        configurable = config["configurable"] if config else {}
        thread_id = configurable.get("thread_id")
        return self._native.list(
            str(thread_id) if thread_id is not None else None,
            configurable.get("checkpoint_ns"),
            configurable.get("checkpoint_id"),
            json.dumps(filter, separators=(",", ":"), ensure_ascii=False) if filter else None,
            get_checkpoint_id(before) if before else None,
            limit,
        )

    def _delta(self, raw: Mapping[str, tuple]) -> dict[str, DeltaChannelHistory]:
        loads = self.serde.loads_typed
        out: dict[str, DeltaChannelHistory] = {}
        for channel, (seed, writes) in raw.items():
            entry: DeltaChannelHistory = {
                "writes": [(task, ch, loads(v)) for task, ch, v in writes]
            }
            if seed is not None:
                entry["seed"] = loads(seed)
            out[channel] = entry
        return out

    # -- synchronous API ------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raw = self._native.get_tuple(*_address(config), True)
        return None if raw is None else self._tuple(raw)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        stream = self._list_stream(config, filter, before, limit)
        while batch := stream.next_batch(_LIST_BATCH):
            for raw in batch:
                yield self._tuple(raw)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args = self._put_args(config, checkpoint, metadata, new_versions)
        checkpoint_id = self._native.put(*args, True)
        return _config(args[0], args[1], checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._native.put_writes(*self._writes_args(config, writes, task_id, task_path), True)

    def list_threads(self, *, after: str | None = None, limit: int | None = None) -> Iterator[str]:
        """The ids of the threads holding a checkpoint, ascending as the store orders them
        (byte order; PostgreSQL: the column's collation), without reading a checkpoint: from
        an index page by page (Redis: a scan of its thread keys, each call). With ``after``,
        only the ids after it (the next page of a list: pass the last id of the previous
        one); with ``limit``, at most that many."""
        stream = self._native.list_threads(*_threads_args(after, limit))
        while batch := stream.next_batch(_LIST_BATCH):
            yield from batch

    def delete_thread(self, thread_id: str) -> None:
        self._native.delete_thread(str(thread_id), True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._native.delete_for_runs([str(r) for r in run_ids], True)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._native.copy_thread(str(source_thread_id), str(target_thread_id), True)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._native.prune([str(t) for t in thread_ids], strategy, True)

    def set_thread_ttl(
        self, thread_id: str, ttl: timedelta | Literal["default", "pinned"]
    ) -> None:
        """Gives a thread its own TTL (counted from its last write), ``"pinned"`` (it never
        expires) or ``"default"`` (the saver's ``ttl`` again). Raises
        :class:`checkpoint_rs.errors.UnsupportedError` where the backend has no TTLs."""
        self._native.set_thread_ttl(str(thread_id), *_thread_ttl(ttl), True)

    def thread_ttl(self, thread_id: str) -> timedelta | None:
        """Time left before the thread's data expires; ``None`` when it has no TTL, no data,
        or has expired."""
        return _left(self._native.thread_ttl(str(thread_id), True))

    def sweep_expired(self, limit: int = 1000) -> int:
        """Deletes the data of at most ``limit`` expired threads (already invisible) and
        returns how many it deleted; call it until it returns less than ``limit``."""
        return self._native.sweep_expired(limit, True)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        raw = self._native.delta_channel_history(*_address(config), list(channels), True)
        return self._delta(raw)

    # -- asynchronous API -----------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raw = await self._native.get_tuple(*_address(config), False)
        return None if raw is None else self._tuple(raw)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        stream = self._list_stream(config, filter, before, limit)
        while batch := await stream.anext_batch(_LIST_BATCH):
            for raw in batch:
                yield self._tuple(raw)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args = self._put_args(config, checkpoint, metadata, new_versions)
        checkpoint_id = await self._native.put(*args, False)
        return _config(args[0], args[1], checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._native.put_writes(
            *self._writes_args(config, writes, task_id, task_path), False
        )

    async def alist_threads(
        self, *, after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[str]:
        """As ``list_threads``, awaiting each page."""
        stream = self._native.list_threads(*_threads_args(after, limit))
        while batch := await stream.anext_batch(_LIST_BATCH):
            for thread_id in batch:
                yield thread_id

    async def adelete_thread(self, thread_id: str) -> None:
        await self._native.delete_thread(str(thread_id), False)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._native.delete_for_runs([str(r) for r in run_ids], False)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._native.copy_thread(str(source_thread_id), str(target_thread_id), False)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._native.prune([str(t) for t in thread_ids], strategy, False)

    async def aset_thread_ttl(
        self, thread_id: str, ttl: timedelta | Literal["default", "pinned"]
    ) -> None:
        """Async version of :meth:`set_thread_ttl`."""
        await self._native.set_thread_ttl(str(thread_id), *_thread_ttl(ttl), False)

    async def athread_ttl(self, thread_id: str) -> timedelta | None:
        """Async version of :meth:`thread_ttl`."""
        return _left(await self._native.thread_ttl(str(thread_id), False))

    async def asweep_expired(self, limit: int = 1000) -> int:
        """Async version of :meth:`sweep_expired`."""
        return await self._native.sweep_expired(limit, False)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        raw = await self._native.delta_channel_history(*_address(config), list(channels), False)
        return self._delta(raw)

    # -- side effects once, one run per thread --------------------------------------------

    def effect_key(self, config: RunnableConfig, effect: str) -> str:
        """The idempotency key of side effect ``effect``, for :meth:`once`:

        * of the graph task that runs with ``config`` (the config LangGraph passes to a
          node or ``@task``): built from the thread, the namespace, the checkpoint the step
          started from, the task's id and ``effect``, so the same task of the same step
          gets the same key on every retry, resume and replay, and no other task does;
        * of a checkpoint, for ``config`` addressing one (a ``StateSnapshot``'s
          ``config``, a ``CheckpointTuple``'s): an effect that happens once per checkpoint,
          such as showing the user the question of the interrupt it holds.

        The same keys as checkpoint-sanitize's ``EffectKey::for_task`` and
        ``EffectKey::for_checkpoint`` in Rust. ``InvalidInputError`` for a config that is
        neither."""
        if not effect:
            raise errors.InvalidInputError("an effect name is empty")
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        namespace = str(configurable.get("checkpoint_ns", ""))
        task_id = configurable.get("__pregel_task_id")
        if task_id:
            # A task's namespace is its graph's plus `|node:task_id` (none at the root).
            namespace = namespace.rpartition("|")[0]
            checkpoint_id = (configurable.get("checkpoint_map") or {}).get(namespace)
        else:
            task_id, checkpoint_id = "", configurable.get("checkpoint_id")
        if thread_id is None or not checkpoint_id:
            raise errors.InvalidInputError(
                "effect_key needs the config LangGraph passes to a node or task, or the "
                "config of a checkpoint (with its thread and checkpoint id); for other "
                "effects, pick a key yourself"
            )
        return effect_key(str(thread_id), namespace, checkpoint_id, task_id, effect)

    def once(self, key: str, effect: Callable[[], _T]) -> _T:
        """Runs ``effect()`` at most once per ``key`` as far as the idempotency ledger can
        tell, and returns its result, or the result recorded by the call that ran it
        (decoded by the saver's ``serde``; the effect is not run again). Needs
        ``idempotent=True``.

        The key is claimed in the ledger first (one holder at a time, across processes):
        while another caller runs the same effect, this one waits (up to ``pending_wait``,
        then :class:`~checkpoint_rs.errors.UnavailableError`). If ``effect`` raises, the
        claim is given up and the exception propagates: the next call runs it again. So the
        effect runs at least once, and twice only when a process ran it and died (or ran
        past ``claim_ttl``) before its result was recorded; it is exactly once when the
        effect passes ``key`` to a downstream system that deduplicates by it (an email
        queue's job id, a payment API's idempotency key). In a graph node, use
        ``saver.once(saver.effect_key(config, "send_email"), lambda: ...)``: a node that
        LangGraph runs again after a crash, a retry or a resume then does not repeat it.
        """
        begun = self._native.once_begin(key, True)
        if begun[0] == "replay":
            return cast(_T, self.serde.loads_typed((begun[1], begun[2])))
        _, ledger_key, token = begun
        try:
            value = effect()
        except Exception:
            self._native.once_abandon(ledger_key, token, True)
            raise
        outcome = self._outcome(ledger_key, value)
        if outcome is not None:
            _unrecorded(ledger_key, self._native.once_finish(ledger_key, token, *outcome, True))
        return value

    async def aonce(self, key: str, effect: Callable[[], Awaitable[_T] | _T]) -> _T:
        """Async version of :meth:`once`: ``effect`` is a coroutine function (or a plain
        function), awaited in the caller's event loop. A call cancelled while its effect
        runs keeps its claim until ``claim_ttl`` runs out, as the effect may have happened.
        """
        begun = await self._native.once_begin(key, False)
        if begun[0] == "replay":
            return cast(_T, self.serde.loads_typed((begun[1], begun[2])))
        _, ledger_key, token = begun
        try:
            value = effect()
            if inspect.isawaitable(value):
                value = await value
        except Exception:
            await self._native.once_abandon(ledger_key, token, False)
            raise
        outcome = self._outcome(ledger_key, value)
        if outcome is not None:
            origin = await self._native.once_finish(ledger_key, token, *outcome, False)
            _unrecorded(ledger_key, origin)
        return cast(_T, value)

    def _outcome(self, ledger_key: str, value: Any) -> tuple[str, bytes] | None:
        """``value`` serialized for the ledger, or ``None`` (logged) if ``serde`` cannot: the
        effect ran, so its caller gets the value; the claim expires after ``claim_ttl``."""
        try:
            return self.serde.dumps_typed(value)
        except Exception as e:  # the serializer's own exceptions vary
            _log.warning(
                "the outcome of effect %r cannot be serialized (%s); it is not recorded and "
                "may run again once its claim expires",
                ledger_key,
                e,
            )
            return None

    def lock_thread(self, thread_id: str) -> ThreadLock:
        """One run of ``thread_id`` at a time, across processes: ``with
        saver.lock_thread(thread_id) as lock:`` (or ``async with``) waits until no one else
        holds the thread (up to ``lease_wait``, then
        :class:`~checkpoint_rs.errors.UnavailableError`), then holds it until the block
        ends. Needs ``idempotent=True``.

        Within the process the lock is a lock; across processes it is the thread's lease in
        the store, renewed in the background, with a fencing token that every ``put`` and
        ``put_writes`` of the thread through this saver carries while the lock is held. A
        holder that stalled until its lease expired and another process took the thread
        over can no longer write: its puts raise
        :class:`~checkpoint_rs.errors.StaleFenceError` and store nothing (``lock.lost``
        tells). Not reentrant: locking a thread this saver already holds waits forever.
        """
        return ThreadLock(self._native, thread_id)

    # -- versions -------------------------------------------------------------------------

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """LangGraph's string versions (as its PostgreSQL, SQLite and Redis savers make
        them): a 32-digit counter, a dot and a random suffix, so versions written by Python
        and by Rust writers of one thread order by their counter."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"


class ThreadLock:
    """A thread lock of :meth:`RustCheckpointSaver.lock_thread`: a context manager, with
    ``with`` or ``async with``."""

    def __init__(self, native: NativeSaver, thread_id: str) -> None:
        self._native = native
        self._thread_id = thread_id
        self._guard: Any = None

    def __repr__(self) -> str:
        state = "unheld" if self._guard is None or self._guard.released else "held"
        return f"ThreadLock({self._thread_id!r}, {state}, fence={self.fence})"

    @property
    def thread_id(self) -> str:
        """The locked thread."""
        return self._thread_id

    @property
    def fence(self) -> int | None:
        """The lease's fencing token while held (``None`` before, and on a backend without
        leases)."""
        return None if self._guard is None else self._guard.fence

    @property
    def lost(self) -> bool:
        """Whether another holder took the thread's lease over: this holder's writes to
        the thread are refused."""
        return self._guard is not None and self._guard.lost

    def _taken(self) -> None:
        if self._guard is not None:
            raise RuntimeError("a ThreadLock is entered once; call lock_thread again")

    def __enter__(self) -> ThreadLock:
        self._taken()
        self._guard = self._native.lock_thread(self._thread_id, True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._guard.release(True)

    async def __aenter__(self) -> ThreadLock:
        self._taken()
        self._guard = await self._native.lock_thread(self._thread_id, False)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._guard.release(False)


class InMemorySaver(RustCheckpointSaver):
    """The reference saver, in process memory: gone when the process ends."""

    _kind = "memory"

    def __init__(self, **options: Any) -> None:
        super().__init__("", **options)


class SqliteSaver(RustCheckpointSaver):
    """A SQLite database file (created when missing; ``":memory:"`` for a private
    in-memory database). Several processes may share the file.

    ``path`` may also be a ``sqlite3.Connection`` to a file, as LangGraph's ``SqliteSaver``
    takes: the saver opens that file with connections of its own (the one given stays the
    caller's, open)."""

    _kind = "sqlite"

    def __init__(
        self, path: str | os.PathLike[str] | sqlite3.Connection, **options: Any
    ) -> None:
        super().__init__(_sqlite_path(path), **options)

    @classmethod
    def from_conn_string(cls, conn_string: str, **options: Any) -> SqliteSaver:
        """LangGraph's way to open a saver, for code written against its savers:
        ``with SqliteSaver.from_conn_string("agent.db") as saver:`` (or ``async with``)
        opens the file and closes the saver when the block ends. ``options`` are this
        class's own."""
        return cls(conn_string, **options)


class PostgresSaver(RustCheckpointSaver):
    """PostgreSQL, in LangGraph's own tables (``checkpoints``, ``checkpoint_blobs``,
    ``checkpoint_writes``): LangGraph's ``PostgresSaver`` reads and continues the threads
    this saver writes, and the other way round. ``schema`` puts the tables in another
    schema; ``setup=False`` skips creating them; ``max_connections`` sizes the pool.

    Opened with a URL, or with what LangGraph's saver takes: a psycopg ``Connection`` or
    ``AsyncConnection``, or a psycopg_pool ``ConnectionPool`` or ``AsyncConnectionPool``.
    The saver then connects where that connection (or pool) does, with its own pool (of
    the given pool's ``max_size`` unless ``max_connections`` says otherwise), and never
    uses the object itself: closing it does not close the saver. Connection parameters the
    saver cannot honour (several hosts, ``target_session_attrs``, ``service``, ...) are an
    ``InvalidInputError``.

    Through a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``, the
    transaction-mode ports of managed poolers), pass ``transaction_pooling=True``: each call
    then runs in a transaction of its own with unnamed statements, as such a pooler
    requires, at the cost of more round trips per call."""

    _kind = "postgres"

    def __init__(self, url: str | Any, **options: Any) -> None:
        # What LangGraph's saver takes instead of a URL: a psycopg connection or pool. This
        # saver reads where it connects (and a pool's size) and opens its own pool.
        found = _postgres_target(url)
        if found is not None:
            url, size = found
            if size is not None:
                options.setdefault("max_connections", size)
        super().__init__(url, **options)

    @classmethod
    def from_conn_string(
        cls, conn_string: str, *, pipeline: bool = False, **options: Any
    ) -> PostgresSaver:
        """LangGraph's way to open a saver, for code written against its savers:
        ``with PostgresSaver.from_conn_string(url) as saver:`` (or ``async with``) connects
        and closes the saver when the block ends. ``pipeline`` (psycopg's pipeline mode in
        LangGraph's saver) is accepted and has nothing to do: every call is one round trip
        already. ``options`` are this class's own."""
        del pipeline
        return cls(conn_string, **options)


class RedisSaver(RustCheckpointSaver):
    """Plain Redis 7 (no modules), one server (``redis://``, ``rediss://``) or a Cluster
    (``redis+cluster://[user:password@]host:port,host:port``, ``rediss+cluster://`` for
    TLS: some of its primaries, the credentials applying to every node). ``key_prefix``
    separates stores sharing a server; ``max_connections`` sizes the pool.

    A server with a memory limit whose ``maxmemory-policy`` would evict the saver's keys
    (``allkeys-*``, or ``volatile-*`` with a TTL) is refused with a ``BackendError``: an
    evicted key leaves threads that load incomplete. ``allow_eviction=True`` accepts it.

    As LangGraph's ``RedisSaver``, it also takes the URL as ``redis_url=``, or a redis-py
    client (``Redis`` or ``RedisCluster``, sync or asyncio) as ``redis_client=``: it then
    connects to that client's server or Cluster (hosts, port, database, user, password;
    TLS) with connections of its own, and never uses the client itself."""

    _kind = "redis"

    @classmethod
    def from_conn_string(cls, redis_url: str, **options: Any) -> RedisSaver:
        """LangGraph's way to open a saver, for code written against its savers:
        ``with RedisSaver.from_conn_string("redis://...") as saver:`` (or ``async with``)
        connects and closes the saver when the block ends. ``options`` are this class's
        own (``ttl`` takes the keys of LangGraph's)."""
        return cls(redis_url, **options)

    def __init__(
        self,
        url: str | None = None,
        *,
        redis_url: str | None = None,
        redis_client: Any = None,
        connection_args: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        # LangGraph's RedisSaver takes the URL as `redis_url`, or a redis-py client as
        # `redis_client`, whose server this saver connects to with connections of its own;
        # `connection_args` configure redis-py's client, which this saver does not use.
        del connection_args
        given = [t for t in (url, redis_url, redis_client) if t is not None]
        if len(given) != 1:
            raise TypeError("RedisSaver takes one of a URL, redis_url= or redis_client=")
        target = given[0]
        if redis_client is not None:
            target = _redis_client_url(redis_client)
        if isinstance(target, str) and target.startswith(("redis+cluster:", "rediss+cluster:")):
            self._kind = "redis-cluster"
        super().__init__(target, **options)

    def purge(self) -> int:
        """Deletes every key under this saver's prefix (checkpoints, indexes, leases,
        ledger) and returns how many were deleted. For tests and tear-down scripts."""
        return self._native.destroy(True)

    async def apurge(self) -> int:
        """Async version of :meth:`purge`."""
        return await self._native.destroy(False)


class MongoSaver(RustCheckpointSaver):
    """MongoDB 6 or later: the database is the URL's path (``mongodb://host/db``),
    ``database=`` or LangGraph's ``db_name=``; ``collection_prefix`` separates stores
    sharing a database; ``setup=False`` skips creating indexes. As LangGraph's
    ``MongoDBSaver``, it also takes a pymongo ``MongoClient`` or ``AsyncMongoClient``
    (database ``db_name``, default ``"checkpointing_db"``) and connects where that client
    does (its hosts, replica set, credentials and TLS), with connections of its own.
    ``ttl`` is, as there, a number of seconds (or a ``timedelta``): every checkpoint and
    pending write expires that long after it was written, removed by TTL indexes that
    ``setup`` creates; what a newer checkpoint's delta channels are rebuilt from lives as
    long as that checkpoint.

    Durability: ``transactions`` is ``"auto"`` (the default: multi-document transactions
    where the deployment has them), ``"required"`` or ``"disabled"`` (ordered idempotent
    writes, without compare-and-set puts or leases); ``write_concern`` is ``"majority"``
    (the default, journaled) or ``"server-default"``. ``transactions="disabled",
    write_concern="server-default"`` writes as LangGraph's ``MongoDBSaver`` does."""

    _kind = "mongodb"

    def __init__(
        self,
        url: Any = None,
        db_name: str | None = None,
        *,
        client: Any = None,
        **options: Any,
    ) -> None:
        # LangGraph's MongoDBSaver takes a pymongo client (positionally or as `client=`) and
        # the database as `db_name` (default "checkpointing_db"); this saver connects where
        # the client does, with connections of its own.
        given = [t for t in (url, client) if t is not None]
        if len(given) != 1:
            raise TypeError("MongoSaver takes one of a URL or a pymongo client")
        named = [k for k in ("checkpoint_collection_name", "writes_collection_name") if k in options]
        if named:
            raise errors.InvalidInputError(
                f"MongoSaver has no option {named[0]!r}: its collections are its own "
                "(checkpoints, checkpoint_values, ...), named after collection_prefix="
            )
        ttl = options.pop("ttl", None)
        if isinstance(ttl, timedelta):
            ttl = ttl.total_seconds()
        if ttl is not None and not isinstance(ttl, Mapping):
            # LangGraph's MongoDBSaver(ttl=seconds): every checkpoint and pending write
            # expires that long after it was written (TTL indexes, made by setup).
            options["collection_ttl_seconds"] = _positive(ttl, "ttl", "seconds")
        elif ttl is not None:
            options["ttl"] = ttl
        target = _mongo_client_url(given[0])
        if target is not given[0]:
            options.setdefault("database", db_name or "checkpointing_db")
        elif db_name is not None:
            options.setdefault("database", db_name)
        super().__init__(target, **options)

    @classmethod
    def from_conn_string(
        cls, conn_string: str, db_name: str = "checkpointing_db", **options: Any
    ) -> MongoSaver:
        """LangGraph's way to open a saver, for code written against its
        ``MongoDBSaver``: ``with MongoSaver.from_conn_string(url, db_name) as saver:`` (or
        ``async with``) connects and closes the saver when the block ends. The database is
        ``db_name``, as there (``database=`` wins). The collections are this saver's own,
        not LangGraph's: ``checkpoint migrate`` copies threads from LangGraph's."""
        options.setdefault("database", db_name)
        return cls(conn_string, **options)

    def drop_collections(self) -> None:
        """Drops every collection of this configuration (checkpoints, values, writes,
        leases, ledger). For tests and tear-down scripts."""
        self._native.destroy(True)

    async def adrop_collections(self) -> None:
        """Async version of :meth:`drop_collections`."""
        await self._native.destroy(False)


# LangGraph's class names, so that swapping the import is all a program written against
# LangGraph's savers needs: each class here is synchronous and asynchronous at once.
MemorySaver = InMemorySaver
AsyncSqliteSaver = SqliteSaver
AsyncPostgresSaver = PostgresSaver
AsyncRedisSaver = RedisSaver
MongoDBSaver = MongoSaver
AsyncMongoDBSaver = MongoSaver
