#![doc = include_str!("../README.md")]

mod admin;
mod codec;
mod config;
mod coord;
mod core;
mod error;
mod keys;
pub mod langgraph;
mod read;
mod saver;
mod schema;
mod sql;
mod wal;
mod write;

pub use config::{Durability, SqliteSaverBuilder, ThreadTtl};
pub use keys::MAX_IDENTIFIER_BYTES;
pub use saver::SqliteSaver;
pub use sqlx;
