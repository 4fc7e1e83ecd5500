//! The conformance suite through each wrapper and through the canonical stack, over the
//! in-memory saver: a wrapper is transparent for every value that is not a message list
//! needing repair.

use std::sync::Arc;

use checkpoint_conformance::{SaverFactory, factory_fn};
use checkpoint_core::{BoxError, InMemorySaver, Saver};
use checkpoint_sanitize::{
    IdempotentLayer, PendingMarkersLayer, SanitizeConfig, SanitizeOnLoadLayer, SkipUnsafePutLayer,
    StackConfig, canonical_layer,
};

/// A fresh in-memory saver per clause.
fn memory() -> impl SaverFactory {
    factory_fn(|| {
        std::future::ready(Ok::<_, BoxError>(
            Arc::new(InMemorySaver::new()) as Arc<dyn Saver>
        ))
    })
}

mod sanitize_on_load {
    use super::*;
    checkpoint_conformance::conformance_suite!(memory().layered(SanitizeOnLoadLayer::new(
        SanitizeConfig::default().write_back(true)
    )));
}

mod pending_markers {
    use super::*;
    checkpoint_conformance::conformance_suite!(
        memory().layered(PendingMarkersLayer::new(Default::default()))
    );
}

mod skip_unsafe_put {
    use super::*;
    checkpoint_conformance::conformance_suite!(
        memory().layered(SkipUnsafePutLayer::new(Default::default()))
    );
}

mod idempotent {
    use super::*;
    checkpoint_conformance::conformance_suite!(
        memory().layered(IdempotentLayer::new(Default::default()))
    );
}

mod stack {
    use super::*;
    checkpoint_conformance::conformance_suite!(
        memory().layered(canonical_layer(StackConfig::default().write_back(true)))
    );
}

#[test]
fn layered_factories_build_fresh_wrapped_savers() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let factory = memory().layered(IdempotentLayer::new(Default::default()));
        let a = factory.build().await.unwrap();
        let b = factory.build().await.unwrap();
        assert!(format!("{a:?}").contains("Idempotent"), "{a:?}");
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(factory.skip_reason().is_none());
    });
}
