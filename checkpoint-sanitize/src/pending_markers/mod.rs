//! [`PendingMarkers`]: write-ahead markers of in-flight tool calls, and their resolution.

mod calls;
mod layer;
mod record;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DecodeLimits, Error, Lease, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Result, Saver, ThreadTtl, TypedValue, now_iso8601,
};
use serde_json::json;

pub use calls::{
    CallState, Decision, Outstanding, OutstandingCall, Recovery, Resolution, Resolved, ToolReplayer,
};
pub use layer::PendingMarkersLayer;
pub use record::{MARKER_CHANNEL, RESOLUTION_CHANNEL, ResolutionKind, is_marker_channel};

use crate::messages::{
    Answer, MessageList, PLACEHOLDER_ID_PREFIX, PLACEHOLDER_TEXT, ToolCall, ToolOutput,
    pending_results,
};
use crate::util::{address, put_successor};
use record::{MARKER_TASK_PREFIX, Marker, ResolutionRecord};

/// The id prefix of result messages written by [`PendingMarkers::resolve`] (followed by the
/// call id).
pub const RESULT_ID_PREFIX: &str = "checkpoint-sanitize:result:";

/// What [`PendingMarkers::recover`] does with an outstanding call of a tool that is not
/// declared idempotent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NonIdempotentAction {
    /// Answer it with the placeholder result (the default).
    #[default]
    Discard,
    /// Leave it for a human ([`Resolution::HandToHuman`]).
    HandToHuman,
}

/// Configuration of [`PendingMarkers`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PendingMarkersConfig {
    /// The channel holding the message list (default `"messages"`).
    pub channel: String,
    /// Tools whose calls may be run again after a crash (default: none).
    pub idempotent_tools: BTreeSet<String>,
    /// What recovery does with the other tools' calls (default: discard).
    pub non_idempotent: NonIdempotentAction,
    /// The result written for a discarded call (default: the placeholder error result).
    pub placeholder: ToolOutput,
    /// Decode limits for message values.
    pub limits: DecodeLimits,
}

impl Default for PendingMarkersConfig {
    fn default() -> Self {
        Self {
            channel: "messages".to_owned(),
            idempotent_tools: BTreeSet::new(),
            non_idempotent: NonIdempotentAction::Discard,
            placeholder: ToolOutput::error(PLACEHOLDER_TEXT),
            limits: DecodeLimits::default(),
        }
    }
}

impl PendingMarkersConfig {
    /// Sets the message channel.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = channel.into();
        self
    }

    /// Declares a tool idempotent: recovery replays its calls.
    pub fn idempotent_tool(mut self, name: impl Into<String>) -> Self {
        self.idempotent_tools.insert(name.into());
        self
    }

    /// Sets what recovery does with calls of other tools.
    pub fn non_idempotent(mut self, action: NonIdempotentAction) -> Self {
        self.non_idempotent = action;
        self
    }
}

/// A [`Saver`] that records, durably and through the saver itself, which tool calls are in
/// flight, and resolves them after a crash.
///
/// # Behavior
/// * **Marking.** When a `put` stores a message list that ends with unanswered tool calls,
///   a marker (the AI message and its calls) is recorded right after, as a pending write of
///   channel [`MARKER_CHANNEL`] on the checkpoint the put returned, with the put's fence. A
///   runtime runs tools after `put` returns, so the marker is durable before any tool
///   starts; if writing it fails, `put` fails. Every backend stores it, as any pending write
///   (LangGraph ignores writes of task ids it did not schedule). When
///   [`SkipUnsafePut`](crate::SkipUnsafePut) sits below and skips the put, the marker lands
///   on the previous head, with the AI message, so the calls that may have run are still
///   known. [`mark_in_flight`](Self::mark_in_flight) does the same explicitly.
/// * **Outstanding.** [`outstanding`](Self::outstanding) lists the calls of a checkpoint
///   (the head by default) that are marked or ending its list, and that no result answers:
///   not in the list, not in a pending write of the message channel, not resolved. Markers
///   are cleared by results landing: once results are in the list or in pending writes, or
///   a newer checkpoint is the head, the calls are no longer outstanding (the marker writes
///   stay as history).
/// * **Resolution.** [`resolve`](Self::resolve) answers calls with a given result (a
///   replay, a human's answer) or the placeholder, by writing one new checkpoint (the
///   results right after their call, in the list's format, compare-and-set), or hands them
///   to a human (recorded as a [`RESOLUTION_CHANNEL`] write; still outstanding, in state
///   [`CallState::AwaitingHuman`]). [`recover`](Self::recover) replays calls of tools
///   declared idempotent and discards or hands over the others.
/// * Reads and everything else are forwarded unchanged.
#[derive(Clone, Debug)]
pub struct PendingMarkers<S> {
    inner: S,
    config: PendingMarkersConfig,
}

