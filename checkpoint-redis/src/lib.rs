#![doc = include_str!("../README.md")]

mod chunk;
mod config;
mod conn;
mod error;
mod keys;
mod record;
mod saver;
mod scripts;

pub use config::{DEFAULT_KEY_PREFIX, RedisSaverBuilder};
pub use saver::{RedisSaver, ThreadTtl};

/// The Bb8 pool crate this saver pools its single-node connections with.
pub use bb8;
/// The Redis driver this saver is built on.
pub use redis;
