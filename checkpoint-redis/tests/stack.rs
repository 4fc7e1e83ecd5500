//! The canonical wrapper stack of `checkpoint-sanitize` over Redis: the whole
//! conformance suite, and the field reports' scenarios (seeds 000, 002, 004).

mod common;

use std::sync::Arc;

use checkpoint_core::{BoxError, Saver, async_trait};
use checkpoint_sanitize::{StackConfig, canonical_stack, scenarios};
use conformance_tests::SaverFactory;

/// The stack (write-back on) over a saver with a fresh key prefix.
struct StackFactory(common::RedisFactory);

#[async_trait]
impl SaverFactory for StackFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        let mut config = StackConfig::default();
        config.sanitize = config.sanitize.write_back(true);
        Ok(Arc::new(canonical_stack(self.0.build().await?, config)))
    }
    async fn teardown(&self) {
        self.0.teardown().await;
    }
    fn skip_reason(&self) -> Option<String> {
        self.0.skip_reason()
    }
}

conformance_tests::conformance_suite!(StackFactory(common::RedisFactory::from_env()));

/// Every scenario of `checkpoint_sanitize::scenarios::ALL` (new ones included), each against
/// a fresh saver on this backend (the scenario builds the wrappers it tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_report_scenarios() {
    for (name, run) in scenarios::ALL {
        let factory = common::RedisFactory::from_env();
        if let Some(reason) = factory.skip_reason() {
            assert!(!conformance_tests::servers_required(), "{reason}");
            eprintln!("SKIPPED: {reason}");
            return;
        }
        let saver = factory.build().await.expect("saver");
        let outcome = run(saver).await;
        factory.teardown().await;
        if let Err(e) = outcome {
            panic!("scenario {name} failed: {e}");
        }
    }
    assert!(!scenarios::ALL.is_empty());
}
