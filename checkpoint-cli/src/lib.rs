#![doc = include_str!("../README.md")]

pub mod diff;
pub mod inspect;
pub mod migrate;
pub mod prune;
pub mod render;
pub mod select;
pub mod store;
pub mod verify;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The store URL cannot be used (exit status 2).
    #[error("bad store URL: {0}")]
    Url(String),
    /// An option's value cannot be used: a thread pattern, a time (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// What the command names does not exist (exit status 1).
    #[error("{0}")]
    NotFound(String),
    /// A repair could not be written (exit status 1).
    #[error("repair not applied: {0}")]
    NotApplied(String),
    /// The saver failed (exit status 1).
    #[error(transparent)]
    Saver(#[from] checkpoint_core::Error),
}

impl CliError {
    /// The process exit status for this error: 2 for a bad invocation, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Url(_) | CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}
