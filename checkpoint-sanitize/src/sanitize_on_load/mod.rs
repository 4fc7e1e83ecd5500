//! [`SanitizeOnLoad`]: every checkpoint read through it has a message list the providers
//! accept.

mod layer;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DecodeLimits, Lease, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Result, Saver, ThreadTtl, TypedValue,
};
use futures::StreamExt;
use serde_json::json;

pub use layer::SanitizeOnLoadLayer;

use crate::messages::pending_results;
use crate::messages::{MessageList, RepairAction, RepairOptions, Violation};
use crate::util::{lost_race, put_successor};

/// A callback receiving every report of a checkpoint whose list was repaired or could not be
/// read (see [`SanitizeConfig::on_report`]).
#[derive(Clone)]
pub struct ReportHook(Arc<dyn Fn(&SanitizeReport) + Send + Sync>);

impl ReportHook {
    /// Wraps a callback.
    pub fn new(f: impl Fn(&SanitizeReport) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    fn call(&self, report: &SanitizeReport) {
        (self.0)(report);
    }
}

impl fmt::Debug for ReportHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReportHook(..)")
    }
}

/// What to do when the message channel holds a value that claims to be msgpack or JSON but
/// does not decode (malformed, or beyond the decode limits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UndecodablePolicy {
    /// Return the checkpoint unchanged and report it (the default: a wrapper that cannot
    /// read a value does not make the thread unreadable).
    #[default]
    PassThrough,
    /// Fail the read with the decoding error.
    Fail,
}

/// Configuration of [`SanitizeOnLoad`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SanitizeConfig {
    /// The channel holding the message list (default `"messages"`).
    pub channel: String,
    /// How lists are repaired (default: placeholders for unanswered calls, misplaced results
    /// moved, orphan results removed).
    pub repair: RepairOptions,
    /// Write a repaired head back as a new checkpoint on `get_tuple` (default `false`: repair
    /// the returned view only).
    pub write_back: bool,
    /// A fencing token for write-back puts (see [`Lease`]).
    pub write_back_fence: Option<u64>,
    /// Undecodable message values (default: pass through).
    pub undecodable: UndecodablePolicy,
    /// Decode limits for message values.
    pub limits: DecodeLimits,
    /// Called with the report of every repaired or undecodable checkpoint.
    pub on_report: Option<ReportHook>,
}

impl Default for SanitizeConfig {
    fn default() -> Self {
        Self {
            channel: "messages".to_owned(),
            repair: RepairOptions::default(),
            write_back: false,
            write_back_fence: None,
            undecodable: UndecodablePolicy::PassThrough,
            limits: DecodeLimits::default(),
            on_report: None,
        }
    }
}

impl SanitizeConfig {
    /// Sets the message channel.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = channel.into();
        self
    }

    /// Sets the repair options.
    pub fn repair(mut self, repair: RepairOptions) -> Self {
        self.repair = repair;
        self
    }

    /// Turns write-back on or off.
    pub fn write_back(mut self, yes: bool) -> Self {
        self.write_back = yes;
        self
    }

    /// Sets the undecodable-value policy.
    pub fn undecodable(mut self, policy: UndecodablePolicy) -> Self {
        self.undecodable = policy;
        self
    }

    /// Sets the decode limits.
    pub fn limits(mut self, limits: DecodeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the report callback.
    pub fn on_report(mut self, hook: ReportHook) -> Self {
        self.on_report = Some(hook);
        self
    }
}

/// What the message channel of a checkpoint held.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChannelState {
    /// The checkpoint has no value in the channel.
    Absent,
    /// The value is not a message list (left untouched).
    NotMessages,
    /// The value could not be decoded (left untouched, see [`UndecodablePolicy`]).
    Undecodable {
        /// The decoding error.
        reason: String,
    },
    /// A message list both providers accept.
    Valid,
    /// A message list that was repaired.
    Repaired,
}

/// Whether a repaired head was written back.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteBack {
    /// Write-back is off, or nothing was repaired.
    NotRequested,
    /// The repaired state was stored as this new checkpoint (the returned tuple).
    Written(CheckpointConfig),
    /// Write-back was on but did not happen; the repaired view was returned.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// What [`SanitizeOnLoad`] found and did for one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SanitizeReport {
    /// The checkpoint as loaded.
    pub checkpoint: CheckpointConfig,
    /// The message channel.
    pub channel: String,
    /// What the channel held.
    pub state: ChannelState,
    /// The violations of the list as loaded.
    pub violations: Vec<Violation>,
    /// The changes made (message indexes refer to the list as loaded).
    pub actions: Vec<RepairAction>,
    /// Unanswered calls left alone because pending writes answer them.
    pub deferred: Vec<String>,
    /// Write-back of the repaired state.
    pub write_back: WriteBack,
}

