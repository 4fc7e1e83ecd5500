//! The backend's private error type and its mapping into [`checkpoint_core::Error`].
//!
//! Classification uses the driver's own information: error labels
//! (`TransientTransactionError`, `RetryableWriteError`, `UnknownTransactionCommitResult`),
//! the error kind (I/O, server selection, pool cleared) and server error codes (duplicate key,
//! write conflict, not primary, shutdown, ...). The driver error always stays reachable as the
//! `source` of the core error.

use mongodb::error::{
    ErrorKind, RETRYABLE_WRITE_ERROR, TRANSIENT_TRANSACTION_ERROR,
    UNKNOWN_TRANSACTION_COMMIT_RESULT, WriteFailure,
};

use checkpoint_core::Error;

/// The backend name in core errors.
pub(crate) const BACKEND: &str = "mongo";

/// Server error code of a unique index violation.
pub(crate) const DUPLICATE_KEY: i32 = 11000;
/// Server error code of a write conflict between concurrent writers.
pub(crate) const WRITE_CONFLICT: i32 = 112;
/// Server error code of a command the server does not know.
pub(crate) const COMMAND_NOT_FOUND: i32 = 59;

/// Server error codes after which retrying the same call may succeed: the deployment is
/// electing, stepping down, shutting down, unreachable or overloaded, or the operation ran
/// into a concurrent writer. (The driver's retryable-read and retryable-write code lists,
/// plus write and lock conflicts.)
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    24,    // LockTimeout
    50,    // MaxTimeMSExpired
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    134,   // ReadConcernMajorityNotAvailableYet
    189,   // PrimarySteppedDown
    251,   // NoSuchTransaction (aborted by the server; the whole transaction may be retried)
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
    462,   // IngressRequestRateLimitExceeded
];

/// Everything that can go wrong inside the backend.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MongoError {
    /// The driver or the server reported an error.
    #[error("MongoDB driver error")]
    Driver(#[source] mongodb::error::Error),
    /// A stored document does not have the shape this backend writes (written by something
    /// else, or damaged).
    #[error("stored {what} is malformed: {reason}")]
    Corrupt {
        /// Which kind of document.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A stored JSON field (checkpoint or metadata) does not decode.
    #[error("stored {what} does not decode")]
    Json {
        /// Which field.
        what: &'static str,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A transaction kept failing with transient errors for the configured retry time.
    #[error("gave up after {attempts} attempts of a transaction that kept conflicting")]
    RetriesExhausted {
        /// How many attempts ran.
        attempts: u32,
        /// The last error.
        #[source]
        last: Box<MongoError>,
    },
    /// Optimistic concurrency on one document kept losing to concurrent writers.
    #[error("gave up after {attempts} attempts to update a document that kept changing")]
    Contention {
        /// How many attempts ran.
        attempts: u32,
    },
    /// The transaction body asks to be run again from the start (it learned something that
    /// changes what it writes, e.g. that a value is stored already).
    #[error("transaction to be run again")]
    RetryTransaction(#[source] Box<MongoError>),
    /// The collections are in a stored layout this build does not know.
    #[error(
        "the collections are in stored layout {found}, which this build of checkpoint-mongo \
         does not know (it writes layout {known}): a newer version wrote them; upgrade the \
         crate"
    )]
    LayoutTooNew {
        /// The layout document's `v`, as found.
        found: String,
        /// The layout this build writes.
        known: i64,
    },
    /// A core error raised inside a transaction body (conflict, stale fence, invalid input),
    /// carried out so the transaction is aborted and the error returned as is.
    #[error("{0}")]
    Domain(Box<Error>),
}

impl From<mongodb::error::Error> for MongoError {
    fn from(e: mongodb::error::Error) -> Self {
        MongoError::Driver(e)
    }
}

impl From<Error> for MongoError {
    fn from(e: Error) -> Self {
        MongoError::Domain(Box::new(e))
    }
}

impl MongoError {
    pub(crate) fn corrupt(what: &'static str, reason: impl Into<String>) -> Self {
        MongoError::Corrupt {
            what,
            reason: reason.into(),
        }
    }

    /// Wraps this error to make the transaction runner start over.
    pub(crate) fn retry_transaction(self) -> Self {
        MongoError::RetryTransaction(Box::new(self))
    }

    /// Whether retrying the whole transaction may succeed.
    pub(crate) fn is_transient_transaction_error(&self) -> bool {
        match self {
            MongoError::RetryTransaction(_) => true,
            MongoError::Driver(e) => {
                e.contains_label(TRANSIENT_TRANSACTION_ERROR)
                    || codes(e).iter().any(|c| *c == WRITE_CONFLICT || *c == 251)
                    || is_network(e)
            }
            _ => false,
        }
    }

    /// Whether this is a commit whose outcome is unknown (retry the commit itself).
    pub(crate) fn is_unknown_commit_result(&self) -> bool {
        matches!(self, MongoError::Driver(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT))
    }

    /// Whether retrying the same call may succeed.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            MongoError::Driver(e) => {
                e.contains_label(TRANSIENT_TRANSACTION_ERROR)
                    || e.contains_label(RETRYABLE_WRITE_ERROR)
                    || e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT)
                    || is_network(e)
                    || codes(e).iter().any(|c| TRANSIENT_CODES.contains(c))
            }
            MongoError::RetriesExhausted { .. } | MongoError::Contention { .. } => true,
            MongoError::RetryTransaction(inner) => inner.is_transient(),
            MongoError::Corrupt { .. }
            | MongoError::Json { .. }
            | MongoError::LayoutTooNew { .. }
            | MongoError::Domain(_) => false,
        }
    }
}

