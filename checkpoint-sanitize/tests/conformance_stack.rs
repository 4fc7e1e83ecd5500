//! The conformance suite against the canonical stack of all four wrappers (write-back on) over the in-memory saver: the wrapper is
//! transparent for every value that is not a message list needing repair.

use std::sync::Arc;

use checkpoint_core::{BoxError, InMemorySaver, Saver, async_trait};
use checkpoint_sanitize::{StackConfig, canonical_stack};
use conformance_tests::SaverFactory;

struct Factory;

#[async_trait]
impl SaverFactory for Factory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(canonical_stack(
            InMemorySaver::new(),
            stack_config(),
        )))
    }
}

conformance_tests::conformance_suite!(Factory);

fn stack_config() -> StackConfig {
    let mut config = StackConfig::default();
    config.sanitize = config.sanitize.write_back(true);
    config
}
