//! The error type shared by every saver, wrapper and tool in the workspace.

use std::error::Error as StdError;

/// A boxed error from a driver or another library, kept as the `source` of an [`Error`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// `Result` with the workspace's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a [`Saver`](crate::Saver) operation can fail with.
///
/// Backends keep their own private error types and map them into these variants using the
/// driver's classification, keeping the driver error as `source`. Use
/// [`is_transient`](Error::is_transient) to decide whether a call may be retried as is.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The addressed object does not exist (used by operations that require it to).
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// A compare-and-set put lost: the parent it named is no longer the head of its
    /// `(thread_id, checkpoint_ns)`.
    #[error(
        "compare-and-set conflict on thread {thread_id:?} namespace {checkpoint_ns:?}: \
         expected head {expected:?}, found {found:?}"
    )]
    Conflict {
        /// Thread of the put.
        thread_id: String,
        /// Namespace of the put.
        checkpoint_ns: String,
        /// The head the writer expected (the parent it named; `None` = empty namespace).
        expected: Option<String>,
        /// The head actually found (`None` = empty namespace).
        found: Option<String>,
    },

    /// A call carried a fencing token that is no longer current: another holder has since been
    /// granted the thread's lease (or the ledger key's claim).
    #[error("stale fencing token {token} for {scope}: the current token is {current}")]
    StaleFence {
        /// What the token guards: `thread <id>` or `ledger key <key>`.
        scope: String,
        /// The token the call carried.
        token: u64,
        /// The current token (`0`: none was ever granted).
        current: u64,
    },

    /// The caller passed something the contract does not allow (missing thread id, an id the
    /// backend cannot store, inconsistent versions, ...).
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// Human-readable explanation, naming the offending field.
        reason: String,
    },

    /// A wrapper's policy refused the call (for example a guard that will not persist a
    /// state it deems unsafe). Nothing was written.
    #[error("{by} refused the call: {reason}")]
    Rejected {
        /// The component that refused (e.g. `SkipUnsafePut`).
        by: &'static str,
        /// Why.
        reason: String,
    },

    /// The saver does not implement this optional operation (see
    /// [`Capabilities`](crate::Capabilities)).
    #[error("operation not supported by this saver: {op}")]
    Unsupported {
        /// Name of the operation.
        op: &'static str,
    },

    /// A value could not be encoded or decoded.
    #[error("serialization error: {reason}")]
    Serialization {
        /// What failed.
        reason: String,
        /// The codec's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// Decoding stopped because the input exceeds a configured
    /// [`DecodeLimits`](crate::DecodeLimits) bound.
    #[error("decode limit exceeded: {limit} is {actual}, the maximum is {max}")]
    LimitExceeded {
        /// Which limit (`bytes`, `depth`, `elements`).
        limit: &'static str,
        /// The value seen (or a lower bound of it).
        actual: u64,
        /// The configured maximum.
        max: u64,
    },

    /// The backend could not be reached or timed out; retrying later may succeed.
    #[error("{backend} is unavailable")]
    Unavailable {
        /// Backend name (`postgres`, `redis`, ...).
        backend: &'static str,
        /// The driver error.
        #[source]
        source: BoxError,
    },

    /// The backend answered with an error that retrying will not fix.
    #[error("{backend} error")]
    Backend {
        /// Backend name (`postgres`, `redis`, ...).
        backend: &'static str,
        /// The driver error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Whether the same call may succeed if retried unchanged (connection loss, timeout,
    /// pool exhaustion, serialization failure of a concurrent transaction).
    ///
    /// A [`Conflict`](Error::Conflict) is not transient: the caller must re-read the head and
    /// decide what to write.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// The error's message and its sources', `: `-separated: what to log or show where only
    /// text travels. A source whose text already ends the message (sqlx's database errors
    /// print theirs) is not repeated (see [`causes`](Self::causes)).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        for cause in self.causes() {
            text.push_str(": ");
            text.push_str(&cause);
        }
        text
    }

    /// The texts of the error's sources, outermost first, for showing one per line. A source
    /// whose text ends the text before it (the message, or the source it came from) is left
    /// out: drivers often print their cause in their own message.
    pub fn causes(&self) -> Vec<String> {
        let mut last = self.to_string();
        let mut out = Vec::new();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let shown = cause.to_string();
            if !last.ends_with(&shown) {
                out.push(shown.clone());
            }
            last = shown;
            source = cause.source();
        }
        out
    }

    /// A stable, lower-case name of the variant (`"conflict"`, `"unavailable"`, ...), for
    /// logs, metrics and bindings that map errors to their own types.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::Conflict { .. } => "conflict",
            Error::StaleFence { .. } => "stale_fence",
            Error::InvalidInput { .. } => "invalid_input",
            Error::Rejected { .. } => "rejected",
            Error::Unsupported { .. } => "unsupported",
            Error::Serialization { .. } => "serialization",
            Error::LimitExceeded { .. } => "limit_exceeded",
            Error::Unavailable { .. } => "unavailable",
            Error::Backend { .. } => "backend",
        }
    }

    /// [`Error::StaleFence`] for a thread's lease: `token` is not `current`.
    pub fn stale_lease(thread_id: &str, token: u64, current: u64) -> Self {
        Error::StaleFence {
            scope: format!("thread {thread_id:?}"),
            token,
            current,
        }
    }

    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::Serialization`] with a source.
    pub fn serialization(reason: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Serialization {
            reason: reason.into(),
            source: Some(source.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver error that prints its cause in its own message, as sqlx's database errors do.
    #[derive(Debug, thiserror::Error)]
    #[error("error returned from database: {0}")]
    struct Driver(#[source] std::io::Error);

    #[test]
    fn chain_shows_every_cause_once() {
        let e = Error::Backend {
            backend: "sqlite",
            source: Box::new(Driver(std::io::Error::other("database is locked"))),
        };
        assert_eq!(
            e.chain(),
            format!("{e}: error returned from database: database is locked")
        );
        let plain = Error::Backend {
            backend: "sqlite",
            source: Box::new(std::io::Error::other("disk full")),
        };
        assert_eq!(plain.chain(), format!("{plain}: disk full"));
        assert_eq!(
            Error::invalid("bad").chain(),
            Error::invalid("bad").to_string()
        );
    }

    /// An error that prints its source in its own message and has one, as the redis
    /// crate's I/O errors do.
    #[derive(Debug, thiserror::Error)]
    #[error("command failed: {0}")]
    struct Repeating(#[source] std::io::Error);

    #[test]
    fn causes_leave_out_what_the_text_before_already_says() {
        let e = Error::Unavailable {
            backend: "redis",
            source: Box::new(Repeating(std::io::Error::other("connection refused"))),
        };
        assert_eq!(e.causes(), vec!["command failed: connection refused"]);
        assert_eq!(
            e.chain(),
            "redis is unavailable: command failed: connection refused"
        );
        let nested = Error::Backend {
            backend: "postgres",
            source: Box::new(std::io::Error::other("disk full")),
        };
        assert_eq!(nested.causes(), vec!["disk full"]);
        assert!(Error::invalid("bad").causes().is_empty());
    }
}
