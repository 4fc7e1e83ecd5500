//! Model-based property testing: random operation sequences run against a saver under test
//! and against the reference model ([`InMemorySaver`]), compared after every step.
//!
//! The pieces, from small to large:
//!
//! * Strategies (all public, reusable for your own savers and graphs): [`typed_value`],
//!   [`channel_changes`], [`metadata`], [`metadata_filter`], [`pending_writes`],
//!   [`prune_strategy`], [`parent`], [`get_target`], [`op`] and [`ops`], among others.
//!   Identifiers come from small fixed pools ([`THREADS`], [`NAMESPACES`], [`CHANNELS`], ...)
//!   so that generated operations collide often: the same thread, namespace, channel version
//!   or task id is hit many times in one sequence. Every strategy's value tree is `Send`, so
//!   a generated case can be shrunk inside a `Send` future.
//! * [`Op`]: one operation of the [`Saver`] trait. Anything that refers to data which only
//!   exists at run time (a parent checkpoint, the target of pending writes, a `before` bound)
//!   is an index, resolved modulo what the model holds when the operation runs, so every
//!   operation of every sequence — also of every shrunk sequence — is applicable.
//! * [`run_ops`]: applies a sequence to both savers, compares every result and, after every
//!   operation that may change data, the full contents (a global [`Saver::list`]). Results
//!   both agree on are also checked against the contract's own rules (list order, limit and
//!   options, addresses, pending-write order), so a bug the model shares is caught too, and a
//!   panic of either saver is reported as a divergence.
//! * [`check_against_model`]: the proptest driver. Each case gets a fresh saver from a
//!   [`SaverFactory`] and a fresh model; a failing sequence is shrunk to a minimal one,
//!   which is returned with the divergence it causes.
//!
//! ```
//! use std::sync::Arc;
//! use checkpoint_core::{InMemorySaver, Saver};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let factory = conformance_tests::factory_fn(|| async {
//!     Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>)
//! });
//! conformance_tests::model::check_against_model(&factory, 4)
//!     .await
//!     .unwrap_or_else(|e| panic!("{e}"));
//! # });
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Debug, Write as _};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use checkpoint_core::{
    Capabilities, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig,
    CheckpointMetadata, CheckpointTuple, Error, InMemorySaver, ListOptions, PruneStrategy,
    PutOptions, PutWritesOptions, Saver, SaverExt, Source, TypedValue, ValueType,
    new_checkpoint_id,
};
use futures::FutureExt;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::{Map, Value, json};

use crate::SaverFactory;

/// Thread ids operations are drawn from (a small pool, so operations collide).
pub const THREADS: [&str; 3] = ["t0", "t1", "t-ü ✓"];
/// A thread id no generated `put` ever writes to (reads and deletes of it find nothing).
pub const UNKNOWN_THREAD: &str = "t-unknown";
/// Namespaces operations are drawn from: the root graph, a child and a nested child.
pub const NAMESPACES: [&str; 3] = ["", "child:1", "child:1|inner:2"];
/// Channels whose values checkpoints carry.
pub const CHANNELS: [&str; 4] = ["messages", "counter", "scratch", "ünï code"];
/// Channels of pending writes: the four special channels and two ordinary ones.
pub const WRITE_CHANNELS: [&str; 6] = [
    "__error__",
    "__interrupt__",
    "__resume__",
    "__scheduled__",
    "messages",
    "counter",
];
/// The special channels alone.
const SPECIAL_WRITE_CHANNELS: [&str; 4] =
    ["__error__", "__interrupt__", "__resume__", "__scheduled__"];
/// Task ids of pending writes.
pub const TASK_IDS: [&str; 3] = ["task-1", "task-2", "tâche-3"];
/// Task paths of pending writes (`""`: none given).
pub const TASK_PATHS: [&str; 3] = ["", "~__pregel_pull, agent", "~__pregel_push, 0"];
/// Run ids stored in metadata (`run_id`).
pub const RUN_IDS: [&str; 3] = ["run-a", "run-b", "run-c"];
/// A run id no generated checkpoint carries.
pub const UNKNOWN_RUN: &str = "run-unknown";
/// The custom (not well-known) metadata key generated metadata and filters use.
pub const CUSTOM_KEY: &str = "tag";
/// The node name under which a generated checkpoint records the versions it has seen.
pub const NODE: &str = "agent";

/// Longest sequence [`check_against_model`] generates, unless `CHECKPOINT_MODEL_MAX_OPS` says
/// otherwise.
pub const DEFAULT_MAX_OPS: usize = 40;
/// The RNG seed [`check_against_model`] uses unless `PROPTEST_RNG_SEED` is set, so that CI
/// runs are reproducible.
pub const DEFAULT_SEED: u64 = 0x5EED_C0DE_CAFE_F00D;

/// Which checkpoint a generated [`Op::Put`] names as its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parent {
    /// No parent: a new chain (the config has no `checkpoint_id`).
    None,
    /// The current head (latest checkpoint) of the thread and namespace, if there is one.
    Head,
    /// An older checkpoint of the thread and namespace: index `n` modulo the number of
    /// non-head checkpoints (the head when it is the only one; no parent when there is none).
    /// The new checkpoint forks the history there.
    Older(usize),
}

/// A deliberate mistake in an [`Op::Put`]: the saver must reject it with
/// [`Error::InvalidInput`] and store nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutFault {
    /// The config's thread id is empty.
    EmptyThread,
    /// The checkpoint's id is empty.
    EmptyCheckpointId,
    /// The checkpoint's id is not greater than its parent's (equal to the parent's when there
    /// is a parent, otherwise the config names a parent with a greater id).
    IdNotAboveParent,
    /// A `new_versions` entry disagrees with the checkpoint's `channel_versions`.
    VersionMismatch,
}

/// A deliberate mistake in an [`Op::PutWrites`]: the saver must reject it with
/// [`Error::InvalidInput`] and store nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritesFault {
    /// The config's thread id is empty.
    EmptyThread,
    /// The config has no checkpoint id.
    NoCheckpointId,
}

/// What an [`Op::GetTuple`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetTarget {
    /// The latest checkpoint of a thread and namespace (no checkpoint id).
    Latest {
        /// Thread id (may be [`UNKNOWN_THREAD`]).
        thread: String,
        /// Namespace.
        ns: String,
    },
    /// An existing checkpoint, by its full address: index modulo the number of checkpoints
    /// the model holds (the latest of thread `t0` when it holds none).
    Existing(usize),
    /// A checkpoint id issued earlier in the sequence (index modulo their number), looked up
    /// at a possibly different address: found only where it exists (ids of other threads or
    /// namespaces, and deleted ones, are not found).
    Issued {
        /// Index into the ids issued so far.
        index: usize,
        /// Thread id to look in.
        thread: String,
        /// Namespace to look in.
        ns: String,
    },
    /// A fresh id nobody ever put: never found.
    Missing {
        /// Thread id to look in.
        thread: String,
        /// Namespace to look in.
        ns: String,
    },
    /// A config with an empty thread id: [`Error::InvalidInput`].
    EmptyThread,
}

