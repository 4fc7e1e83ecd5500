//! The state every module shares: the pool, the schema and how statements reach the
//! server. Modules depend on this one, never on `saver.rs`.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use checkpoint_core::backend::LostConnections;
use futures::future::{BoxFuture, FutureExt};
use futures::stream::{BoxStream, StreamExt};
use sqlx::error::BoxDynError;
use sqlx::postgres::{
    PgArguments, PgConnection, PgPool, PgQueryResult, PgRow, PgStatement, PgTransactionManager,
    PgTypeInfo, Postgres,
};
use sqlx::{Describe, Either, Execute, Executor, Transaction, TransactionManager};

use crate::config::quoted_schema;
use crate::error::connection_lost;

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    /// The pool, its warm connections and how statements run on them.
    pub(crate) conns: Conns,
    /// The schema the tables live in, when configured (else the connection's search path).
    pub(crate) schema: Option<String>,
    /// The TTL of threads without their own, in ms (`None`: no expiry).
    pub(crate) default_ttl_ms: Option<i64>,
    /// Whether `get_tuple` restarts the TTL of the thread it read.
    pub(crate) refresh_on_read: bool,
    /// Whether the saver's statements carry a `statement_timeout` (the builder's option),
    /// which [`begin_unbounded`](Self::begin_unbounded) lifts.
    pub(crate) bounds_statements: bool,
}

impl Inner {
    /// The pool.
    pub(crate) fn pool(&self) -> &PgPool {
        self.conns.warm.pool()
    }

    /// A transaction on a connection of the pool (see [`Conns::begin`]).
    pub(crate) async fn begin(&self) -> Result<Tx, sqlx::Error> {
        self.conns.begin().await
    }

    /// A transaction whose statements no `statement_timeout` of the saver bounds: for
    /// `setup` and the sweeper, whose work may rightly take longer than a call's limit.
    pub(crate) async fn begin_unbounded(&self) -> Result<Tx, sqlx::Error> {
        let mut tx = self.begin().await?;
        if self.bounds_statements {
            sqlx::query("SET LOCAL statement_timeout TO 0")
                .execute(tx.conn())
                .await?;
        }
        Ok(tx)
    }

    /// A saver's state over `pool`; `transaction_pooling` and `statement_timeout_ms` (in
    /// ms) as the builder's options of those names. Directly, the `statement_timeout` is a
    /// startup option of the pool's connections; behind a transaction-mode pooler, each
    /// call's transaction sets it, as it sets the schema's `search_path`.
    pub(crate) fn new(
        pool: PgPool,
        lost: Arc<LostConnections>,
        schema: Option<String>,
        default_ttl_ms: Option<i64>,
        refresh_on_read: bool,
        transaction_pooling: bool,
        statement_timeout_ms: Option<u32>,
    ) -> Self {
        let begin = transaction_pooling.then(|| {
            let mut begin = "BEGIN".to_owned();
            if let Some(schema) = &schema {
                begin.push_str(&format!(
                    "; SET LOCAL search_path TO {}",
                    quoted_schema(schema)
                ));
            }
            if let Some(ms) = statement_timeout_ms {
                begin.push_str(&format!("; SET LOCAL statement_timeout TO {ms}"));
            }
            begin
        });
        Self {
            conns: Conns {
                // With the server bounding statements, a cancelled call's connection is
                // closed: sqlx's test of a returned connection can wait for good on one
                // cancelled mid-exchange.
                warm: Arc::new(
                    Warm::with_lost_connections(pool, lost)
                        .close_cancelled(statement_timeout_ms.is_some()),
                ),
                begin: begin.map(Arc::from),
            },
            schema,
            default_ttl_ms,
            refresh_on_read,
            bounds_statements: statement_timeout_ms.is_some(),
        }
    }
}

/// The pool and the connections the saver keeps out of it between operations (see
/// [`checkpoint_core::backend::Warm`]).
pub(crate) type Warm = checkpoint_core::backend::Warm<Postgres>;

/// The saver's connections, and how a call runs on one.
///
/// Directly (or through a session-mode pooler) a call is one statement, prepared once per
/// connection under a name sqlx caches, and the schema is the connection's `search_path`.
/// Through a transaction-mode pooler (`begin` set) the server connection behind a client
/// connection changes between transactions, so nothing may outlive one: each call runs in
/// its own transaction, opened by `begin` (`BEGIN`, and `SET LOCAL search_path` for a
/// schema), with unnamed statements.
#[derive(Clone)]
pub(crate) struct Conns {
    /// The pool and its warm connections.
    pub(crate) warm: Arc<Warm>,
    /// The statement opening each call's transaction behind a transaction-mode pooler.
    begin: Option<Arc<str>>,
}

impl fmt::Debug for Conns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conns")
            .field("transaction_pooling", &self.begin.is_some())
            .finish_non_exhaustive()
    }
}

