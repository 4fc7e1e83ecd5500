//! The canonical stack of the four wrappers.

use tower_layer::Layer;

use crate::{
    Idempotent, IdempotentConfig, IdempotentLayer, PendingMarkers, PendingMarkersConfig,
    PendingMarkersLayer, SanitizeConfig, SanitizeOnLoad, SanitizeOnLoadLayer, SkipUnsafePut,
    SkipUnsafePutConfig, SkipUnsafePutLayer,
};

/// The four wrappers in the canonical order (outermost first): [`SanitizeOnLoad`],
/// [`PendingMarkers`], [`SkipUnsafePut`], [`Idempotent`], then the backend. The crate README
/// explains the order.
pub type CanonicalStack<S> = SanitizeOnLoad<PendingMarkers<SkipUnsafePut<Idempotent<S>>>>;

/// The [`Layer`] building a [`CanonicalStack`]: the four layers as a tuple, outermost
/// first (`tower_layer` applies a tuple's first layer outermost).
pub type CanonicalLayer = (
    SanitizeOnLoadLayer,
    PendingMarkersLayer,
    SkipUnsafePutLayer,
    IdempotentLayer,
);

/// The configuration of every layer of the canonical stack.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct StackConfig {
    /// [`SanitizeOnLoad`].
    pub sanitize: SanitizeConfig,
    /// [`PendingMarkers`].
    pub markers: PendingMarkersConfig,
    /// [`SkipUnsafePut`].
    pub skip: SkipUnsafePutConfig,
    /// [`Idempotent`].
    pub idempotent: IdempotentConfig,
}

impl StackConfig {
    /// Sets [`SanitizeConfig::write_back`](crate::SanitizeConfig::write_back): repaired
    /// states are written back as new checkpoints.
    pub fn write_back(mut self, yes: bool) -> Self {
        self.sanitize = self.sanitize.write_back(yes);
        self
    }

    /// Uses `channel` as the message channel in every layer.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        let channel = channel.into();
        self.sanitize.channel = channel.clone();
        self.markers.channel = channel.clone();
        self.skip.channel = channel;
        self
    }
}

/// The layer of the canonical stack.
pub fn canonical_layer(config: StackConfig) -> CanonicalLayer {
    (
        SanitizeOnLoadLayer::new(config.sanitize),
        PendingMarkersLayer::new(config.markers),
        SkipUnsafePutLayer::new(config.skip),
        IdempotentLayer::new(config.idempotent),
    )
}

/// Wraps `backend` in the canonical stack.
///
/// ```
/// use std::sync::Arc;
/// use checkpoint_core::{InMemorySaver, Saver};
/// use checkpoint_sanitize::{StackConfig, canonical_stack};
/// let stack = canonical_stack(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>, StackConfig::default());
/// let _markers = stack.markers();
/// let _effects = stack.idempotent();
/// let _shared: Arc<dyn Saver> = Arc::new(stack);
/// ```
pub fn canonical_stack<S>(backend: S, config: StackConfig) -> CanonicalStack<S> {
    canonical_layer(config).layer(backend)
}

impl<S> CanonicalStack<S> {
    /// The [`PendingMarkers`] layer (outstanding calls, resolution, recovery).
    pub fn markers(&self) -> &PendingMarkers<SkipUnsafePut<Idempotent<S>>> {
        self.get_ref()
    }

    /// The [`SkipUnsafePut`] layer.
    pub fn guard(&self) -> &SkipUnsafePut<Idempotent<S>> {
        self.get_ref().get_ref()
    }

    /// The [`Idempotent`] layer (effects run once, per-thread serializer).
    pub fn idempotent(&self) -> &Idempotent<S> {
        self.get_ref().get_ref().get_ref()
    }
}