/// One generated operation of the [`Saver`] trait.
///
/// Indices (`target`, [`Parent::Older`], `before`, ...) are resolved when the operation runs,
/// against the checkpoints the model then holds (newest first, as a global `list` yields
/// them), modulo their number; an operation that needs an existing checkpoint when there is
/// none is skipped. See [`run_ops`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// [`Saver::put`] of a successor of the chosen parent with some channels changed.
    Put {
        /// Thread id.
        thread: String,
        /// Namespace.
        ns: String,
        /// Which checkpoint becomes the parent.
        parent: Parent,
        /// Channel changes: a new value, or `None` to remove the channel's value. Every
        /// change bumps the channel's version and lands in `new_versions`.
        changes: Vec<(String, Option<TypedValue>)>,
        /// Whether a channel without a version starts with a string version (LangGraph's
        /// PostgreSQL form) rather than an integer.
        string_versions: bool,
        /// The metadata to store.
        metadata: CheckpointMetadata,
        /// Compare-and-set rather than plain.
        compare_and_set: bool,
        /// A deliberate mistake the saver must reject.
        fault: Option<PutFault>,
    },
    /// [`Saver::put`] of an existing checkpoint again (same id, same parent, every channel in
    /// `new_versions`) with new metadata: replaces metadata, keeps pending writes.
    RepeatPut {
        /// Index of the existing checkpoint.
        target: usize,
        /// The new metadata.
        metadata: CheckpointMetadata,
        /// Compare-and-set rather than plain.
        compare_and_set: bool,
    },
    /// [`Saver::put_writes`] against an existing checkpoint.
    PutWrites {
        /// Index of the existing checkpoint.
        target: usize,
        /// `(channel, value)` pairs, possibly empty.
        writes: Vec<(String, TypedValue)>,
        /// Task id.
        task_id: String,
        /// Task path.
        task_path: String,
        /// A deliberate mistake the saver must reject.
        fault: Option<WritesFault>,
    },
    /// [`Saver::get_tuple`].
    GetTuple {
        /// What to read.
        target: GetTarget,
    },
    /// [`Saver::list`], collected.
    List {
        /// Thread id (`None`: global listing; may be [`UNKNOWN_THREAD`]).
        thread: Option<String>,
        /// Namespace (`None`: every namespace).
        ns: Option<String>,
        /// Only the checkpoint with the id of the existing checkpoint at this index.
        checkpoint_id: Option<usize>,
        /// Metadata equality filter.
        filter: Map<String, Value>,
        /// Only ids strictly below the id of the existing checkpoint at this index.
        before: Option<usize>,
        /// At most this many.
        limit: Option<usize>,
    },
    /// [`Saver::delete_thread`] (may name [`UNKNOWN_THREAD`]).
    DeleteThread {
        /// Thread id.
        thread: String,
    },
    /// [`Saver::copy_thread`] (optional).
    CopyThread {
        /// Source thread (may be [`UNKNOWN_THREAD`], or equal `target`).
        source: String,
        /// Target thread.
        target: String,
    },
    /// [`Saver::prune`] (optional).
    Prune {
        /// Threads to prune (may be empty, repeat, or name [`UNKNOWN_THREAD`]).
        threads: Vec<String>,
        /// What to keep.
        strategy: PruneStrategy,
    },
    /// [`Saver::delete_for_runs`] (optional).
    DeleteForRuns {
        /// Run ids (may be empty or name [`UNKNOWN_RUN`]).
        runs: Vec<String>,
    },
}

impl Op {
    /// Whether the operation may change stored data (reads never do).
    pub fn changes_data(&self) -> bool {
        !matches!(self, Op::GetTuple { .. } | Op::List { .. })
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

fn owned(pool: &'static [&'static str]) -> impl Strategy<Value = String, Tree: Send> + Clone {
    select(pool).prop_map(str::to_owned)
}

/// A thread id from [`THREADS`], the first ones more often (so histories grow).
pub fn thread_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![5 => Just(0usize), 2 => Just(1), 1 => Just(2)].prop_map(|i| THREADS[i].to_owned())
}

/// A thread id from [`THREADS`] or, now and then, [`UNKNOWN_THREAD`].
pub fn any_thread_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![6 => thread_id(), 1 => Just(UNKNOWN_THREAD.to_owned())]
}

/// A namespace from [`NAMESPACES`], the root more often.
pub fn namespace() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![5 => Just(0usize), 2 => Just(1), 1 => Just(2)]
        .prop_map(|i| NAMESPACES[i].to_owned())
}

/// A channel from [`CHANNELS`].
pub fn channel() -> impl Strategy<Value = String, Tree: Send> + Clone {
    owned(&CHANNELS)
}

/// A run id from [`RUN_IDS`].
pub fn run_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    owned(&RUN_IDS)
}

/// A run id from [`RUN_IDS`] or, now and then, [`UNKNOWN_RUN`].
pub fn any_run_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![4 => run_id(), 1 => Just(UNKNOWN_RUN.to_owned())]
}

/// A metadata `source`.
pub fn source() -> impl Strategy<Value = Source, Tree: Send> + Clone {
    select(&[Source::Input, Source::Loop, Source::Update, Source::Fork][..])
}

fn msgpack(value: impl Into<Value>) -> TypedValue {
    TypedValue::msgpack(&value.into()).expect("msgpack encodes JSON values")
}

fn json_scalar() -> impl Strategy<Value = Value, Tree: Send> + Clone {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..1000).prop_map(Value::from),
        Just(json!(1.5)),
        select(&["", "x", "ü ✓ 🦀"][..]).prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value, Tree: Send> + Clone {
    prop_oneof![
        3 => json_scalar(),
        1 => prop::collection::vec(json_scalar(), 0..3).prop_map(Value::from),
        1 => prop::collection::btree_map(select(&["a", "b", "ключ"][..]), json_scalar(), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
    ]
}

/// A stored value of any kind: null, raw bytes (also empty), a `bytearray`, msgpack strings
/// (empty, unicode, with NUL, arbitrary), msgpack integers, JSON documents and an opaque
/// foreign tag (`pickle`) that must round-trip untouched.
pub fn typed_value() -> impl Strategy<Value = TypedValue, Tree: Send> + Clone {
    prop_oneof![
        Just(TypedValue::null()),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(TypedValue::from_bytes),
        prop::collection::vec(any::<u8>(), 0..4)
            .prop_map(|b| TypedValue::new(ValueType::Bytearray, b)),
        select(&["", "héllo ✓ 🦀", "nul\0inside", "line\nbreak"][..]).prop_map(msgpack),
        prop::collection::vec(any::<char>(), 0..6)
            .prop_map(|chars| msgpack(chars.into_iter().collect::<String>())),
        any::<i64>().prop_map(msgpack),
        json_value().prop_map(|v| TypedValue::json(&v).expect("JSON encodes JSON values")),
        Just(TypedValue::new(
            ValueType::from("pickle"),
            vec![0x80, 0x04, 0x95, 0x00]
        )),
    ]
}

/// Channel changes of one step: up to three `(channel, new value or None for a removal)`.
/// A channel may appear twice (its version is bumped twice, the last change wins).
pub fn channel_changes()
-> impl Strategy<Value = Vec<(String, Option<TypedValue>)>, Tree: Send> + Clone {
    prop::collection::vec(
        (channel(), prop::option::weighted(0.8, typed_value())),
        0..4,
    )
}

/// A value of the custom metadata key [`CUSTOM_KEY`]: strings, numbers (`1` and `1.0`, equal
/// for filters, distinct when read back), booleans, null and a nested object.
pub fn custom_value() -> impl Strategy<Value = Value, Tree: Send> + Clone {
    select(vec![
        json!("x"),
        json!("ü ✓"),
        json!(1),
        json!(1.0),
        json!(true),
        Value::Null,
        json!({"k": [1, "two"]}),
    ])
}

/// Checkpoint metadata: any of `source`, `step`, `parents` (empty), `run_id` and the custom
/// key [`CUSTOM_KEY`], each present or not.
pub fn metadata() -> impl Strategy<Value = CheckpointMetadata, Tree: Send> + Clone {
    (
        prop::option::weighted(0.8, source()),
        prop::option::weighted(0.8, -1i64..4),
        any::<bool>(),
        prop::option::weighted(0.7, run_id()),
        prop::option::of(custom_value()),
    )
        .prop_map(|(source, step, parents, run, custom)| {
            let mut m = CheckpointMetadata::new();
            if let Some(s) = source {
                m = m.with_source(s);
            }
            if let Some(s) = step {
                m = m.with_step(s);
            }
            if parents {
                m = m.with_parents(BTreeMap::new());
            }
            if let Some(r) = run {
                m = m.with_run_id(r);
            }
            if let Some(c) = custom {
                m = m.with(CUSTOM_KEY, c);
            }
            m
        })
}

/// One condition of a metadata filter: `source`, `step` (as an integer or an equal float),
/// `run_id` (possibly unknown), `parents` (empty object) or the custom key.
pub fn filter_condition() -> impl Strategy<Value = (String, Value), Tree: Send> + Clone {
    prop_oneof![
        source().prop_map(|s| ("source".to_owned(), Value::from(s.as_str()))),
        (-1i64..4, any::<bool>()).prop_map(|(n, float)| {
            let v = if float {
                Value::from(n as f64)
            } else {
                Value::from(n)
            };
            ("step".to_owned(), v)
        }),
        any_run_id().prop_map(|r| ("run_id".to_owned(), Value::from(r))),
        Just(("parents".to_owned(), json!({}))),
        custom_value().prop_map(|v| (CUSTOM_KEY.to_owned(), v)),
    ]
}

/// A metadata filter: empty, one condition, or (less often) two or three.
pub fn metadata_filter() -> impl Strategy<Value = Map<String, Value>, Tree: Send> + Clone {
    prop_oneof![
        3 => Just(Map::new()),
        4 => filter_condition().prop_map(|(k, v)| [(k, v)].into_iter().collect()),
        1 => prop::collection::vec(filter_condition(), 2..4)
            .prop_map(|conditions| conditions.into_iter().collect()),
    ]
}

/// The writes of one `put_writes` call: either any mix of [`WRITE_CHANNELS`] (possibly
/// empty), or special channels only (a call that replaces existing writes).
pub fn pending_writes() -> impl Strategy<Value = Vec<(String, TypedValue)>, Tree: Send> + Clone {
    prop_oneof![
        2 => prop::collection::vec((owned(&WRITE_CHANNELS), typed_value()), 0..4),
        1 => prop::collection::vec((owned(&SPECIAL_WRITE_CHANNELS), typed_value()), 1..3),
    ]
}

/// A prune strategy: keep the latest, keep the last 0 to 2, or delete everything.
pub fn prune_strategy() -> impl Strategy<Value = PruneStrategy, Tree: Send> + Clone {
    prop_oneof![
        Just(PruneStrategy::KeepLatest),
        (0usize..3).prop_map(PruneStrategy::KeepLast),
        Just(PruneStrategy::DeleteAll),
    ]
}

/// The parent choice of a put: mostly the head, sometimes none or an older checkpoint.
pub fn parent() -> impl Strategy<Value = Parent, Tree: Send> + Clone {
    prop_oneof![
        1 => Just(Parent::None),
        6 => Just(Parent::Head),
        3 => (0usize..8).prop_map(Parent::Older),
    ]
}

/// What a `get_tuple` reads.
pub fn get_target() -> impl Strategy<Value = GetTarget, Tree: Send> + Clone {
    prop_oneof![
        3 => (any_thread_id(), namespace()).prop_map(|(thread, ns)| GetTarget::Latest { thread, ns }),
        4 => (0usize..16).prop_map(GetTarget::Existing),
        2 => (0usize..16, thread_id(), namespace())
            .prop_map(|(index, thread, ns)| GetTarget::Issued { index, thread, ns }),
        1 => (thread_id(), namespace()).prop_map(|(thread, ns)| GetTarget::Missing { thread, ns }),
        1 => Just(GetTarget::EmptyThread),
    ]
}

fn put_op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    (
        thread_id(),
        namespace(),
        parent(),
        channel_changes(),
        prop::bool::weighted(0.2),
        metadata(),
        prop::bool::weighted(0.3),
        prop::option::weighted(
            0.06,
            select(
                &[
                    PutFault::EmptyThread,
                    PutFault::EmptyCheckpointId,
                    PutFault::IdNotAboveParent,
                    PutFault::VersionMismatch,
                ][..],
            ),
        ),
    )
        .prop_map(
            |(thread, ns, parent, changes, string_versions, metadata, compare_and_set, fault)| {
                Op::Put {
                    thread,
                    ns,
                    parent,
                    changes,
                    string_versions,
                    metadata,
                    compare_and_set,
                    fault,
                }
            },
        )
}

