"""Exceptions raised by checkpoint_rs savers.

Every error of the Rust library arrives as one of these classes. Each also derives from the
built-in exception a caller would expect, so ``except ValueError`` catches bad input and
``except ConnectionError`` an unreachable server.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class of every error a checkpoint_rs saver raises."""


class NotFoundError(CheckpointError, LookupError):
    """What the call names does not exist."""


class ConflictError(CheckpointError, RuntimeError):
    """A compare-and-set put lost: the thread's head is no longer the checkpoint it
    continues. Nothing was written. Attributes: ``thread_id``, ``checkpoint_ns``,
    ``expected`` (the parent the put named) and ``found`` (the head it found)."""

    thread_id: str
    checkpoint_ns: str
    expected: str | None
    found: str | None


class StaleFenceError(CheckpointError, RuntimeError):
    """A fencing token (lease or idempotency claim) is no longer current."""


class InvalidInputError(CheckpointError, ValueError):
    """The saver's contract rejects this input; nothing was written."""


class LimitExceededError(InvalidInputError):
    """A stored value exceeds the decoding limits (size, depth or element count)."""


class RejectedError(CheckpointError, RuntimeError):
    """A wrapper refused the call (for example an unsafe put)."""


class UnsupportedError(CheckpointError, NotImplementedError):
    """The backend does not provide this operation."""


class SerializationError(CheckpointError, ValueError):
    """A value could not be encoded or decoded."""


class UnavailableError(CheckpointError, ConnectionError):
    """The backend cannot be reached (transient: retrying may succeed)."""


class BackendError(CheckpointError, RuntimeError):
    """The backend failed."""


class ClosedError(CheckpointError, RuntimeError):
    """The saver was closed (``close()``, or the end of its ``with`` block)."""


__all__ = [
    "BackendError",
    "CheckpointError",
    "ClosedError",
    "ConflictError",
    "InvalidInputError",
    "LimitExceededError",
    "NotFoundError",
    "RejectedError",
    "SerializationError",
    "StaleFenceError",
    "UnavailableError",
    "UnsupportedError",
]
