//! Opening a store from its URL: one scheme per backend.

use std::path::PathBuf;
use std::sync::Arc;

use checkpoint_core::backend::ReadOnly;
use checkpoint_core::{IntegrityScan, Saver};
use checkpoint_mongo::langgraph::LangGraphMongoSource;
use checkpoint_mongo::{MongoConfig, MongoSaver};
use checkpoint_postgres::PostgresSaver;
use checkpoint_redis::RedisSaver;
use checkpoint_sqlite::SqliteSaver;
use checkpoint_sqlite::langgraph::LangGraphSqliteSource;

use crate::CliError;

/// The URL schemes [`Store::parse`] accepts, as shown in help and errors.
pub const SCHEMES: &str = "sqlite://PATH, postgres://..., redis://... (rediss://), \
                           redis+cluster://HOST:PORT[,HOST:PORT...], mongodb://.../DB, \
                           langgraph-sqlite://PATH, langgraph-mongodb://.../DB (read-only)";

/// Which backend a URL names, and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub enum Store {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A SQLite file written by Python's `langgraph-checkpoint-sqlite` (read-only).
    LangGraphSqlite(PathBuf),
    /// A PostgreSQL server (LangGraph's tables).
    Postgres(String),
    /// A single Redis server.
    Redis(String),
    /// A Redis Cluster, by its seed nodes (`redis://host:port` each).
    RedisCluster(Vec<String>),
    /// A MongoDB deployment and the database holding the collections.
    Mongo {
        /// The connection string as given.
        uri: String,
        /// The database named in its path.
        database: String,
    },
    /// A MongoDB database written by Python's `langgraph-checkpoint-mongodb` (read-only).
    LangGraphMongo {
        /// The connection string, as `mongodb://...`.
        uri: String,
        /// The database named in its path.
        database: String,
    },
}

impl std::fmt::Debug for Store {
    // Never prints a connection string: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            Store::LangGraphSqlite(p) => f.debug_tuple("LangGraphSqlite").field(p).finish(),
            Store::Postgres(_) => f.write_str("Postgres(..)"),
            Store::Redis(_) => f.write_str("Redis(..)"),
            Store::RedisCluster(n) => write!(f, "RedisCluster({} nodes)", n.len()),
            Store::Mongo { database, .. } => write!(f, "Mongo {{ database: {database:?} }}"),
            Store::LangGraphMongo { database, .. } => {
                write!(f, "LangGraphMongo {{ database: {database:?} }}")
            }
        }
    }
}

