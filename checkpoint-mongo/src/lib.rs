#![doc = include_str!("../README.md")]

mod admin;
mod chunk;
mod codec;
mod config;
mod coord;
mod core;
mod delta;
mod error;
mod keys;
pub mod langgraph;
mod read;
mod saver;
mod schema;
mod txn;
mod write;

pub use config::{
    Atomicity, CollectionNames, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, MongoConfig, TransactionMode,
};
pub use saver::MongoSaver;

/// Entry points for the fuzz targets in `fuzz/`; not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    use mongodb::bson::Document;

    /// Reads `bytes` as a BSON document and decodes it as every stored document this crate
    /// reads back: a checkpoint, a pending-writes document and its entries, a value, and
    /// LangGraph's checkpoint and pending-write documents. Must never panic.
    pub fn stored_document(bytes: &[u8]) {
        let Ok(doc) = Document::from_reader(bytes) else {
            return;
        };
        let _ = crate::codec::checkpoint_row(doc.clone());
        let _ = crate::codec::writes_row(doc.clone());
        let _ = crate::codec::get_value(&mut doc.clone(), "fuzz");
        crate::langgraph::fuzz_document(&doc);
    }
}

/// The MongoDB driver this crate is built on (use it for client options, write concerns,
/// command monitoring).
pub use mongodb;