impl From<MongoError> for Error {
    fn from(e: MongoError) -> Self {
        match e {
            MongoError::Domain(inner) => *inner,
            e if e.is_transient() => Error::Unavailable {
                backend: BACKEND,
                source: Box::new(e),
            },
            e => Error::Backend {
                backend: BACKEND,
                source: Box::new(e),
            },
        }
    }
}

/// Maps a driver error straight into the core error.
pub(crate) fn driver(e: mongodb::error::Error) -> Error {
    MongoError::Driver(e).into()
}

fn is_network(e: &mongodb::error::Error) -> bool {
    matches!(
        e.kind.as_ref(),
        ErrorKind::Io(_)
            | ErrorKind::ServerSelection { .. }
            | ErrorKind::ConnectionPoolCleared { .. }
    ) || driver_source(e).is_some_and(is_network)
}

/// The driver error a driver error wraps (a `bulkWrite` that failed after some of its
/// writes succeeded carries the command's error this way).
fn driver_source(e: &mongodb::error::Error) -> Option<&mongodb::error::Error> {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<mongodb::error::Error>())
}

/// Every server error code the error carries (a batch can carry several).
pub(crate) fn codes(e: &mongodb::error::Error) -> Vec<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => vec![c.code],
        ErrorKind::Write(WriteFailure::WriteError(w)) => vec![w.code],
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => vec![w.code],
        ErrorKind::InsertMany(m) => {
            let mut v: Vec<i32> = m.write_errors.iter().flatten().map(|w| w.code).collect();
            v.extend(m.write_concern_error.iter().map(|w| w.code));
            v
        }
        ErrorKind::BulkWrite(b) => {
            let mut v: Vec<i32> = b.write_errors.values().map(|w| w.code).collect();
            v.extend(b.write_concern_errors.iter().map(|w| w.code));
            v.extend(driver_source(e).map(codes).unwrap_or_default());
            v
        }
        _ => Vec::new(),
    }
}

/// Whether the error is a unique-index violation.
pub(crate) fn is_duplicate_key(e: &mongodb::error::Error) -> bool {
    codes(e).contains(&DUPLICATE_KEY)
}

/// For an unordered `insert_many`, or an ordered `bulkWrite` stopped by a write error:
/// whether every error is a duplicate key (the documents that failed already exist) and
/// there is no write concern error.
pub(crate) fn only_duplicate_keys(e: &mongodb::error::Error) -> bool {
    match e.kind.as_ref() {
        ErrorKind::InsertMany(m) => {
            m.write_concern_error.is_none()
                && m.write_errors
                    .as_ref()
                    .is_some_and(|w| !w.is_empty() && w.iter().all(|w| w.code == DUPLICATE_KEY))
        }
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == DUPLICATE_KEY,
        ErrorKind::BulkWrite(b) => {
            b.write_concern_errors.is_empty()
                && !b.write_errors.is_empty()
                && b.write_errors.values().all(|w| w.code == DUPLICATE_KEY)
                && driver_source(e).is_none()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_errors_pass_through_unchanged() {
        let e: Error = MongoError::from(Error::invalid("bad")).into();
        assert!(matches!(e, Error::InvalidInput { reason } if reason == "bad"));
    }

    #[test]
    fn corrupt_documents_are_backend_errors_with_a_source() {
        let e: Error = MongoError::corrupt("checkpoint", "no field t").into();
        assert!(!e.is_transient());
        match e {
            Error::Backend { backend, source } => {
                assert_eq!(backend, "mongo");
                assert!(source.to_string().contains("no field t"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exhausted_retries_are_transient() {
        let e: Error = MongoError::Contention { attempts: 3 }.into();
        assert!(e.is_transient());
        assert!(matches!(
            e,
            Error::Unavailable {
                backend: "mongo",
                ..
            }
        ));
    }

    #[test]
    fn custom_driver_errors_are_backend_errors() {
        let e = driver(mongodb::error::Error::custom("x"));
        assert!(matches!(e, Error::Backend { .. }));
        let source = std::error::Error::source(&e).expect("source kept");
        assert!(source.to_string().contains("driver"));
    }
}
