//! [`RedisSaver`]: construction and the [`Saver`] implementation, which delegates to the
//! read, write, maintenance and coordination modules.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DeltaChannelHistory, IntegrityScan, Lease, ListOptions, PruneStrategy,
    PutOptions, PutWritesOptions, Result, Saver, StorageIssue, TypedValue, async_trait,
};

use crate::config::{RedisSaverBuilder, ThreadTtl};
use crate::core::Inner;
use crate::{admin, coord, read, write};

/// A checkpoint saver on Redis ≥ 7 (single node or Cluster), without modules.
///
/// Clones share one connection pool (or Cluster client). See the crate documentation for
/// the key layout, guarantees and Cluster notes.
#[derive(Clone)]
pub struct RedisSaver {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl RedisSaverBuilder {
    /// Connects (checking the server answers) and returns the saver.
    pub async fn build(self) -> Result<RedisSaver> {
        Ok(RedisSaver {
            inner: Arc::new(self.connect().await?),
        })
    }
}

impl RedisSaver {
    /// A builder for a single server at `url`.
    pub fn builder(url: impl Into<String>) -> RedisSaverBuilder {
        RedisSaverBuilder::new(url)
    }

    /// A builder for a Redis Cluster reached through `nodes`.
    #[cfg(feature = "cluster")]
    pub fn cluster_builder<I, S>(nodes: I) -> RedisSaverBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisSaverBuilder::cluster(nodes)
    }

    /// Connects to a single server with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        RedisSaverBuilder::new(url).build().await
    }

    /// The prefix of every key this saver writes.
    pub fn key_prefix(&self) -> &str {
        self.inner.layout.prefix()
    }

    /// Whether this saver talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.link.is_cluster()
    }

    /// Deletes every key under this saver's prefix (checkpoints, indexes, leases, ledger)
    /// with `SCAN` + `DEL`, and returns how many were deleted. Meant for tests and
    /// benchmarks that own their prefix; never used on the hot path.
    pub async fn purge(&self) -> Result<u64> {
        admin::purge(&self.inner).await
    }
}

#[async_trait]
impl Saver for RedisSaver {
    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        read::get_tuple(&self.inner, config).await
    }

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        read::delta_channel_history(&self.inner, config, channels).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        read::list(Arc::clone(&self.inner), options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        read::list_threads(Arc::clone(&self.inner), None)
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        read::list_threads(Arc::clone(&self.inner), Some(after))
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        write::put(
            &self.inner,
            config,
            checkpoint,
            metadata,
            new_versions,
            options,
        )
        .await
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        write::put_writes(&self.inner, config, writes, task_id, options).await
    }

    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        if self.inner.link.is_cluster() {
            return checkpoint_core::backend::import_by_put(self, tuples).await;
        }
        write::import(&self.inner, tuples).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        admin::delete_thread(&self.inner, thread_id).await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        admin::copy_thread(&self.inner, source, target).await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        admin::prune(&self.inner, thread_ids, strategy).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        admin::delete_for_runs(&self.inner, run_ids).await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        coord::acquire_lease(&self.inner, thread_id, holder, ttl).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        coord::renew_lease(&self.inner, lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        coord::release_lease(&self.inner, lease).await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        coord::claim(&self.inner, key, ttl).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        coord::complete_claim(&self.inner, key, token, outcome).await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        coord::abandon_claim(&self.inner, key, token).await
    }
    /// Applied at once to every existing key of the thread, atomically, and on every later
    /// write (and read, with [`refresh_on_read`](crate::RedisSaverBuilder::refresh_on_read)).
    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        admin::set_thread_ttl(&self.inner, thread_id, ttl).await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        admin::thread_ttl(&self.inner, thread_id).await
    }

    /// Redis deletes expired keys itself: always `Ok(0)`.
    async fn sweep_expired(&self, _limit: usize) -> Result<usize> {
        Ok(0)
    }
}

#[async_trait]
impl IntegrityScan for RedisSaver {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>> {
        admin::scan_thread(&self.inner, thread_id).await
    }
}