fn put_writes_op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    (
        0usize..16,
        pending_writes(),
        owned(&TASK_IDS),
        owned(&TASK_PATHS),
        prop::option::weighted(
            0.05,
            select(&[WritesFault::EmptyThread, WritesFault::NoCheckpointId][..]),
        ),
    )
        .prop_map(
            |(target, writes, task_id, task_path, fault)| Op::PutWrites {
                target,
                writes,
                task_id,
                task_path,
                fault,
            },
        )
}

fn list_op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    (
        prop::option::weighted(0.7, any_thread_id()),
        prop::option::weighted(0.5, namespace()),
        prop::option::weighted(0.1, 0usize..16),
        metadata_filter(),
        prop::option::weighted(0.25, 0usize..16),
        prop::option::weighted(0.3, 0usize..4),
    )
        .prop_map(
            |(thread, ns, checkpoint_id, filter, before, limit)| Op::List {
                thread,
                ns,
                checkpoint_id,
                filter,
                before,
                limit,
            },
        )
}

/// One operation, weighted towards puts and writes so histories grow, with every read and
/// every extended operation in the mix.
pub fn op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    prop_oneof![
        12 => put_op(),
        2 => (0usize..16, metadata(), any::<bool>()).prop_map(|(target, metadata, compare_and_set)| {
            Op::RepeatPut { target, metadata, compare_and_set }
        }),
        6 => put_writes_op(),
        4 => get_target().prop_map(|target| Op::GetTuple { target }),
        5 => list_op(),
        1 => any_thread_id().prop_map(|thread| Op::DeleteThread { thread }),
        2 => (any_thread_id(), thread_id())
            .prop_map(|(source, target)| Op::CopyThread { source, target }),
        2 => (prop::collection::vec(any_thread_id(), 0..3), prune_strategy())
            .prop_map(|(threads, strategy)| Op::Prune { threads, strategy }),
        1 => prop::collection::vec(any_run_id(), 0..3).prop_map(|runs| Op::DeleteForRuns { runs }),
    ]
}

/// A sequence of up to `max_len` operations. Shrinks by dropping operations and simplifying
/// the remaining ones; since indices are resolved at run time, every shrunk sequence runs.
pub fn ops(max_len: usize) -> impl Strategy<Value = Vec<Op>, Tree: Send> + Clone {
    prop::collection::vec(op(), 0..=max_len)
}

// ---------------------------------------------------------------------------------------------
// Running a sequence
// ---------------------------------------------------------------------------------------------

/// The first difference between the saver under test and the model.
struct Mismatch {
    what: String,
    saver: String,
    model: String,
}

impl Mismatch {
    fn new(what: impl Into<String>, saver: &dyn Debug, model: &dyn Debug) -> Self {
        Self {
            what: what.into(),
            saver: format!("{saver:#?}"),
            model: format!("{model:#?}"),
        }
    }

    /// Both savers returned `agreed`, which breaks the contract: the model is wrong too.
    fn contract(what: &str, violation: &str, agreed: &dyn Debug) -> Self {
        let shown = format!("{agreed:#?}");
        Self {
            what: format!(
                "{what}: both savers agree, but the result breaks the Saver contract, so the \
                 reference model (InMemorySaver) is wrong as well: {violation}"
            ),
            saver: shown.clone(),
            model: shown,
        }
    }
}

/// A short rendering of a result for mismatch reports.
struct Outcome<'a, T>(&'a checkpoint_core::Result<T>);

impl<T: Debug> Debug for Outcome<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Ok(v) => write!(f, "Ok({v:#?})"),
            Err(e) => write!(f, "Err({e:?}) = \"{e}\""),
        }
    }
}

/// Which saver a call went to.
#[derive(Clone, Copy)]
enum Side {
    Saver,
    Model,
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// Awaits one call, turning a panic into a mismatch that names the side and the call.
async fn guard<F: Future>(side: Side, call: &str, fut: F) -> Result<F::Output, Mismatch> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(output) => Ok(output),
        Err(panic) => {
            let message = format!("panicked: {}", panic_message(&*panic));
            let (who, saver, model) = match side {
                Side::Saver => ("the saver under test", message, "-".to_owned()),
                Side::Model => (
                    "the reference model (InMemorySaver)",
                    "-".to_owned(),
                    message,
                ),
            };
            Err(Mismatch {
                what: format!("{who} panicked in `{call}` (no operation may panic)"),
                saver,
                model,
            })
        }
    }
}

fn same_kind(a: &Error, b: &Error) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Compares two results: equal values, or errors of the same variant.
fn compare<T: PartialEq + Debug>(
    what: &str,
    saver: &checkpoint_core::Result<T>,
    model: &checkpoint_core::Result<T>,
) -> Result<(), Mismatch> {
    let agree = match (saver, model) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => same_kind(a, b),
        _ => false,
    };
    if agree {
        Ok(())
    } else {
        Err(Mismatch::new(
            format!("{what} differs"),
            &Outcome(saver),
            &Outcome(model),
        ))
    }
}

