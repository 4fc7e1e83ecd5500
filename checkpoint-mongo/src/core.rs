//! The state every module shares: the driver handles, the collections and the settings.
//! Modules depend on this one, never on `saver.rs`.

use std::sync::atomic::AtomicBool;

use checkpoint_core::Capabilities;
use mongodb::bson::Document;
use mongodb::{Client, Collection, Database};

use crate::config::{Atomicity, CollectionNames, MongoConfig};

/// Shared state: the driver handles and the configuration.
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) database: Database,
    pub(crate) config: MongoConfig,
    pub(crate) names: CollectionNames,
    pub(crate) atomicity: Atomicity,
    pub(crate) checkpoints: Collection<Document>,
    pub(crate) values: Collection<Document>,
    pub(crate) writes: Collection<Document>,
    pub(crate) chunks: Collection<Document>,
    pub(crate) heads: Collection<Document>,
    pub(crate) leases: Collection<Document>,
    pub(crate) ledger: Collection<Document>,
    pub(crate) layout: Collection<Document>,
    /// The collections' stored layout once it was found to be one this build knows (by
    /// `setup`, or before the saver's first operation: see `schema::ready`); 0 before.
    pub(crate) layout_version: std::sync::atomic::AtomicI64,
    /// Whether a put may try the client-level `bulkWrite` command (MongoDB 8.0+): starts as
    /// [`MongoConfig::bulk_write`], cleared for good the first time the driver finds the
    /// server too old for it (before sending anything) or the server does not know it.
    pub(crate) bulk_write: AtomicBool,
    /// What recent puts' delta channels keep alive under a TTL (see `delta::retained_by`).
    pub(crate) retention: crate::delta::RetentionMemo,
}

impl Inner {
    pub(crate) fn transactions(&self) -> bool {
        self.atomicity == Atomicity::Transactions
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        // Retention is the collection-wide TTL of `MongoConfig::ttl` (TTL indexes), not per
        // thread.
        let all = Capabilities::all().with_ttl(false);
        if self.transactions() {
            all
        } else {
            all.with_compare_and_set(false).with_leases(false)
        }
    }
}
