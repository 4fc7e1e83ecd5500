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
mod read;
mod saver;
mod schema;
mod txn;
mod write;

pub use config::{
    Atomicity, CollectionNames, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, MongoConfig, TransactionMode,
};
pub use saver::MongoSaver;

/// The MongoDB driver this crate is built on (use it for client options, write concerns,
/// command monitoring).
pub use mongodb;
