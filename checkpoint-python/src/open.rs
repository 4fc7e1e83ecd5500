//! Opening a backend, and the optional wrapper stack around it.

use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{Error, InMemorySaver, Result, Retry, RetryLayer, Saver, Timeout};
use checkpoint_mongo::mongodb::options::WriteConcern;
use checkpoint_mongo::{MongoConfig, MongoSaver, TransactionMode};
use checkpoint_postgres::PostgresSaver;
use checkpoint_redis::RedisSaver;
use checkpoint_sanitize::{
    Idempotent, IdempotentConfig, PendingMarkers, PendingMarkersConfig, SanitizeConfig,
    SanitizeOnLoad, SkipUnsafePut, SkipUnsafePutConfig,
};
use checkpoint_sqlite::{SqliteSaver, SqliteSaverBuilder};

use crate::effects::Effects;

/// Which backend, and where.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Memory,
    Sqlite(String),
    Postgres(String),
    Redis(String),
    RedisCluster(Vec<String>),
    Mongo(String),
}

/// Backend options; each applies to the backends that have it and is an error on the others.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    /// PostgreSQL schema (default: the connection's `search_path`).
    pub(crate) schema: Option<String>,
    /// Redis key prefix.
    pub(crate) key_prefix: Option<String>,
    /// MongoDB database (default: the one in the URL's path).
    pub(crate) database: Option<String>,
    /// MongoDB collection prefix.
    pub(crate) collection_prefix: Option<String>,
    /// MongoDB transaction mode: `auto`, `required` or `disabled`.
    pub(crate) transactions: Option<String>,
    /// MongoDB write concern: `majority` (journaled) or `server-default`.
    pub(crate) write_concern: Option<String>,
    /// Pool size (PostgreSQL, Redis).
    pub(crate) max_connections: Option<u32>,
    /// Run each call in its own transaction with unnamed statements, for a pooler in
    /// transaction mode (PostgreSQL).
    pub(crate) transaction_pooling: Option<bool>,
    /// Accept a Redis server whose memory policy may evict the saver's keys.
    pub(crate) allow_eviction: Option<bool>,
    /// Create tables and indexes when missing (PostgreSQL, MongoDB; SQLite always does).
    pub(crate) setup: bool,
    /// The TTL of every thread, from its last write (memory, SQLite, PostgreSQL, Redis).
    pub(crate) default_ttl: Option<Duration>,
    /// Whether reads restart a thread's TTL too (memory, SQLite, PostgreSQL, Redis).
    pub(crate) refresh_on_read: Option<bool>,
    /// How often a background task sweeps expired threads (memory, SQLite, PostgreSQL,
    /// Redis); started by the caller once the saver is open.
    pub(crate) sweep_interval: Option<Duration>,
    /// The time to live of every checkpoint and pending write from when it was written, by
    /// TTL indexes (MongoDB: LangGraph's `MongoDBSaver(ttl=seconds)`).
    pub(crate) collection_ttl: Option<Duration>,
    /// The `statement_timeout` of a PostgreSQL saver's connections, a little longer than
    /// the `timeout` option: there alone a statement the client gave up on can wait for
    /// another session's lock for as long as it is held.
    pub(crate) statement_timeout: Option<Duration>,
}

/// Which wrappers of `checkpoint-sanitize` to put around the backend (outermost first:
/// sanitize-on-load, pending markers, skip-unsafe-put, idempotent — the canonical order).
#[derive(Clone, Debug, Default)]
pub(crate) struct Wrappers {
    pub(crate) sanitize_on_load: bool,
    pub(crate) pending_markers: bool,
    pub(crate) skip_unsafe_put: bool,
    /// The `Idempotent` wrapper, with its settings.
    pub(crate) idempotent: Option<IdempotentConfig>,
}

fn invalid(reason: String) -> Error {
    Error::InvalidInput { reason }
}

