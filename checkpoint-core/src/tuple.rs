//! What a read returns.

use crate::{Checkpoint, CheckpointConfig, CheckpointMetadata, PendingWrite};

/// A checkpoint with its address, metadata, parent and pending writes.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointTuple {
    /// The full address (thread, namespace, checkpoint id) of this checkpoint.
    pub config: CheckpointConfig,
    /// The checkpoint, with the values of its current channel versions.
    pub checkpoint: Checkpoint,
    /// The metadata, exactly as put.
    pub metadata: CheckpointMetadata,
    /// The address of the parent checkpoint, if it has one.
    pub parent_config: Option<CheckpointConfig>,
    /// Pending writes recorded against this checkpoint, ordered by `(task_path, task_id, idx)`.
    pub pending_writes: Vec<PendingWrite>,
}
