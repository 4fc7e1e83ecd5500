#![doc = include_str!("../README.md")]

pub mod inspect;
pub mod migrate;
pub mod render;
pub mod store;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The store URL cannot be used (exit status 2).
    #[error("bad store URL: {0}")]
    Url(String),
    /// What the command names does not exist (exit status 1).
    #[error("{0}")]
    NotFound(String),
    /// The saver failed (exit status 1).
    #[error(transparent)]
    Saver(#[from] checkpoint_core::Error),
}

impl CliError {
    /// The process exit status for this error: 2 for a bad invocation, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Url(_) => 2,
            _ => 1,
        }
    }
}