fn address(t: &CheckpointTuple) -> String {
    format!(
        "{}/{:?}/{}",
        t.config.thread_id, t.config.checkpoint_ns, t.checkpoint.id
    )
}

fn addresses(tuples: &[CheckpointTuple]) -> String {
    let all: Vec<String> = tuples.iter().map(address).collect();
    format!("[{}]", all.join(", "))
}

fn differing_fields(a: &CheckpointTuple, b: &CheckpointTuple) -> Vec<&'static str> {
    let mut out = Vec::new();
    if a.config != b.config {
        out.push("config");
    }
    if a.checkpoint != b.checkpoint {
        out.push("checkpoint");
    }
    if a.metadata != b.metadata {
        out.push("metadata");
    }
    if a.parent_config != b.parent_config {
        out.push("parent_config");
    }
    if a.pending_writes != b.pending_writes {
        out.push("pending_writes");
    }
    out
}

/// Compares two list results element by element.
fn compare_lists(
    what: &str,
    saver: &checkpoint_core::Result<Vec<CheckpointTuple>>,
    model: &checkpoint_core::Result<Vec<CheckpointTuple>>,
) -> Result<(), Mismatch> {
    let (Ok(s), Ok(m)) = (saver, model) else {
        return compare(what, saver, model);
    };
    for i in 0..s.len().max(m.len()) {
        let (a, b) = (s.get(i), m.get(i));
        if a == b {
            continue;
        }
        let detail = match (a, b) {
            (Some(a), Some(b)) => format!("differs in {}", differing_fields(a, b).join(", ")),
            (Some(_), None) => "is extra in the saver's result".to_owned(),
            _ => "is missing from the saver's result".to_owned(),
        };
        return Err(Mismatch {
            what: format!(
                "{what}: element {i} {detail} (the saver yields {} tuples, the model {})\n  \
                 saver (thread/ns/id): {}\n  model (thread/ns/id): {}",
                s.len(),
                m.len(),
                addresses(s),
                addresses(m),
            ),
            saver: format!("{a:#?}"),
            model: format!("{b:#?}"),
        });
    }
    Ok(())
}

/// What the contract says of every tuple a read returns.
fn tuple_violation(t: &CheckpointTuple) -> Option<String> {
    let c = &t.config;
    if c.checkpoint_id.as_deref() != Some(t.checkpoint.id.as_str()) || !c.extra.is_empty() {
        return Some(format!(
            "{}: config does not carry exactly its address",
            address(t)
        ));
    }
    if let Some(p) = &t.parent_config {
        let parent_id = p.checkpoint_id.as_deref().unwrap_or("");
        if p.thread_id != c.thread_id
            || p.checkpoint_ns != c.checkpoint_ns
            || parent_id >= t.checkpoint.id.as_str()
            || !p.extra.is_empty()
        {
            return Some(format!(
                "{}: parent_config {p:?} is not an older checkpoint of the same thread and \
                 namespace",
                address(t)
            ));
        }
    }
    if let Some(channel) = t
        .checkpoint
        .channel_values
        .keys()
        .find(|k| !t.checkpoint.channel_versions.contains_key(*k))
    {
        return Some(format!(
            "{}: channel {channel:?} has a value but no version",
            address(t)
        ));
    }
    let keys: Vec<_> = t
        .pending_writes
        .iter()
        .map(|w| (&w.task_path, &w.task_id, w.idx))
        .collect();
    if keys.windows(2).any(|k| k[0] >= k[1]) {
        return Some(format!(
            "{}: pending writes are not strictly ordered by (task_path, task_id, idx): {keys:?}",
            address(t)
        ));
    }
    for w in &t.pending_writes {
        let expected = checkpoint_core::writes::special_index(&w.channel);
        if expected.is_some_and(|i| i != w.idx) || (expected.is_none() && w.idx < 0) {
            return Some(format!(
                "{}: write {:?} of task {:?} has index {}",
                address(t),
                w.channel,
                w.task_id,
                w.idx
            ));
        }
    }
    None
}

/// What the contract says of every list result.
fn list_violation(options: &ListOptions, tuples: &[CheckpointTuple]) -> Option<String> {
    if let Some(limit) = options.limit {
        if tuples.len() > limit {
            return Some(format!("{} tuples exceed the limit {limit}", tuples.len()));
        }
    }
    let key = |t: &CheckpointTuple| {
        (
            t.checkpoint.id.clone(),
            t.config.thread_id.clone(),
            t.config.checkpoint_ns.clone(),
        )
    };
    if let Some(pair) = tuples.windows(2).find(|p| key(&p[0]) <= key(&p[1])) {
        return Some(format!(
            "not ordered by (id, thread, namespace) descending: {} comes before {}",
            address(&pair[0]),
            address(&pair[1])
        ));
    }
    for t in tuples {
        if !options.admits(
            &t.config.thread_id,
            &t.config.checkpoint_ns,
            &t.checkpoint.id,
            &t.metadata,
        ) {
            return Some(format!("{} does not pass the list options", address(t)));
        }
        if let Some(v) = tuple_violation(t) {
            return Some(v);
        }
    }
    None
}

/// Checks that an operation the saver does not advertise failed with `Unsupported`
/// (or, when the input is faulty too, with `InvalidInput`: validation may come first).
fn expect_unsupported<T: Debug>(
    capability: &str,
    saver: &checkpoint_core::Result<T>,
    faulty: bool,
) -> Result<(), Mismatch> {
    match saver {
        Err(Error::Unsupported { .. }) => Ok(()),
        Err(Error::InvalidInput { .. }) if faulty => Ok(()),
        _ => Err(Mismatch::new(
            format!(
                "the saver does not advertise `{capability}` in capabilities() but did not \
                 return Error::Unsupported"
            ),
            &Outcome(saver),
            &"Err(Unsupported { .. })",
        )),
    }
}

/// The state of one run: the savers and what the model currently holds.
struct Run<'a> {
    saver: &'a dyn Saver,
    model: &'a InMemorySaver,
    caps: Capabilities,
    /// Every checkpoint of the model, newest first, as `ListOptions::new()` yields them.
    current: Vec<CheckpointTuple>,
    /// Every checkpoint id a put was attempted with, oldest first.
    issued: Vec<String>,
}

/// Resolves `index` modulo `len`.
fn pick<T>(items: &[T], index: usize) -> Option<&T> {
    if items.is_empty() {
        None
    } else {
        items.get(index % items.len())
    }
}

/// A successor of `parent` (or a first checkpoint) with `changes` applied, and its
/// `new_versions`.
fn successor(
    parent: Option<&Checkpoint>,
    changes: &[(String, Option<TypedValue>)],
    string_versions: bool,
) -> (Checkpoint, ChannelVersions) {
    let mut checkpoint = match parent {
        Some(p) => {
            let mut c = p.successor();
            c.versions_seen
                .insert(NODE.to_owned(), p.channel_versions.clone());
            c
        }
        None => Checkpoint::new(),
    };
    let mut new_versions = ChannelVersions::new();
    let mut updated = BTreeSet::new();
    for (channel, value) in changes {
        let current = checkpoint.channel_versions.get(channel);
        let next = if string_versions && current.is_none() {
            ChannelVersion::next_string(None)
        } else {
            ChannelVersion::next(current)
        };
        match value {
            Some(v) => {
                checkpoint.channel_values.insert(channel.clone(), v.clone());
            }
            None => {
                checkpoint.channel_values.remove(channel);
            }
        }
        checkpoint
            .channel_versions
            .insert(channel.clone(), next.clone());
        new_versions.insert(channel.clone(), next);
        updated.insert(channel.clone());
    }
    checkpoint.updated_channels = (!updated.is_empty()).then(|| updated.into_iter().collect());
    (checkpoint, new_versions)
}

fn put_options(compare_and_set: bool) -> PutOptions {
    if compare_and_set {
        PutOptions::compare_and_set()
    } else {
        PutOptions::new()
    }
}

