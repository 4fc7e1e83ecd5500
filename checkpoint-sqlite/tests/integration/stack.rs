//! The canonical wrapper stack of `checkpoint-sanitize` over SQLite: the whole conformance
//! suite, and the field reports' scenarios (seeds 000, 002, 004).

use checkpoint_conformance::SaverFactory;
use checkpoint_sanitize::{StackConfig, canonical_layer, scenarios};

use crate::common::SqliteFactory;

checkpoint_conformance::conformance_suite!(
    SqliteFactory::default().layered(canonical_layer(StackConfig::default().write_back(true)))
);

/// Every scenario of `checkpoint_sanitize::scenarios::ALL`, each against a fresh database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_report_scenarios() {
    let factory = SqliteFactory::default();
    scenarios::run_all(&factory).await;
    factory.teardown().await;
}
