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
                           redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...] \
                           (rediss+cluster://), mongodb://.../DB, \
                           langgraph-sqlite://PATH, langgraph-mongodb://.../DB (read-only)";

/// The store options a URL's query may carry, per scheme, as shown in help. They are taken
/// out of the URL before its driver sees it; every other parameter goes to the driver.
pub const STORE_PARAMETERS: &str = "postgres://...?schema=NAME&transaction_pooling=true, \
                                    redis://...?key_prefix=PREFIX (also redis+cluster://...), \
                                    mongodb://.../DB?collection_prefix=PREFIX";

/// Which backend a URL names, and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub enum Store {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A SQLite file written by Python's `langgraph-checkpoint-sqlite` (read-only).
    LangGraphSqlite(PathBuf),
    /// A PostgreSQL server (LangGraph's tables).
    Postgres {
        /// The connection string, without the store's own parameters.
        url: String,
        /// `?schema=`: the schema of the tables (default: the connection's `search_path`).
        schema: Option<String>,
        /// `?transaction_pooling=true`: behind a pooler in transaction mode (see
        /// `PostgresSaverBuilder::transaction_pooling`).
        transaction_pooling: bool,
    },
    /// A single Redis server.
    Redis {
        /// The connection string, without the store's own parameters.
        url: String,
        /// `?key_prefix=`: the prefix of the saver's keys (default: the saver's).
        key_prefix: Option<String>,
    },
    /// A Redis Cluster, by its seed nodes (`redis[s]://[user:password@]host:port` each).
    RedisCluster {
        /// The seed nodes.
        nodes: Vec<String>,
        /// `?key_prefix=`, as for [`Store::Redis`].
        key_prefix: Option<String>,
    },
    /// A MongoDB deployment and the database holding the collections.
    Mongo {
        /// The connection string, without the store's own parameters.
        uri: String,
        /// The database named in its path.
        database: String,
        /// `?collection_prefix=`: the prefix of the collection names (default: none).
        collection_prefix: Option<String>,
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
            Store::Postgres {
                schema,
                transaction_pooling,
                ..
            } => f
                .debug_struct("Postgres")
                .field("schema", schema)
                .field("transaction_pooling", transaction_pooling)
                .finish_non_exhaustive(),
            Store::Redis { key_prefix, .. } => f
                .debug_struct("Redis")
                .field("key_prefix", key_prefix)
                .finish_non_exhaustive(),
            Store::RedisCluster { nodes, key_prefix } => f
                .debug_struct("RedisCluster")
                .field("nodes", &nodes.len())
                .field("key_prefix", key_prefix)
                .finish(),
            Store::Mongo {
                database,
                collection_prefix,
                ..
            } => f
                .debug_struct("Mongo")
                .field("database", database)
                .field("collection_prefix", collection_prefix)
                .finish_non_exhaustive(),
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
            "postgres" | "postgresql" => {
                let (url, mut params) = take_params(url, &["schema", "transaction_pooling"])?;
                let transaction_pooling = match params.remove("transaction_pooling").as_deref() {
                    None | Some("false" | "0") => false,
                    Some("true" | "1") => true,
                    Some(other) => {
                        return Err(CliError::Url(format!(
                            "transaction_pooling={other:?}: expected true or false"
                        )));
                    }
                };
                Ok(Store::Postgres {
                    url,
                    schema: params.remove("schema"),
                    transaction_pooling,
                })
            }
            "redis" | "rediss" => {
                let (url, mut params) = take_params(url, &["key_prefix"])?;
                Ok(Store::Redis {
                    url,
                    key_prefix: params.remove("key_prefix"),
                })
            }
            "redis+cluster" | "rediss+cluster" => {
                let (url, mut params) = take_params(url, &["key_prefix"])?;
                let nodes = checkpoint_redis::cluster_nodes(&url).map_err(|e| match e {
                    checkpoint_core::Error::InvalidInput { reason } => CliError::Url(reason),
                    other => CliError::Url(other.to_string()),
                })?;
                Ok(Store::RedisCluster {
                    nodes,
                    key_prefix: params.remove("key_prefix"),
                })
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
                    None => {
                        let (uri, mut params) = take_params(url, &["collection_prefix"])?;
                        Store::Mongo {
                            uri,
                            database,
                            collection_prefix: params.remove("collection_prefix"),
                        }
                    }
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
            Store::Postgres {
                url,
                schema,
                transaction_pooling,
            } => both(postgres(url, schema.as_deref(), *transaction_pooling, connections).await?),
            Store::Redis { url, key_prefix } => both(
                redis(
                    RedisSaver::builder(url.clone()),
                    key_prefix,
                    connections,
                    access,
                )
                .await?,
            ),
            Store::RedisCluster { nodes, key_prefix } => both(
                redis(
                    RedisSaver::cluster_builder(nodes.clone()),
                    key_prefix,
                    connections,
                    access,
                )
                .await?,
            ),
            Store::Mongo {
                uri,
                database,
                collection_prefix,
            } => both(mongo(uri, database, collection_prefix.as_deref()).await?),
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
            Store::Postgres {
                url,
                schema,
                transaction_pooling,
            } => {
                let saver =
                    postgres(url, schema.as_deref(), *transaction_pooling, connections).await?;
                saver.setup().await?;
                Arc::new(saver)
            }
            Store::Mongo {
                uri,
                database,
                collection_prefix,
            } => {
                let saver = mongo(uri, database, collection_prefix.as_deref()).await?;
                saver.setup().await?;
                Arc::new(saver)
            }
            Store::Redis { .. } | Store::RedisCluster { .. } => {
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

/// The PostgreSQL saver of a `postgres://` store.
async fn postgres(
    url: &str,
    schema: Option<&str>,
    transaction_pooling: bool,
    connections: Option<u32>,
) -> Result<PostgresSaver, CliError> {
    let mut builder = PostgresSaver::builder(url)?.transaction_pooling(transaction_pooling);
    if let Some(schema) = schema {
        builder = builder.schema(schema);
    }
    if let Some(n) = connections {
        builder = builder.max_connections(n);
    }
    Ok(builder.connect().await?)
}

/// The MongoDB saver of a `mongodb://` store.
async fn mongo(
    uri: &str,
    database: &str,
    collection_prefix: Option<&str>,
) -> Result<MongoSaver, CliError> {
    let mut config = MongoConfig::new(database);
    if let Some(prefix) = collection_prefix {
        config = config.collection_prefix(prefix);
    }
    Ok(MongoSaver::connect(uri, config).await?)
}

/// `url` without the query parameters called `names`, and their decoded values. Every other
/// parameter stays as written, for the driver. A parameter given twice, or without a value,
/// is [`CliError::Url`].
fn take_params(
    url: &str,
    names: &[&str],
) -> Result<(String, std::collections::BTreeMap<String, String>), CliError> {
    let mut taken = std::collections::BTreeMap::new();
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (url, None),
    };
    let Some((base, query)) = before_fragment.split_once('?') else {
        return Ok((url.to_owned(), taken));
    };
    let mut kept = Vec::new();
    for segment in query.split('&').filter(|s| !s.is_empty()) {
        let (key, value) = form_urlencoded::parse(segment.as_bytes())
            .next()
            .unwrap_or_default();
        if !names.contains(&key.as_ref()) {
            kept.push(segment);
            continue;
        }
        if value.is_empty() {
            return Err(CliError::Url(format!("{key}= needs a value")));
        }
        if taken
            .insert(key.clone().into_owned(), value.into_owned())
            .is_some()
        {
            return Err(CliError::Url(format!("{key}= is given twice")));
        }
    }
    let mut out = base.to_owned();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    Ok((out, taken))
}

/// What a command does with a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

async fn redis(
    builder: checkpoint_redis::RedisSaverBuilder,
    key_prefix: &Option<String>,
    connections: Option<u32>,
    access: Access,
) -> Result<RedisSaver, CliError> {
    let builder = builder.allow_eviction(access == Access::Read);
    let builder = match key_prefix {
        Some(prefix) => builder.key_prefix(prefix.clone()),
        None => builder,
    };
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
        assert_eq!(
            Store::parse("postgres://u:p@h/db").unwrap(),
            Store::Postgres {
                url: "postgres://u:p@h/db".into(),
                schema: None,
                transaction_pooling: false
            }
        );
        assert_eq!(
            Store::parse("redis+cluster://a:7000,b:7001").unwrap(),
            Store::RedisCluster {
                nodes: vec!["redis://a:7000".into(), "redis://b:7001".into()],
                key_prefix: None
            }
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
            "redis+cluster://a:7000,,b:7001",
            "redis+cluster://u:p@a:7000,v:q@b:7001",
        ] {
            assert!(matches!(Store::parse(bad), Err(CliError::Url(_))), "{bad}");
        }
        let debug = format!("{:?}", Store::parse("postgres://u:secret@h/db").unwrap());
        assert!(!debug.contains("secret"));
    }

    #[test]
    fn store_parameters_are_taken_out_of_the_url_and_the_rest_kept_as_written() {
        assert_eq!(
            Store::parse(
                "postgres://u:p@h/db?sslmode=require&schema=Agents&options=-c%20x%3Dy\
                 &transaction_pooling=true#f"
            )
            .unwrap(),
            Store::Postgres {
                url: "postgres://u:p@h/db?sslmode=require&options=-c%20x%3Dy#f".into(),
                schema: Some("Agents".into()),
                transaction_pooling: true
            }
        );
        assert_eq!(
            Store::parse("rediss://:pw@h:6380/2?key_prefix=app%3A1").unwrap(),
            Store::Redis {
                url: "rediss://:pw@h:6380/2".into(),
                key_prefix: Some("app:1".into())
            }
        );
        assert_eq!(
            Store::parse("redis+cluster://a:7000,b:7001?key_prefix=x").unwrap(),
            Store::RedisCluster {
                nodes: vec!["redis://a:7000".into(), "redis://b:7001".into()],
                key_prefix: Some("x".into())
            }
        );
        assert_eq!(
            Store::parse("rediss+cluster://u:pw@a:7000,b:7001/?key_prefix=x#insecure").unwrap(),
            Store::RedisCluster {
                nodes: vec![
                    "rediss://u:pw@a:7000/#insecure".into(),
                    "rediss://u:pw@b:7001/#insecure".into()
                ],
                key_prefix: Some("x".into())
            }
        );
        assert_eq!(
            Store::parse("mongodb://h/agents?replicaSet=rs0&collection_prefix=t1_").unwrap(),
            Store::Mongo {
                uri: "mongodb://h/agents?replicaSet=rs0".into(),
                database: "agents".into(),
                collection_prefix: Some("t1_".into())
            }
        );
        // Two stores differing only in their prefix are different stores.
        assert_ne!(
            Store::parse("redis://h?key_prefix=a").unwrap(),
            Store::parse("redis://h?key_prefix=b").unwrap()
        );
        for bad in [
            "postgres://h/db?transaction_pooling=maybe",
            "postgres://h/db?schema=a&schema=b",
            "redis://h?key_prefix=",
            "mongodb://h/db?collection_prefix",
        ] {
            assert!(matches!(Store::parse(bad), Err(CliError::Url(_))), "{bad}");
        }
        let debug = format!(
            "{:?}",
            Store::parse("redis://:secret@h?key_prefix=p").unwrap()
        );
        assert!(
            !debug.contains("secret") && debug.contains("\"p\""),
            "{debug}"
        );
    }
}
