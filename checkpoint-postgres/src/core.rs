//! The state every module shares: the pool and the schema. Modules depend on this one,
//! never on `saver.rs`.

use sqlx::postgres::PgPool;

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    /// The schema the tables live in, when configured (else the connection's search path).
    pub(crate) schema: Option<String>,
    /// The TTL of threads without their own, in ms (`None`: no expiry).
    pub(crate) default_ttl_ms: Option<i64>,
    /// Whether `get_tuple` restarts the TTL of the thread it read.
    pub(crate) refresh_on_read: bool,
}
