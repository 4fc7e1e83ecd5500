//! [`MongoConfig`]: where the saver stores its data and how it writes.

use std::fmt;
use std::time::Duration;

use mongodb::options::{Acknowledgment, WriteConcern};

use checkpoint_core::{Error, Result};

/// Smallest accepted [`MongoConfig::chunk_size`].
pub const MIN_CHUNK_SIZE: usize = 1024;
/// Largest accepted [`MongoConfig::chunk_size`] (far below the 16 MiB BSON document limit).
pub const MAX_CHUNK_SIZE: usize = 4 * 1024 * 1024;

/// Whether puts and pending writes run inside multi-document transactions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionMode {
    /// Use transactions when the deployment supports them (a replica set or a sharded
    /// cluster), ordered writes otherwise (a standalone server). Decided once, when the saver
    /// is created, from the server's `hello` reply.
    #[default]
    Auto,
    /// Always use transactions; operations fail on a deployment without them.
    Required,
    /// Never use transactions: ordered idempotent writes, with the reduced capability set of
    /// [`Atomicity::OrderedWrites`].
    Disabled,
}

/// How the saver makes `put` and `put_writes` atomic, as decided at creation (see
/// [`MongoSaver::atomicity`](crate::MongoSaver::atomicity)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Atomicity {
    /// Multi-document transactions (snapshot read concern, the configured write concern),
    /// retried on transient errors. Every capability is available: compare-and-set puts and
    /// fenced writes are checked and written in the same transaction.
    Transactions,
    /// No transactions: every write is idempotent and ordered so that a reader never sees a
    /// checkpoint whose values are missing (values and chunks first, the checkpoint document
    /// last); a call's pending writes live in one document, so they appear together.
    /// Compare-and-set puts and leases need an atomic check-and-write across documents and are
    /// not advertised (they return [`Error::Unsupported`]).
    OrderedWrites,
}

impl Atomicity {
    /// `"transactions"` or `"ordered-writes"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Atomicity::Transactions => "transactions",
            Atomicity::OrderedWrites => "ordered-writes",
        }
    }
}

impl fmt::Display for Atomicity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Configuration of a [`MongoSaver`](crate::MongoSaver): the database and collection names,
/// the write concern, the transaction mode, an optional time to live and tuning knobs.
///
/// The connection string is not part of it (it goes to
/// [`MongoSaver::connect`](crate::MongoSaver::connect)), so printing a config never prints a
/// password.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_mongo::MongoConfig;
/// let config = MongoConfig::new("agents")
///     .collection_prefix("support_")
///     .ttl(Some(Duration::from_secs(30 * 24 * 3600)));
/// assert_eq!(config.collection_names().checkpoints, "support_checkpoints");
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MongoConfig {
    /// The database holding the collections.
    pub database: String,
    /// Prepended to every collection name (default: none).
    pub collection_prefix: String,
    /// Whether to use transactions (default [`TransactionMode::Auto`]).
    pub transactions: TransactionMode,
    /// Write concern of every write and commit (default: `w: "majority"`, journaled).
    pub write_concern: WriteConcern,
    /// Time to live of checkpoints and pending writes, counted from when they were written;
    /// enforced by TTL indexes that [`setup`](crate::MongoSaver::setup) creates (`None`, the
    /// default: kept until deleted).
    pub ttl: Option<Duration>,
    /// How many checkpoints one step of a `list` stream reads (default 64).
    pub list_page_size: usize,
    /// Values and pending-write values larger than this are stored as separate chunk
    /// documents of at most this size (default 1 MiB; between [`MIN_CHUNK_SIZE`] and
    /// [`MAX_CHUNK_SIZE`]).
    pub chunk_size: usize,
    /// How long a transaction is retried after transient errors (write conflicts, elections,
    /// network errors) before the operation gives up with `Error::Unavailable` (default 30 s).
    pub transaction_retry_time: Duration,
    /// Whether a put sends its writes as one client-level `bulkWrite` command where the
    /// server has it (MongoDB 8.0 and later; default `true`): one round trip for the values
    /// and the checkpoint document instead of one per collection. The saver falls back to
    /// one command per collection by itself when the driver finds the server older or the
    /// server does not know the command; set `false` for a server that advertises 8.0 but
    /// implements `bulkWrite` differently.
    pub bulk_write: bool,
}

impl MongoConfig {
    /// The defaults, with collections in `database`.
    pub fn new(database: impl Into<String>) -> Self {
        Self {
            database: database.into(),
            collection_prefix: String::new(),
            transactions: TransactionMode::Auto,
            write_concern: WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .journal(true)
                .build(),
            ttl: None,
            list_page_size: 64,
            chunk_size: 1024 * 1024,
            transaction_retry_time: Duration::from_secs(30),
            bulk_write: true,
        }
    }

