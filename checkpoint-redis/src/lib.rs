#![doc = include_str!("../README.md")]

mod admin;
mod chunk;
mod codec;
mod config;
mod conn;
mod coord;
mod core;
mod error;
mod keys;
mod read;
mod saver;
mod scripts;
mod write;

pub use config::{DEFAULT_KEY_PREFIX, RedisSaverBuilder, ThreadTtl, cluster_nodes};

/// Entry points for the fuzz targets in `fuzz/`; not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    /// Reads `bytes` as every stored form this crate parses back: a value field, a
    /// checkpoint record (manifests and metadata tokens), and a whole `load_tuple` reply
    /// (`bytes` parsed as RESP). Must never panic.
    pub fn stored_bytes(bytes: &[u8]) {
        let _ = crate::codec::decode_typed(bytes);
        let _ = crate::codec::record_manifests(bytes);
        let _ = crate::codec::record_tokens(bytes);
        if let Ok(reply) = redis::parse_redis_value(bytes) {
            let _ = crate::codec::decode_tuple("fuzz", reply);
        }
    }
}
pub use saver::RedisSaver;

/// The Bb8 pool crate this saver pools its single-node connections with.
pub use bb8;
/// The Redis driver this saver is built on.
pub use redis;
