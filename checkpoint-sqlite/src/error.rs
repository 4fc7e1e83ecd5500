//! The backend's private error type and its mapping into [`checkpoint_core::Error`].

use checkpoint_core::Error;

const BACKEND: &str = "sqlite";

/// The message of the `RAISE(ABORT, ...)` of a compare-and-set put that lost.
pub(crate) const CONFLICT: &str = "checkpoint-rs: conflict";
/// The message of the `RAISE(ABORT, ...)` of a write with a stale fencing token.
pub(crate) const STALE_FENCE: &str = "checkpoint-rs: stale fence";

/// What can go wrong inside this crate before it becomes a core [`Error`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum SqliteError {
    /// A driver error, classified by [`classify`].
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// A stored row this crate cannot read back.
    #[error("corrupt row: {what}")]
    Corrupt {
        what: String,
        #[source]
        source: Option<checkpoint_core::BoxError>,
    },
    /// The database was set up by a newer version of this crate.
    #[error(
        "the database's schema is at version {found}, newer than this build of \
         checkpoint-sqlite knows ({known}); upgrade the crate to open it"
    )]
    SchemaTooNew { found: i64, known: i64 },
    /// The database cannot hold this crate's data as it is.
    #[error("unsupported database: {0}")]
    Unsupported(String),
}

impl SqliteError {
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        SqliteError::Corrupt {
            what: what.into(),
            source: None,
        }
    }

    pub(crate) fn corrupt_because(
        what: impl Into<String>,
        source: impl Into<checkpoint_core::BoxError>,
    ) -> Self {
        SqliteError::Corrupt {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

pub(crate) type SqliteResult<T> = Result<T, SqliteError>;

impl From<SqliteError> for Error {
    fn from(e: SqliteError) -> Self {
        match e {
            SqliteError::Sqlx(e) => classify(e),
            SqliteError::Corrupt { what, source } => Error::Serialization {
                reason: format!("sqlite: {what}"),
                source,
            },
            e @ (SqliteError::SchemaTooNew { .. } | SqliteError::Unsupported(_)) => {
                Error::Backend {
                    backend: BACKEND,
                    source: Box::new(e),
                }
            }
        }
    }
}

/// Which `RAISE` of the put triggers a driver error carries, if any.
pub(crate) fn raised(e: &sqlx::Error) -> Option<&'static str> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    [CONFLICT, STALE_FENCE]
        .into_iter()
        .find(|m| db.message() == *m)
}

/// SQLite result codes (primary, the low byte of an extended code) after which retrying the
/// same call may succeed: the database is busy or locked by another connection or process,
/// or an I/O error or interruption happened.
fn transient_code(code: i64) -> bool {
    matches!(
        code & 0xff,
        5  // SQLITE_BUSY
        | 6  // SQLITE_LOCKED
        | 9  // SQLITE_INTERRUPT
        | 10 // SQLITE_IOERR
        | 13 // SQLITE_FULL
        | 15 // SQLITE_PROTOCOL
    )
}

/// Whether `e` is `SQLITE_BUSY` (any extended form): another connection holds a lock this
/// call needed, and SQLite did not (or could no longer) wait for it.
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i64>().ok())
            .is_some_and(|c| c & 0xff == 5),
        _ => false,
    }
}

/// Maps a driver error by the driver's own classification: busy or locked databases, I/O
/// and pool failures become [`Error::Unavailable`]; SQLite's "too big" becomes
/// [`Error::InvalidInput`]; the rest [`Error::Backend`]. The driver error stays the source.
pub(crate) fn classify(e: sqlx::Error) -> Error {
    let transient = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().and_then(|c| c.parse::<i64>().ok());
            if code.is_some_and(|c| c & 0xff == 18) {
                // SQLITE_TOOBIG
                return Error::InvalidInput {
                    reason: format!("sqlite cannot store this input: {}", db.message()),
                };
            }
            code.is_some_and(transient_code)
        }
        _ => false,
    };
    if transient {
        Error::Unavailable {
            backend: BACKEND,
            source: Box::new(e),
        }
    } else {
        Error::Backend {
            backend: BACKEND,
            source: Box::new(e),
        }
    }
}
