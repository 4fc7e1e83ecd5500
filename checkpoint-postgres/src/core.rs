//! The state every module shares: the pool and the schema. Modules depend on this one,
//! never on `saver.rs`.

use std::sync::Arc;

use checkpoint_core::backend::LostConnections;
use sqlx::Transaction;
use sqlx::postgres::{PgPool, Postgres};

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    /// The pool, and connections kept out of it between operations (see [`Warm`]).
    pub(crate) warm: Arc<Warm>,
    /// The schema the tables live in, when configured (else the connection's search path).
    pub(crate) schema: Option<String>,
    /// The TTL of threads without their own, in ms (`None`: no expiry).
    pub(crate) default_ttl_ms: Option<i64>,
    /// Whether `get_tuple` restarts the TTL of the thread it read.
    pub(crate) refresh_on_read: bool,
}

impl Inner {
    /// The pool.
    pub(crate) fn pool(&self) -> &PgPool {
        self.warm.pool()
    }

    /// A transaction on a connection of the pool, the warm ones handed back first (see
    /// [`Warm::through_pool`](checkpoint_core::backend::Warm::through_pool)).
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.warm.through_pool(self.pool().begin()).await
    }

    /// A saver's state over `pool`.
    pub(crate) fn new(
        pool: PgPool,
        lost: Arc<LostConnections>,
        schema: Option<String>,
        default_ttl_ms: Option<i64>,
        refresh_on_read: bool,
    ) -> Self {
        Self {
            warm: Arc::new(Warm::with_lost_connections(pool, lost)),
            schema,
            default_ttl_ms,
            refresh_on_read,
        }
    }
}

/// The pool and the connections the saver keeps out of it between operations (see
/// [`checkpoint_core::backend::Warm`]).
pub(crate) type Warm = checkpoint_core::backend::Warm<Postgres>;

/// Awaits `$run`, one sqlx call on `$conn: &mut PgConnection`, on a connection of `$warm`
/// (an `Arc<Warm>`), which stays warm if the call succeeds; failing to get a connection
/// returns the classified error from the enclosing function.
///
/// `warm!(idempotent ...)` is for a call that may run twice with the same outcome (a read,
/// an upsert): one whose connection turned out dead ([`connection_lost`]) runs once more
/// on another connection, so a server restart or failover does not fail one call per
/// pooled connection.
///
/// [`connection_lost`]: crate::error::connection_lost
macro_rules! warm {
    (idempotent $warm:expr, |$conn:ident| $run:expr) => {
        checkpoint_core::backend::warm!(
            $warm,
            $crate::error::classify,
            retry_if $crate::error::connection_lost,
            |$conn| $run
        )
    };
    ($warm:expr, |$conn:ident| $run:expr) => {
        checkpoint_core::backend::warm!($warm, $crate::error::classify, |$conn| $run)
    };
}
pub(crate) use warm;
