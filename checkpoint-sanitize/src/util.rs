//! Helpers shared by the wrappers.

use checkpoint_core::{
    CheckpointConfig, CheckpointMetadata, CheckpointTuple, Error, PutOptions, Result, Saver,
    Source, TypedValue,
};
use serde_json::{Value, json};

/// The metadata key under which this crate records what it did to a checkpoint it wrote.
pub const METADATA_KEY: &str = "checkpoint_sanitize";

/// The address of a stored tuple without extra keys.
pub(crate) fn address(config: &CheckpointConfig) -> CheckpointConfig {
    let mut c =
        CheckpointConfig::new(config.thread_id.clone()).with_ns(config.checkpoint_ns.clone());
    c.checkpoint_id = config.checkpoint_id.clone();
    c
}

/// Writes a successor of `tuple` whose `channel` holds `value`, as a manual state update
/// (`source: "update"`, `step + 1`, the parent's `parents`), with `note` recorded under
/// [`METADATA_KEY`]. Compare-and-set when the saver supports it, fenced with `fence`.
pub(crate) async fn put_successor<S: Saver + ?Sized>(
    saver: &S,
    tuple: &CheckpointTuple,
    channel: &str,
    value: TypedValue,
    note: Value,
    fence: Option<u64>,
) -> Result<CheckpointConfig> {
    let mut checkpoint = tuple.checkpoint.successor();
    let version = checkpoint.set_typed(channel, value);
    let step = tuple.metadata.step().unwrap_or(-1).saturating_add(1);
    let mut metadata = CheckpointMetadata::new()
        .with_source(Source::Update)
        .with_step(step);
    metadata.insert(
        "parents",
        tuple
            .metadata
            .get("parents")
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    metadata.insert(METADATA_KEY, note);
    let mut options = if saver.capabilities().compare_and_set {
        PutOptions::compare_and_set()
    } else {
        PutOptions::new()
    };
    if let Some(token) = fence {
        options = options.fence(token);
    }
    saver
        .put(
            &address(&tuple.config),
            checkpoint,
            metadata,
            [(channel.to_owned(), version)].into(),
            options,
        )
        .await
}

/// Whether an error only says that someone else moved the head first.
pub(crate) fn lost_race(e: &Error) -> bool {
    matches!(e, Error::Conflict { .. })
}