impl<S> PendingMarkers<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: PendingMarkersConfig) -> Self {
        Self { inner, config }
    }

    /// The wrapped saver.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The configuration.
    pub fn config(&self) -> &PendingMarkersConfig {
        &self.config
    }

    /// The marker for `checkpoint`'s list, when it ends with identified unanswered calls.
    fn marker_for(&self, checkpoint: &Checkpoint) -> Option<(Marker, String)> {
        let value = checkpoint.channel_values.get(&self.config.channel)?;
        let list = MessageList::decode_with(value, &self.config.limits).ok()??;
        let pending = list.pending_tool_calls()?;
        let calls: Vec<ToolCall> = pending
            .calls
            .into_iter()
            .filter(|c| c.id.is_some())
            .collect();
        let first = calls.first()?.id.clone()?;
        let message = list.messages().get(pending.message_index)?;
        Some((
            Marker {
                checkpoint_id: checkpoint.id.clone(),
                message_id: message.id().map(str::to_owned),
                message: list.element_bytes(pending.message_index)?.to_vec(),
                msgpack: list.is_msgpack(),
                calls,
                recorded_at: now_iso8601(),
            },
            format!("{MARKER_TASK_PREFIX}{first}"),
        ))
    }
}

impl<S: Saver> PendingMarkers<S> {
    /// Records the calls `checkpoint`'s list ends waiting for as in flight, against the
    /// stored checkpoint `config` addresses. Returns the marked call ids (empty: nothing to
    /// mark).
    pub async fn mark_in_flight(
        &self,
        config: &CheckpointConfig,
        checkpoint: &Checkpoint,
        fence: Option<u64>,
    ) -> Result<Vec<String>> {
        let Some((marker, task_id)) = self.marker_for(checkpoint) else {
            return Ok(Vec::new());
        };
        self.write_marker(config, marker, &task_id, fence).await
    }

    async fn write_marker(
        &self,
        config: &CheckpointConfig,
        marker: Marker,
        task_id: &str,
        fence: Option<u64>,
    ) -> Result<Vec<String>> {
        let ids: Vec<String> = marker.calls.iter().filter_map(|c| c.id.clone()).collect();
        let mut options = PutWritesOptions::new();
        options.fence = fence;
        self.inner
            .put_writes(
                &address(config),
                vec![(MARKER_CHANNEL.to_owned(), marker.encode()?)],
                task_id,
                options,
            )
            .await?;
        tracing::debug!(
            thread_id = %config.thread_id,
            checkpoint_ns = %config.checkpoint_ns,
            checkpoint_id = config.checkpoint_id.as_deref().unwrap_or(""),
            tool_calls = ?ids,
            "recorded in-flight tool calls"
        );
        Ok(ids)
    }

    /// The outstanding calls of the checkpoint `config` addresses (the head without an id),
    /// or `None` when there is no such checkpoint.
    pub async fn outstanding(&self, config: &CheckpointConfig) -> Result<Option<Outstanding>> {
        Ok(self.load(config).await?.map(|(_, _, _, o)| o))
    }

    /// The tuple, its list, its markers and its outstanding calls.
    #[allow(clippy::type_complexity)]
    async fn load(
        &self,
        config: &CheckpointConfig,
    ) -> Result<
        Option<(
            CheckpointTuple,
            Option<MessageList>,
            Vec<Marker>,
            Outstanding,
        )>,
    > {
        let Some(tuple) = self.inner.get_tuple(config).await? else {
            return Ok(None);
        };
        let channel = &self.config.channel;
        let list = match tuple.checkpoint.channel_values.get(channel) {
            Some(v) => MessageList::decode_with(v, &self.config.limits)?,
            None => None,
        };
        let mut answered: HashSet<String> = pending_results(&tuple, channel).into_iter().collect();
        let mut called: HashSet<String> = HashSet::new();
        if let Some(list) = &list {
            for m in list.messages() {
                answered.extend(m.tool_results().iter().cloned());
                called.extend(m.tool_calls().iter().filter_map(|c| c.id.clone()));
            }
        }
        let mut resolved: HashSet<String> = HashSet::new();
        let mut awaiting: HashSet<String> = HashSet::new();
        let mut markers = Vec::new();
        for w in &tuple.pending_writes {
            if w.channel == RESOLUTION_CHANNEL {
                if let Some(r) = ResolutionRecord::decode(&w.value) {
                    match r.kind {
                        ResolutionKind::AwaitingHuman => awaiting.insert(r.call_id),
                        _ => resolved.insert(r.call_id),
                    };
                }
            } else if w.channel == MARKER_CHANNEL {
                match Marker::decode(&w.value) {
                    Some(m) => markers.push(m),
                    None => tracing::warn!(
                        task_id = %w.task_id,
                        "ignoring an unreadable tool-call marker"
                    ),
                }
            }
        }
        let open = |id: &String| !answered.contains(id) && !resolved.contains(id);
        let mut calls: Vec<OutstandingCall> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut push = |call: &ToolCall, marked: bool, calls: &mut Vec<OutstandingCall>| {
            let Some(id) = &call.id else { return };
            if !open(id) || !seen.insert(id.clone()) {
                return;
            }
            calls.push(OutstandingCall {
                call: call.clone(),
                state: if awaiting.contains(id) {
                    CallState::AwaitingHuman
                } else {
                    CallState::InFlight
                },
                marked,
                message_in_state: called.contains(id),
                idempotent: call
                    .name
                    .as_ref()
                    .is_some_and(|n| self.config.idempotent_tools.contains(n)),
            });
        };
        for marker in &markers {
            for call in &marker.calls {
                push(call, true, &mut calls);
            }
        }
        if let Some(pending) = list.as_ref().and_then(MessageList::pending_tool_calls) {
            for call in &pending.calls {
                push(call, false, &mut calls);
            }
        }
        let outstanding = Outstanding {
            checkpoint: address(&tuple.config),
            calls,
        };
        Ok(Some((tuple, list, markers, outstanding)))
    }

