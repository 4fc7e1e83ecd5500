//! The backend's private error type and its mapping into [`checkpoint_core::Error`].

use checkpoint_core::Error;

const BACKEND: &str = "postgres";

/// What can go wrong inside this crate before it becomes a core [`Error`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum PgError {
    /// A driver error, classified by [`classify`].
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// The connection's `search_path` is not the configured schema: the server (or a pooler
    /// in front of it) ignored the startup option that sets it.
    #[error(
        "schema {schema:?} was configured, but the connection's search_path is {found:?}: \
         something between the saver and PostgreSQL ignored the search_path startup option \
         (PgBouncer drops it when `options` is in ignore_startup_parameters), and the saver \
         would read and write the tables of another schema. Connect to PostgreSQL directly, \
         or leave the schema unset and give the role that search_path \
         (ALTER ROLE ... SET search_path = ...)"
    )]
    SearchPathIgnored { schema: String, found: String },
    /// The schema holds this crate's objects at a migration newer than this build knows.
    #[error(
        "the schema's checkpoint-rs objects are at migration {found}, newer than this build \
         of checkpoint-postgres knows ({known}): a newer version set it up, and this one \
         could store what that version no longer reads the same way; upgrade the crate"
    )]
    SchemaTooNew { found: i32, known: i32 },
    /// A stored row this crate cannot read back.
    #[error("corrupt row: {what}")]
    Corrupt {
        what: String,
        #[source]
        source: Option<checkpoint_core::BoxError>,
    },
}

impl PgError {
    pub(crate) fn corrupt(
        what: impl Into<String>,
        source: impl Into<checkpoint_core::BoxError>,
    ) -> Self {
        PgError::Corrupt {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

/// SQLSTATE codes after which retrying the same call may succeed: the session ended (see
/// [`session_ended`]), the server turned read-only (see [`read_only`]), the statement lost a
/// race or waited too long, or the server ran out of a resource that frees up (disk space,
/// memory, connections; as a full disk is for the SQLite saver).
fn transient_sqlstate(code: &str) -> bool {
    session_ended(code)
        || read_only(code)
        || code == "40001" // serialization_failure
        || code == "40P01" // deadlock_detected
        || code == "53000" // insufficient_resources
        || code == "53100" // disk_full
        || code == "53200" // out_of_memory
        || code == "53300" // too_many_connections
        || code == "55P03" // lock_not_available
        || code == "57P03" // cannot_connect_now
        || code == "57014" // query_canceled (statement timeout)
}

/// SQLSTATE codes with which the server ends a session: a connection exception, a shutdown
/// or `pg_terminate_backend` (57P01), crash recovery (57P02), and the session timeouts
/// (`idle_session_timeout`, 57P05; `idle_in_transaction_session_timeout`, 25P03), whose
/// message a pooled connection finds waiting at its next call.
fn session_ended(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P05" | "25P03")
}

/// SQLSTATE 25006 (read_only_sql_transaction): the server no longer takes writes. After a
/// failover the old primary, now a standby, keeps the connections made to it, while new
/// connections go where the service's address now points; a pool would hand the stale ones
/// out until their lifetime ends (30 minutes by default).
fn read_only(code: &str) -> bool {
    code == "25006"
}

/// Whether a call failed because its connection was dead, died under it, or can no longer
/// write: the socket failed or reached its end, the server ended the session
/// ([`session_ended`]), or it turned read-only ([`read_only`]). Such a call did not commit,
/// or (its answer lost) committed a statement that an idempotent call may run again; its
/// connection is closed.
pub(crate) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| session_ended(&code) || read_only(&code)),
        _ => false,
    }
}

/// SQLSTATE codes that mean the input cannot be stored.
fn input_sqlstate(code: &str) -> bool {
    code == "22P05" // untranslatable_character (NUL in text/jsonb)
        || code == "22021" // character_not_in_repertoire
        || code == "54000" // program_limit_exceeded (index row too large)
        || code == "22001" // string_data_right_truncation
}

impl From<PgError> for Error {
    fn from(e: PgError) -> Self {
        match e {
            PgError::Sqlx(e) => classify(e),
            PgError::Corrupt { what, source } => Error::Serialization {
                reason: format!("postgres: {what}"),
                source,
            },
            e @ (PgError::SearchPathIgnored { .. } | PgError::SchemaTooNew { .. }) => {
                Error::Backend {
                    backend: BACKEND,
                    source: Box::new(e),
                }
            }
        }
    }
}

/// Maps a driver error by the driver's own classification: connection and pool failures and
/// transient SQLSTATEs become [`Error::Unavailable`]; input the server cannot store becomes
/// [`Error::InvalidInput`] (with the driver error's message); the rest [`Error::Backend`].
pub(crate) fn classify(e: sqlx::Error) -> Error {
    let transient = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => match db.code() {
            Some(code) if input_sqlstate(&code) => {
                return Error::InvalidInput {
                    reason: format!("postgres cannot store this input: {}", db.message()),
                };
            }
            Some(code) => transient_sqlstate(&code),
            None => false,
        },
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

pub(crate) type PgResult<T> = Result<T, PgError>;
