//! The field reports' failures (seeds 000, 002 and 004 of the project's field reports) as
//! runnable scenarios: test support for backends (feature `testing`).
//!
//! Each scenario is a `pub async fn` taking the backend as an `Arc<dyn Saver>`, so every
//! backend crate runs them on its own saver, usually all at once with [`run_all`] and its
//! conformance factory. A scenario returns
//! `Ok(())` when the behavior the report asks for holds, [`ScenarioError::Failed`] with an
//! explanation when it does not, and [`ScenarioError::Unsupported`] when the backend lacks
//! a capability the scenario needs. Every scenario works on fresh, uniquely named threads
//! and leaves them in place (a backend's test factory cleans up its own namespace).
//!
//! | scenario | report | what must hold |
//! |---|---|---|
//! | [`seed_000_interrupt_presented_exactly_once`] | 000 | a process dies between the interrupt checkpoint and the "present the question" message; lazy recovery on read, across crashes and concurrent readers, writes the message exactly once (key: checkpoint id) |
//! | [`seed_002_approval_resume_sends_email_once`] | 002 | approval resumes retried and raced: the email is sent once (execution key), the proposal is upserted by a deterministic key, one run per case at a time, in-process and across processes (lease, fencing) |
//! | [`seed_004_crash_between_tool_calls_and_results`] | 004 | the next load is valid for OpenAI and Anthropic, every message is kept, nothing is reset |
//! | [`seed_004_concurrent_messages_do_not_interleave`] | 004 | concurrent messages on one thread, serialized per thread, never interleave tool calls |
//! | [`seed_004_guard_never_persists_unsafe_state`] | 004 | with [`SkipUnsafePut`](crate::SkipUnsafePut), no stored checkpoint ends with unanswered calls and the parent chain stays valid |
//! | [`seed_004_markers_replay_or_resolve`] | 004 | with [`PendingMarkers`](crate::PendingMarkers), in-flight calls are known after a crash and are replayed (idempotent tools), discarded or handed to a human |

mod seed_000;
mod seed_002;
mod seed_004;
mod seed_004_markers;

use std::fmt;

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{ChannelVersions, Checkpoint, Error, TypedValue};

pub use seed_000::seed_000_interrupt_presented_exactly_once;
pub use seed_002::seed_002_approval_resume_sends_email_once;
pub use seed_004::{
    seed_004_concurrent_messages_do_not_interleave, seed_004_crash_between_tool_calls_and_results,
    seed_004_guard_never_persists_unsafe_state,
};
pub use seed_004_markers::seed_004_markers_replay_or_resolve;

use crate::messages::ToolCall;

/// Why a scenario did not pass.
#[derive(Debug)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The behavior does not hold: what was expected and what happened.
    Failed(String),
    /// The saver failed.
    Saver(Error),
    /// The backend lacks a capability the scenario needs.
    Unsupported(&'static str),
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScenarioError::Failed(why) => write!(f, "scenario failed: {why}"),
            ScenarioError::Saver(e) => {
                write!(f, "scenario failed: the saver returned an error: {e}")
            }
            ScenarioError::Unsupported(what) => write!(f, "scenario needs {what}"),
        }
    }
}

impl std::error::Error for ScenarioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ScenarioError::Saver(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for ScenarioError {
    fn from(e: Error) -> Self {
        ScenarioError::Saver(e)
    }
}

/// What every scenario returns.
pub type ScenarioResult = Result<(), ScenarioError>;

/// A scenario as a plain function, for running them all in a loop.
pub type ScenarioFn = fn(
    std::sync::Arc<dyn checkpoint_core::Saver>,
) -> futures::future::BoxFuture<'static, ScenarioResult>;

/// Every scenario with its name, so a backend runs them all (and any added later) with one
/// loop, each against a fresh saver.
pub const ALL: &[(&str, ScenarioFn)] = &[
    ("seed_000_interrupt_presented_exactly_once", |s| {
        Box::pin(seed_000_interrupt_presented_exactly_once(s))
    }),
    ("seed_002_approval_resume_sends_email_once", |s| {
        Box::pin(seed_002_approval_resume_sends_email_once(s))
    }),
    ("seed_004_crash_between_tool_calls_and_results", |s| {
        Box::pin(seed_004_crash_between_tool_calls_and_results(s))
    }),
    ("seed_004_concurrent_messages_do_not_interleave", |s| {
        Box::pin(seed_004_concurrent_messages_do_not_interleave(s))
    }),
    ("seed_004_guard_never_persists_unsafe_state", |s| {
        Box::pin(seed_004_guard_never_persists_unsafe_state(s))
    }),
    ("seed_004_markers_replay_or_resolve", |s| {
        Box::pin(seed_004_markers_replay_or_resolve(s))
    }),
];

/// Runs every scenario of [`ALL`], each against a fresh saver from `factory` (torn down
/// after it), and panics naming the first one that fails. When the factory cannot run here
/// ([`SaverFactory::skip_reason`]) it prints why and returns, unless servers are required
/// ([`checkpoint_conformance::servers_required`]), where it panics.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use checkpoint_core::{InMemorySaver, Saver};
/// let memory = checkpoint_conformance::factory_fn(|| async {
///     Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>)
/// });
/// checkpoint_sanitize::scenarios::run_all(&memory).await;
/// # });
/// ```
pub async fn run_all(factory: &dyn SaverFactory) {
    if let Some(reason) = factory.skip_reason() {
        assert!(
            !checkpoint_conformance::servers_required(),
            "the field report scenarios need their backend (CI=true or CHECKPOINT_TEST_REQUIRE=1): {reason}"
        );
        eprintln!("field report scenarios: SKIPPED: {reason}");
        return;
    }
    for (name, run) in ALL {
        let saver = match factory.build().await {
            Ok(saver) => saver,
            Err(e) => panic!("scenario {name}: the saver factory failed: {e}"),
        };
        let outcome = run(saver).await;
        factory.teardown().await;
        if let Err(e) = outcome {
            panic!("scenario {name} failed: {e}");
        }
    }
}

/// Fails the scenario with a message unless `cond` holds.
macro_rules! check {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err($crate::scenarios::ScenarioError::Failed(format!($($why)+)));
        }
    };
}
pub(crate) use check;

/// A thread id no earlier run used.
fn unique_thread(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

/// A tool call.
fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: Some(id.to_owned()),
        name: Some(name.to_owned()),
        args: Some(args),
    }
}

/// The successor of `prev` (or a first checkpoint) with `changes` applied, and its
/// `new_versions`.
fn step(
    prev: Option<&Checkpoint>,
    changes: Vec<(&str, TypedValue)>,
) -> (Checkpoint, ChannelVersions) {
    let mut checkpoint = prev.map_or_else(Checkpoint::new, Checkpoint::successor);
    let mut versions = ChannelVersions::new();
    for (channel, value) in changes {
        let v = checkpoint.set_typed(channel, value);
        versions.insert(channel.to_owned(), v);
    }
    if let Some(prev) = prev {
        checkpoint
            .versions_seen
            .insert("agent".to_owned(), prev.channel_versions.clone());
    }
    (checkpoint, versions)
}

/// Waits up to `secs` seconds for `fut`.
async fn within<T>(
    secs: u64,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, ScenarioError> {
    tokio::time::timeout(std::time::Duration::from_secs(secs), fut)
        .await
        .map_err(|_| ScenarioError::Failed(format!("{what} did not finish within {secs} s")))
}