impl Run<'_> {
    /// The model's checkpoints of one thread and namespace, newest first.
    fn of(&self, thread: &str, ns: &str) -> Vec<&CheckpointTuple> {
        self.current
            .iter()
            .filter(|t| t.config.thread_id == thread && t.config.checkpoint_ns == ns)
            .collect()
    }

    fn existing(&self, index: usize) -> Option<CheckpointTuple> {
        pick(&self.current, index).cloned()
    }

    /// The id of an existing checkpoint (or, when there is none, of an issued one).
    fn existing_id(&self, index: usize) -> Option<String> {
        pick(&self.current, index)
            .map(|t| t.checkpoint.id.clone())
            .or_else(|| pick(&self.issued, index).cloned())
    }

    /// Lists both with `options`, compares element by element, checks the contract, and
    /// returns the model's result.
    async fn list_both(
        &self,
        what: &str,
        options: &ListOptions,
    ) -> Result<Vec<CheckpointTuple>, Mismatch> {
        let s = guard(Side::Saver, "list", self.saver.list_all(options.clone())).await?;
        let m = guard(Side::Model, "list", self.model.list_all(options.clone())).await?;
        compare_lists(what, &s, &m)?;
        match m {
            Ok(tuples) => match list_violation(options, &tuples) {
                Some(v) => Err(Mismatch::contract(what, &v, &addresses(&tuples))),
                None => Ok(tuples),
            },
            // Both failed alike: tolerated for a query, but the full contents must list.
            Err(e) => Err(Mismatch::new(
                format!("{what} failed on both savers"),
                &Outcome::<()>(&s.map(|_| ())),
                &Outcome::<()>(&Err(e)),
            )),
        }
    }

    /// Lists both savers' full contents, compares them and remembers the model's.
    async fn check_state(&mut self) -> Result<(), Mismatch> {
        self.current = self
            .list_both("the full contents (global list)", &ListOptions::new())
            .await?;
        Ok(())
    }

    async fn apply(&mut self, op: &Op) -> Result<(), Mismatch> {
        match op {
            Op::Put {
                thread,
                ns,
                parent,
                changes,
                string_versions,
                metadata,
                compare_and_set,
                fault,
            } => {
                let entries = self.of(thread, ns);
                let parent = match parent {
                    Parent::None => None,
                    Parent::Head => entries.first().copied(),
                    Parent::Older(i) if entries.len() > 1 => {
                        Some(entries[1 + i % (entries.len() - 1)])
                    }
                    Parent::Older(_) => entries.first().copied(),
                }
                .cloned();
                let mut config = CheckpointConfig::new(thread.as_str()).with_ns(ns.as_str());
                if let Some(p) = &parent {
                    config = config.with_checkpoint_id(p.checkpoint.id.as_str());
                }
                let (mut checkpoint, mut new_versions) = successor(
                    parent.as_ref().map(|p| &p.checkpoint),
                    changes,
                    *string_versions,
                );
                match fault {
                    None => {}
                    Some(PutFault::EmptyThread) => config.thread_id.clear(),
                    Some(PutFault::EmptyCheckpointId) => checkpoint.id.clear(),
                    Some(PutFault::IdNotAboveParent) => match &parent {
                        Some(p) => checkpoint.id = p.checkpoint.id.clone(),
                        None => config.checkpoint_id = Some(new_checkpoint_id()),
                    },
                    Some(PutFault::VersionMismatch) => {
                        let channel = changes
                            .first()
                            .map_or(CHANNELS[0], |(c, _)| c.as_str())
                            .to_owned();
                        // Differs from the channel's version in the checkpoint (if any).
                        let wrong = ChannelVersion::next(checkpoint.channel_versions.get(&channel));
                        new_versions.insert(channel, wrong);
                    }
                }
                if !checkpoint.id.is_empty() {
                    self.issued.push(checkpoint.id.clone());
                }
                let options = put_options(*compare_and_set);
                let s = guard(
                    Side::Saver,
                    "put",
                    self.saver.put(
                        &config,
                        checkpoint.clone(),
                        metadata.clone(),
                        new_versions.clone(),
                        options.clone(),
                    ),
                )
                .await?;
                if *compare_and_set && !self.caps.compare_and_set {
                    return expect_unsupported("compare_and_set", &s, fault.is_some());
                }
                let expected = config.latest().with_checkpoint_id(checkpoint.id.as_str());
                let m = guard(
                    Side::Model,
                    "put",
                    self.model
                        .put(&config, checkpoint, metadata.clone(), new_versions, options),
                )
                .await?;
                compare("the put result", &s, &m)?;
                match &m {
                    Ok(returned) if *returned != expected => Err(Mismatch::contract(
                        "the put result",
                        &format!("put must return {expected:?}"),
                        returned,
                    )),
                    Err(e) if fault.is_some() && !matches!(e, Error::InvalidInput { .. }) => {
                        Err(Mismatch::contract(
                            "the put result",
                            "a faulty put must fail with InvalidInput",
                            e,
                        ))
                    }
                    Ok(returned) if fault.is_some() => Err(Mismatch::contract(
                        "the put result",
                        "a faulty put must fail with InvalidInput",
                        returned,
                    )),
                    _ => Ok(()),
                }
            }
            Op::RepeatPut {
                target,
                metadata,
                compare_and_set,
            } => {
                let Some(t) = self.existing(*target) else {
                    return Ok(());
                };
                let mut config = t.config.latest();
                if let Some(p) = &t.parent_config {
                    config.checkpoint_id = p.checkpoint_id.clone();
                }
                let new_versions = t.checkpoint.channel_versions.clone();
                let options = put_options(*compare_and_set);
                let s = guard(
                    Side::Saver,
                    "put",
                    self.saver.put(
                        &config,
                        t.checkpoint.clone(),
                        metadata.clone(),
                        new_versions.clone(),
                        options.clone(),
                    ),
                )
                .await?;
                if *compare_and_set && !self.caps.compare_and_set {
                    return expect_unsupported("compare_and_set", &s, false);
                }
                let m = guard(
                    Side::Model,
                    "put",
                    self.model.put(
                        &config,
                        t.checkpoint,
                        metadata.clone(),
                        new_versions,
                        options,
                    ),
                )
                .await?;
                compare("the repeated put result", &s, &m)
            }
            Op::PutWrites {
                target,
                writes,
                task_id,
                task_path,
                fault,
            } => {
                let Some(t) = self.existing(*target) else {
                    return Ok(());
                };
                let mut config = t.config;
                match fault {
                    None => {}
                    Some(WritesFault::EmptyThread) => config.thread_id.clear(),
                    Some(WritesFault::NoCheckpointId) => config.checkpoint_id = None,
                }
                let options = PutWritesOptions::new().task_path(task_path.as_str());
                let s = guard(
                    Side::Saver,
                    "put_writes",
                    self.saver
                        .put_writes(&config, writes.clone(), task_id, options.clone()),
                )
                .await?;
                let m = guard(
                    Side::Model,
                    "put_writes",
                    self.model
                        .put_writes(&config, writes.clone(), task_id, options),
                )
                .await?;
                compare("the put_writes result", &s, &m)
            }
            Op::GetTuple { target } => {
                let config = match target {
                    GetTarget::Latest { thread, ns } => {
                        CheckpointConfig::new(thread.as_str()).with_ns(ns.as_str())
                    }
                    GetTarget::Existing(i) => match self.existing(*i) {
                        Some(t) => t.config,
                        None => CheckpointConfig::new(THREADS[0]),
                    },
                    GetTarget::Issued { index, thread, ns } => {
                        let id = pick(&self.issued, *index)
                            .cloned()
                            .unwrap_or_else(new_checkpoint_id);
                        CheckpointConfig::new(thread.as_str())
                            .with_ns(ns.as_str())
                            .with_checkpoint_id(id)
                    }
                    GetTarget::Missing { thread, ns } => CheckpointConfig::new(thread.as_str())
                        .with_ns(ns.as_str())
                        .with_checkpoint_id(new_checkpoint_id()),
                    GetTarget::EmptyThread => CheckpointConfig::new(""),
                };
                let what = format!("get_tuple({config:?})");
                let s = guard(Side::Saver, "get_tuple", self.saver.get_tuple(&config)).await?;
                let m = guard(Side::Model, "get_tuple", self.model.get_tuple(&config)).await?;
                compare(&what, &s, &m)?;
                let violation = match &m {
                    Ok(Some(t)) => tuple_violation(t).or_else(|| {
                        let wanted = (
                            &config.thread_id,
                            &config.checkpoint_ns,
                            config.checkpoint_id.as_ref().unwrap_or(&t.checkpoint.id),
                        );
                        let got = (
                            &t.config.thread_id,
                            &t.config.checkpoint_ns,
                            &t.checkpoint.id,
                        );
                        (wanted != got).then(|| "returns another checkpoint".to_owned())
                    }),
                    Ok(None) => None,
                    Err(Error::InvalidInput { .. }) if config.thread_id.is_empty() => None,
                    Err(_) if config.thread_id.is_empty() => {
                        Some("an empty thread id must give InvalidInput".to_owned())
                    }
                    Err(_) => Some("a read of a valid address must not fail".to_owned()),
                };
                match violation {
                    Some(v) => Err(Mismatch::contract(&what, &v, &Outcome(&m))),
                    None => Ok(()),
                }
            }
            Op::List {
                thread,
                ns,
                checkpoint_id,
                filter,
                before,
                limit,
            } => {
                let mut options = ListOptions::new().with_filter(filter.clone());
                options.thread_id = thread.clone();
                options.checkpoint_ns = ns.clone();
                options.checkpoint_id = checkpoint_id.and_then(|i| self.existing_id(i));
                options.before = before.and_then(|i| self.existing_id(i));
                options.limit = *limit;
                self.list_both(&format!("list({options:?})"), &options)
                    .await
                    .map(drop)
            }
            Op::DeleteThread { thread } => {
                let s = guard(
                    Side::Saver,
                    "delete_thread",
                    self.saver.delete_thread(thread),
                )
                .await?;
                let m = guard(
                    Side::Model,
                    "delete_thread",
                    self.model.delete_thread(thread),
                )
                .await?;
                compare("the delete_thread result", &s, &m)
            }
            Op::CopyThread { source, target } => {
                let s = guard(
                    Side::Saver,
                    "copy_thread",
                    self.saver.copy_thread(source, target),
                )
                .await?;
                if !self.caps.copy_thread {
                    return expect_unsupported("copy_thread", &s, false);
                }
                let m = guard(
                    Side::Model,
                    "copy_thread",
                    self.model.copy_thread(source, target),
                )
                .await?;
                compare("the copy_thread result", &s, &m)
            }
            Op::Prune { threads, strategy } => {
                let s = guard(Side::Saver, "prune", self.saver.prune(threads, *strategy)).await?;
                if !self.caps.prune {
                    return expect_unsupported("prune", &s, false);
                }
                let m = guard(Side::Model, "prune", self.model.prune(threads, *strategy)).await?;
                compare("the prune result", &s, &m)
            }
            Op::DeleteForRuns { runs } => {
                let s = guard(
                    Side::Saver,
                    "delete_for_runs",
                    self.saver.delete_for_runs(runs),
                )
                .await?;
                if !self.caps.delete_for_runs {
                    return expect_unsupported("delete_for_runs", &s, false);
                }
                let m = guard(
                    Side::Model,
                    "delete_for_runs",
                    self.model.delete_for_runs(runs),
                )
                .await?;
                compare("the delete_for_runs result", &s, &m)
            }
        }
    }
}

