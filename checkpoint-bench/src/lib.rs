#![doc = include_str!("../README.md")]

pub mod backend;
pub mod payload;
pub mod report;
pub mod rng;
pub mod rss;
pub mod runner;
pub mod stats;
pub mod validate;
pub mod workload;

pub use backend::{BACKENDS, Backend, BackendOptions, Floors, MongoDurability, open};
pub use report::RunReport;
pub use runner::run;
pub use workload::Params;
