//! The conformance suite against MongoDB (the server at `CHECKPOINT_TEST_MONGO_URL`), with
//! the atomicity the server supports (transactions on a replica set). Each clause runs in
//! its own database, dropped afterwards.

use crate::common;

use checkpoint_mongo::TransactionMode;
use common::MongoFactory;

checkpoint_conformance::conformance_suite!(MongoFactory::new("conf", TransactionMode::Auto));

/// The same clauses with puts written one command per collection, as on servers before
/// MongoDB 8.0 (no `bulkWrite`), and with a TTL (a day, so nothing expires during the
/// clauses), so every put also takes the expiry refreshes and the delta channels'
/// retention.
mod per_collection {
    use super::*;
    checkpoint_conformance::conformance_suite!(
        MongoFactory::new("conf1", TransactionMode::Auto)
            .without_bulk_write()
            .with_ttl(std::time::Duration::from_secs(24 * 3600))
    );
}
