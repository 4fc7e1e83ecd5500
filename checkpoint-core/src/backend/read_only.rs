//! Stores that can only be read, as savers: [`ReadSource`] and [`ReadOnly`].

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, IntegrityScan, Lease, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Result, Saver, StorageIssue, TypedValue,
};

/// The reading half of [`Saver`]: what a source of checkpoints that is never written to
/// (LangGraph's own layouts, opened to migrate or inspect them) implements. Each method
/// keeps the contract of the [`Saver`] method of the same name.
#[async_trait]
pub trait ReadSource: std::fmt::Debug + Send + Sync + 'static {
    /// What the source is, for the [`Error::Rejected`] of a write (`by`).
    const NAME: &'static str;

    /// As [`Saver::get_tuple`].
    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>>;

    /// As [`Saver::list`].
    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>>;

    /// As [`Saver::list_threads`].
    fn list_threads(&self) -> BoxStream<'static, Result<String>>;

    /// As [`Saver::list_threads_after`], whose default (ids greater than `after` in byte
    /// order) this is too.
    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        crate::backend::ids_after(self.list_threads(), after)
    }
}

/// A [`ReadSource`] as a [`Saver`], so every tool that reads a saver (listing, inspecting,
/// verifying, migrating from it) reads the source: reads go to the source; every write and
/// coordination call is [`Error::Rejected`] and changes nothing; [`Capabilities`] advertises
/// nothing. Also an [`IntegrityScan`] when the source is one.
#[derive(Clone, Debug)]
pub struct ReadOnly<S>(S);

impl<S: ReadSource> ReadOnly<S> {
    /// Wraps `source`.
    pub fn new(source: S) -> Self {
        Self(source)
    }

    /// The source.
    pub fn get_ref(&self) -> &S {
        &self.0
    }

    /// The source, unwrapped.
    pub fn into_inner(self) -> S {
        self.0
    }

    fn rejected(op: &str) -> Error {
        Error::Rejected {
            by: S::NAME,
            reason: format!("{op}: the store is a read-only source"),
        }
    }
}

#[async_trait]
impl<S: ReadSource> Saver for ReadOnly<S> {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        self.0.get_tuple(config).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        self.0.list(options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.0.list_threads()
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.0.list_threads_after(after)
    }

    async fn put(
        &self,
        _config: &CheckpointConfig,
        _checkpoint: Checkpoint,
        _metadata: CheckpointMetadata,
        _new_versions: ChannelVersions,
        _options: PutOptions,
    ) -> Result<CheckpointConfig> {
        Err(Self::rejected("put"))
    }

    async fn put_writes(
        &self,
        _config: &CheckpointConfig,
        _writes: Vec<(String, TypedValue)>,
        _task_id: &str,
        _options: PutWritesOptions,
    ) -> Result<()> {
        Err(Self::rejected("put_writes"))
    }

    async fn delete_thread(&self, _thread_id: &str) -> Result<()> {
        Err(Self::rejected("delete_thread"))
    }

    async fn copy_thread(&self, _source: &str, _target: &str) -> Result<()> {
        Err(Self::rejected("copy_thread"))
    }

    async fn prune(&self, _thread_ids: &[String], _strategy: PruneStrategy) -> Result<()> {
        Err(Self::rejected("prune"))
    }

    async fn delete_for_runs(&self, _run_ids: &[String]) -> Result<()> {
        Err(Self::rejected("delete_for_runs"))
    }

    async fn acquire_lease(
        &self,
        _thread_id: &str,
        _holder: &str,
        _ttl: Duration,
    ) -> Result<Option<Lease>> {
        Err(Self::rejected("acquire_lease"))
    }

    async fn renew_lease(&self, _lease: &Lease, _ttl: Duration) -> Result<Lease> {
        Err(Self::rejected("renew_lease"))
    }

    async fn release_lease(&self, _lease: &Lease) -> Result<()> {
        Err(Self::rejected("release_lease"))
    }

    async fn claim(&self, _key: &str, _ttl: Duration) -> Result<Claim> {
        Err(Self::rejected("claim"))
    }

    async fn complete_claim(&self, _key: &str, _token: u64, _outcome: TypedValue) -> Result<()> {
        Err(Self::rejected("complete_claim"))
    }

    async fn abandon_claim(&self, _key: &str, _token: u64) -> Result<()> {
        Err(Self::rejected("abandon_claim"))
    }
}

#[async_trait]
impl<S: ReadSource + IntegrityScan> IntegrityScan for ReadOnly<S> {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>> {
        self.0.scan_thread(thread_id).await
    }

    async fn scan_threads(
        &self,
        thread_ids: &[String],
    ) -> Result<std::collections::BTreeMap<String, Vec<StorageIssue>>> {
        self.0.scan_threads(thread_ids).await
    }
}
