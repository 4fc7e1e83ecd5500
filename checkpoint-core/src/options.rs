//! What a [`Saver`](crate::Saver) advertises, and the options of its calls.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::{CheckpointConfig, CheckpointMetadata};
#[cfg(doc)]
use crate::{Error, Lease, Saver};

/// Optional operations a saver implements. A saver that does not advertise one returns
/// [`Error::Unsupported`] when it is called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`Saver::copy_thread`].
    pub copy_thread: bool,
    /// [`Saver::prune`].
    pub prune: bool,
    /// [`Saver::delete_for_runs`].
    pub delete_for_runs: bool,
    /// [`PutMode::CompareAndSet`] in [`Saver::put`].
    pub compare_and_set: bool,
    /// Thread leases with fencing tokens: [`Saver::acquire_lease`], [`Saver::renew_lease`],
    /// [`Saver::release_lease`] and the `fence` options of puts and writes.
    pub leases: bool,
    /// The idempotency ledger: [`Saver::claim`], [`Saver::complete_claim`],
    /// [`Saver::abandon_claim`].
    pub ledger: bool,
    /// Thread retention: [`Saver::set_thread_ttl`], [`Saver::thread_ttl`] and
    /// [`Saver::sweep_expired`].
    pub ttl: bool,
}

impl Capabilities {
    /// Nothing optional.
    pub const fn none() -> Self {
        Self {
            copy_thread: false,
            prune: false,
            delete_for_runs: false,
            compare_and_set: false,
            leases: false,
            ledger: false,
            ttl: false,
        }
    }

    /// Every optional operation.
    pub const fn all() -> Self {
        Self {
            copy_thread: true,
            prune: true,
            delete_for_runs: true,
            compare_and_set: true,
            leases: true,
            ledger: true,
            ttl: true,
        }
    }

    /// Sets `copy_thread`.
    pub const fn with_copy_thread(mut self, yes: bool) -> Self {
        self.copy_thread = yes;
        self
    }

    /// Sets `prune`.
    pub const fn with_prune(mut self, yes: bool) -> Self {
        self.prune = yes;
        self
    }

    /// Sets `delete_for_runs`.
    pub const fn with_delete_for_runs(mut self, yes: bool) -> Self {
        self.delete_for_runs = yes;
        self
    }

    /// Sets `compare_and_set`.
    pub const fn with_compare_and_set(mut self, yes: bool) -> Self {
        self.compare_and_set = yes;
        self
    }

    /// Sets `leases`.
    pub const fn with_leases(mut self, yes: bool) -> Self {
        self.leases = yes;
        self
    }

    /// Sets `ledger`.
    pub const fn with_ledger(mut self, yes: bool) -> Self {
        self.ledger = yes;
        self
    }

    /// Sets `ttl`.
    pub const fn with_ttl(mut self, yes: bool) -> Self {
        self.ttl = yes;
        self
    }
}

/// How long a thread's data lives (see [`Saver::set_thread_ttl`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadTtl {
    /// The saver's default TTL (no expiry without one).
    Default,
    /// Expire this long after the thread's last write (or read, for a saver that refreshes
    /// on read). At least 1 ms.
    Expire(Duration),
    /// Never expire, whatever the saver's default.
    Pinned,
}

/// What [`Saver::list`] returns, and in which order.
///
/// Build with [`ListOptions::new`] (global: every thread) or [`ListOptions::thread`] and the
/// `with_*`/builder methods.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ListOptions {
    /// Only this thread (`None`: every thread).
    pub thread_id: Option<String>,
    /// Only this namespace (`None`: every namespace).
    pub checkpoint_ns: Option<String>,
    /// Only this checkpoint id.
    pub checkpoint_id: Option<String>,
    /// Metadata equality filter: every key must be present with an equal value
    /// (see [`json_equal`](crate::json_equal)).
    pub filter: Map<String, Value>,
    /// Only checkpoints whose id is strictly less than this id.
    pub before: Option<String>,
    /// At most this many tuples.
    pub limit: Option<usize>,
}

impl ListOptions {
    /// Every checkpoint of every thread.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every checkpoint of `thread_id`, all namespaces.
    pub fn thread(thread_id: impl Into<String>) -> Self {
        Self {
            thread_id: Some(thread_id.into()),
            ..Self::default()
        }
    }

