//! `--backend memory`: the in-memory reference saver of `checkpoint-core`.

use std::sync::{Arc, Mutex, PoisonError};

use checkpoint_core::{InMemorySaver, Result, Saver, async_trait};

use super::{Backend, Floors};

/// The in-memory backend: a new [`InMemorySaver`] per repetition, bytes stored from
/// [`InMemorySaver::stored_bytes`], no server and so no floor.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    /// The saver of the current repetition (clones share its store).
    current: Mutex<Option<InMemorySaver>>,
}

impl MemoryBackend {
    /// A backend that has not made a saver yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &str {
        "memory"
    }

    async fn fresh(&self) -> Result<Arc<dyn Saver>> {
        let saver = InMemorySaver::new();
        let previous = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(saver.clone());
        drop(previous);
        Ok(Arc::new(saver))
    }

    async fn bytes_stored(&self, _saver: &dyn Saver) -> Result<Option<u64>> {
        // `dyn Saver` cannot be downcast; the backend kept a handle sharing the same store.
        let current = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(current.map(|s| s.stored_bytes() as u64))
    }

    async fn floors(&self) -> Result<Option<Floors>> {
        Ok(None)
    }

    async fn teardown(&self) -> Result<()> {
        let last = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(last);
        Ok(())
    }
}
