//! [`SkipUnsafePut`]: a state that ends with unanswered tool calls is never persisted.

mod layer;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DecodeLimits, Error, Lease, ListOptions, PruneStrategy, PutMode,
    PutOptions, PutWritesOptions, Result, Saver, ThreadTtl, TypedValue,
};

pub use layer::SkipUnsafePutLayer;

use crate::messages::MessageList;
use crate::pending_markers::is_marker_channel;
use crate::util::address;

/// The key of [`CheckpointConfig::extra`] in the config a skipped put returns: the id of the
/// checkpoint that was not stored.
pub const SKIPPED_KEY: &str = "checkpoint_sanitize_skipped";

/// The `by` of the [`Error::Rejected`] a rejected put returns (see
/// [`is_unsafe_put_rejection`]).
pub const REJECTED_BY: &str = "SkipUnsafePut";

/// Whether `error` is [`SkipUnsafePut`]'s rejection of an unsafe state.
pub fn is_unsafe_put_rejection(error: &Error) -> bool {
    matches!(error, Error::Rejected { by, .. } if *by == REJECTED_BY)
}

/// What to do with an unsafe put.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnsafePutPolicy {
    /// Do not store it; return the config of the previous head (its parent), with the
    /// skipped id under [`SKIPPED_KEY`]. The default.
    #[default]
    Skip,
    /// Fail with [`Error::Rejected`] (`by` = [`REJECTED_BY`]).
    Reject,
}

/// Which states are unsafe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnsafeCheck {
    /// The list ends with tool calls no result answers (the crash window of seed 004). The
    /// default.
    #[default]
    TrailingUnansweredCalls,
    /// Any violation of a provider's tool-call rules anywhere in the list.
    AnyViolation,
}

/// Configuration of [`SkipUnsafePut`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SkipUnsafePutConfig {
    /// The channel holding the message list (default `"messages"`).
    pub channel: String,
    /// Skip (default) or reject.
    pub policy: UnsafePutPolicy,
    /// What counts as unsafe.
    pub check: UnsafeCheck,
    /// Decode limits for message values.
    pub limits: DecodeLimits,
    /// How many skipped puts are remembered (for interrupts and version carry-over; default
    /// 4096). The oldest are forgotten first.
    pub max_remembered: usize,
}

impl Default for SkipUnsafePutConfig {
    fn default() -> Self {
        Self {
            channel: "messages".to_owned(),
            policy: UnsafePutPolicy::Skip,
            check: UnsafeCheck::TrailingUnansweredCalls,
            limits: DecodeLimits::default(),
            max_remembered: 4096,
        }
    }
}

impl SkipUnsafePutConfig {
    /// Sets the message channel.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = channel.into();
        self
    }

    /// Sets the policy.
    pub fn policy(mut self, policy: UnsafePutPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets what counts as unsafe.
    pub fn check(mut self, check: UnsafeCheck) -> Self {
        self.check = check;
        self
    }
}

type NsKey = (String, String);
type CheckpointKey = (String, String, String);

/// A put that was not stored.
#[derive(Clone, Debug)]
struct Skipped {
    /// The stored checkpoint it descends from (`checkpoint_id` set).
    parent: CheckpointConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    options: PutOptions,
}

/// Channel versions first written by skipped puts, to be stored by the next put that keeps
/// them.
#[derive(Clone, Debug, Default)]
struct Carry {
    /// The stored checkpoint the skipped puts descend from.
    anchor: String,
    versions: ChannelVersions,
    values: BTreeMap<String, TypedValue>,
}

#[derive(Debug, Default)]
struct State {
    skipped: HashMap<CheckpointKey, Skipped>,
    order: VecDeque<CheckpointKey>,
    carry: HashMap<NsKey, Carry>,
    /// Skipped checkpoints stored after all (an interrupt was recorded against them).
    materialized: HashSet<CheckpointKey>,
    materialized_order: VecDeque<CheckpointKey>,
}

