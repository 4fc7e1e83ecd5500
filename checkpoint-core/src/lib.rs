#![doc = include_str!("../README.md")]

mod checkpoint;
mod config;
mod error;
mod id;
mod lease;
mod memory;
mod metadata;
mod saver;
mod tuple;
mod value;
mod version;
pub mod writes;

pub use checkpoint::{CHECKPOINT_FORMAT_VERSION, Checkpoint, now_iso8601};
pub use config::{CheckpointConfig, NS_END, NS_SEP, child_namespace, namespace_levels};
pub use error::{BoxError, Error, Result};
pub use id::{checkpoint_id_unix_millis, new_checkpoint_id};
pub use lease::{Claim, Lease};
pub use memory::InMemorySaver;
pub use metadata::{CheckpointMetadata, Source, json_equal};
pub use saver::{
    Capabilities, ListOptions, PruneStrategy, PutMode, PutOptions, PutWritesOptions, Saver,
    SaverExt, validate_claim_request, validate_lease_request, validate_put,
};
pub use tuple::CheckpointTuple;
pub use value::{DecodeLimits, Format, Serializer, TypedValue, ValueType, decode_msgpack};
pub use version::{ChannelVersion, ChannelVersions, next_version};
pub use writes::{PendingWrite, SPECIAL_CHANNELS};

pub use async_trait::async_trait;
pub use bytes::Bytes;
pub use futures::stream::BoxStream;
pub use rmpv;
pub use serde_json;
