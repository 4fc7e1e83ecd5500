//! [`SqliteSaver`]: opening, and the [`Saver`] implementation, which delegates to the read,
//! write, maintenance and coordination modules.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DeltaChannelHistory, IntegrityScan, Lease, ListOptions, PruneStrategy,
    PutOptions, PutWritesOptions, Result, Saver, StorageIssue, TypedValue, async_trait,
};
use sqlx::sqlite::SqlitePool;

use crate::config::{SqliteSaverBuilder, ThreadTtl, from_pool};
use crate::core::Inner;
use crate::error::classify;
use crate::{admin, coord, read, schema, write};

/// A [`Saver`] on SQLite: a database file (or memory) on this machine, no server.
///
/// Open it with [`SqliteSaver::open`], [`SqliteSaver::open_in_memory`],
/// [`SqliteSaver::builder`] or [`SqliteSaver::from_pool`]; each creates or upgrades the
/// schema. Cheap to clone: clones share the connections. Several processes may open the
/// same file; their writes serialize on SQLite's lock (waiting up to the busy timeout).
#[derive(Clone)]
pub struct SqliteSaver {
    inner: Arc<Inner>,
}

impl fmt::Debug for SqliteSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl SqliteSaverBuilder {
    /// Opens the database (creating the file when missing) and sets up the schema.
    pub async fn open(self) -> Result<SqliteSaver> {
        let saver = SqliteSaver {
            inner: Arc::new(self.connect().await?),
        };
        saver.setup().await?;
        Ok(saver)
    }
}

impl SqliteSaver {
    /// A builder for the database file at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteSaverBuilder {
        SqliteSaverBuilder::new(path)
    }

    /// Opens (creating when missing) the database file at `path` with the default settings.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        SqliteSaverBuilder::new(path).open().await
    }

    /// A private in-memory database, gone when the saver and its clones are dropped.
    pub async fn open_in_memory() -> Result<Self> {
        SqliteSaverBuilder::in_memory().open().await
    }

    /// A saver on an existing pool (its connect options decide file, journal mode and
    /// durability; WAL is recommended). All reads and writes use the pool; this saver's
    /// writes are serialized among themselves. Sets up the schema.
    ///
    /// The saver keeps connections warm between its operations (see [`pool`](Self::pool)):
    /// the pool's other users, other savers on the same pool included, may wait up to
    /// 250 ms for one when the saver is idle and up to 1 s when it is busy.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self> {
        let saver = Self {
            inner: Arc::new(from_pool(pool)),
        };
        saver.setup().await?;
        Ok(saver)
    }

    /// Creates or upgrades the schema (versioned migrations recorded in
    /// `checkpoint_rs_migrations`). Idempotent; the constructors call it.
    pub async fn setup(&self) -> Result<()> {
        let _turn = self.inner.write_turn().await;
        let writer = &self.inner.writer;
        let mut conn = writer
            .through_pool(writer.pool().acquire())
            .await
            .map_err(classify)?;
        schema::setup(&mut conn).await?;
        Ok(())
    }

    /// The pool this saver writes with (one connection, unless built
    /// [`from_pool`](Self::from_pool)).
    ///
    /// After an operation that succeeded, the saver keeps its connection checked out for
    /// the next one instead of handing it back, which spares sqlx's test of every returned
    /// connection (a round trip to the connection's worker thread). One goes back to the
    /// pool after 250 ms idle or 1 s out of it, and at once when one of the saver's
    /// operations waits for the pool or the pool closes.
    pub fn pool(&self) -> &SqlitePool {
        self.inner.writer.pool()
    }

    /// Whether this saver holds the locks that keep another copy of SQLite in this process
    /// (Python's `sqlite3` module beside the Python binding, say) from deleting the file's
    /// write-ahead log when it closes: true for a file this saver opened on Linux, false in
    /// memory, on a caller's pool, on other platforms, or if the file system refused the
    /// locks. See the crate's "Guarantees".
    pub fn wal_guarded(&self) -> bool {
        self.inner.wal_guarded()
    }

    /// Sweeps expired threads in the background (see
    /// [`spawn_sweeper`](checkpoint_core::backend::spawn_sweeper)): `batch` at a time, every
    /// `every`, until the returned handle is aborted or the runtime stops.
    pub fn spawn_sweeper(&self, every: Duration, batch: usize) -> tokio::task::JoinHandle<()> {
        checkpoint_core::backend::spawn_sweeper(Arc::new(self.clone()), every, batch)
    }
}

#[async_trait]
impl Saver for SqliteSaver {
    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        read::get_tuple(&self.inner, config).await
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

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        read::delta_channel_history(&self.inner, config, channels).await
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

    /// Each call is one short `IMMEDIATE` transaction on the writer.
    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        admin::sweep_expired(&self.inner, limit).await
    }
}

#[async_trait]
impl IntegrityScan for SqliteSaver {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>> {
        admin::scan_thread(&self.inner, thread_id).await
    }
}