fn render_ops(ops: &[Op]) -> String {
    let mut out = String::new();
    for (i, op) in ops.iter().enumerate() {
        let _ = writeln!(out, "  {i:>3}: {op:?}");
    }
    out
}

/// Applies `ops` to `saver` (under test) and `model` (the reference), comparing after every
/// step.
///
/// Both savers must start with equal contents (normally both empty); this is checked first.
/// Then, for each operation:
///
/// * indices are resolved against what the model holds (see [`Op`]); an operation whose
///   target does not exist is skipped;
/// * the operation is applied to both with identical inputs (checkpoints, ids and timestamps
///   are built once, then cloned), and the results must agree: equal values (returned
///   configs, tuples, listed tuples element by element), or errors of the same
///   [`Error`] variant (both `Conflict`, both `InvalidInput`, ...);
/// * an optional operation the saver does not advertise in [`Saver::capabilities`] must fail
///   with [`Error::Unsupported`] on the saver and is not applied to the model;
/// * after every operation that may change data, the full contents (a global
///   [`ListOptions::new`] listing) of both must be equal, element by element;
/// * results both agree on are also checked against what the contract says of any result
///   (list order, `limit`, every listed tuple passing the options, a tuple's config and
///   parent addresses, pending-write order and indexes, a faulty put failing with
///   `InvalidInput`), so a bug shared by the model is reported too;
/// * a panic, of either saver, is a divergence (no operation may panic).
///
/// Returns a description of the first divergence: the step, the operation, both results.
pub async fn run_ops(saver: &dyn Saver, model: &InMemorySaver, ops: &[Op]) -> Result<(), String> {
    let mut run = Run {
        saver,
        model,
        caps: saver.capabilities(),
        current: Vec::new(),
        issued: Vec::new(),
    };
    let describe = |step: &str, m: Mismatch| {
        format!(
            "{step}: {}\n--- saver under test:\n{}\n--- model (InMemorySaver):\n{}",
            m.what, m.saver, m.model
        )
    };
    run.check_state()
        .await
        .map_err(|m| describe("before the first operation", m))?;
    for (i, op) in ops.iter().enumerate() {
        let mut outcome = run.apply(op).await;
        if outcome.is_ok() && op.changes_data() {
            outcome = run.check_state().await;
        }
        if let Err(m) = outcome {
            return Err(describe(&format!("step {i} of {} ({op:?})", ops.len()), m));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The proptest driver
// ---------------------------------------------------------------------------------------------

/// Why one case failed.
enum CaseFailure {
    /// The saver diverged from the model (or panicked): shrink.
    Diverged(String),
    /// The factory could not build a saver: stop.
    Setup(String),
}

async fn run_case(factory: &dyn SaverFactory, ops: &[Op]) -> Result<(), CaseFailure> {
    let saver = factory
        .build()
        .await
        .map_err(|e| CaseFailure::Setup(format!("the saver factory failed: {e}")))?;
    let model = InMemorySaver::new();
    match AssertUnwindSafe(run_ops(&*saver, &model, ops))
        .catch_unwind()
        .await
    {
        Ok(Ok(())) => Ok(()),
        Ok(Err(divergence)) => Err(CaseFailure::Diverged(divergence)),
        Err(panic) => Err(CaseFailure::Diverged(format!(
            "an unguarded point: the run panicked (no operation may panic): {}",
            panic_message(&*panic)
        ))),
    }
}

fn env_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} is not a valid number")),
        _ => Ok(None),
    }
}

