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
//! let factory = checkpoint_conformance::factory_fn(|| async {
//!     Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>)
//! });
//! checkpoint_conformance::model::check_against_model(&factory, 4)
//!     .await
//!     .unwrap_or_else(|e| panic!("{e}"));
//! # });
//! ```

mod compare;
mod run;
mod strategies;
#[cfg(test)]
mod tests;

use std::fmt::{Debug, Write as _};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use checkpoint_core::{CheckpointMetadata, InMemorySaver, PruneStrategy, Saver, TypedValue};
#[cfg(doc)]
use checkpoint_core::{Error, ListOptions};
use futures::FutureExt;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::{Map, Value};

use crate::SaverFactory;
use compare::*;
use run::*;
pub use strategies::*;

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
pub(super) const SPECIAL_WRITE_CHANNELS: [&str; 4] =
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

/// The operations of a sequence, one per line, as a failure report shows them.
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