impl SanitizeReport {
    fn new(checkpoint: CheckpointConfig, channel: &str, state: ChannelState) -> Self {
        Self {
            checkpoint,
            channel: channel.to_owned(),
            state,
            violations: Vec::new(),
            actions: Vec::new(),
            deferred: Vec::new(),
            write_back: WriteBack::NotRequested,
        }
    }

    /// Whether the list was repaired.
    pub fn repaired(&self) -> bool {
        self.state == ChannelState::Repaired
    }
}

/// A [`Saver`] that repairs the message list of every checkpoint it returns.
///
/// On `get_tuple` and `list`, the message channel (see [`SanitizeConfig::channel`]) of each
/// checkpoint is decoded (data only) and, when a provider would reject it (tool calls without
/// results, results without calls, results after other content), repaired with
/// [`MessageList::repair`]: by default a placeholder error result ("tool call was
/// interrupted; not executed") is inserted right after each unanswered call, in the format of
/// the list. Valid messages are never dropped or reordered, untouched messages keep their
/// bytes, and a value that is not a message list is returned unchanged.
///
/// Calls answered by pending writes of the message channel (the tools ran, the next
/// checkpoint was not written yet) are left alone: the runtime appends those results when it
/// resumes.
///
/// Every repair is reported: [`get_tuple_with_report`](Self::get_tuple_with_report),
/// [`list_with_reports`](Self::list_with_reports), the [`SanitizeConfig::on_report`] hook,
/// and a `tracing` warning with the thread, namespace, checkpoint and number of changes.
/// With [`SanitizeConfig::write_back`], a repaired head read by `get_tuple` is stored as a new
/// checkpoint (compare-and-set, `source: "update"`, metadata `checkpoint_sanitize`), unless
/// it has pending writes (their tasks belong to the loaded checkpoint) or another writer
/// moved the head first.
///
/// Only unrecoverable data is an error: a message list whose repair fails. Nothing is ever
/// reset.
#[derive(Clone, Debug)]
pub struct SanitizeOnLoad<S> {
    inner: S,
    config: SanitizeConfig,
}

impl<S> SanitizeOnLoad<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: SanitizeConfig) -> Self {
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
    pub fn config(&self) -> &SanitizeConfig {
        &self.config
    }

    /// Repairs one loaded tuple (no write-back) and reports what was done.
    pub fn sanitize_tuple(
        &self,
        tuple: CheckpointTuple,
    ) -> Result<(CheckpointTuple, SanitizeReport)> {
        sanitize(&self.config, tuple)
    }
}

fn sanitize(
    config: &SanitizeConfig,
    mut tuple: CheckpointTuple,
) -> Result<(CheckpointTuple, SanitizeReport)> {
    let channel = config.channel.as_str();
    let address = tuple.config.clone();
    let Some(value) = tuple.checkpoint.channel_values.get(channel) else {
        return Ok((
            tuple,
            SanitizeReport::new(address, channel, ChannelState::Absent),
        ));
    };
    let list = match MessageList::decode_with(value, &config.limits) {
        Ok(Some(list)) => list,
        Ok(None) => {
            return Ok((
                tuple,
                SanitizeReport::new(address, channel, ChannelState::NotMessages),
            ));
        }
        Err(e) => {
            if config.undecodable == UndecodablePolicy::Fail {
                return Err(e);
            }
            let report = SanitizeReport::new(
                address,
                channel,
                ChannelState::Undecodable {
                    reason: e.to_string(),
                },
            );
            tracing::warn!(
                thread_id = %report.checkpoint.thread_id,
                checkpoint_ns = %report.checkpoint.checkpoint_ns,
                checkpoint_id = report.checkpoint.checkpoint_id.as_deref().unwrap_or(""),
                channel,
                error = %e,
                "message channel could not be decoded; returned unchanged"
            );
            if let Some(hook) = &config.on_report {
                hook.call(&report);
            }
            return Ok((tuple, report));
        }
    };
    let mut options = config.repair.clone();
    options
        .pending_results
        .extend(pending_results(&tuple, channel));
    let repaired = list.repair(&options)?;
    let unresolved = repaired.unresolved();
    if !unresolved.is_empty() {
        return Err(checkpoint_core::Error::Serialization {
            reason: format!(
                "message list of checkpoint {:?} in thread {:?} cannot be repaired: {:?}",
                address.checkpoint_id, address.thread_id, unresolved
            ),
            source: None,
        });
    }
    let mut report = SanitizeReport::new(
        address,
        channel,
        if repaired.changed() {
            ChannelState::Repaired
        } else {
            ChannelState::Valid
        },
    );
    report.violations = repaired.before.violations.clone();
    report.actions = repaired.actions;
    report.deferred = repaired.deferred;
    if let Some(value) = repaired.value {
        tuple
            .checkpoint
            .channel_values
            .insert(channel.to_owned(), value);
        tracing::warn!(
            thread_id = %report.checkpoint.thread_id,
            checkpoint_ns = %report.checkpoint.checkpoint_ns,
            checkpoint_id = report.checkpoint.checkpoint_id.as_deref().unwrap_or(""),
            channel,
            changes = report.actions.len(),
            violations = report.violations.len(),
            "repaired message list on load"
        );
        tracing::debug!(actions = ?report.actions, "message list repairs");
    }
    Ok((tuple, report))
}

