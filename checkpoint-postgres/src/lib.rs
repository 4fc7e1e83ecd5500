#![doc = include_str!("../README.md")]

mod error;
mod migrations;
mod saver;
mod sql;

pub use saver::{MAX_IDENTIFIER_BYTES, PostgresSaver, PostgresSaverBuilder};
pub use sqlx;