/// Runs `cases` generated operation sequences against fresh savers from `factory`, each
/// compared step by step with a fresh [`InMemorySaver`] by [`run_ops`].
///
/// * Each case builds a fresh saver with [`SaverFactory::build`] (teardown is the caller's,
///   as for every clause) and runs a sequence of up to [`DEFAULT_MAX_OPS`] operations.
/// * Environment: `CHECKPOINT_MODEL_CASES` overrides `cases`; `CHECKPOINT_MODEL_MAX_OPS` the
///   sequence length. Proptest's `PROPTEST_*` variables apply too (notably
///   `PROPTEST_RNG_SEED`, `PROPTEST_MAX_SHRINK_ITERS`, `PROPTEST_MAX_SHRINK_TIME`); without
///   `PROPTEST_RNG_SEED` the seed is [`DEFAULT_SEED`], so runs are reproducible.
/// * On a divergence the sequence is shrunk (fewer, simpler operations; at most 1024 runs or
///   two minutes unless proptest's shrink limits are set) and the error names the seed, the
///   minimal failing sequence and the divergence it causes. A factory failure is returned
///   as is, without shrinking.
///
/// It is an ordinary `async fn` (no blocking), so it runs on any tokio runtime flavor; the
/// returned future is `Send`.
pub async fn check_against_model(factory: &dyn SaverFactory, cases: u32) -> Result<(), String> {
    let cases = env_number("CHECKPOINT_MODEL_CASES")?.unwrap_or(cases);
    let max_ops = env_number("CHECKPOINT_MODEL_MAX_OPS")?.unwrap_or(DEFAULT_MAX_OPS);
    let mut config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(DEFAULT_SEED);
    }
    let max_shrink_iters = match config.max_shrink_iters {
        u32::MAX => 1024,
        n => n,
    };
    let max_shrink_time = match config.max_shrink_time {
        0 => Duration::from_secs(120),
        ms => Duration::from_millis(u64::from(ms)),
    };
    let seed = config.rng_seed;
    let mut runner = TestRunner::new(config);
    let strategy = ops(max_ops);

    for case in 0..cases {
        let mut tree = strategy
            .new_tree(&mut runner)
            .map_err(|e| format!("model-based check: generating case {case} failed: {e}"))?;
        let first = tree.current();
        let divergence = match run_case(factory, &first).await {
            Ok(()) => continue,
            Err(CaseFailure::Setup(e)) => return Err(e),
            Err(CaseFailure::Diverged(d)) => d,
        };

        // Shrink as proptest does: simplify while the case still fails, complicate when a
        // simplification made it pass.
        let original_len = first.len();
        let mut minimal = (first, divergence);
        let started = Instant::now();
        let mut shrink_runs = 0u32;
        let mut more = tree.simplify();
        while more && shrink_runs < max_shrink_iters && started.elapsed() < max_shrink_time {
            shrink_runs += 1;
            let candidate = tree.current();
            more = match run_case(factory, &candidate).await {
                Ok(()) => tree.complicate(),
                Err(CaseFailure::Setup(e)) => return Err(e),
                Err(CaseFailure::Diverged(d)) => {
                    minimal = (candidate, d);
                    tree.simplify()
                }
            };
        }
        let (ops, divergence) = minimal;
        return Err(format!(
            "model-based check: the saver diverged from the reference model (InMemorySaver) \
             in case {case} of {cases} (seed {seed}; reproduce with PROPTEST_RNG_SEED={seed} \
             CHECKPOINT_MODEL_CASES={cases} CHECKPOINT_MODEL_MAX_OPS={max_ops}).\n\
             Minimal failing sequence ({} of the original {original_len} operations, after \
             {shrink_runs} shrink runs):\n{}Divergence at {divergence}",
            ops.len(),
            render_ops(&ops),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use checkpoint_core::{BoxStream, async_trait};
    use futures::StreamExt;

    use super::*;
    use crate::factory_fn;

    /// How a [`Broken`] saver departs from the contract.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Flaw {
        /// None: a faithful forwarder.
        None,
        /// `put_writes` succeeds but stores nothing.
        DropsWrites,
        /// `list` yields oldest first.
        ReversesList,
        /// Advertises no optional operation and returns `Unsupported` for them.
        NoExtensions,
        /// Advertises no optional operation but performs them anyway.
        LiesAboutCapabilities,
        /// Compare-and-set behaves like a plain put.
        IgnoresCompareAndSet,
    }

    #[derive(Debug)]
    struct Broken {
        inner: InMemorySaver,
        flaw: Flaw,
    }

    impl Broken {
        fn hides_extensions(&self) -> bool {
            matches!(self.flaw, Flaw::NoExtensions)
        }
    }

    #[async_trait]
    impl Saver for Broken {
        fn capabilities(&self) -> Capabilities {
            match self.flaw {
                Flaw::NoExtensions | Flaw::LiesAboutCapabilities => Capabilities::none(),
                _ => self.inner.capabilities(),
            }
        }

        async fn get_tuple(
            &self,
            config: &CheckpointConfig,
        ) -> checkpoint_core::Result<Option<CheckpointTuple>> {
            self.inner.get_tuple(config).await
        }

        fn list(
            &self,
            options: ListOptions,
        ) -> BoxStream<'static, checkpoint_core::Result<CheckpointTuple>> {
            let stream = self.inner.list(options);
            if self.flaw != Flaw::ReversesList {
                return stream;
            }
            futures::stream::once(async move {
                let mut all: Vec<_> = stream.collect().await;
                all.reverse();
                futures::stream::iter(all)
            })
            .flatten()
            .boxed()
        }

        async fn put(
            &self,
            config: &CheckpointConfig,
            checkpoint: Checkpoint,
            metadata: CheckpointMetadata,
            new_versions: ChannelVersions,
            options: PutOptions,
        ) -> checkpoint_core::Result<CheckpointConfig> {
            let options = if self.flaw == Flaw::IgnoresCompareAndSet {
                PutOptions::new()
            } else if self.hides_extensions() && options != PutOptions::new() {
                return Err(Error::Unsupported {
                    op: "put (compare-and-set)",
                });
            } else {
                options
            };
            self.inner
                .put(config, checkpoint, metadata, new_versions, options)
                .await
        }

        async fn put_writes(
            &self,
            config: &CheckpointConfig,
            writes: Vec<(String, TypedValue)>,
            task_id: &str,
            options: PutWritesOptions,
        ) -> checkpoint_core::Result<()> {
            if self.flaw == Flaw::DropsWrites {
                config.require_checkpoint_id()?;
                return Ok(());
            }
            self.inner
                .put_writes(config, writes, task_id, options)
                .await
        }

        async fn delete_thread(&self, thread_id: &str) -> checkpoint_core::Result<()> {
            self.inner.delete_thread(thread_id).await
        }

        async fn copy_thread(&self, source: &str, target: &str) -> checkpoint_core::Result<()> {
            if self.hides_extensions() {
                return Err(Error::Unsupported { op: "copy_thread" });
            }
            self.inner.copy_thread(source, target).await
        }

        async fn prune(
            &self,
            thread_ids: &[String],
            strategy: PruneStrategy,
        ) -> checkpoint_core::Result<()> {
            if self.hides_extensions() {
                return Err(Error::Unsupported { op: "prune" });
            }
            self.inner.prune(thread_ids, strategy).await
        }

        async fn delete_for_runs(&self, run_ids: &[String]) -> checkpoint_core::Result<()> {
            if self.hides_extensions() {
                return Err(Error::Unsupported {
                    op: "delete_for_runs",
                });
            }
            self.inner.delete_for_runs(run_ids).await
        }
        async fn acquire_lease(
            &self,
            thread_id: &str,
            holder: &str,
            ttl: std::time::Duration,
        ) -> checkpoint_core::Result<Option<checkpoint_core::Lease>> {
            self.inner.acquire_lease(thread_id, holder, ttl).await
        }
        async fn renew_lease(
            &self,
            lease: &checkpoint_core::Lease,
            ttl: std::time::Duration,
        ) -> checkpoint_core::Result<checkpoint_core::Lease> {
            self.inner.renew_lease(lease, ttl).await
        }
        async fn release_lease(
            &self,
            lease: &checkpoint_core::Lease,
        ) -> checkpoint_core::Result<()> {
            self.inner.release_lease(lease).await
        }
        async fn claim(
            &self,
            key: &str,
            ttl: std::time::Duration,
        ) -> checkpoint_core::Result<checkpoint_core::Claim> {
            self.inner.claim(key, ttl).await
        }
        async fn complete_claim(
            &self,
            key: &str,
            token: u64,
            outcome: TypedValue,
        ) -> checkpoint_core::Result<()> {
            self.inner.complete_claim(key, token, outcome).await
        }
        async fn abandon_claim(&self, key: &str, token: u64) -> checkpoint_core::Result<()> {
            self.inner.abandon_claim(key, token).await
        }
    }

    fn factory(flaw: Flaw) -> impl SaverFactory {
        factory_fn(move || async move {
            Ok(Arc::new(Broken {
                inner: InMemorySaver::new(),
                flaw,
            }) as Arc<dyn Saver>)
        })
    }

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn check_against_model_future_is_send() {
        let f = factory(Flaw::None);
        let fut = check_against_model(&f, 1);
        assert_send(&fut);
    }

    #[tokio::test]
    async fn reference_matches_itself() {
        let f = factory_fn(|| async { Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>) });
        check_against_model(&f, 24)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn faithful_wrapper_passes_on_a_multi_thread_runtime() {
        check_against_model(&factory(Flaw::None), 8)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn saver_without_extensions_passes_when_it_returns_unsupported() {
        check_against_model(&factory(Flaw::NoExtensions), 24)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    async fn detected(flaw: Flaw, expect: &[&str]) {
        let err = check_against_model(&factory(flaw), 48)
            .await
            .expect_err("the flaw must be detected");
        for needle in expect {
            assert!(err.contains(needle), "{flaw:?}: {needle:?} not in:\n{err}");
        }
        assert!(err.contains("Minimal failing sequence"), "{err}");
    }

    #[tokio::test]
    async fn dropped_pending_writes_are_detected() {
        detected(Flaw::DropsWrites, &["PutWrites", "pending_writes"]).await;
    }

    #[tokio::test]
    async fn reversed_list_order_is_detected() {
        detected(Flaw::ReversesList, &["element 0"]).await;
    }

    #[tokio::test]
    async fn unadvertised_operations_that_succeed_are_detected() {
        detected(
            Flaw::LiesAboutCapabilities,
            &["did not return Error::Unsupported"],
        )
        .await;
    }

    #[tokio::test]
    async fn ignored_compare_and_set_is_detected() {
        detected(
            Flaw::IgnoresCompareAndSet,
            &["compare_and_set: true", "Conflict"],
        )
        .await;
    }

    #[tokio::test]
    async fn shrinking_finds_a_short_sequence() {
        let err = check_against_model(&factory(Flaw::DropsWrites), 48)
            .await
            .expect_err("detected");
        let ops = err
            .lines()
            .filter(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|n| n.parse::<usize>().is_ok())
            })
            .count();
        // A put and the put_writes whose writes vanish.
        assert_eq!(ops, 2, "{err}");
    }

    #[tokio::test]
    async fn factory_failures_are_reported_without_shrinking() {
        let f = factory_fn(|| async {
            Err::<Arc<dyn Saver>, checkpoint_core::BoxError>("no server".into())
        });
        let err = check_against_model(&f, 3).await.expect_err("fails");
        assert!(err.contains("no server"), "{err}");
    }

    fn put(thread: &str, ns: &str, parent: Parent, compare_and_set: bool) -> Op {
        Op::Put {
            thread: thread.to_owned(),
            ns: ns.to_owned(),
            parent,
            changes: vec![
                ("messages".to_owned(), Some(msgpack("hi"))),
                ("counter".to_owned(), None),
            ],
            string_versions: false,
            metadata: CheckpointMetadata::for_step(Source::Loop, 1).with_run_id("run-a"),
            compare_and_set,
            fault: None,
        }
    }

    #[tokio::test]
    async fn every_kind_of_operation_runs_against_the_reference() {
        let ops = vec![
            put("t0", "", Parent::None, true),
            put("t0", "", Parent::Head, true),
            put("t0", "", Parent::None, true), // conflict: the namespace is not empty
            put("t0", "", Parent::Older(0), true), // conflict: not the head
            put("t0", "", Parent::Older(0), false), // a fork
            put("t1", "child:1|inner:2", Parent::Head, false),
            Op::RepeatPut {
                target: 0,
                metadata: CheckpointMetadata::new().with(CUSTOM_KEY, 1.0),
                compare_and_set: true,
            },
            Op::PutWrites {
                target: 1,
                writes: vec![
                    ("__interrupt__".to_owned(), TypedValue::null()),
                    ("messages".to_owned(), TypedValue::from_bytes(vec![0, 1])),
                ],
                task_id: "task-1".to_owned(),
                task_path: String::new(),
                fault: None,
            },
            Op::PutWrites {
                target: 1,
                writes: vec![("__error__".to_owned(), msgpack("boom"))],
                task_id: "task-1".to_owned(),
                task_path: "~__pregel_pull, agent".to_owned(),
                fault: Some(WritesFault::NoCheckpointId),
            },
            Op::GetTuple {
                target: GetTarget::Existing(2),
            },
            Op::GetTuple {
                target: GetTarget::Missing {
                    thread: "t0".to_owned(),
                    ns: String::new(),
                },
            },
            Op::GetTuple {
                target: GetTarget::EmptyThread,
            },
            Op::List {
                thread: None,
                ns: Some(String::new()),
                checkpoint_id: None,
                filter: [("step".to_owned(), json!(1.0))].into_iter().collect(),
                before: Some(1),
                limit: Some(2),
            },
            Op::CopyThread {
                source: "t0".to_owned(),
                target: "t1".to_owned(),
            },
            Op::Prune {
                threads: vec!["t1".to_owned(), UNKNOWN_THREAD.to_owned()],
                strategy: PruneStrategy::KeepLast(1),
            },
            Op::DeleteForRuns {
                runs: vec!["run-a".to_owned()],
            },
            Op::DeleteThread {
                thread: "t0".to_owned(),
            },
        ];
        let saver = InMemorySaver::new();
        let model = InMemorySaver::new();
        run_ops(&saver, &model, &ops)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // The repeated put dropped `run_id` from one checkpoint, which its copy in t1 keeps.
        let left = saver.list_all(ListOptions::new()).await.unwrap();
        assert_eq!(left.len(), 1, "{left:#?}");
        assert_eq!(left[0].config.thread_id, "t1");
        assert_eq!(left[0].metadata.get(CUSTOM_KEY), Some(&json!(1.0)));
    }

    /// Regression, found by this module: `delete_for_runs` emptying a thread that holds the
    /// run's checkpoints in two namespaces once dropped the thread after the first namespace
    /// and left the second one's entries in the global index, so the next global `list`
    /// panicked.
    #[tokio::test]
    async fn reference_delete_for_runs_emptying_a_thread_with_two_namespaces() {
        let put = |ns: &str| Op::Put {
            thread: "t1".to_owned(),
            ns: ns.to_owned(),
            parent: Parent::None,
            changes: vec![],
            string_versions: false,
            metadata: CheckpointMetadata::new().with_run_id("run-a"),
            compare_and_set: false,
            fault: None,
        };
        let ops = [
            put("child:1"),
            put(""),
            Op::DeleteForRuns {
                runs: vec!["run-a".to_owned()],
            },
        ];
        run_ops(&InMemorySaver::new(), &InMemorySaver::new(), &ops)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn run_ops_reports_the_step_and_both_results() {
        let saver = Broken {
            inner: InMemorySaver::new(),
            flaw: Flaw::DropsWrites,
        };
        let ops = vec![
            put("t0", "", Parent::None, false),
            Op::PutWrites {
                target: 0,
                writes: vec![("messages".to_owned(), msgpack(1))],
                task_id: "task-2".to_owned(),
                task_path: String::new(),
                fault: None,
            },
        ];
        let err = run_ops(&saver, &InMemorySaver::new(), &ops)
            .await
            .expect_err("detected");
        assert!(err.starts_with("step 1 of 2 (PutWrites"), "{err}");
        assert!(
            err.contains("--- saver under test:") && err.contains("--- model"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn run_ops_rejects_savers_that_start_different() {
        let saver = InMemorySaver::new();
        run_ops(
            &saver,
            &InMemorySaver::new(),
            &[put("t0", "", Parent::None, false)],
        )
        .await
        .unwrap();
        let err = run_ops(&saver, &InMemorySaver::new(), &[])
            .await
            .expect_err("saver is not empty");
        assert!(err.starts_with("before the first operation"), "{err}");
    }

    #[test]
    fn generated_sequences_cover_every_operation() {
        let mut runner = TestRunner::deterministic();
        let strategy = ops(DEFAULT_MAX_OPS);
        let mut seen = BTreeSet::new();
        let mut faults = 0;
        let mut special_only = 0;
        for _ in 0..64 {
            for op in strategy.new_tree(&mut runner).unwrap().current() {
                seen.insert(
                    format!("{op:?}")
                        .split([' ', '{'])
                        .next()
                        .unwrap()
                        .to_owned(),
                );
                match &op {
                    Op::Put { fault: Some(_), .. } | Op::PutWrites { fault: Some(_), .. } => {
                        faults += 1;
                    }
                    Op::PutWrites { writes, .. }
                        if !writes.is_empty()
                            && writes.iter().all(|(c, _)| c.starts_with("__")) =>
                    {
                        special_only += 1;
                    }
                    _ => {}
                }
            }
        }
        let all = [
            "Put",
            "RepeatPut",
            "PutWrites",
            "GetTuple",
            "List",
            "DeleteThread",
            "CopyThread",
            "Prune",
            "DeleteForRuns",
        ];
        for name in all {
            assert!(seen.contains(name), "{name} never generated: {seen:?}");
        }
        assert!(faults > 0 && special_only > 0, "{faults} {special_only}");
    }
}
