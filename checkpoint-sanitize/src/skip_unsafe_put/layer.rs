use tower_layer::Layer;

use super::{SkipUnsafePut, SkipUnsafePutConfig};

/// A [`Layer`] wrapping savers in [`SkipUnsafePut`].
#[derive(Clone, Debug, Default)]
pub struct SkipUnsafePutLayer {
    config: SkipUnsafePutConfig,
}

impl SkipUnsafePutLayer {
    /// A layer with `config`.
    pub fn new(config: SkipUnsafePutConfig) -> Self {
        Self { config }
    }
}

impl<S> Layer<S> for SkipUnsafePutLayer {
    type Service = SkipUnsafePut<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SkipUnsafePut::new(inner, self.config.clone())
    }
}
