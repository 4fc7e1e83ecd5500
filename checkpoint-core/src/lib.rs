#![doc = include_str!("../README.md")]

pub mod backend;
mod checkpoint;
mod config;
pub mod delta;
mod error;
mod id;
pub mod integrity;
mod lease;
mod memory;
mod metadata;
mod options;
mod retry;
mod saver;
#[cfg(test)]
mod testing;
mod timeout;
mod trace;
mod tuple;
mod value;
mod version;
pub mod writes;

pub use checkpoint::{CHECKPOINT_FORMAT_VERSION, Checkpoint, now_iso8601};
pub use config::{CheckpointConfig, NS_END, NS_SEP, child_namespace, namespace_levels};
pub use delta::DeltaChannelHistory;
pub use error::{BoxError, Error, Result};
pub use id::{checkpoint_id_unix_millis, new_checkpoint_id};
pub use integrity::{IntegrityScan, StorageIssue};
pub use lease::{Claim, Lease};
pub use memory::{InMemorySaver, InMemorySaverBuilder};
pub use metadata::{CheckpointMetadata, Source, json_equal};
pub use options::{
    Capabilities, ListOptions, PruneStrategy, PutMode, PutOptions, PutWritesOptions, ThreadTtl,
};
pub use retry::{RetriesExhausted, Retry, RetryLayer};
pub use saver::{Saver, SaverExt};
pub use timeout::{TimedOut, Timeout, TimeoutLayer};
pub use trace::{Tracing, TracingLayer};
pub use tuple::CheckpointTuple;
pub use value::{
    DecodeLimits, Format, Serializer, TypedValue, ValueType, decode_json, decode_msgpack,
};
pub use value::{json, msgpack};
pub use version::{ChannelVersion, ChannelVersions, next_version};
pub use writes::{PendingWrite, SPECIAL_CHANNELS};

pub use async_trait::async_trait;
pub use bytes::Bytes;
pub use futures::stream::BoxStream;
pub use rmpv;
pub use serde_json;