/// A [`Saver`] that does not persist a checkpoint whose message list ends with unanswered
/// tool calls.
///
/// # Behavior
/// * On `put`, the message channel ([`SkipUnsafePutConfig::channel`]) is checked when the
///   put changes it. A safe put, or one whose value is not a message list, is passed on.
/// * [`UnsafePutPolicy::Skip`]: nothing is stored; the returned config addresses the parent
///   (the previous head), with the skipped id in `extra[`[`SKIPPED_KEY`]`]`. The parent chain
///   stays valid: the next put names that parent (or the skipped id, which is mapped back
///   to it) and is stored as its child. Channel versions first written by skipped puts are
///   carried over and stored with the next put that still names them, so no value is lost.
///   A compare-and-set put is checked against the head as if it were stored. A put without
///   parent cannot be skipped (there is no previous head) and is rejected.
/// * [`UnsafePutPolicy::Reject`]: [`Error::Rejected`] before calling the inner saver
///   ([`is_unsafe_put_rejection`]).
/// * Pending writes addressed to a skipped checkpoint (by its id, or by the returned config
///   carrying [`SKIPPED_KEY`]) belong to a step that was never persisted: they are dropped,
///   and the step runs again from the previous head after a crash. Two exceptions: an
///   [`INTERRUPT`] write makes the skipped state a deliberate pause (a human must answer the
///   calls), so the skipped checkpoint is stored after all and the writes with it; writes of
///   [`PendingMarkers`](crate::PendingMarkers) are recorded against the previous head, so
///   the calls that may have run are known.
/// * Everything else is forwarded unchanged.
///
/// Skipped puts are remembered in memory (bounded by
/// [`SkipUnsafePutConfig::max_remembered`]); after a crash nothing needs them, since the
/// stored history ends at the last safe checkpoint.
#[derive(Clone, Debug)]
pub struct SkipUnsafePut<S> {
    inner: S,
    config: SkipUnsafePutConfig,
    state: Arc<Mutex<State>>,
}

impl<S> SkipUnsafePut<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: SkipUnsafePutConfig) -> Self {
        Self {
            inner,
            config,
            state: Arc::new(Mutex::new(State::default())),
        }
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
    pub fn config(&self) -> &SkipUnsafePutConfig {
        &self.config
    }

