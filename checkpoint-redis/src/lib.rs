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

pub use config::{DEFAULT_KEY_PREFIX, RedisSaverBuilder, ThreadTtl};
pub use saver::RedisSaver;

/// The Bb8 pool crate this saver pools its single-node connections with.
pub use bb8;
/// The Redis driver this saver is built on.
pub use redis;