impl Store {
    /// Parses a store URL; an unknown scheme or a URL missing its path or database is
    /// [`CliError::Url`].
    pub fn parse(url: &str) -> Result<Store, CliError> {
        let bad = |why: &str| CliError::Url(format!("{why} (expected one of {SCHEMES})"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("the store is not a URL"))?;
        match scheme {
            "sqlite" | "langgraph-sqlite" => {
                let path = rest.split(['?', '#']).next().unwrap_or_default();
                if path.is_empty() {
                    return Err(bad(&format!("{scheme}:// needs a file path")));
                }
                Ok(if scheme == "sqlite" {
                    Store::Sqlite(PathBuf::from(path))
                } else {
                    Store::LangGraphSqlite(PathBuf::from(path))
                })
            }
            "postgres" | "postgresql" => Ok(Store::Postgres(url.to_owned())),
            "redis" | "rediss" => Ok(Store::Redis(url.to_owned())),
            "redis+cluster" => {
                let nodes: Vec<String> = rest
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(|n| format!("redis://{n}"))
                    .collect();
                if nodes.is_empty() {
                    return Err(bad("redis+cluster:// needs at least one node"));
                }
                Ok(Store::RedisCluster(nodes))
            }
            "mongodb" | "mongodb+srv" | "langgraph-mongodb" | "langgraph-mongodb+srv" => {
                let after_host = rest.split_once('/').map(|(_, p)| p).unwrap_or_default();
                let database = after_host
                    .split(['?', '#'])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                if database.is_empty() {
                    return Err(bad(&format!(
                        "{scheme}:// needs the database in its path ({scheme}://host/db)"
                    )));
                }
                Ok(match scheme.strip_prefix("langgraph-") {
                    None => Store::Mongo {
                        uri: url.to_owned(),
                        database,
                    },
                    Some(driver_scheme) => Store::LangGraphMongo {
                        uri: format!("{driver_scheme}://{rest}"),
                        database,
                    },
                })
            }
            other => Err(bad(&format!("unknown scheme {other:?}"))),
        }
    }

    /// Connects to the store as it is, for a command that may write to it: nothing is
    /// created or migrated, and a SQLite file that does not exist is an error rather than a
    /// new empty database.
    pub async fn open(&self) -> Result<Arc<dyn Saver>, CliError> {
        Ok(self.open_with(None, Access::Write).await?.0)
    }

    /// [`open`](Self::open), for a command that only reads: a Redis server whose memory
    /// policy may evict keys is accepted (reading cannot make that worse, and it is how
    /// threads are rescued from such a server); one that writes is refused it (see
    /// `RedisSaverBuilder::allow_eviction`).
    pub async fn open_to_read(&self) -> Result<Arc<dyn Saver>, CliError> {
        Ok(self.open_with(None, Access::Read).await?.0)
    }

    /// [`open`](Self::open), with the store's [`IntegrityScan`] (every backend a URL names
    /// has one). `connections`: the size of the saver's connection pool (PostgreSQL, Redis)
    /// instead of its default, for callers that keep that many calls in flight; MongoDB
    /// takes it from the URL (`maxPoolSize`). For reading only, as
    /// [`open_to_read`](Self::open_to_read).
    pub async fn open_scannable(
        &self,
        connections: Option<u32>,
    ) -> Result<(Arc<dyn Saver>, Arc<dyn IntegrityScan>), CliError> {
        self.open_with(connections, Access::Read).await
    }

    async fn open_with(
        &self,
        connections: Option<u32>,
        access: Access,
    ) -> Result<(Arc<dyn Saver>, Arc<dyn IntegrityScan>), CliError> {
        fn both<S: Saver + IntegrityScan + 'static>(
            s: S,
        ) -> (Arc<dyn Saver>, Arc<dyn IntegrityScan>) {
            let s = Arc::new(s);
            (s.clone(), s)
        }
        Ok(match self {
            Store::Sqlite(path) => {
                if !path.is_file() {
                    return Err(CliError::NotFound(format!(
                        "no SQLite file at {}",
                        path.display()
                    )));
                }
                both(SqliteSaver::open(path).await?)
            }
            Store::LangGraphSqlite(path) => {
                if !path.is_file() {
                    return Err(CliError::NotFound(format!(
                        "no SQLite file at {}",
                        path.display()
                    )));
                }
                both(ReadOnly::new(LangGraphSqliteSource::open(path).await?))
            }
            Store::Postgres(url) => both(postgres(url, connections).await?),
            Store::Redis(url) => {
                both(redis(RedisSaver::builder(url.clone()), connections, access).await?)
            }
            Store::RedisCluster(nodes) => both(
                redis(
                    RedisSaver::cluster_builder(nodes.clone()),
                    connections,
                    access,
                )
                .await?,
            ),
            Store::Mongo { uri, database } => {
                both(MongoSaver::connect(uri, MongoConfig::new(database.clone())).await?)
            }
            Store::LangGraphMongo { uri, database } => both(ReadOnly::new(
                LangGraphMongoSource::connect(uri, database).await?,
            )),
        })
    }
}