    /// The ids of the unanswered calls that make `checkpoint` unsafe to persist, or `None`
    /// when it is safe (or its message channel is not a message list).
    pub fn unsafe_calls(&self, checkpoint: &Checkpoint) -> Option<Vec<String>> {
        let value = checkpoint.channel_values.get(&self.config.channel)?;
        let list = MessageList::decode_with(value, &self.config.limits).ok()??;
        match self.config.check {
            UnsafeCheck::TrailingUnansweredCalls => {
                let pending = list.pending_tool_calls()?;
                Some(
                    pending
                        .calls
                        .into_iter()
                        .map(|c| c.id.unwrap_or_default())
                        .collect(),
                )
            }
            UnsafeCheck::AnyViolation => {
                let v = list.validate();
                (!v.is_valid()).then(|| v.unanswered_calls())
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves the parent a put names: a skipped id maps to the stored checkpoint it
    /// descends from; a config returned for a skipped put that was materialized since maps
    /// to it.
    fn effective_parent(&self, config: &CheckpointConfig) -> CheckpointConfig {
        let mut parent = address(config);
        let state = self.lock();
        if let Some(id) = config.extra.get(SKIPPED_KEY).and_then(|v| v.as_str()) {
            let key = (
                config.thread_id.clone(),
                config.checkpoint_ns.clone(),
                id.to_owned(),
            );
            if state.materialized.contains(&key) {
                parent.checkpoint_id = Some(id.to_owned());
                return parent;
            }
        }
        if let Some(id) = &config.checkpoint_id {
            let key = (
                config.thread_id.clone(),
                config.checkpoint_ns.clone(),
                id.clone(),
            );
            if let Some(skipped) = state.skipped.get(&key) {
                return skipped.parent.clone();
            }
        }
        parent
    }

    /// The skipped checkpoint a write config addresses, if any.
    fn skipped_target(&self, config: &CheckpointConfig) -> Option<(CheckpointKey, Skipped)> {
        let state = self.lock();
        let by_id = config.checkpoint_id.iter().map(|id| {
            (
                config.thread_id.clone(),
                config.checkpoint_ns.clone(),
                id.clone(),
            )
        });
        let by_extra = config
            .extra
            .get(SKIPPED_KEY)
            .and_then(|v| v.as_str())
            .map(|id| {
                (
                    config.thread_id.clone(),
                    config.checkpoint_ns.clone(),
                    id.to_owned(),
                )
            });
        by_id
            .chain(by_extra)
            .find_map(|key| state.skipped.get(&key).map(|s| (key.clone(), s.clone())))
    }

    fn remember(&self, key: CheckpointKey, skipped: Skipped) {
        let mut state = self.lock();
        let ns = (key.0.clone(), key.1.clone());
        let anchor = skipped.parent.checkpoint_id.clone().unwrap_or_default();
        let carry = state.carry.entry(ns).or_default();
        if carry.anchor != anchor {
            *carry = Carry {
                anchor,
                ..Carry::default()
            };
        }
        for (channel, version) in &skipped.new_versions {
            carry.versions.insert(channel.clone(), version.clone());
            match skipped.checkpoint.channel_values.get(channel) {
                Some(v) => {
                    carry.values.insert(channel.clone(), v.clone());
                }
                None => {
                    carry.values.remove(channel);
                }
            }
        }
        state.order.push_back(key.clone());
        state.skipped.insert(key, skipped);
        while state.order.len() > self.config.max_remembered.max(1) {
            if let Some(old) = state.order.pop_front() {
                state.skipped.remove(&old);
            }
        }
    }

    /// Adds versions carried from skipped puts that `checkpoint` still names.
    fn apply_carry(
        &self,
        parent: &CheckpointConfig,
        checkpoint: &mut Checkpoint,
        new_versions: &mut ChannelVersions,
    ) -> bool {
        let state = self.lock();
        let ns = (parent.thread_id.clone(), parent.checkpoint_ns.clone());
        let Some(carry) = state.carry.get(&ns) else {
            return false;
        };
        if parent.checkpoint_id.as_deref() != Some(carry.anchor.as_str()) {
            return false;
        }
        for (channel, version) in &carry.versions {
            if new_versions.contains_key(channel)
                || checkpoint.channel_versions.get(channel) != Some(version)
            {
                continue;
            }
            new_versions.insert(channel.clone(), version.clone());
            if !checkpoint.channel_values.contains_key(channel)
                && let Some(v) = carry.values.get(channel)
            {
                checkpoint.channel_values.insert(channel.clone(), v.clone());
            }
        }
        true
    }

    fn clear_carry(&self, parent: &CheckpointConfig) {
        let mut state = self.lock();
        let ns = (parent.thread_id.clone(), parent.checkpoint_ns.clone());
        if state
            .carry
            .get(&ns)
            .is_some_and(|c| parent.checkpoint_id.as_deref() == Some(c.anchor.as_str()))
        {
            state.carry.remove(&ns);
        }
    }
}

impl<S: Saver> SkipUnsafePut<S> {
    /// Stores a skipped checkpoint after all (an interrupt is being recorded against it).
    async fn materialize(&self, key: &CheckpointKey, skipped: Skipped) -> Result<CheckpointConfig> {
        let mut options = skipped.options.clone();
        // Its parent is the head it was checked against; do not fail on a retry.
        options.mode = PutMode::Plain;
        let stored = self
            .inner
            .put(
                &skipped.parent,
                skipped.checkpoint,
                skipped.metadata,
                skipped.new_versions,
                options,
            )
            .await?;
        let mut state = self.lock();
        state.skipped.remove(key);
        state.order.retain(|k| k != key);
        let ns = (key.0.clone(), key.1.clone());
        state.carry.remove(&ns);
        state.materialized.insert(key.clone());
        state.materialized_order.push_back(key.clone());
        while state.materialized_order.len() > self.config.max_remembered.max(1) {
            if let Some(old) = state.materialized_order.pop_front() {
                state.materialized.remove(&old);
            }
        }
        tracing::info!(
            thread_id = %key.0,
            checkpoint_ns = %key.1,
            checkpoint_id = %key.2,
            "stored a skipped checkpoint: an interrupt was recorded against it"
        );
        Ok(stored)
    }
}

#[async_trait]
impl<S: Saver> Saver for SkipUnsafePut<S> {
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
        mut checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        mut new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        let parent = self.effective_parent(config);
        let carried = self.apply_carry(&parent, &mut checkpoint, &mut new_versions);
        let unsafe_calls = if new_versions.contains_key(&self.config.channel) {
            self.unsafe_calls(&checkpoint)
        } else {
            None
        };
        let Some(calls) = unsafe_calls else {
            let stored = self
                .inner
                .put(&parent, checkpoint, metadata, new_versions, options)
                .await?;
            if carried {
                self.clear_carry(&parent);
            }
            return Ok(stored);
        };
        let reject = |why: &str| Error::Rejected {
            by: REJECTED_BY,
            reason: format!(
                "checkpoint {:?} of thread {:?} ends with unanswered tool calls {calls:?}{why}",
                checkpoint.id, parent.thread_id
            ),
        };
        if self.config.policy == UnsafePutPolicy::Reject {
            return Err(reject(""));
        }
        checkpoint_core::backend::validate_put(&parent, &checkpoint, &new_versions)?;
        let Some(parent_id) = parent.checkpoint_id.clone() else {
            return Err(reject(" and it has no parent to fall back to"));
        };
        if options.mode == PutMode::CompareAndSet {
            let head = self
                .inner
                .get_tuple(&parent.latest())
                .await?
                .map(|t| t.checkpoint.id);
            if head.as_deref() != Some(parent_id.as_str()) {
                return Err(Error::Conflict {
                    thread_id: parent.thread_id.clone(),
                    checkpoint_ns: parent.checkpoint_ns.clone(),
                    expected: Some(parent_id),
                    found: head,
                });
            }
        }
        tracing::warn!(
            thread_id = %parent.thread_id,
            checkpoint_ns = %parent.checkpoint_ns,
            checkpoint_id = %checkpoint.id,
            parent_id = %parent_id,
            tool_calls = ?calls,
            "skipped an unsafe put: the message list ends with unanswered tool calls"
        );
        let key = (
            parent.thread_id.clone(),
            parent.checkpoint_ns.clone(),
            checkpoint.id.clone(),
        );
        let skipped_id = checkpoint.id.clone();
        self.remember(
            key,
            Skipped {
                parent: parent.clone(),
                checkpoint,
                metadata,
                new_versions,
                options,
            },
        );
        let mut returned = parent;
        returned.extra.insert(
            SKIPPED_KEY.to_owned(),
            serde_json::Value::String(skipped_id),
        );
        Ok(returned)
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        config.require_checkpoint_id()?;
        let Some((key, skipped)) = self.skipped_target(config) else {
            return self
                .inner
                .put_writes(config, writes, task_id, options)
                .await;
        };
        if writes.iter().any(|(c, _)| c == INTERRUPT) {
            let stored = self.materialize(&key, skipped).await?;
            return self
                .inner
                .put_writes(&stored, writes, task_id, options)
                .await;
        }
        if !writes.is_empty() && writes.iter().all(|(c, _)| is_marker_channel(c)) {
            return self
                .inner
                .put_writes(&skipped.parent, writes, task_id, options)
                .await;
        }
        tracing::debug!(
            thread_id = %key.0,
            checkpoint_ns = %key.1,
            checkpoint_id = %key.2,
            task_id,
            writes = writes.len(),
            "dropped pending writes of a skipped checkpoint"
        );
        Ok(())
    }

    /// Forwarded unchanged: an import copies stored data exactly, so nothing of this
    /// wrapper applies to it. What the wrapper remembers about the imported namespaces
    /// (skipped checkpoints, values carried to the next put) no longer describes the store
    /// and is forgotten, as `delete_thread` forgets a thread's.
    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        let namespaces: HashSet<(String, String)> = tuples
            .iter()
            .map(|t| (t.config.thread_id.clone(), t.config.checkpoint_ns.clone()))
            .collect();
        self.inner.import(tuples).await?;
        let mut state = self.lock();
        let touched =
            |thread: &str, ns: &str| namespaces.contains(&(thread.to_owned(), ns.to_owned()));
        state.skipped.retain(|k, _| !touched(&k.0, &k.1));
        state.order.retain(|k| !touched(&k.0, &k.1));
        state.carry.retain(|k, _| !touched(&k.0, &k.1));
        Ok(())
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.inner.delete_thread(thread_id).await?;
        let mut state = self.lock();
        state.skipped.retain(|k, _| k.0 != thread_id);
        state.order.retain(|k| k.0 != thread_id);
        state.carry.retain(|k, _| k.0 != thread_id);
        Ok(())
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
