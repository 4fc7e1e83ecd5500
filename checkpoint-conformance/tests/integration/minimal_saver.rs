//! The suite against a saver that advertises no optional operation: every optional clause
//! must take its "returns `Error::Unsupported`" branch and still pass, and the required
//! clauses must not depend on optional operations.

use std::sync::Arc;

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{
    BoxError, BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig,
    CheckpointMetadata, CheckpointTuple, Error, InMemorySaver, ListOptions, PruneStrategy, PutMode,
    PutOptions, PutWritesOptions, Result, Saver, TypedValue, async_trait,
};

/// Only the required operations, delegated to the reference; everything optional refused.
#[derive(Debug, Default)]
struct MinimalSaver(InMemorySaver);

#[async_trait]
impl Saver for MinimalSaver {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }
    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        self.0.get_tuple(config).await
    }
    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        self.0.list(options)
    }
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        if options.mode == PutMode::CompareAndSet {
            return Err(Error::Unsupported {
                op: "put(compare_and_set)",
            });
        }
        self.0
            .put(config, checkpoint, metadata, new_versions, options)
            .await
    }
    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        if options.fence.is_some() {
            return Err(Error::Unsupported {
                op: "put_writes(fence)",
            });
        }
        self.0.put_writes(config, writes, task_id, options).await
    }
    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.0.delete_thread(thread_id).await
    }
    async fn copy_thread(&self, _: &str, _: &str) -> Result<()> {
        Err(Error::Unsupported { op: "copy_thread" })
    }
    async fn prune(&self, _: &[String], _: PruneStrategy) -> Result<()> {
        Err(Error::Unsupported { op: "prune" })
    }
    async fn delete_for_runs(&self, _: &[String]) -> Result<()> {
        Err(Error::Unsupported {
            op: "delete_for_runs",
        })
    }
    async fn acquire_lease(
        &self,
        _: &str,
        _: &str,
        _: std::time::Duration,
    ) -> Result<Option<checkpoint_core::Lease>> {
        Err(Error::Unsupported {
            op: "acquire_lease",
        })
    }
    async fn renew_lease(
        &self,
        _: &checkpoint_core::Lease,
        _: std::time::Duration,
    ) -> Result<checkpoint_core::Lease> {
        Err(Error::Unsupported { op: "renew_lease" })
    }
    async fn release_lease(&self, _: &checkpoint_core::Lease) -> Result<()> {
        Err(Error::Unsupported {
            op: "release_lease",
        })
    }
    async fn claim(&self, _: &str, _: std::time::Duration) -> Result<checkpoint_core::Claim> {
        Err(Error::Unsupported { op: "claim" })
    }
    async fn complete_claim(&self, _: &str, _: u64, _: TypedValue) -> Result<()> {
        Err(Error::Unsupported {
            op: "complete_claim",
        })
    }
    async fn abandon_claim(&self, _: &str, _: u64) -> Result<()> {
        Err(Error::Unsupported {
            op: "abandon_claim",
        })
    }
}

struct MinimalFactory;

#[async_trait]
impl SaverFactory for MinimalFactory {
    async fn build(&self) -> std::result::Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(MinimalSaver::default()))
    }
}

checkpoint_conformance::conformance_suite!(MinimalFactory);
