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

pub use config::PostgresSaverBuilder;
pub use keys::MAX_IDENTIFIER_BYTES;
pub use saver::PostgresSaver;
pub use sqlx;
