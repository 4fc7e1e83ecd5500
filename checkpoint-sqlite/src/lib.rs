#![doc = include_str!("../README.md")]

mod admin;
mod codec;
mod config;
mod coord;
mod core;
mod error;
mod guard;
mod keys;
pub mod langgraph;
mod read;
mod saver;
mod schema;
mod sql;
mod wal;
mod write;

/// Entry points for the fuzz targets in `fuzz/`; not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use std::collections::HashMap;

    use checkpoint_core::{Bytes, TypedValue, ValueType};

    use crate::codec::{HeadRow, assemble_tuples};

    /// Reads `bytes` as the columns of a stored checkpoint row and one value row (eight
    /// parts split at `0xFF`: the checkpoint and metadata columns, the packed writes' index
    /// and bytes, and the value row's channel, version key, type and blob) and decodes them
    /// as a read does. Must never panic.
    pub fn stored_row(bytes: &[u8]) {
        let mut parts = bytes.splitn(8, |&b| b == 0xFF);
        let mut next = || parts.next().unwrap_or_default();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let (checkpoint, metadata, index, packed) = (next(), next(), next(), next());
        let (channel, version, ty, blob) = (next(), next(), next(), next());
        let head = HeadRow {
            thread: "t".into(),
            ns: String::new(),
            id: "c".into(),
            parent: None,
            checkpoint: text(checkpoint),
            metadata: text(metadata),
            writes_index: (!index.is_empty()).then(|| text(index)),
            writes_bytes: Some(packed.to_vec()),
        };
        let value = (!ty.is_empty()).then(|| {
            TypedValue::new(
                ValueType::from(text(ty).as_str()),
                Bytes::copy_from_slice(blob),
            )
        });
        let values = HashMap::from([(
            ("t".to_owned(), String::new(), text(channel), text(version)),
            value,
        )]);
        let _ = assemble_tuples(vec![head], &values);
    }
}

pub use config::{Durability, SqliteSaverBuilder, ThreadTtl};
pub use keys::MAX_IDENTIFIER_BYTES;
pub use saver::SqliteSaver;
pub use sqlx;
