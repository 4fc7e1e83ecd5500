//! The calls [`PendingMarkers`](super::PendingMarkers) reports and resolves: outstanding
//! calls, decisions, what resolution and recovery did, and the replayer of idempotent tools.

use async_trait::async_trait;
use checkpoint_core::{BoxError, CheckpointConfig};

#[cfg(doc)]
use super::PendingMarkers;
use crate::messages::{ToolCall, ToolOutput};

/// Where an outstanding call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallState {
    /// Started (or about to start) and not answered.
    InFlight,
    /// Handed to a human, who has not answered yet.
    AwaitingHuman,
}

/// A tool call of a thread that has no result.
#[derive(Clone, Debug, PartialEq)]
pub struct OutstandingCall {
    /// The call (its `id` is always set).
    pub call: ToolCall,
    /// In flight or awaiting a human.
    pub state: CallState,
    /// Whether a marker was recorded before it ran (`false`: found only in the message list,
    /// e.g. the process died between the checkpoint and the marker).
    pub marked: bool,
    /// Whether the AI message making the call is in the checkpoint's list (`false` when
    /// [`SkipUnsafePut`](crate::SkipUnsafePut) did not persist it: resolving re-adds it from
    /// the marker).
    pub message_in_state: bool,
    /// Whether its tool is declared idempotent.
    pub idempotent: bool,
}

/// The outstanding calls of a thread's checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Outstanding {
    /// The checkpoint they were computed on (the head, unless another was asked for).
    pub checkpoint: CheckpointConfig,
    /// The calls, markers first, in recording order.
    pub calls: Vec<OutstandingCall>,
}

impl Outstanding {
    /// Whether nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// How to resolve one call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// Write this result (a replay's output, or a human's answer).
    Result(ToolOutput),
    /// Write the placeholder result: the call is not executed.
    Discard,
    /// Record that a human must answer; nothing is written to the message list.
    HandToHuman,
}

/// One call's resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The call.
    pub call_id: String,
    /// What to do.
    pub resolution: Resolution,
}

impl Decision {
    /// A decision.
    pub fn new(call_id: impl Into<String>, resolution: Resolution) -> Self {
        Self {
            call_id: call_id.into(),
            resolution,
        }
    }
}

/// What [`PendingMarkers::resolve`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The new checkpoint holding the results, when results were written.
    pub checkpoint: Option<CheckpointConfig>,
    /// Calls answered with a given result.
    pub answered: Vec<String>,
    /// Calls answered with the placeholder.
    pub discarded: Vec<String>,
    /// Calls handed to a human.
    pub awaiting_human: Vec<String>,
}

/// What [`PendingMarkers::recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The resolution written.
    pub resolved: Resolved,
    /// Calls of idempotent tools run again (their results are in `resolved.answered`).
    pub replayed: Vec<String>,
}

/// Runs a tool call again during recovery (only calls of tools declared idempotent).
#[async_trait]
pub trait ToolReplayer: Send + Sync {
    /// Runs `call` and returns its output. An error becomes an error result.
    async fn replay(&self, call: &ToolCall) -> std::result::Result<ToolOutput, BoxError>;
}