    /// Resolves outstanding calls of the checkpoint `config` addresses (use
    /// [`Outstanding::checkpoint`]). Results and discards are written as one new checkpoint
    /// (compare-and-set when supported: [`Error::Conflict`] if the head moved); hand-overs
    /// are recorded. Every decision must name an outstanding call.
    pub async fn resolve(
        &self,
        config: &CheckpointConfig,
        decisions: Vec<Decision>,
    ) -> Result<Resolved> {
        let Some((tuple, list, markers, outstanding)) = self.load(config).await? else {
            return Err(Error::NotFound {
                what: format!(
                    "checkpoint {:?} of thread {:?}",
                    config.checkpoint_id, config.thread_id
                ),
            });
        };
        let by_id: HashMap<&str, &OutstandingCall> = outstanding
            .calls
            .iter()
            .filter_map(|c| c.call.id.as_deref().map(|id| (id, c)))
            .collect();
        let mut seen = HashSet::new();
        for d in &decisions {
            if !by_id.contains_key(d.call_id.as_str()) {
                return Err(Error::invalid(format!(
                    "tool call {:?} is not outstanding in checkpoint {:?}",
                    d.call_id, outstanding.checkpoint.checkpoint_id
                )));
            }
            if !seen.insert(d.call_id.as_str()) {
                return Err(Error::invalid(format!(
                    "tool call {:?} is decided twice",
                    d.call_id
                )));
            }
        }
        let mut resolved = Resolved::default();
        let mut answers = Vec::new();
        let mut appended: Vec<Vec<u8>> = Vec::new();
        for d in &decisions {
            let call = by_id[d.call_id.as_str()];
            let (output, message_id) = match &d.resolution {
                Resolution::HandToHuman => {
                    resolved.awaiting_human.push(d.call_id.clone());
                    continue;
                }
                Resolution::Result(output) => {
                    resolved.answered.push(d.call_id.clone());
                    (output.clone(), format!("{RESULT_ID_PREFIX}{}", d.call_id))
                }
                Resolution::Discard => {
                    resolved.discarded.push(d.call_id.clone());
                    (
                        self.config.placeholder.clone(),
                        format!("{PLACEHOLDER_ID_PREFIX}{}", d.call_id),
                    )
                }
            };
            if !call.message_in_state {
                let marker = markers
                    .iter()
                    .find(|m| {
                        m.calls
                            .iter()
                            .any(|c| c.id.as_deref() == Some(d.call_id.as_str()))
                    })
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "no marker holds the message of call {:?}",
                            d.call_id
                        ))
                    })?;
                if list
                    .as_ref()
                    .is_some_and(|l| l.is_msgpack() != marker.msgpack)
                {
                    return Err(Error::invalid(
                        "the marked message and the message list are encoded differently",
                    ));
                }
                if !appended.contains(&marker.message) {
                    appended.push(marker.message.clone());
                }
            }
            answers.push(Answer {
                call_id: d.call_id.clone(),
                tool_name: call.call.name.clone(),
                output,
                message_id,
            });
        }
        let fence = None;
        if !answers.is_empty() {
            let Some(list) = &list else {
                return Err(Error::invalid(format!(
                    "checkpoint {:?} has no message list in channel {:?} to add results to",
                    outstanding.checkpoint.checkpoint_id, self.config.channel
                )));
            };
            let value = list.answer_calls(&appended, &answers)?;
            let note = json!({
                "resolved_tool_calls": answers.iter().map(|a| a.call_id.clone()).collect::<Vec<_>>(),
            });
            let at = put_successor(
                &self.inner,
                &tuple,
                &self.config.channel,
                value,
                note,
                fence,
            )
            .await?;
            resolved.checkpoint = Some(at);
        }
        let new_id = resolved
            .checkpoint
            .as_ref()
            .and_then(|c| c.checkpoint_id.clone());
        for d in &decisions {
            let record = ResolutionRecord {
                call_id: d.call_id.clone(),
                kind: match d.resolution {
                    Resolution::Result(_) => ResolutionKind::Result,
                    Resolution::Discard => ResolutionKind::Discarded,
                    Resolution::HandToHuman => ResolutionKind::AwaitingHuman,
                },
                checkpoint_id: new_id.clone(),
            };
            let mut options = PutWritesOptions::new();
            options.fence = fence;
            self.inner
                .put_writes(
                    &outstanding.checkpoint,
                    vec![(RESOLUTION_CHANNEL.to_owned(), record.encode()?)],
                    &record.task_id(),
                    options,
                )
                .await?;
        }
        tracing::info!(
            thread_id = %outstanding.checkpoint.thread_id,
            answered = ?resolved.answered,
            discarded = ?resolved.discarded,
            awaiting_human = ?resolved.awaiting_human,
            "resolved outstanding tool calls"
        );
        Ok(resolved)
    }

    /// Resolves every in-flight call of the checkpoint `config` addresses: calls of tools
    /// declared idempotent are replayed with `replayer` (an error becomes an error result),
    /// the others are discarded or handed to a human per
    /// [`PendingMarkersConfig::non_idempotent`]. Calls already awaiting a human are left
    /// alone. `None` when there is no checkpoint.
    pub async fn recover(
        &self,
        config: &CheckpointConfig,
        replayer: &dyn ToolReplayer,
    ) -> Result<Option<Recovery>> {
        let Some(outstanding) = self.outstanding(config).await? else {
            return Ok(None);
        };
        let mut decisions = Vec::new();
        let mut replayed = Vec::new();
        for c in &outstanding.calls {
            let Some(id) = c.call.id.clone() else {
                continue;
            };
            if c.state == CallState::AwaitingHuman {
                continue;
            }
            let resolution = if c.idempotent {
                replayed.push(id.clone());
                Resolution::Result(match replayer.replay(&c.call).await {
                    Ok(output) => output,
                    Err(e) => ToolOutput::error(format!("tool failed when replayed: {e}")),
                })
            } else {
                match self.config.non_idempotent {
                    NonIdempotentAction::Discard => Resolution::Discard,
                    NonIdempotentAction::HandToHuman => Resolution::HandToHuman,
                }
            };
            decisions.push(Decision::new(id, resolution));
        }
        if decisions.is_empty() {
            return Ok(Some(Recovery::default()));
        }
        let resolved = self.resolve(&outstanding.checkpoint, decisions).await?;
        Ok(Some(Recovery { resolved, replayed }))
    }
}