impl Conns {
    /// Opens what one call runs in on `conn`: nothing directly, a transaction behind a
    /// transaction-mode pooler.
    pub(crate) async fn scope<'c>(
        &self,
        conn: &'c mut PgConnection,
    ) -> Result<Scope<'c>, sqlx::Error> {
        Ok(match &self.begin {
            None => Scope::Direct(conn),
            Some(begin) => {
                Scope::Pooled(sqlx::Connection::begin_with(conn, begin.to_string()).await?)
            }
        })
    }

    /// A transaction on a connection of the saver (a warm one, else the pool's), with the
    /// schema's `search_path` behind a transaction-mode pooler. A connection found dead by
    /// the `BEGIN` (a server restart) is closed and the `BEGIN` sent once more on another,
    /// which the pool checks first: nothing ran on the dead one.
    pub(crate) async fn begin(&self) -> Result<Tx, sqlx::Error> {
        let statement = self.begin.as_deref().map(|b| Cow::Owned(b.to_owned()));
        let mut retried = false;
        loop {
            let mut tx = Tx {
                conn: Some(self.warm.acquire().await?),
                warm: Arc::clone(&self.warm),
                named: self.begin.is_none(),
                begun: false,
                lost: OnceLock::new(),
            };
            let begun = PgTransactionManager::begin(tx.conn().conn, statement.clone()).await;
            let e = match begun {
                Ok(()) => {
                    tx.begun = true;
                    return Ok(tx);
                }
                Err(e) => e,
            };
            // Closed, whatever the error (see `Tx::begun`).
            drop(tx);
            if !connection_lost(&e) {
                return Err(e);
            }
            self.warm.connection_lost(&e);
            if retried {
                return Err(e);
            }
            retried = true;
        }
    }
}

/// A transaction of several statements (see [`Conns::begin`]). Its statements run on
/// [`conn`](Self::conn), which prepares them as the saver must; the connection itself is
/// not reachable.
///
/// Committed, its connection stays warm for the next operation. Dropped before that (an
/// error, a cancelled call), it is rolled back as sqlx's own transactions are: the
/// `ROLLBACK` goes with the pool's test of the returned connection. When the saver closes
/// cancelled calls' connections ([`Warm::close_cancelled`]), an uncommitted transaction's
/// connection is closed instead and the server rolls back: the call may have been cut short
/// mid-statement, and sqlx's test of a connection left in the middle of an exchange can
/// wait for good.
///
/// A statement that finds the connection dead or the server read-only
/// ([`connection_lost`]) has the connection closed when the transaction ends, as a
/// single-statement call's is, and the saver's other connections checked.
///
/// [`Warm::close_cancelled`]: checkpoint_core::backend::Warm::close_cancelled
pub(crate) struct Tx {
    /// `None` once committed.
    conn: Option<checkpoint_core::backend::Conn<Postgres>>,
    warm: Arc<Warm>,
    named: bool,
    /// Whether the server answered the `BEGIN`. Until then the connection is closed if
    /// dropped (a failed or cancelled `BEGIN`): sqlx counts a transaction only once the
    /// server has answered its `BEGIN`, and rolls back only what it counted, so a
    /// connection handed back after its `BEGIN` ran uncounted would stay in a transaction
    /// that the saver's next single statements on it would join, acknowledged and never
    /// committed.
    begun: bool,
    /// The error of a statement that found the connection lost.
    lost: OnceLock<String>,
}

impl Tx {
    /// The executor to run the transaction's next statement on.
    pub(crate) fn conn(&mut self) -> PgConn<'_> {
        PgConn {
            // Taken only by `commit`, which consumes `self`.
            conn: self.conn.as_deref_mut().unwrap_or_else(|| unreachable!()),
            named: self.named,
            lost: Some(&self.lost),
        }
    }

    /// Commits the transaction.
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        let conn = self.conn().conn;
        let committed = PgTransactionManager::commit(conn).await;
        note_lost(Some(&self.lost), committed.as_ref().err());
        committed?;
        if let Some(mut conn) = self.conn.take() {
            conn.settled();
            conn.done();
        }
        Ok(())
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if let Some(error) = self.lost.get() {
            self.warm.connection_lost(error);
            conn.discard();
        } else if !self.begun {
            conn.discard();
        } else {
            // Queued only: the pool's test of the connection sends it, unless the
            // connection is closed (see above).
            PgTransactionManager::start_rollback(&mut conn);
        }
    }
}

