//! How identifiers, tokens and durations are represented in columns, and which identifiers
//! PostgreSQL can store.

use std::time::Duration;

use checkpoint_core::backend::Identifiers;

/// Longest identifier (thread id, namespace, checkpoint id, channel, task id, version,
/// ledger key), in bytes. Primary keys combine up to four of them and PostgreSQL limits a
/// btree index entry to about 2.7 KB; longer identifiers are rejected up front with
/// [`Error::InvalidInput`](checkpoint_core::Error::InvalidInput) instead of failing inside
/// the server.
pub const MAX_IDENTIFIER_BYTES: usize = 512;

/// What this backend stores as an identifier: up to [`MAX_IDENTIFIER_BYTES`], and no NUL
/// (PostgreSQL `text` cannot hold it).
pub(crate) const IDENTIFIERS: Identifiers =
    Identifiers::new("PostgreSQL", MAX_IDENTIFIER_BYTES).without_nul();

/// Whether a string can name something stored here (reads of anything else find nothing).
pub(crate) fn storable(s: &str) -> bool {
    IDENTIFIERS.storable(s)
}

/// A duration as the microseconds of an `interval` (at least 1).
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX).max(1)
}

/// A fencing token as its `bigint` column.
pub(crate) fn token_i64(token: u64) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}

/// A fencing token read from its `bigint` column.
pub(crate) fn token_u64(token: i64) -> u64 {
    u64::try_from(token).unwrap_or(0)
}
