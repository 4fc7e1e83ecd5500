//! Backends: how the benchmark gets a fresh saver, measures what it stores and measures the
//! physical floor of its server.
//!
//! A backend is one module here implementing [`Backend`], plus one entry in [`BACKENDS`] and
//! in [`open`]. See the crate README ("Adding a backend").

mod memory;
#[cfg(feature = "mongo")]
mod mongo;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use checkpoint_core::{Error, Result, Saver, async_trait};

pub use memory::MemoryBackend;
#[cfg(feature = "mongo")]
pub use mongo::MongoBackend;
#[cfg(feature = "postgres")]
pub use postgres::PostgresBackend;
#[cfg(feature = "redis")]
pub use redis::RedisBackend;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteBackend;

/// One storage backend under benchmark.
///
/// The runner calls, per repetition: [`fresh`](Backend::fresh) once, then
/// [`floors`](Backend::floors) at each phase boundary (before W1, after W1, W2, W3 and W4),
/// and [`bytes_stored`](Backend::bytes_stored) once, right after W1 (before the floor sample
/// that follows it). After the last repetition it calls [`teardown`](Backend::teardown).
#[async_trait]
pub trait Backend: fmt::Debug + Send + Sync {
    /// The name used on the command line and in the report (`memory`, `postgres`, ...).
    fn name(&self) -> &str;

    /// A fresh, empty saver for one repetition: the backend's tables or keys dropped and
    /// re-created. The saver returned by the previous call is no longer used.
    async fn fresh(&self) -> Result<Arc<dyn Saver>>;

    /// Bytes the backend stores for what has been written to `saver` (the one the last
    /// [`fresh`](Backend::fresh) returned), measured as WORKLOAD.md §6 defines it for this
    /// backend; `None` if it cannot tell.
    async fn bytes_stored(&self, saver: &dyn Saver) -> Result<Option<u64>>;

    /// One sample of the physical floor of the backend's server (WORKLOAD.md §6), measured
    /// now; `None` for a backend without a server. It must not touch the saver's tables or
    /// keys, and must leave nothing behind that changes [`bytes_stored`](Backend::bytes_stored).
    async fn floors(&self) -> Result<Option<Floors>>;

    /// Called once after the last repetition: releases the last saver and removes what the
    /// backend created, so nothing of the run is left on the server.
    async fn teardown(&self) -> Result<()>;

    /// The settings of the savers this backend creates that a reader of the report needs
    /// to compare it with another run (recorded in the report as `settings`).
    fn settings(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}

/// One sample of a server's physical floor, and which workload figure compares with which
/// floor figure.
///
/// Figure names carry their unit as a suffix (`_ms` for latencies, `_per_s` for
/// throughputs), e.g. `insert_commit_1k_p50_ms`.
///
/// ```
/// use checkpoint_bench::backend::Floors;
/// let f = Floors::new()
///     .figure("insert_commit_1k_p50_ms", 0.4)
///     .compare("put_p50_ms", "insert_commit_1k_p50_ms");
/// assert_eq!(f.figures["insert_commit_1k_p50_ms"], 0.4);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Floors {
    /// Floor figure name → value.
    pub figures: BTreeMap<String, f64>,
    /// Workload figure name (one of [`WORKLOAD_FIGURES`](crate::report::WORKLOAD_FIGURES))
    /// → the floor figure it is reported against.
    pub basis: BTreeMap<String, String>,
}

impl Floors {
    /// No figures.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a floor figure.
    pub fn figure(mut self, name: impl Into<String>, value: f64) -> Self {
        self.figures.insert(name.into(), value);
        self
    }

    /// Reports `workload_figure` as a ratio to `floor_figure`.
    pub fn compare(
        mut self,
        workload_figure: impl Into<String>,
        floor_figure: impl Into<String>,
    ) -> Self {
        self.basis
            .insert(workload_figure.into(), floor_figure.into());
        self
    }
}

/// Names accepted by [`open`].
pub const BACKENDS: &[&str] = &[
    "memory",
    #[cfg(feature = "postgres")]
    "postgres",
    #[cfg(feature = "redis")]
    "redis",
    #[cfg(feature = "mongo")]
    "mongo",
    #[cfg(feature = "sqlite")]
    "sqlite",
];