    /// Sets the collection name prefix.
    pub fn collection_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.collection_prefix = prefix.into();
        self
    }

    /// Sets the transaction mode.
    pub fn transactions(mut self, mode: TransactionMode) -> Self {
        self.transactions = mode;
        self
    }

    /// Sets the write concern.
    pub fn write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = write_concern;
        self
    }

    /// Sets the time to live (`None`: keep until deleted).
    pub fn ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how many checkpoints one step of a `list` stream reads.
    pub fn list_page_size(mut self, n: usize) -> Self {
        self.list_page_size = n;
        self
    }

    /// Sets the chunk size of large values.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// Sets how long transactions are retried after transient errors.
    pub fn transaction_retry_time(mut self, time: Duration) -> Self {
        self.transaction_retry_time = time;
        self
    }

    /// Sets whether puts may use the client-level `bulkWrite` command.
    pub fn bulk_write(mut self, enabled: bool) -> Self {
        self.bulk_write = enabled;
        self
    }

    /// The names of the collections this configuration uses.
    pub fn collection_names(&self) -> CollectionNames {
        let p = &self.collection_prefix;
        CollectionNames {
            checkpoints: format!("{p}checkpoints"),
            values: format!("{p}checkpoint_values"),
            writes: format!("{p}checkpoint_writes"),
            chunks: format!("{p}checkpoint_chunks"),
            heads: format!("{p}checkpoint_heads"),
            leases: format!("{p}checkpoint_leases"),
            ledger: format!("{p}checkpoint_ledger"),
            layout: format!("{p}checkpoint_layout"),
        }
    }

    /// Checks the configuration, naming the offending field.
    pub fn validate(&self) -> Result<()> {
        // MongoDB's own rules for database names: no empty name, at most 63 bytes, none of
        // these characters.
        if self.database.is_empty() || self.database.len() > 63 {
            return Err(Error::invalid(
                "MongoConfig::database must be 1 to 63 bytes long",
            ));
        }
        if self.database.chars().any(|c| {
            matches!(
                c,
                '/' | '\\' | '.' | ' ' | '"' | '$' | '*' | '<' | '>' | ':' | '|' | '?' | '\0'
            )
        }) {
            return Err(Error::invalid(format!(
                "MongoConfig::database {:?} contains a character MongoDB does not allow in database names",
                self.database
            )));
        }
        if self.collection_prefix.contains('$')
            || self.collection_prefix.contains('\0')
            || self.collection_prefix.starts_with("system.")
            || self.collection_prefix.starts_with('.')
        {
            return Err(Error::invalid(format!(
                "MongoConfig::collection_prefix {:?} would make invalid collection names",
                self.collection_prefix
            )));
        }
        if self.collection_prefix.len() > 100 {
            return Err(Error::invalid(
                "MongoConfig::collection_prefix is longer than 100 bytes",
            ));
        }
        if self.list_page_size == 0 || self.list_page_size > 10_000 {
            return Err(Error::invalid(
                "MongoConfig::list_page_size must be between 1 and 10000",
            ));
        }
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&self.chunk_size) {
            return Err(Error::invalid(format!(
                "MongoConfig::chunk_size must be between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE} bytes"
            )));
        }
        if let Some(ttl) = self.ttl
            && ttl < Duration::from_secs(1)
        {
            return Err(Error::invalid(
                "MongoConfig::ttl must be at least one second",
            ));
        }
        Ok(())
    }
}

/// The collections of one configuration (see [`MongoConfig::collection_names`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectionNames {
    /// One document per checkpoint.
    pub checkpoints: String,
    /// One document per stored channel version.
    pub values: String,
    /// One document per `(checkpoint, task)` holding that task's pending writes.
    pub writes: String,
    /// Chunks of values too large to keep inline.
    pub chunks: String,
    /// One small document per `(thread, namespace)` that every put updates inside its
    /// transaction, so that concurrent puts on one namespace conflict and serialize.
    pub heads: String,
    /// One document per thread that ever had a lease: holder, fencing token, expiry.
    pub leases: String,
    /// The idempotency ledger: one document per key.
    pub ledger: String,
    /// One document naming the stored layout of all the others.
    pub layout: String,
}

impl CollectionNames {
    /// Every name, in a fixed order.
    pub fn all(&self) -> [&str; 8] {
        [
            &self.checkpoints,
            &self.values,
            &self.writes,
            &self.chunks,
            &self.heads,
            &self.leases,
            &self.ledger,
            &self.layout,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_names_are_prefixed() {
        let c = MongoConfig::new("db");
        c.validate().unwrap();
        assert_eq!(c.collection_names().writes, "checkpoint_writes");
        let c = c.collection_prefix("x_");
        assert_eq!(c.collection_names().all()[0], "x_checkpoints");
    }

    #[test]
    fn invalid_settings_are_rejected_with_the_field_name() {
        for (c, field) in [
            (MongoConfig::new(""), "database"),
            (MongoConfig::new("a.b"), "database"),
            (MongoConfig::new("a$"), "database"),
            (MongoConfig::new("x".repeat(64)), "database"),
            (
                MongoConfig::new("db").collection_prefix("$x"),
                "collection_prefix",
            ),
            (
                MongoConfig::new("db").collection_prefix("system."),
                "collection_prefix",
            ),
            (MongoConfig::new("db").list_page_size(0), "list_page_size"),
            (MongoConfig::new("db").chunk_size(10), "chunk_size"),
            (MongoConfig::new("db").chunk_size(64 << 20), "chunk_size"),
            (
                MongoConfig::new("db").ttl(Some(Duration::from_millis(5))),
                "ttl",
            ),
        ] {
            match c.validate() {
                Err(Error::InvalidInput { reason }) => assert!(reason.contains(field), "{reason}"),
                other => panic!("{c:?}: {other:?}"),
            }
        }
    }
}
