//! The canonical wrapper stack of `checkpoint-sanitize` over Redis: the whole
//! conformance suite, and the field reports' scenarios (seeds 000, 002, 004).

use checkpoint_conformance::SaverFactory;
use checkpoint_sanitize::{StackConfig, canonical_layer, scenarios};

use crate::common;

checkpoint_conformance::conformance_suite!(
    common::RedisFactory::from_env()
        .layered(canonical_layer(StackConfig::default().write_back(true)))
);

/// Every scenario of `checkpoint_sanitize::scenarios::ALL`, each against a fresh saver on
/// this backend (a scenario builds the wrappers it tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_report_scenarios() {
    scenarios::run_all(&common::RedisFactory::from_env()).await;
}