fn reject_options(backend: &str, options: &Options, allowed: &[&str]) -> Result<()> {
    let given = [
        ("schema", options.schema.is_some()),
        ("key_prefix", options.key_prefix.is_some()),
        ("database", options.database.is_some()),
        ("collection_prefix", options.collection_prefix.is_some()),
        ("transactions", options.transactions.is_some()),
        ("write_concern", options.write_concern.is_some()),
        ("max_connections", options.max_connections.is_some()),
        ("transaction_pooling", options.transaction_pooling.is_some()),
        ("allow_eviction", options.allow_eviction.is_some()),
        ("collection_ttl", options.collection_ttl.is_some()),
        (
            "ttl",
            options.default_ttl.is_some()
                || options.refresh_on_read.is_some()
                || options.sweep_interval.is_some(),
        ),
    ];
    match given
        .iter()
        .find(|(name, set)| *set && !allowed.contains(name))
    {
        Some((name, _)) => Err(invalid(format!("{backend} has no option {name:?}"))),
        None => Ok(()),
    }
}

/// The database a `mongodb://host/db` URL names, if any.
fn mongo_database(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let path = rest.split_once('/')?.1;
    let db = path.split(['?', '#']).next()?;
    (!db.is_empty()).then(|| db.to_owned())
}

/// The backend-specific administration a Python class exposes besides the saver API.
#[derive(Clone, Debug, Default)]
pub(crate) enum Admin {
    #[default]
    None,
    /// `RedisSaver.purge()`.
    Redis(RedisSaver),
    /// `MongoSaver.drop_collections()`, `setup()`.
    Mongo(MongoSaver),
    /// `PostgresSaver.setup()`.
    Postgres(PostgresSaver),
}

impl Admin {
    /// Deletes everything the store holds under its prefix (Redis) or configuration
    /// (MongoDB); returns the number of keys deleted where the backend counts them.
    pub(crate) async fn destroy(self) -> Result<Option<u64>> {
        match self {
            Admin::None | Admin::Postgres(_) => Err(Error::Unsupported { op: "destroy" }),
            Admin::Redis(saver) => saver.purge().await.map(Some),
            Admin::Mongo(saver) => saver.drop_collections().await.map(|()| None),
        }
    }

    /// Creates what the backend stores into where it is missing (idempotent): PostgreSQL's
    /// tables and MongoDB's indexes. SQLite migrates its file when it opens it, and the
    /// in-memory saver and Redis need nothing.
    pub(crate) async fn setup(self) -> Result<()> {
        match self {
            Admin::Postgres(saver) => saver.setup().await,
            Admin::Mongo(saver) => saver.setup().await,
            Admin::None | Admin::Redis(_) => Ok(()),
        }
    }
}