impl<S: Saver> SanitizeOnLoad<S> {
    /// [`Saver::get_tuple`] with the report of what was repaired (and written back).
    pub async fn get_tuple_with_report(
        &self,
        config: &CheckpointConfig,
    ) -> Result<Option<(CheckpointTuple, SanitizeReport)>> {
        let Some(loaded) = self.inner.get_tuple(config).await? else {
            return Ok(None);
        };
        let (tuple, mut report) = sanitize(&self.config, loaded.clone())?;
        if !report.repaired() || !self.config.write_back {
            self.notify(&report);
            return Ok(Some((tuple, report)));
        }
        let outcome = self.write_back(config, &loaded, &tuple, &report).await;
        let result = match outcome {
            Ok(Some((written, at))) => {
                report.write_back = WriteBack::Written(at);
                written
            }
            Ok(None) => tuple,
            Err(reason) => {
                report.write_back = WriteBack::Skipped { reason };
                tuple
            }
        };
        if let WriteBack::Written(at) = &report.write_back {
            tracing::info!(
                thread_id = %at.thread_id,
                checkpoint_ns = %at.checkpoint_ns,
                checkpoint_id = at.checkpoint_id.as_deref().unwrap_or(""),
                "wrote the repaired message list back as a new checkpoint"
            );
        }
        self.notify(&report);
        Ok(Some((result, report)))
    }

    /// Writes the repaired state of `loaded` back; `Err(reason)` when it is not done.
    async fn write_back(
        &self,
        requested: &CheckpointConfig,
        loaded: &CheckpointTuple,
        repaired: &CheckpointTuple,
        report: &SanitizeReport,
    ) -> std::result::Result<Option<(CheckpointTuple, CheckpointConfig)>, String> {
        if !loaded.pending_writes.is_empty() {
            return Err(format!(
                "the checkpoint has {} pending writes; their tasks belong to it",
                loaded.pending_writes.len()
            ));
        }
        let cas = self.inner.capabilities().compare_and_set;
        if requested.checkpoint_id.is_some() && !cas {
            return Err(
                "an explicitly addressed checkpoint is only written back with compare-and-set"
                    .to_owned(),
            );
        }
        let channel = &self.config.channel;
        let Some(value) = repaired.checkpoint.channel_values.get(channel).cloned() else {
            return Err("the repaired value is missing".to_owned());
        };
        let note = json!({
            "repaired_from": loaded.checkpoint.id,
            "changes": report.actions.len(),
        });
        match put_successor(
            &self.inner,
            loaded,
            channel,
            value,
            note,
            self.config.write_back_fence,
        )
        .await
        {
            Ok(at) => match self.inner.get_tuple(&at).await {
                Ok(Some(t)) => Ok(Some((t, at))),
                Ok(None) => Err("the written checkpoint could not be read back".to_owned()),
                Err(e) => Err(format!("reading the written checkpoint failed: {e}")),
            },
            Err(e) if lost_race(&e) => Err(format!("another writer moved the head first: {e}")),
            Err(e) => {
                tracing::warn!(error = %e, "write-back of a repaired message list failed");
                Err(format!("write-back failed: {e}"))
            }
        }
    }

    /// [`Saver::list`] with each tuple's report (no write-back).
    pub fn list_with_reports(
        &self,
        options: ListOptions,
    ) -> BoxStream<'static, Result<(CheckpointTuple, SanitizeReport)>> {
        let config = self.config.clone();
        self.inner
            .list(options)
            .map(move |item| {
                let (tuple, report) = sanitize(&config, item?)?;
                if report.repaired()
                    && let Some(hook) = &config.on_report
                {
                    hook.call(&report);
                }
                Ok((tuple, report))
            })
            .boxed()
    }

    fn notify(&self, report: &SanitizeReport) {
        if report.repaired()
            && let Some(hook) = &self.config.on_report
        {
            hook.call(report);
        }
    }
}

#[async_trait]
impl<S: Saver> Saver for SanitizeOnLoad<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        Ok(self.get_tuple_with_report(config).await?.map(|(t, _)| t))
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
        self.list_with_reports(options)
            .map(|item| item.map(|(t, _)| t))
            .boxed()
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
