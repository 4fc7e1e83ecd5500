#![doc = include_str!("../README.md")]

mod admin;
mod codec;
mod config;
mod coord;
mod core;
mod error;
mod keys;
mod read;
mod saver;
mod schema;
mod sql;
mod write;

/// Entry points for the fuzz targets in `fuzz/`; not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    /// Reads `bytes` as the columns of a stored checkpoint row (four parts split at `0xFF`:
    /// the checkpoint and metadata `jsonb` texts, a value type and a value blob) and
    /// decodes them as a read does. Must never panic.
    pub fn stored_row(bytes: &[u8]) {
        let mut parts = bytes.splitn(4, |&b| b == 0xFF);
        let (checkpoint, metadata, value_type, blob) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        let value_type = String::from_utf8_lossy(value_type);
        let _ = crate::codec::fuzz_row(checkpoint, metadata, &value_type, blob);
    }
}

pub use config::PostgresSaverBuilder;
pub use keys::MAX_IDENTIFIER_BYTES;
pub use saver::PostgresSaver;
pub use sqlx;
