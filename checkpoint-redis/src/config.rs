//! [`RedisSaverBuilder`]: where to connect and how the saver behaves.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use checkpoint_core::{Error, Result};
use redis::AsyncConnectionConfig;

use crate::chunk::{ChunkMemo, MEMO_MAX_BYTES};
use crate::conn::{Link, Manager};
use crate::core::Inner;
use crate::error::RedisSaverError;
use crate::keys::{Layout, valid_prefix};

pub use checkpoint_core::ThreadTtl;

/// The key prefix used when none is configured.
pub const DEFAULT_KEY_PREFIX: &str = "checkpoint";

#[derive(Clone)]
enum Target {
    Url(String),
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
}

/// Configures and connects a [`RedisSaver`](crate::RedisSaver).
///
/// ```no_run
/// # async fn demo() -> checkpoint_core::Result<()> {
/// use std::time::Duration;
/// use checkpoint_redis::RedisSaver;
///
/// let saver = RedisSaver::builder("redis://127.0.0.1:6379")
///     .key_prefix("myapp:checkpoints")
///     .pool_size(16)
///     .default_ttl(Some(Duration::from_secs(7 * 24 * 3600)))
///     .refresh_on_read(true)
///     .build()
///     .await?;
/// # let _ = saver; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisSaverBuilder {
    target: Target,
    prefix: String,
    pool_size: u32,
    chunk_memo_bytes: usize,
    pool_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    default_ttl: Option<Duration>,
    refresh_on_read: bool,
}

impl fmt::Debug for RedisSaverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSaverBuilder")
            .field("target", &redacted_target(&self.target))
            .field("prefix", &self.prefix)
            .field("pool_size", &self.pool_size)
            .field("chunk_memo_bytes", &self.chunk_memo_bytes)
            .field("pool_timeout", &self.pool_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("default_ttl", &self.default_ttl)
            .field("refresh_on_read", &self.refresh_on_read)
            .finish()
    }
}