impl Store {
    /// Connects to the store to write to it, creating what a saver needs: the SQLite file
    /// and its schema, PostgreSQL's tables, MongoDB's indexes (each idempotent).
    /// `connections` as for [`open_scannable`](Self::open_scannable).
    pub async fn open_for_writing(
        &self,
        connections: Option<u32>,
    ) -> Result<Arc<dyn Saver>, CliError> {
        let saver: Arc<dyn Saver> = match self {
            Store::Sqlite(path) => Arc::new(SqliteSaver::open(path).await?),
            Store::Postgres(url) => {
                let saver = postgres(url, connections).await?;
                saver.setup().await?;
                Arc::new(saver)
            }
            Store::Mongo { uri, database } => {
                let saver = MongoSaver::connect(uri, MongoConfig::new(database.clone())).await?;
                saver.setup().await?;
                Arc::new(saver)
            }
            Store::Redis(_) | Store::RedisCluster(_) => {
                return Ok(self.open_with(connections, Access::Write).await?.0);
            }
            Store::LangGraphSqlite(_) | Store::LangGraphMongo { .. } => {
                return Err(CliError::Url(
                    "langgraph-sqlite:// and langgraph-mongodb:// are read-only sources: \
                     migrate from them into sqlite://, postgres://, redis:// or mongodb://"
                        .into(),
                ));
            }
        };
        Ok(saver)
    }
}

async fn postgres(url: &str, connections: Option<u32>) -> Result<PostgresSaver, CliError> {
    let mut builder = PostgresSaver::builder(url)?;
    if let Some(n) = connections {
        builder = builder.max_connections(n);
    }
    Ok(builder.connect().await?)
}

/// What a command does with a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

async fn redis(
    builder: checkpoint_redis::RedisSaverBuilder,
    connections: Option<u32>,
    access: Access,
) -> Result<RedisSaver, CliError> {
    let builder = builder.allow_eviction(access == Access::Read);
    // The commands write or read each thread once: the saver's memo of recent list values
    // (64 MiB by default, for agents writing the same threads again and again) would only
    // hold memory. 4 MiB covers the threads a migration has in flight.
    let builder = builder.chunk_memo_bytes(4 << 20);
    let builder = match connections {
        Some(n) => builder.pool_size(n),
        None => builder,
    };
    Ok(builder.build().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_parse_and_bad_urls_are_typed_errors() {
        assert_eq!(
            Store::parse("sqlite://./agent.db").unwrap(),
            Store::Sqlite(PathBuf::from("./agent.db"))
        );
        assert_eq!(
            Store::parse("sqlite:///tmp/a.db").unwrap(),
            Store::Sqlite(PathBuf::from("/tmp/a.db"))
        );
        assert!(matches!(
            Store::parse("postgres://u:p@h/db").unwrap(),
            Store::Postgres(_)
        ));
        assert_eq!(
            Store::parse("redis+cluster://a:7000,b:7001").unwrap(),
            Store::RedisCluster(vec!["redis://a:7000".into(), "redis://b:7001".into()])
        );
        match Store::parse("mongodb://h:27017/agents?replicaSet=rs0").unwrap() {
            Store::Mongo { database, .. } => assert_eq!(database, "agents"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Store::parse("langgraph-sqlite://lg.sqlite").unwrap(),
            Store::LangGraphSqlite(PathBuf::from("lg.sqlite"))
        );
        assert_eq!(
            Store::parse("langgraph-mongodb://h:27017/lg?replicaSet=rs0").unwrap(),
            Store::LangGraphMongo {
                uri: "mongodb://h:27017/lg?replicaSet=rs0".into(),
                database: "lg".into()
            }
        );
        for bad in [
            "agent.db",
            "sqlite://",
            "langgraph-sqlite://",
            "mysql://h/db",
            "mongodb://h:27017",
            "langgraph-mongodb://h:27017/",
            "redis+cluster://",
        ] {
            assert!(matches!(Store::parse(bad), Err(CliError::Url(_))), "{bad}");
        }
        let debug = format!("{:?}", Store::parse("postgres://u:secret@h/db").unwrap());
        assert!(!debug.contains("secret"));
    }
}