/// What one call runs in (see [`Conns::scope`]).
pub(crate) enum Scope<'c> {
    /// The connection itself.
    Direct(&'c mut PgConnection),
    /// A transaction, committed by [`finish`](Self::finish) (rolled back if dropped).
    Pooled(Transaction<'c, Postgres>),
}

impl Scope<'_> {
    /// The executor to run the call's statement on.
    pub(crate) fn conn(&mut self) -> PgConn<'_> {
        match self {
            Self::Direct(conn) => PgConn {
                conn,
                named: true,
                lost: None,
            },
            Self::Pooled(tx) => PgConn {
                conn: tx,
                named: false,
                lost: None,
            },
        }
    }

    /// Ends the call: commits its transaction, if any.
    pub(crate) async fn finish(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Direct(_) => Ok(()),
            Self::Pooled(tx) => tx.commit().await,
        }
    }
}

/// A connection as an [`Executor`] that prepares unnamed statements when `named` is
/// false: sqlx names (and caches) a statement per connection unless the query says
/// otherwise, and behind a transaction-mode pooler a named statement would stay on a
/// server connection that other clients use next. In a [`Tx`], it notes a statement that
/// found the connection lost.
#[derive(Debug)]
pub(crate) struct PgConn<'c> {
    conn: &'c mut PgConnection,
    named: bool,
    lost: Option<&'c OnceLock<String>>,
}

/// Keeps `error` in `lost` when it says the connection was lost ([`connection_lost`]).
fn note_lost(lost: Option<&OnceLock<String>>, error: Option<&sqlx::Error>) {
    if let (Some(lost), Some(error)) = (lost, error)
        && connection_lost(error)
    {
        let _ = lost.set(error.to_string());
    }
}

/// A query, named (persistent) only if its connection allows it.
struct Statement<E> {
    query: E,
    named: bool,
}

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Statement<E> {
    fn sql(&self) -> &'q str {
        self.query.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.query.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, BoxDynError> {
        self.query.take_arguments()
    }

    fn persistent(&self) -> bool {
        self.named && self.query.persistent()
    }
}

impl<'c> Executor<'c> for PgConn<'c> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let lost = self.lost;
        let rows = self.conn.fetch_many(Statement {
            query,
            named: self.named,
        });
        match lost {
            None => rows,
            Some(_) => Box::pin(rows.inspect(move |r| note_lost(lost, r.as_ref().err()))),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let lost = self.lost;
        let row = self.conn.fetch_optional(Statement {
            query,
            named: self.named,
        });
        match lost {
            None => row,
            Some(_) => Box::pin(row.inspect(move |r| note_lost(lost, r.as_ref().err()))),
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        let lost = self.lost;
        let prepared = self.conn.prepare_with(sql, parameters);
        match lost {
            None => prepared,
            Some(_) => Box::pin(prepared.inspect(move |r| note_lost(lost, r.as_ref().err()))),
        }
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        let lost = self.lost;
        let described = self.conn.describe(sql);
        match lost {
            None => described,
            Some(_) => Box::pin(described.inspect(move |r| note_lost(lost, r.as_ref().err()))),
        }
    }
}

/// Awaits `$run`, one sqlx call on `$conn` (a [`PgConn`]), on a connection of `$conns` (a
/// [`Conns`]), which stays warm if the call succeeds; failing to get a connection returns
/// the classified error from the enclosing function. Behind a transaction-mode pooler the
/// call runs in a transaction of its own (see [`Conns`]).
///
/// `warm!(idempotent ...)` is for a call that may run twice with the same outcome (a read,
/// an upsert): one whose connection turned out dead ([`connection_lost`]) runs once more
/// on another connection, so a server restart or failover does not fail one call per
/// pooled connection. Without `idempotent` such a call fails, and its connection is closed
/// all the same.
///
/// [`connection_lost`]: crate::error::connection_lost
macro_rules! warm {
    (idempotent $conns:expr, |$conn:ident| $run:expr) => {{
        let conns: &$crate::core::Conns = &$conns;
        checkpoint_core::backend::warm!(
            conns.warm,
            $crate::error::classify,
            retry_if $crate::error::connection_lost,
            |c| $crate::core::scoped!(conns, c, |$conn| $run)
        )
    }};
    ($conns:expr, |$conn:ident| $run:expr) => {{
        let conns: &$crate::core::Conns = &$conns;
        checkpoint_core::backend::warm!(
            conns.warm,
            $crate::error::classify,
            discard_if $crate::error::connection_lost,
            |c| $crate::core::scoped!(conns, c, |$conn| $run)
        )
    }};
}
pub(crate) use warm;

/// `$run` on `$c: &mut PgConnection` in the scope `$conns` gives a call (see
/// [`Conns::scope`]), as a future of its result.
macro_rules! scoped {
    ($conns:expr, $c:ident, |$conn:ident| $run:expr) => {
        async {
            let mut scope = $conns.scope($c).await?;
            let out = {
                let $conn = scope.conn();
                $run.await
            }?;
            scope.finish().await?;
            Ok::<_, sqlx::Error>(out)
        }
    };
}
pub(crate) use scoped;
