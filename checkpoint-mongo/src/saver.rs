//! [`MongoSaver`]: construction, `setup`, and the [`Saver`] implementation (which delegates to
//! the read, write, maintenance and coordination modules).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use mongodb::bson::{Document, doc};
use mongodb::options::{ClientOptions, DatabaseOptions};
use mongodb::{Client, Database};

use checkpoint_core::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DeltaChannelHistory, Lease, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Result, Saver, TypedValue, async_trait,
};

use crate::config::{Atomicity, MongoConfig, TransactionMode};
use crate::core::Inner;
use crate::error::driver;
use crate::{admin, coord, delta, read, schema, write};

/// A [`Saver`] on MongoDB (see the crate documentation for the layout and guarantees).
///
/// Cheap to clone: clones share the driver's connection pool. Create it once per process
/// with [`connect`](Self::connect) or [`from_client`](Self::from_client), call
/// [`setup`](Self::setup) once per database (it is idempotent), then share it (for example as
/// `Arc<dyn Saver>`) between all tasks.
#[derive(Clone)]
pub struct MongoSaver {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for MongoSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client (and its credentials) is never printed.
        f.debug_struct("MongoSaver")
            .field("database", &self.inner.config.database)
            .field("collection_prefix", &self.inner.config.collection_prefix)
            .field("atomicity", &self.inner.atomicity)
            .field("ttl", &self.inner.config.ttl)
            .finish_non_exhaustive()
    }
}

impl MongoSaver {
    /// Connects to the deployment at `uri` (a `mongodb://` or `mongodb+srv://` connection
    /// string) and decides the [`Atomicity`] from the server's `hello` reply (one round trip).
    ///
    /// Does not create anything: call [`setup`](Self::setup) before first use. Errors never
    /// include the connection string.
    pub async fn connect(uri: &str, config: MongoConfig) -> Result<Self> {
        config.validate()?;
        let options = ClientOptions::parse(uri).await.map_err(driver)?;
        let client = Client::with_options(options).map_err(driver)?;
        Self::from_client(client, config).await
    }

    /// Builds a saver on an existing driver client (to share its pool, or to set driver
    /// options such as timeouts, TLS or a command event handler).
    ///
    /// With [`TransactionMode::Auto`] this asks the server once (`hello`) whether it is a
    /// replica set member or a `mongos`; with `Required` or `Disabled` it does no I/O.
    pub async fn from_client(client: Client, config: MongoConfig) -> Result<Self> {
        config.validate()?;
        let atomicity = match config.transactions {
            TransactionMode::Required => Atomicity::Transactions,
            TransactionMode::Disabled => Atomicity::OrderedWrites,
            TransactionMode::Auto => detect_atomicity(&client).await?,
        };
        tracing::info!(
            database = %config.database,
            atomicity = %atomicity,
            "MongoDB checkpoint saver ready"
        );
        let database = client.database_with_options(
            &config.database,
            DatabaseOptions::builder()
                .write_concern(config.write_concern.clone())
                .build(),
        );
        let names = config.collection_names();
        let coll = |name: &str| database.collection::<Document>(name);
        let inner = Inner {
            checkpoints: coll(&names.checkpoints),
            values: coll(&names.values),
            writes: coll(&names.writes),
            chunks: coll(&names.chunks),
            heads: coll(&names.heads),
            leases: coll(&names.leases),
            ledger: coll(&names.ledger),
            layout: coll(&names.layout),
            layout_version: std::sync::atomic::AtomicI64::new(0),
            bulk_write: std::sync::atomic::AtomicBool::new(config.bulk_write),
            retention: crate::delta::RetentionMemo::new(),
            client,
            database,
            config,
            names,
            atomicity,
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// How `put` and `put_writes` are made atomic on this deployment.
    pub fn atomicity(&self) -> Atomicity {
        self.inner.atomicity
    }

    /// The configuration.
    pub fn config(&self) -> &MongoConfig {
        &self.inner.config
    }

    /// The driver client (shared with this saver).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The database holding the collections.
    pub fn database(&self) -> &Database {
        &self.inner.database
    }

    /// Creates the collections' indexes (and, with a [`MongoConfig::ttl`], the TTL indexes).
    /// Idempotent: run it at deploy time or at start-up; it changes nothing when the indexes
    /// exist. Fails with [`Error::Backend`](checkpoint_core::Error::Backend) when an index of
    /// the same name exists with other options (for example a TTL index from a different
    /// configuration).
    pub async fn setup(&self) -> Result<()> {
        schema::setup(&self.inner).await
    }

    /// Drops every collection of this configuration (all checkpoints, values, writes,
    /// leases and ledger entries). For tests and tear-down scripts.
    pub async fn drop_collections(&self) -> Result<()> {
        schema::drop_collections(&self.inner).await
    }
}

async fn detect_atomicity(client: &Client) -> Result<Atomicity> {
    let hello = client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await
        .map_err(driver)?;
    let replica_set = hello.get_str("setName").is_ok();
    let mongos = hello.get_str("msg").is_ok_and(|m| m == "isdbgrid");
    let sessions = hello.contains_key("logicalSessionTimeoutMinutes");
    Ok(if (replica_set || mongos) && sessions {
        Atomicity::Transactions
    } else {
        Atomicity::OrderedWrites
    })
}

#[async_trait]
impl Saver for MongoSaver {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        schema::ready(&self.inner).await?;
        read::get_tuple(&self.inner, config).await
    }

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        schema::ready(&self.inner).await?;
        delta::delta_channel_history(&self.inner, config, channels).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        schema::after_ready(&self.inner, read::list(Arc::clone(&self.inner), options))
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        schema::after_ready(
            &self.inner,
            read::list_threads(Arc::clone(&self.inner), None),
        )
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        let threads = read::list_threads(Arc::clone(&self.inner), Some(after));
        schema::after_ready(&self.inner, threads)
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        schema::ready(&self.inner).await?;
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
        schema::ready(&self.inner).await?;
        write::put_writes(&self.inner, config, writes, task_id, options).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        schema::ready(&self.inner).await?;
        admin::delete_thread(&self.inner, thread_id).await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        schema::ready(&self.inner).await?;
        admin::copy_thread(&self.inner, source, target).await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        schema::ready(&self.inner).await?;
        admin::prune(&self.inner, thread_ids, strategy).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        schema::ready(&self.inner).await?;
        admin::delete_for_runs(&self.inner, run_ids).await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        schema::ready(&self.inner).await?;
        coord::acquire_lease(&self.inner, thread_id, holder, ttl).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        schema::ready(&self.inner).await?;
        coord::renew_lease(&self.inner, lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        schema::ready(&self.inner).await?;
        coord::release_lease(&self.inner, lease).await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        schema::ready(&self.inner).await?;
        coord::claim(&self.inner, key, ttl).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        schema::ready(&self.inner).await?;
        coord::complete_claim(&self.inner, key, token, outcome).await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        schema::ready(&self.inner).await?;
        coord::abandon_claim(&self.inner, key, token).await
    }
}

#[async_trait]
impl checkpoint_core::IntegrityScan for MongoSaver {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<checkpoint_core::StorageIssue>> {
        schema::ready(&self.inner).await?;
        admin::scan_thread(&self.inner, thread_id).await
    }
}