#[async_trait]
impl<S: Saver> Saver for PendingMarkers<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        self.inner.get_tuple(config).await
    }

    /// Forwarded unchanged: the history is the raw input of the runtime's reconstruction.
    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<std::collections::BTreeMap<String, checkpoint_core::DeltaChannelHistory>> {
        self.inner.delta_channel_history(config, channels).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        self.inner.list(options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.inner.list_threads()
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.inner.list_threads_after(after)
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        let marker = if new_versions.contains_key(&self.config.channel) {
            self.marker_for(&checkpoint)
        } else {
            None
        };
        let fence = options.fence;
        let stored = self
            .inner
            .put(config, checkpoint, metadata, new_versions, options)
            .await?;
        if let Some((marker, task_id)) = marker {
            self.write_marker(&stored, marker, &task_id, fence).await?;
        }
        Ok(stored)
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        self.inner
            .put_writes(config, writes, task_id, options)
            .await
    }

    /// Forwarded unchanged: an import copies stored data exactly, so nothing of this
    /// wrapper applies to it.
    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        self.inner.import(tuples).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.inner.delete_thread(thread_id).await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        self.inner.copy_thread(source, target).await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        self.inner.prune(thread_ids, strategy).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        self.inner.delete_for_runs(run_ids).await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.inner.acquire_lease(thread_id, holder, ttl).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.renew_lease(lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        self.inner.claim(key, ttl).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        self.inner.complete_claim(key, token, outcome).await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        self.inner.abandon_claim(key, token).await
    }
    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        self.inner.set_thread_ttl(thread_id, ttl).await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        self.inner.thread_ttl(thread_id).await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        self.inner.sweep_expired(limit).await
    }
}
