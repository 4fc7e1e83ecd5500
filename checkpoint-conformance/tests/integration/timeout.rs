//! The conformance suite against the reference saver behind [`Timeout`]: the wrapper changes
//! nothing a call that answers in time returns, streams included.

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{BoxError, InMemorySaver, Saver, Timeout, async_trait};

/// Each clause gets a new, empty in-memory saver behind a deadline no call comes near.
struct TimeoutFactory;

#[async_trait]
impl SaverFactory for TimeoutFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(Timeout::new(
            InMemorySaver::new(),
            Duration::from_secs(60),
        )))
    }
}

checkpoint_conformance::conformance_suite!(TimeoutFactory);
