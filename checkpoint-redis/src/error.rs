//! The backend's private error type and its mapping into [`checkpoint_core::Error`].

use checkpoint_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Name of this backend in core errors.
pub(crate) const BACKEND: &str = "redis";

/// What can go wrong talking to Redis, before it becomes a core [`Error`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum RedisSaverError {
    /// The driver failed (connection, timeout, server error, ...).
    #[error("redis command failed")]
    Redis(#[source] RedisError),
    /// No pooled connection became available within the pool timeout.
    #[error("timed out waiting for a pooled redis connection")]
    PoolTimeout,
    /// A script answered with something this crate does not understand.
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
    /// The server's memory policy could delete keys of stored threads (see
    /// `RedisSaverBuilder::allow_eviction`): why, followed by what that does and the fix.
    #[error(
        "{0}: a thread is several keys, so an evicted one leaves threads that load without \
         some of their values or writes; set maxmemory-policy to noeviction, or build with \
         allow_eviction(true) to accept it"
    )]
    Evicting(String),
    /// The keys under the prefix are in a stored layout this build does not know.
    #[error(
        "the keys under this prefix are in stored layout {found}, which this build of \
         checkpoint-redis does not know (it writes layout {known}): a newer version wrote \
         them; upgrade the crate"
    )]
    LayoutTooNew { found: String, known: i64 },
}

impl From<RedisError> for RedisSaverError {
    fn from(e: RedisError) -> Self {
        RedisSaverError::Redis(e)
    }
}

/// Whether a driver error is worth retrying: the connection dropped or was refused, an I/O
/// timeout, the server (or cluster) is temporarily unable to serve, or it refuses writes at
/// its memory limit (`OOM`, under `noeviction`: memory frees up as threads are deleted or
/// expire, as a full disk does for the SQLite saver).
///
/// Refused credentials are not: the driver marks them for reconnecting (a token may have
/// been refreshed since), but the same call with the same credentials fails again.
pub(crate) fn redis_is_transient(e: &RedisError) -> bool {
    if authentication_failed(e) {
        return false;
    }
    if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || out_of_memory(e)
    {
        return true;
    }
    matches!(
        e.kind(),
        ErrorKind::ClusterConnectionNotFound
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            )
    )
}

/// Whether the server refused the connection's credentials. The Cluster client reports a
/// first connection that failed on every node as I/O, with the node's error only as text.
fn authentication_failed(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed
        || (e.kind() == ErrorKind::Io
            && e.detail()
                .is_some_and(|d| d.contains("AuthenticationFailed")))
}

/// Whether the server refused a command at its memory limit, alone or inside a `MULTI`
/// (which `EXECABORT`s with the command's `OOM`).
fn out_of_memory(e: &RedisError) -> bool {
    e.code() == Some("OOM")
        || e.clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, s)| s.code() == "OOM"))
}

/// Whether the connection an error came from must be replaced.
pub(crate) fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

impl RedisSaverError {
    /// Whether the operation may succeed if retried unchanged.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            RedisSaverError::Redis(e) => redis_is_transient(e),
            RedisSaverError::PoolTimeout => true,
            RedisSaverError::Protocol(_)
            | RedisSaverError::Evicting(_)
            | RedisSaverError::LayoutTooNew { .. } => false,
        }
    }
}

impl From<RedisSaverError> for Error {
    fn from(e: RedisSaverError) -> Self {
        if e.is_transient() {
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
}

/// A reply that does not have the shape a script returns.
pub(crate) fn protocol(what: impl Into<String>) -> Error {
    RedisSaverError::Protocol(what.into()).into()
}

/// A stored record that does not decode.
pub(crate) fn corrupt(what: impl Into<String>) -> Error {
    Error::Serialization {
        reason: what.into(),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn io_errors_are_unavailable_with_their_source() {
        let e = RedisError::from(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        let core: Error = RedisSaverError::Redis(e).into();
        assert!(core.is_transient());
        assert!(matches!(
            core,
            Error::Unavailable {
                backend: "redis",
                ..
            }
        ));
        let source = std::error::Error::source(&core).expect("kept source");
        assert!(
            std::error::Error::source(source).is_some(),
            "driver error kept"
        );
        let core: Error = RedisSaverError::PoolTimeout.into();
        assert!(core.is_transient());
    }

    #[test]
    fn refused_credentials_are_backend_errors() {
        // As the driver reports them from one server, and from a Cluster's first connect.
        let single = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let cluster = RedisError::from((
            ErrorKind::Io,
            "Failed to create initial connections",
            "Io: Password authentication failed - AuthenticationFailed".to_owned(),
        ));
        for e in [single, cluster] {
            let core: Error = RedisSaverError::Redis(e).into();
            assert!(!core.is_transient(), "{core}");
            assert!(matches!(core, Error::Backend { .. }), "{core}");
        }
        let refused = RedisError::from((
            ErrorKind::Io,
            "Failed to create initial connections",
            "Io: Connection refused (os error 111)".to_owned(),
        ));
        assert!(redis_is_transient(&refused));
    }

    #[test]
    fn server_errors_are_backend_errors() {
        let e = RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "ERR bad"));
        let core: Error = RedisSaverError::Redis(e).into();
        assert!(!core.is_transient());
        assert!(matches!(core, Error::Backend { .. }));
        let e = RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "LOADING"));
        assert!(Error::from(RedisSaverError::Redis(e)).is_transient());
        assert!(!Error::from(RedisSaverError::Protocol("x".into())).is_transient());
    }
}
