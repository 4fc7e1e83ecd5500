use tower_layer::Layer;

use super::{SanitizeConfig, SanitizeOnLoad};

/// A [`Layer`] wrapping savers in [`SanitizeOnLoad`].
#[derive(Clone, Debug, Default)]
pub struct SanitizeOnLoadLayer {
    config: SanitizeConfig,
}

impl SanitizeOnLoadLayer {
    /// A layer with `config`.
    pub fn new(config: SanitizeConfig) -> Self {
        Self { config }
    }
}

impl<S> Layer<S> for SanitizeOnLoadLayer {
    type Service = SanitizeOnLoad<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SanitizeOnLoad::new(inner, self.config.clone())
    }
}
