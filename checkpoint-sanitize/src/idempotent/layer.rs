use tower_layer::Layer;

use super::{Idempotent, IdempotentConfig};

/// A [`Layer`] wrapping savers in [`Idempotent`].
///
/// Each wrapped saver gets its own lock map and lease registry; clone the resulting
/// [`Idempotent`] (not the layer) to share them.
#[derive(Clone, Debug, Default)]
pub struct IdempotentLayer {
    config: IdempotentConfig,
}

impl IdempotentLayer {
    /// A layer with `config`.
    pub fn new(config: IdempotentConfig) -> Self {
        Self { config }
    }
}

impl<S> Layer<S> for IdempotentLayer {
    type Service = Idempotent<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotent::new(inner, self.config.clone())
    }
}
