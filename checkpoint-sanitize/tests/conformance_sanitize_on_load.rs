//! The conformance suite against [SanitizeOnLoad] (with write-back on) over the in-memory saver: the wrapper is
//! transparent for every value that is not a message list needing repair.

use std::sync::Arc;

use checkpoint_core::{BoxError, InMemorySaver, Saver, async_trait};
use checkpoint_sanitize::{SanitizeConfig, SanitizeOnLoad};
use conformance_tests::SaverFactory;

struct Factory;

#[async_trait]
impl SaverFactory for Factory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(SanitizeOnLoad::new(
            InMemorySaver::new(),
            SanitizeConfig::default().write_back(true),
        )))
    }
}

conformance_tests::conformance_suite!(Factory);
