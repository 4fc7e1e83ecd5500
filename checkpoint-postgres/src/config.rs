//! [`PostgresSaverBuilder`]: connection options, pool settings and schema.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::backend::{LostConnections, thread_ttl_ms};
use checkpoint_core::{Error, Result, ThreadTtl};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::core::Inner;
use crate::error::{PgError, PgResult, classify};
use crate::schema::{check_own_version, own_version};

/// Connections idle for longer than this are pinged before use.
const IDLE_PING_AFTER: Duration = Duration::from_secs(10);

/// The default pool: 10 connections, a 10 s acquire timeout, and a liveness ping only for
/// connections that sat idle for more than [`IDLE_PING_AFTER`] or since before the saver
/// last found a connection dead (`lost`).
///
/// sqlx's default pings every connection on every acquire: one extra round trip in front of
/// each operation (measured: ≈ 0.1 ms of a 0.8 ms get_tuple). A busy connection does not
/// need it: a connection that breaks mid-call fails with a transient error
/// ([`Error::is_transient`]) and is not reused, and one handed back after an error or a
/// cancelled call is pinged by sqlx in the background and dropped if the server no longer
/// answers. Connections that sat idle, the ones a server restart or a firewall timeout
/// silently kills, are still checked. A restart kills the recently used ones too: once a
/// call found its connection dead, every connection idle since before that is checked.
fn default_pool_options(lost: &Arc<LostConnections>) -> PgPoolOptions {
    let lost = Arc::clone(lost);
    PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            let ping = meta.idle_for > IDLE_PING_AFTER || lost.idle_since_before(meta.idle_for);
            Box::pin(async move {
                if ping {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// The longest TTL stored, in ms (about 95,000 years): `now() + ttl` stays a valid
/// timestamp (PostgreSQL's end at year 294276) and `ttl * interval '1 millisecond'` cannot
/// overflow an interval. Longer TTLs are stored as this.
const MAX_TTL_MS: i64 = 3_000_000_000_000_000;

/// A TTL as `checkpoint_threads.ttl_ms` stores it (0: pinned).
pub(crate) fn stored_ttl_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX).min(MAX_TTL_MS)
}

/// Configures and connects a [`PostgresSaver`](crate::PostgresSaver).
pub struct PostgresSaverBuilder {
    options: PgConnectOptions,
    pool: PgPoolOptions,
    lost: Arc<LostConnections>,
    schema: Option<String>,
    default_ttl: Option<Duration>,
    refresh_on_read: bool,
    transaction_pooling: bool,
    statement_timeout: Option<Duration>,
}

impl fmt::Debug for PostgresSaverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSaverBuilder")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("database", &self.options.get_database())
            .field("schema", &self.schema)
            .field("default_ttl", &self.default_ttl)
            .field("refresh_on_read", &self.refresh_on_read)
            .field("transaction_pooling", &self.transaction_pooling)
            .field("statement_timeout", &self.statement_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresSaverBuilder {
    /// Uses `options` (host, credentials, TLS `sslmode`/certificates, application name...)
    /// exactly as sqlx accepts them.
    pub fn new(options: PgConnectOptions) -> Self {
        let lost = LostConnections::new();
        Self {
            options,
            pool: default_pool_options(&lost),
            lost,
            schema: None,
            default_ttl: None,
            refresh_on_read: false,
            transaction_pooling: false,
            statement_timeout: None,
        }
    }

    /// Expires threads this long after their last write (default `None`: never), unless
    /// [`Saver::set_thread_ttl`](checkpoint_core::Saver::set_thread_ttl) gave them their own
    /// TTL or pinned them. An expired thread is invisible at once; its rows are deleted by
    /// [`Saver::sweep_expired`](checkpoint_core::Saver::sweep_expired) (or in the background
    /// by [`spawn_sweeper`](checkpoint_core::backend::spawn_sweeper)) or by its next write.
    /// At least 1 ms.
    pub fn default_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Whether `get_tuple` also restarts the TTL of the thread it read (default `false`:
    /// only writes do). One more statement per read that found a checkpoint.
    pub fn refresh_on_read(mut self, yes: bool) -> Self {
        self.refresh_on_read = yes;
        self
    }

    /// Puts the tables in this schema (created by [`PostgresSaver::setup`](crate::PostgresSaver::setup)) instead of the
    /// connection's default `search_path`. Letters, digits and `_` only.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Set when the saver connects through a pooler in transaction mode (PgBouncer's
    /// `pool_mode = transaction`, the transaction-mode ports of managed poolers such as
    /// Supavisor), which hands each transaction of a client connection to whichever server
    /// connection is free. Default `false`: the saver prepares each statement once per
    /// connection and keeps it under a name, and takes the schema from the connection's
    /// `search_path` — state that such a pooler leaves on a server connection other clients
    /// use next, where a named statement can fail as already defined or, worse, run another
    /// client's statement of the same name.
    ///
    /// With it, every call runs in a transaction of its own (`BEGIN`, and `SET LOCAL
    /// search_path` when a [`schema`](Self::schema) is set) with unnamed statements, so
    /// nothing outlives the call on the server connection. It costs round trips: a call
    /// is `BEGIN`, a parse, an execute and `COMMIT` instead of one execute (see the crate
    /// README's figures). Session-mode poolers need none of this.
    pub fn transaction_pooling(mut self, yes: bool) -> Self {
        self.transaction_pooling = yes;
        self
    }

    /// Bounds each statement of the saver's calls on the server: PostgreSQL cancels one
    /// still running after `limit` (its `statement_timeout`), and the call fails with a
    /// transient [`Error::Unavailable`]. Default `None`: the server's own setting. At
    /// least 1 ms.
    ///
    /// Set it with a [`TimeoutLayer`](checkpoint_core::TimeoutLayer) of the same limit. The
    /// layer ends the caller's wait, but the statement of a call it cut short runs on in
    /// the server and keeps its connection out of the pool until it ends. A statement
    /// waiting for a lock that another session holds (a stalled transaction on the rows of
    /// the same thread) does not end: a few timed-out calls on one thread would hold every
    /// connection, and the calls of every other thread would fail too. With this bound the
    /// server cancels such a statement and its connection returns to the pool.
    ///
    /// [`setup`](crate::PostgresSaver::setup), whose migrations may rightly take longer, and
    /// `sweep_expired`, whose batch, if cancelled, the next sweep would start over the
    /// same, run without it.
    pub fn statement_timeout(mut self, limit: Option<Duration>) -> Self {
        self.statement_timeout = limit;
        self
    }

    /// Replaces the pool options (size, timeouts, lifetimes). This replaces the default
    /// liveness policy too (see the crate README); sqlx's own default pings every connection
    /// on every acquire.
    pub fn pool_options(mut self, pool: PgPoolOptions) -> Self {
        self.pool = pool;
        self
    }

    /// Sets the pool's maximum number of connections (default 10).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.pool = self.pool.max_connections(n);
        self
    }

    /// Connects the pool lazily (connections open on first use): the state of a new saver.
    pub(crate) fn connect_lazy_inner(self) -> Result<Inner> {
        let statement_timeout_ms = self.statement_timeout_ms()?;
        let options = self.connect_options(statement_timeout_ms)?;
        let default_ttl_ms = self.default_ttl_ms()?;
        Ok(Inner::new(
            self.pool.connect_lazy_with(options),
            self.lost,
            self.schema,
            default_ttl_ms,
            self.refresh_on_read,
            self.transaction_pooling,
            statement_timeout_ms,
        ))
    }

    /// Connects the pool, opening a first connection: the state of a new saver.
    pub(crate) async fn connect_inner(self) -> Result<Inner> {
        let statement_timeout_ms = self.statement_timeout_ms()?;
        let options = self.connect_options(statement_timeout_ms)?;
        let default_ttl_ms = self.default_ttl_ms()?;
        let pool = match self.pool.connect_with(options.clone()).await {
            Ok(pool) => pool,
            Err(sqlx::Error::PoolTimedOut) => return Err(no_connection(&options).await),
            Err(e) => return Err(classify(e)),
        };
        // Behind a transaction-mode pooler each call sets the search_path itself, and
        // `setup` checks the migration inside its transaction.
        if !self.transaction_pooling {
            if let Some(schema) = &self.schema {
                check_search_path(&pool, schema).await?;
            }
            check_own_version(own_version(&pool).await?)?;
        }
        Ok(Inner::new(
            pool,
            self.lost,
            self.schema,
            default_ttl_ms,
            self.refresh_on_read,
            self.transaction_pooling,
            statement_timeout_ms,
        ))
    }

    /// The `statement_timeout` option in ms, PostgreSQL's unit (rounded up; at most what
    /// the server accepts).
    fn statement_timeout_ms(&self) -> Result<Option<u32>> {
        match self.statement_timeout {
            None => Ok(None),
            Some(limit) if limit.is_zero() => Err(Error::invalid(
                "statement_timeout must be at least 1 ms (None leaves the server's setting)",
            )),
            Some(limit) => {
                let ms = limit.as_nanos().div_ceil(1_000_000);
                Ok(Some(
                    u32::try_from(ms).unwrap_or(u32::MAX).min(i32::MAX as u32),
                ))
            }
        }
    }

    fn default_ttl_ms(&self) -> Result<Option<i64>> {
        match self.default_ttl {
            None => Ok(None),
            Some(ttl) if ttl.is_zero() => Err(Error::invalid("default_ttl must be at least 1 ms")),
            Some(ttl) => Ok(thread_ttl_ms("default", ThreadTtl::Expire(ttl))?.map(stored_ttl_ms)),
        }
    }

    /// The connections' options: the caller's, with the schema's `search_path` and the
    /// `statement_timeout` as startup options (behind a transaction-mode pooler, which
    /// would leave them on a server connection other clients use next, each call's
    /// transaction sets them instead: see [`Inner::new`]).
    fn connect_options(&self, statement_timeout_ms: Option<u32>) -> Result<PgConnectOptions> {
        // PostgreSQL's default plan caching is kept on purpose: a generic plan of the
        // filtered list cannot see the filter's selectivity and walks the global order index
        // instead of the metadata GIN index (a full index scan for a rare filter on a large
        // table). Forcing generic plans measured no faster on any W1-W4 operation.
        let mut options = self.options.clone();
        if let Some(ms) = statement_timeout_ms.filter(|_| !self.transaction_pooling) {
            options = options.options([("statement_timeout", ms)]);
        }
        match &self.schema {
            None => Ok(options),
            Some(schema) => {
                check_schema_name(schema)?;
                if self.transaction_pooling {
                    // Set per call (`SET LOCAL`): a session setting would stay with a server
                    // connection, not with this client.
                    Ok(options)
                } else {
                    Ok(options.options([("search_path", quoted_schema(schema))]))
                }
            }
        }
    }
}

/// How long [`no_connection`]'s own attempt may take.
const WHY_TIMEOUT: Duration = Duration::from_secs(5);

/// The error of a pool that could not open its first connection in time. sqlx retries a
/// refused connection until the acquire timeout and then reports the timeout alone; one
/// more attempt, outside the pool, says why (refused, unknown host, bad password...).
async fn no_connection(options: &PgConnectOptions) -> Error {
    use sqlx::ConnectOptions;
    let why = match tokio::time::timeout(WHY_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            // It answers now: the pool's timeout was all there was to it.
            let _ = sqlx::Connection::close(conn).await;
            return classify(sqlx::Error::PoolTimedOut);
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {WHY_TIMEOUT:?}"),
    };
    Error::Unavailable {
        backend: "postgres",
        source: format!("{}; connecting: {why}", sqlx::Error::PoolTimedOut).into(),
    }
}

/// `schema` as a quoted identifier, for `setup` to create it and for the `search_path`
/// naming exactly it (a name with capitals is not folded to lower case; letters, digits and
/// `_`, all `check_schema_name` lets through, need no escaping).
pub(crate) fn quoted_schema(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// Checks that the connection's `search_path` is the one the saver set for `schema`.
pub(crate) async fn check_search_path<'c, E>(conn: E, schema: &str) -> PgResult<()>
where
    E: sqlx::PgExecutor<'c>,
{
    let found: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(conn)
        .await?;
    // Set as a startup option, the value reads back as the saver wrote it (quoted); set
    // with `SET`, PostgreSQL quotes a name only when it must (capitals, keywords).
    let names_schema = found == quoted_schema(schema)
        || (found == schema && !schema.bytes().any(|b| b.is_ascii_uppercase()));
    if names_schema {
        Ok(())
    } else {
        Err(PgError::SearchPathIgnored {
            schema: schema.to_owned(),
            found,
        })
    }
}

fn check_schema_name(schema: &str) -> Result<()> {
    if schema.is_empty()
        || schema.len() > 63
        || !schema
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        || schema.as_bytes()[0].is_ascii_digit()
    {
        return Err(Error::invalid(format!(
            "schema name {schema:?} must be 1-63 ASCII letters, digits or '_', not starting with a digit"
        )));
    }
    Ok(())
}