/// How durably the MongoDB saver writes (`--mongo-durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum MongoDurability {
    /// The saver's defaults: multi-document transactions where the deployment has them,
    /// write concern `w: "majority"`, journaled.
    #[default]
    Default,
    /// LangGraph's `MongoDBSaver`'s: no transactions (ordered idempotent writes) and the
    /// server's default write concern.
    Langgraph,
}

impl MongoDurability {
    /// The name used on the command line and in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Langgraph => "langgraph",
        }
    }
}

/// What [`open`] may need besides the name.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct BackendOptions {
    /// Connection URL of a server backend; for `sqlite`, the directory for its files
    /// (default: a new one in the system's temporary directory). Ignored by `memory`.
    pub url: Option<String>,
    /// How durably the MongoDB saver writes; anything but the default is an error for the
    /// other backends.
    pub mongo_durability: MongoDurability,
    /// PostgreSQL only: savers run each call in a transaction of its own with unnamed
    /// statements, as behind a transaction-mode pooler
    /// (`PostgresSaverBuilder::transaction_pooling`); an error for the other backends.
    pub postgres_transaction_pooling: bool,
}

impl BackendOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the connection URL.
    pub fn url(mut self, url: Option<String>) -> Self {
        self.url = url;
        self
    }

    /// Sets how durably the MongoDB saver writes.
    pub fn mongo_durability(mut self, durability: MongoDurability) -> Self {
        self.mongo_durability = durability;
        self
    }

    /// Sets whether PostgreSQL savers run as behind a transaction-mode pooler.
    pub fn postgres_transaction_pooling(mut self, yes: bool) -> Self {
        self.postgres_transaction_pooling = yes;
        self
    }
}

impl fmt::Debug for BackendOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A URL may carry a password: never print it.
        f.debug_struct("BackendOptions")
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("mongo_durability", &self.mongo_durability)
            .field(
                "postgres_transaction_pooling",
                &self.postgres_transaction_pooling,
            )
            .finish()
    }
}

/// Opens the backend called `name` (one of [`BACKENDS`]).
pub async fn open(name: &str, options: &BackendOptions) -> Result<Box<dyn Backend>> {
    if name != "mongo" && options.mongo_durability != MongoDurability::Default {
        return Err(Error::invalid(format!(
            "--mongo-durability {} applies to the mongo backend only, not {name:?}",
            options.mongo_durability.as_str()
        )));
    }
    if name != "postgres" && options.postgres_transaction_pooling {
        return Err(Error::invalid(format!(
            "--postgres-transaction-pooling applies to the postgres backend only, not {name:?}"
        )));
    }
    match name {
        "memory" => Ok(Box::new(MemoryBackend::new())),
        #[cfg(feature = "postgres")]
        "postgres" => Ok(Box::new(PostgresBackend::open(options).await?)),
        #[cfg(feature = "redis")]
        "redis" => Ok(Box::new(RedisBackend::open(options).await?)),
        #[cfg(feature = "mongo")]
        "mongo" => Ok(Box::new(MongoBackend::open(options).await?)),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Box::new(SqliteBackend::open(options).await?)),
        other => Err(Error::invalid(format!(
            "unknown backend {other:?}; known: {}",
            BACKENDS.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opens_known_backends_only() {
        for name in BACKENDS {
            let backend = open(name, &BackendOptions::new()).await.unwrap();
            assert_eq!(backend.name(), *name);
            backend.teardown().await.unwrap();
        }
        assert!(open("nope", &BackendOptions::new()).await.is_err());
        let langgraph = BackendOptions::new().mongo_durability(MongoDurability::Langgraph);
        let refused = open("memory", &langgraph).await.unwrap_err();
        assert!(
            refused.to_string().contains("mongo backend only"),
            "{refused}"
        );
        let pooled = BackendOptions::new().postgres_transaction_pooling(true);
        let refused = open("memory", &pooled).await.unwrap_err();
        assert!(
            refused.to_string().contains("postgres backend only"),
            "{refused}"
        );
    }

    #[test]
    fn options_debug_hides_the_url() {
        let o = BackendOptions::new().url(Some("postgres://u:secret@h/db".into()));
        assert!(!format!("{o:?}").contains("secret"));
    }
}
