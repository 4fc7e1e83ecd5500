//! The contract's clauses against the saver forced into [`Atomicity::OrderedWrites`] (no
//! transactions), the mode a standalone `mongod` gets: the same server as
//! `tests/conformance.rs`, but every put and maintenance operation takes the ordered,
//! idempotent, transaction-free code path, and the clauses of the operations this mode
//! does not advertise (compare-and-set, leases) check that they return
//! `Error::Unsupported`.
//!
//! The suite is expanded here a second time (as each backend's `tests/stack.rs` does) with a
//! factory forcing the transaction-free mode, so every clause the suite has, now or later,
//! runs in both modes.

use crate::common;

use checkpoint_mongo::{Atomicity, TransactionMode};
use common::MongoFactory;

// With a TTL (a day: nothing expires during the clauses), so ordered puts also take the
// expiry refreshes and the delta channels' retention.
checkpoint_conformance::conformance_suite!(
    MongoFactory::new("ord", TransactionMode::Disabled)
        .with_ttl(std::time::Duration::from_secs(24 * 3600))
);

#[tokio::test]
async fn disabled_transactions_mean_ordered_writes_and_fewer_capabilities() {
    if common::skip("disabled_transactions_mean_ordered_writes_and_fewer_capabilities") {
        return;
    }
    use checkpoint_core::Saver;
    let factory = MongoFactory::new("ordcap", TransactionMode::Disabled);
    let saver = factory.saver().await.unwrap();
    assert_eq!(saver.atomicity(), Atomicity::OrderedWrites);
    let caps = saver.capabilities();
    assert!(!caps.compare_and_set && !caps.leases);
    assert!(caps.copy_thread && caps.prune && caps.delete_for_runs && caps.ledger);
    checkpoint_conformance::SaverFactory::teardown(&factory).await;
}