/// Opens the backend.
pub(crate) async fn open(backend: Backend, options: Options) -> Result<(Arc<dyn Saver>, Admin)> {
    let mut admin = Admin::None;
    let saver: Arc<dyn Saver> = match backend {
        Backend::Memory => {
            reject_options("InMemorySaver", &options, &["ttl"])?;
            Arc::new(
                InMemorySaver::builder()
                    .default_ttl(options.default_ttl)
                    .refresh_on_read(options.refresh_on_read.unwrap_or(false))
                    .build()?,
            )
        }
        Backend::Sqlite(path) => {
            reject_options("SqliteSaver", &options, &["ttl"])?;
            let builder = if path == ":memory:" {
                SqliteSaverBuilder::in_memory()
            } else {
                SqliteSaver::builder(path)
            };
            Arc::new(
                builder
                    .default_ttl(options.default_ttl)
                    .refresh_on_read(options.refresh_on_read.unwrap_or(false))
                    .open()
                    .await?,
            )
        }
        Backend::Postgres(url) => {
            reject_options(
                "PostgresSaver",
                &options,
                &["schema", "max_connections", "transaction_pooling", "ttl"],
            )?;
            let mut builder = PostgresSaver::builder(&url)?
                .default_ttl(options.default_ttl)
                .refresh_on_read(options.refresh_on_read.unwrap_or(false))
                .transaction_pooling(options.transaction_pooling.unwrap_or(false))
                .statement_timeout(options.statement_timeout);
            if let Some(schema) = options.schema {
                builder = builder.schema(schema);
            }
            if let Some(n) = options.max_connections {
                builder = builder.max_connections(n);
            }
            let saver = builder.connect().await?;
            if options.setup {
                saver.setup().await?;
            }
            admin = Admin::Postgres(saver.clone());
            Arc::new(saver)
        }
        Backend::Redis(_) | Backend::RedisCluster(_) => {
            reject_options(
                "RedisSaver",
                &options,
                &["key_prefix", "max_connections", "allow_eviction", "ttl"],
            )?;
            let mut builder = match backend {
                Backend::RedisCluster(nodes) => RedisSaver::cluster_builder(nodes),
                Backend::Redis(url) => RedisSaver::builder(url),
                _ => unreachable!("matched above"),
            }
            .default_ttl(options.default_ttl)
            .refresh_on_read(options.refresh_on_read.unwrap_or(false))
            .allow_eviction(options.allow_eviction.unwrap_or(false));
            if let Some(prefix) = options.key_prefix {
                builder = builder.key_prefix(prefix);
            }
            if let Some(n) = options.max_connections {
                builder = builder.pool_size(n);
            }
            let saver = builder.build().await?;
            admin = Admin::Redis(saver.clone());
            Arc::new(saver)
        }
        Backend::Mongo(url) => {
            reject_options(
                "MongoSaver",
                &options,
                &[
                    "database",
                    "collection_prefix",
                    "transactions",
                    "write_concern",
                    "collection_ttl",
                ],
            )?;
            let database = options
                .database
                .or_else(|| mongo_database(&url))
                .ok_or_else(|| {
                    invalid(
                        "MongoSaver needs a database: in the URL's path (mongodb://host/db) \
                         or as database=..."
                            .into(),
                    )
                })?;
            let mut config = MongoConfig::new(database).ttl(options.collection_ttl);
            if let Some(prefix) = options.collection_prefix {
                config = config.collection_prefix(prefix);
            }
            if let Some(mode) = options.transactions {
                config = config.transactions(match mode.as_str() {
                    "auto" => TransactionMode::Auto,
                    "required" => TransactionMode::Required,
                    "disabled" => TransactionMode::Disabled,
                    other => {
                        return Err(invalid(format!(
                            "transactions={other:?}: expected \"auto\", \"required\" or \
                             \"disabled\""
                        )));
                    }
                });
            }
            match options.write_concern.as_deref() {
                // MongoConfig's default: `w: "majority"`, journaled.
                None | Some("majority") => {}
                Some("server-default") => config = config.write_concern(WriteConcern::default()),
                Some(other) => {
                    return Err(invalid(format!(
                        "write_concern={other:?}: expected \"majority\" or \"server-default\""
                    )));
                }
            }
            let saver = MongoSaver::connect(&url, config).await?;
            if options.setup {
                saver.setup().await?;
            }
            admin = Admin::Mongo(saver.clone());
            Arc::new(saver)
        }
    };
    Ok((saver, admin))
}

/// How the saver's calls meet their saver: the `timeout` option, a deadline on each attempt,
/// and the `retries` option around it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CallPolicy {
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: Option<RetryLayer>,
}

impl CallPolicy {
    /// `saver` behind the policy.
    pub(crate) fn around(&self, saver: Arc<dyn Saver>) -> Arc<dyn Saver> {
        let saver: Arc<dyn Saver> = match self.timeout {
            Some(limit) => Arc::new(Timeout::new(saver, limit)),
            None => saver,
        };
        match self.retry {
            Some(policy) => Arc::new(Retry::new(saver, policy)),
            None => saver,
        }
    }
}

/// Puts the chosen wrappers around `saver`, in the canonical order, and returns the
/// `Idempotent` one too when chosen, for `once` and `lock_thread` (clones share their locks
/// and leases, so the stack's puts carry the fences of the guards it hands out). That
/// wrapper's own ledger and lease calls go to the backend behind `calls` (deadline and
/// retries), so they are bounded and retried like every call of the saver.
pub(crate) fn wrap(
    saver: Arc<dyn Saver>,
    wrappers: &Wrappers,
    calls: CallPolicy,
) -> (Arc<dyn Saver>, Option<Effects>) {
    let mut saver = saver;
    let mut effects = None;
    if let Some(config) = &wrappers.idempotent {
        let inner = calls.around(saver);
        let wrapper = Idempotent::new(inner, config.clone());
        saver = Arc::new(wrapper.clone());
        effects = Some(Arc::new(wrapper));
    }
    if wrappers.skip_unsafe_put {
        saver = Arc::new(SkipUnsafePut::new(saver, SkipUnsafePutConfig::default()));
    }
    if wrappers.pending_markers {
        saver = Arc::new(PendingMarkers::new(saver, PendingMarkersConfig::default()));
    }
    if wrappers.sanitize_on_load {
        saver = Arc::new(SanitizeOnLoad::new(saver, SanitizeConfig::default()));
    }
    (saver, effects)
}
