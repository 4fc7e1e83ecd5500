use tower_layer::Layer;

use super::{PendingMarkers, PendingMarkersConfig};

/// A [`Layer`] wrapping savers in [`PendingMarkers`].
#[derive(Clone, Debug, Default)]
pub struct PendingMarkersLayer {
    config: PendingMarkersConfig,
}

impl PendingMarkersLayer {
    /// A layer with `config`.
    pub fn new(config: PendingMarkersConfig) -> Self {
        Self { config }
    }
}

impl<S> Layer<S> for PendingMarkersLayer {
    type Service = PendingMarkers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PendingMarkers::new(inner, self.config.clone())
    }
}
