//! [`PostgresSaver`]: construction, `setup`, and the [`Saver`] implementation, which
//! delegates to the read, write, maintenance and coordination modules.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DeltaChannelHistory, Error, IntegrityScan, Lease, ListOptions,
    PruneStrategy, PutOptions, PutWritesOptions, Result, Saver, StorageIssue, ThreadTtl,
    TypedValue, async_trait,
};
use sqlx::postgres::{PgConnectOptions, PgPool};

use crate::config::PostgresSaverBuilder;
use crate::core::Inner;
use crate::{admin, coord, read, schema, write};

/// A [`Saver`] on PostgreSQL, sharing LangGraph's checkpoint tables.
///
/// Build it with [`PostgresSaver::connect`] or [`PostgresSaver::builder`], or wrap an
/// existing pool with [`PostgresSaver::from_pool`]; call [`setup`](PostgresSaver::setup)
/// once (it is idempotent and safe to run concurrently) before use. Cloning is cheap and
/// shares the pool.
#[derive(Clone)]
pub struct PostgresSaver {
    inner: Arc<Inner>,
}

impl fmt::Debug for PostgresSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.inner.pool().connect_options();
        f.debug_struct("PostgresSaver")
            .field("host", &o.get_host())
            .field("port", &o.get_port())
            .field("database", &o.get_database())
            .field("username", &o.get_username())
            .field("schema", &self.inner.schema)
            .field("pool_size", &self.inner.pool().size())
            .finish_non_exhaustive()
    }
}

impl PostgresSaverBuilder {
    /// Connects the pool lazily: connections open on first use, so a server that is down
    /// now does not prevent building the saver.
    pub fn connect_lazy(self) -> Result<PostgresSaver> {
        Ok(PostgresSaver::from_inner(self.connect_lazy_inner()?))
    }

    /// Connects the pool, opening a first connection to check the server answers.
    pub async fn connect(self) -> Result<PostgresSaver> {
        Ok(PostgresSaver::from_inner(self.connect_inner().await?))
    }
}

impl PostgresSaver {
    fn from_inner(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// A builder from a connection string (`postgres://user:pass@host:port/db?sslmode=...`).
    pub fn builder(url: &str) -> Result<PostgresSaverBuilder> {
        let options: PgConnectOptions = url.parse().map_err(|e| Error::InvalidInput {
            reason: format!("invalid PostgreSQL connection string: {e}"),
        })?;
        Ok(PostgresSaverBuilder::new(options))
    }

    /// Connects to `url` with default pool settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url)?.connect().await
    }

    /// Uses an existing pool (its connections' `search_path` decides the schema).
    /// No default TTL, no refresh on read: use the builder's
    /// [`pool_options`](PostgresSaverBuilder::pool_options) for those with a pool of your
    /// own settings.
    ///
    /// The saver keeps connections warm between its operations (see [`pool`](Self::pool)):
    /// the pool's other users, other savers on the same pool included, may wait up to
    /// 250 ms for one when the saver is idle and up to 1 s when it is busy; give each
    /// saver a pool of its own, or one with connections to spare, when that matters.
    pub fn from_pool(pool: PgPool) -> Self {
        Self::from_inner(Inner::new(
            pool,
            checkpoint_core::backend::LostConnections::new(),
            None,
            None,
            false,
            false,
            None,
        ))
    }

    /// The pool.
    ///
    /// After an operation that succeeded, the saver keeps its connection checked out for
    /// the next one instead of handing it back, which spares sqlx's test of every
    /// returned connection, a round trip to the server. Such warm connections count in
    /// [`PgPool::size`] but not in [`PgPool::num_idle`]. One goes back to the pool after
    /// 250 ms idle or 1 s out of it, and at once when one of the saver's operations waits
    /// for the pool or the pool closes, so [`PgPool::close`] does not wait for them and the
    /// pool's other users get their turn.
    pub fn pool(&self) -> &PgPool {
        self.inner.pool()
    }

    /// The schema configured with [`PostgresSaverBuilder::schema`], if any.
    pub fn schema(&self) -> Option<&str> {
        self.inner.schema.as_deref()
    }

    /// Creates or upgrades the tables: LangGraph's migrations (recorded in
    /// `checkpoint_migrations`, as LangGraph does) and this crate's own objects (recorded in
    /// `checkpoint_rs_migrations`). Idempotent; concurrent calls from several processes
    /// serialize on an advisory lock and all succeed.
    pub async fn setup(&self) -> Result<()> {
        schema::setup(&self.inner).await.map_err(Error::from)
    }
}

#[async_trait]
impl Saver for PostgresSaver {
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
        read::list(&self.inner, options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        read::list_threads(&self.inner, None)
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        read::list_threads(&self.inner, Some(after))
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

    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        admin::set_thread_ttl(&self.inner, thread_id, ttl).await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        admin::thread_ttl(&self.inner, thread_id).await
    }

    /// One statement per call; threads being written are skipped (`SKIP LOCKED`), so the
    /// sweep never waits for a write nor a write for it.
    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        admin::sweep_expired(&self.inner, limit).await
    }
}

#[async_trait]
impl IntegrityScan for PostgresSaver {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>> {
        let mut found = admin::scan_threads(&self.inner, &[thread_id.to_owned()]).await?;
        Ok(found.remove(thread_id).unwrap_or_default())
    }

    async fn scan_threads(
        &self,
        thread_ids: &[String],
    ) -> Result<BTreeMap<String, Vec<StorageIssue>>> {
        admin::scan_threads(&self.inner, thread_ids).await
    }
}