impl RedisSaverBuilder {
    /// A single server at `url` (`redis://[user:password@]host:port[/db]`, or `rediss://`
    /// where the redis crate is built with TLS).
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Url(url.into()))
    }

    /// A Redis Cluster reached through any of `nodes` (URLs of some of its primaries).
    #[cfg(feature = "cluster")]
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            pool_size: 16,
            chunk_memo_bytes: MEMO_MAX_BYTES,
            pool_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(10),
            default_ttl: None,
            refresh_on_read: false,
        }
    }

    /// Prefix of every key this saver writes (default [`DEFAULT_KEY_PREFIX`]): 1 to 128
    /// bytes of `[A-Za-z0-9._:/-]`. Savers with different prefixes are fully isolated.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Most connections of the single-node pool (default 16; each is multiplexed).
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// How long a call waits for a pooled connection (default 5 s); then it fails with
    /// [`Error::Unavailable`].
    pub fn pool_timeout(mut self, d: Duration) -> Self {
        self.pool_timeout = d;
        self
    }

    /// How long establishing a connection may take (default 2 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long a command may wait for its reply (default 10 s; large values need time).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = d;
        self
    }

    /// A TTL applied to every key of a thread on each write to it (`None`, the default:
    /// data never expires). Threads can override it with
    /// [`Saver::set_thread_ttl`](checkpoint_core::Saver::set_thread_ttl).
    pub fn default_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Whether reads (`get_tuple`, thread listings) also refresh a thread's TTL (default
    /// `false`: only writes do).
    pub fn refresh_on_read(mut self, yes: bool) -> Self {
        self.refresh_on_read = yes;
        self
    }

    /// Bytes of recently written list values the saver keeps (shared with the caller's
    /// values, not copied) so that the next version of a growing list only hashes its new
    /// chunks (default 64 MiB; `0` keeps none). A tool writing many threads once each, like
    /// a migration, needs only a few.
    pub fn chunk_memo_bytes(mut self, bytes: usize) -> Self {
        self.chunk_memo_bytes = bytes;
        self
    }

    /// Connects (checking the server answers): the state of a new saver.
    pub(crate) async fn connect(self) -> Result<Inner> {
        if !valid_prefix(&self.prefix) {
            return Err(Error::invalid(format!(
                "key prefix {:?} must be 1 to 128 bytes of [A-Za-z0-9._:/-]",
                self.prefix
            )));
        }
        if self.pool_size == 0 {
            return Err(Error::invalid("pool_size must be at least 1"));
        }
        if self.default_ttl.is_some_and(|t| t.as_millis() == 0) {
            return Err(Error::invalid("default_ttl must be at least 1 ms"));
        }
        let redacted = redacted_target(&self.target);
        let link = match &self.target {
            Target::Url(url) => {
                let client =
                    redis::Client::open(url.as_str()).map_err(|e| Error::InvalidInput {
                        reason: format!("invalid redis URL {}: {e}", redact_url(url)),
                    })?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(Some(self.response_timeout));
                let epoch = Arc::new(AtomicU64::new(0));
                let manager = Manager::new(client, config, Arc::clone(&epoch));
                let pool = bb8::Pool::builder()
                    .max_size(self.pool_size)
                    .min_idle(Some(1))
                    .connection_timeout(self.pool_timeout)
                    .retry_connection(false)
                    .test_on_check_out(true)
                    .build(manager)
                    .await
                    .map_err(|e| Error::from(RedisSaverError::Redis(e)))?;
                Link::Single { pool, epoch }
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(nodes) => {
                if nodes.is_empty() {
                    return Err(Error::invalid("a cluster needs at least one node URL"));
                }
                let client =
                    redis::cluster::ClusterClient::builder(nodes.iter().map(String::as_str))
                        .connection_timeout(self.connect_timeout)
                        .response_timeout(self.response_timeout)
                        .build()
                        .map_err(|e| Error::InvalidInput {
                            reason: format!("invalid cluster configuration {redacted}: {e}"),
                        })?;
                let conn = client
                    .get_async_connection()
                    .await
                    .map_err(|e| Error::from(RedisSaverError::Redis(e)))?;
                Link::Cluster(conn)
            }
        };
        link.preload().await.map_err(Error::from)?;
        let ping = redis::cmd("PING");
        link.command(&ping).await.map_err(Error::from)?;
        Ok(Inner {
            link,
            layout: Layout::new(&self.prefix),
            default_ttl_ms: self.default_ttl.map_or(0, duration_ms),
            refresh_on_read: self.refresh_on_read,
            target: redacted,
            chunk_memo: ChunkMemo::new(self.chunk_memo_bytes),
        })
    }
}

/// A duration in whole milliseconds, at least 1 for a non-zero duration.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 4);
    if ms == 0 && !d.is_zero() { 1 } else { ms }
}

fn redacted_target(t: &Target) -> String {
    match t {
        Target::Url(u) => redact_url(u),
        #[cfg(feature = "cluster")]
        Target::Cluster(nodes) => format!(
            "cluster[{}]",
            nodes
                .iter()
                .map(|n| redact_url(n))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A URL with its password (and a `password=` query parameter) replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let host = &authority[at..];
            match userinfo.find(':') {
                Some(c) => format!("{}:***{host}", &userinfo[..c]),
                None => format!("***{host}"),
            }
        }
        None => authority.to_owned(),
    };
    let tail = match tail.find("password=") {
        Some(i) => {
            let end = tail[i..].find('&').map_or(tail.len(), |e| i + e);
            format!("{}password=***{}", &tail[..i], &tail[end..])
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(redact_url("redis://s3cret@host"), "redis://***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            redact_url("redis://host/?password=s3cret&x=1"),
            "redis://host/?password=***&x=1"
        );
        #[cfg(feature = "cluster")]
        {
            let b = RedisSaverBuilder::cluster(["redis://u:p4ss@a:1", "redis://b:2"]);
            let shown = format!("{b:?}");
            assert!(!shown.contains("p4ss"), "{shown}");
        }
    }

    #[test]
    fn durations_round_up_to_a_millisecond() {
        assert_eq!(duration_ms(Duration::from_micros(10)), 1);
        assert_eq!(duration_ms(Duration::ZERO), 0);
        assert_eq!(duration_ms(Duration::from_secs(2)), 2000);
    }
}