    /// The checkpoints a config addresses: its thread and namespace, and its checkpoint id if
    /// it has one (LangGraph's `list(config)`).
    pub fn from_config(config: &CheckpointConfig) -> Self {
        Self {
            thread_id: Some(config.thread_id.clone()),
            checkpoint_ns: Some(config.checkpoint_ns.clone()),
            checkpoint_id: config.checkpoint_id.clone(),
            ..Self::default()
        }
    }

    /// Restricts to one namespace.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.checkpoint_ns = Some(ns.into());
        self
    }

    /// Restricts to one checkpoint id.
    pub fn checkpoint_id(mut self, id: impl Into<String>) -> Self {
        self.checkpoint_id = Some(id.into());
        self
    }

    /// Adds a metadata equality condition.
    pub fn filter(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.filter.insert(key.into(), value.into());
        self
    }

    /// Replaces the whole metadata filter.
    pub fn with_filter(mut self, filter: Map<String, Value>) -> Self {
        self.filter = filter;
        self
    }

    /// Only ids strictly below `checkpoint_id`.
    pub fn before(mut self, checkpoint_id: impl Into<String>) -> Self {
        self.before = Some(checkpoint_id.into());
        self
    }

    /// At most `n` tuples.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Whether a stored checkpoint at this address with this metadata passes every condition
    /// except `limit`. Backends that cannot push a condition down use this to check it.
    pub fn admits(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        metadata: &CheckpointMetadata,
    ) -> bool {
        self.thread_id.as_deref().is_none_or(|t| t == thread_id)
            && self
                .checkpoint_ns
                .as_deref()
                .is_none_or(|n| n == checkpoint_ns)
            && self
                .checkpoint_id
                .as_deref()
                .is_none_or(|i| i == checkpoint_id)
            && self.before.as_deref().is_none_or(|b| checkpoint_id < b)
            && metadata.matches(&self.filter)
    }
}

/// How [`Saver::put`] treats the current head of the thread and namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PutMode {
    /// Store unconditionally (LangGraph's behavior).
    #[default]
    Plain,
    /// Store only if the parent named by the config is still the head (latest checkpoint) of
    /// its thread and namespace, or, for a config without checkpoint id, only if the namespace
    /// is empty. Otherwise fail with [`Error::Conflict`].
    CompareAndSet,
}

/// Options of [`Saver::put`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutOptions {
    /// Plain or compare-and-set.
    pub mode: PutMode,
    /// A lease's fencing token: the put is refused with [`Error::StaleFence`] unless it is
    /// the thread's current token (see [`Lease`]).
    pub fence: Option<u64>,
}

impl PutOptions {
    /// A plain put.
    pub fn new() -> Self {
        Self::default()
    }

    /// A compare-and-set put.
    pub fn compare_and_set() -> Self {
        Self {
            mode: PutMode::CompareAndSet,
            fence: None,
        }
    }

    /// Fences the put with a lease's token.
    pub fn fence(mut self, token: u64) -> Self {
        self.fence = Some(token);
        self
    }
}

/// Options of [`Saver::put_writes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutWritesOptions {
    /// The task's path in the graph (LangGraph's `task_path`).
    pub task_path: String,
    /// A lease's fencing token: the call is refused with [`Error::StaleFence`] unless it is
    /// the thread's current token (see [`Lease`]).
    pub fence: Option<u64>,
}

impl PutWritesOptions {
    /// No task path.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the task path.
    pub fn task_path(mut self, task_path: impl Into<String>) -> Self {
        self.task_path = task_path.into();
        self
    }

    /// Fences the call with a lease's token.
    pub fn fence(mut self, token: u64) -> Self {
        self.fence = Some(token);
        self
    }
}

/// What [`Saver::prune`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PruneStrategy {
    /// Keep only the latest checkpoint of each namespace.
    KeepLatest,
    /// Keep the latest `n` checkpoints of each namespace (`0` deletes everything).
    KeepLast(usize),
    /// Delete every checkpoint of the thread.
    DeleteAll,
}

impl PruneStrategy {
    /// How many checkpoints of each namespace the strategy keeps (`0`: none).
    pub fn keep_per_namespace(&self) -> usize {
        match self {
            PruneStrategy::KeepLatest => 1,
            PruneStrategy::KeepLast(n) => *n,
            PruneStrategy::DeleteAll => 0,
        }
    }
}
