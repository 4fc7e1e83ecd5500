//! [`RedisSaverBuilder`]: where to connect and how the saver behaves.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bb8::ManageConnection as _;
use checkpoint_core::{BoxError, Error, Result};
use redis::{AsyncConnectionConfig, Value};

use crate::chunk::{ChunkMemo, MEMO_MAX_BYTES};
use crate::conn::{Link, Manager};
use crate::core::Inner;
use crate::error::RedisSaverError;
use crate::keys::{Layout, thread_entry, valid_prefix};

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
    allow_eviction: bool,
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
            .field("allow_eviction", &self.allow_eviction)
            .finish()
    }
}

/// The node URLs of a Redis Cluster written as one URL:
/// `redis+cluster://[user[:password]@]host[:port][,host[:port]...][/0][#insecure]`, or
/// `rediss+cluster://...` for TLS.
///
/// The nodes are some of the Cluster's primaries (the client discovers the rest); a node
/// without a port is at 6379. The credentials, the scheme and what follows the nodes apply
/// to every node, as the Cluster client needs them equal: the result is one
/// `redis[s]://[user:password@]host:port[...]` URL per node. The credentials may be given
/// once, before the first node, or before every node alike; a `,` or `@` in them is written
/// `%2C` or `%40`. Anything else is [`Error::InvalidInput`], with the password redacted.
///
/// ```
/// assert_eq!(
///     checkpoint_redis::cluster_nodes("rediss+cluster://app:pw@a:7000,b:7001").unwrap(),
///     ["rediss://app:pw@a:7000", "rediss://app:pw@b:7001"],
/// );
/// ```
pub fn cluster_nodes(url: &str) -> Result<Vec<String>> {
    let bad = |why: &str| Error::invalid(format!("Redis Cluster URL {}: {why}", redact_url(url)));
    let (scheme, rest) = match url.split_once("://") {
        Some(("redis+cluster", rest)) => ("redis", rest),
        Some(("rediss+cluster", rest)) => ("rediss", rest),
        _ => return Err(bad("expected redis+cluster:// or rediss+cluster://")),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut credentials: Option<&str> = None;
    let mut hosts = Vec::new();
    for node in authority.split(',') {
        let host = match node.rsplit_once('@') {
            Some((userinfo, host)) => {
                if credentials.is_some_and(|c| c != userinfo) {
                    return Err(bad(
                        "the nodes name different credentials (a Cluster has one set)",
                    ));
                }
                credentials = Some(userinfo);
                host
            }
            None => node,
        };
        if host.is_empty() {
            return Err(bad("a node is empty (expected host[:port] between commas)"));
        }
        hosts.push(host);
    }
    let userinfo = credentials.map_or(String::new(), |c| format!("{c}@"));
    Ok(hosts
        .into_iter()
        .map(|host| format!("{scheme}://{userinfo}{host}{tail}"))
        .collect())
}

/// Whether `url` names a Redis Cluster (see [`cluster_nodes`]).
fn is_cluster_url(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

#[cfg(feature = "cluster")]
fn cluster_target(url: &str) -> Result<Target> {
    Ok(Target::Cluster(cluster_nodes(url)?))
}

#[cfg(not(feature = "cluster"))]
fn cluster_target(url: &str) -> Result<Target> {
    cluster_nodes(url)?;
    Err(Error::invalid(
        "a Redis Cluster URL needs checkpoint-redis's `cluster` feature",
    ))
}

impl RedisSaverBuilder {
    /// The server or Cluster at `url`: a single server as
    /// `redis://[user:password@]host:port[/db]`, or, with the default `tls-rustls` feature,
    /// `rediss://` for TLS (`#insecure` at the end skips verifying the server's
    /// certificate); with the default `cluster` feature, a Cluster as
    /// `redis+cluster://[user:password@]host:port,host:port` (`rediss+cluster://` for TLS;
    /// see [`cluster_nodes`]).
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
            allow_eviction: false,
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

    /// Whether to accept a server whose memory limit lets it delete this saver's keys
    /// (default `false`).
    ///
    /// A Redis server at its `maxmemory` evicts keys when its `maxmemory-policy` is not
    /// `noeviction`: any key with `allkeys-*`, keys that have a TTL with `volatile-*`. A
    /// thread is several keys (records, values, writes), so an evicted key leaves threads
    /// that load without some of their values or writes, or vanish. `build` reads the
    /// policy (`INFO memory`) and refuses a server with a memory limit that can evict any
    /// key, or keys with a TTL when [`default_ttl`](Self::default_ttl) gives every key one;
    /// with `volatile-*`, [`Saver::set_thread_ttl`](checkpoint_core::Saver::set_thread_ttl)
    /// refuses to give a thread a TTL. `true` skips these checks: for a cache whose
    /// contents may go.
    pub fn allow_eviction(mut self, yes: bool) -> Self {
        self.allow_eviction = yes;
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
        let target = match &self.target {
            Target::Url(url) if is_cluster_url(url) => cluster_target(url)?,
            other => other.clone(),
        };
        let redacted = redacted_target(&self.target);
        let link = match &target {
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
                // The first connection is made here, so that a wrong address or refused
                // credentials fail at once with the driver's error: the pool's own attempts
                // keep their errors (bb8 drops them) and retry until the pool timeout. They
                // must retry: a call waiting for a connection is woken only by one that
                // succeeds, so with a single attempt, one that failed during an outage of a
                // moment failed the call at the pool timeout, with the server long back.
                let first = manager
                    .connect()
                    .await
                    .map_err(|e| unreachable_at(RedisSaverError::Redis(e).into(), &redacted))?;
                let pool = bb8::Pool::builder()
                    .max_size(self.pool_size)
                    .min_idle(Some(1))
                    .connection_timeout(self.pool_timeout)
                    .retry_connection(true)
                    .test_on_check_out(true)
                    .build_unchecked(manager);
                // Ready for the first call, beside the one the pool opens itself (`min_idle`).
                // A one-connection pool has reserved its only place for that one: there this
                // connection is refused and closed.
                let _ = pool.add(first);
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
                    .map_err(|e| unreachable_at(RedisSaverError::Redis(e).into(), &redacted))?;
                Link::Cluster(conn)
            }
        };
        link.preload()
            .await
            .map_err(|e| unreachable_at(e.into(), &redacted))?;
        // Reading the layout is also the check that the server answers.
        let layout = Layout::new(&self.prefix);
        let stored = read_layout(&link, &layout)
            .await
            .map_err(|e| unreachable_at(e, &redacted))?;
        let policy = eviction_policy(&link).await;
        let ttl_evictable = if self.allow_eviction {
            None
        } else {
            refuse_eviction(&policy, self.default_ttl.is_some())?
        };
        // On a server that may evict any key (accepted with `allow_eviction`), the thread
        // index, one key, could go while threads stay: such a saver lists threads with a
        // `SCAN`, and opening the prefix writes nothing to a server at its memory limit.
        let thread_index = if matches!(policy, Eviction::AnyKey(_)) {
            false
        } else {
            thread_index(&link, &layout, stored).await?
        };
        Ok(Inner {
            link,
            ttl_evictable,
            layout,
            default_ttl_ms: self.default_ttl.map_or(0, duration_ms),
            refresh_on_read: self.refresh_on_read,
            target: redacted,
            chunk_memo: ChunkMemo::new(self.chunk_memo_bytes),
            thread_index,
        })
    }
}

/// `e`, when connecting to the server failed, naming the server (its URL with the password
/// redacted): a resolver's, socket's or handshake's message alone does not say which one.
fn unreachable_at(e: Error, target: &str) -> Error {
    let at = |source| {
        Box::new(Unreachable {
            target: target.to_owned(),
            source,
        })
    };
    match e {
        Error::Unavailable { backend, source } => Error::Unavailable {
            backend,
            source: at(source),
        },
        Error::Backend { backend, source } => Error::Backend {
            backend,
            source: at(source),
        },
        other => other,
    }
}

/// The cause of a connect that found no server: where it looked, and why.
#[derive(Debug)]
struct Unreachable {
    target: String,
    source: BoxError,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot connect to {}", self.target)
    }
}

impl std::error::Error for Unreachable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// The stored layout this build writes and reads: the keys of a thread, their fields and
/// records, the global index. A version that stores anything differently writes a greater
/// number, so that builds before it refuse the prefix instead of misreading it.
///
/// Layout 2 added the thread entries of the global index (`list_threads` reads them);
/// layout 1 is brought up to it in place (see [`thread_index`]).
const LAYOUT: i64 = 2;

/// What a prefix's layout key says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    /// No mark: a new prefix, or keys written before the mark existed (layout 1).
    Unmarked,
    /// Layout 1.
    One,
    /// [`LAYOUT`].
    Current,
}

/// The layout a prefix is stored in; a layout this build does not know (a newer version
/// wrote it) is refused.
async fn read_layout(link: &Link, layout: &Layout) -> Result<Stored> {
    let found = link
        .command(redis::cmd("GET").arg(layout.layout_key()))
        .await
        .map_err(Error::from)?;
    let found = match found {
        Value::Nil => return Ok(Stored::Unmarked),
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::SimpleString(s) => s,
        other => format!("{other:?}"),
    };
    match found.as_str() {
        "1" => Ok(Stored::One),
        "2" => Ok(Stored::Current),
        _ => Err(RedisSaverError::LayoutTooNew {
            found,
            known: LAYOUT,
        }
        .into()),
    }
}

/// Whether the global index has an entry for every thread: the prefix is stored in
/// [`LAYOUT`], or was brought up to it now (layout 1, or unmarked).
///
/// Bringing layout 1 up adds an entry for every thread found by a `SCAN` of its `cp` keys,
/// then marks the prefix: a saver never trusts the thread entries of a prefix that is not
/// marked 2. An unmarked prefix without a global index key holds no checkpoint (every put
/// writes that index), so it is marked without a scan. A client that may not write (a
/// replica, an ACL without `SET`) leaves the prefix as it is, and its `list_threads` scans.
/// A newer build that marked the prefix in between is refused, as [`read_layout`] does.
async fn thread_index(link: &Link, layout: &Layout, stored: Stored) -> Result<bool> {
    if stored == Stored::Current {
        return Ok(true);
    }
    match upgrade_layout(link, layout, stored == Stored::Unmarked).await {
        Ok(None) => Ok(true),
        Ok(Some(found)) => Err(RedisSaverError::LayoutTooNew {
            found,
            known: LAYOUT,
        }
        .into()),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "could not bring the stored layout up to date; list_threads will scan the key space"
            );
            Ok(false)
        }
    }
}

/// Layout 1 → 2: a thread entry for every thread, then the mark (see [`thread_index`]).
/// `Some(mark)` when the prefix was marked with a layout this build does not know meanwhile.
async fn upgrade_layout(
    link: &Link,
    layout: &Layout,
    unmarked: bool,
) -> std::result::Result<Option<String>, RedisSaverError> {
    let global = &layout.global_keys()[0];
    let empty = unmarked
        && matches!(
            link.command(redis::cmd("EXISTS").arg(global)).await?,
            Value::Int(0)
        );
    if !empty {
        let keys = link.scan_keys(&layout.thread_records_pattern()).await?;
        let mut entries = keys.iter().filter_map(|k| {
            let thread = layout.thread_of_records_key(k)?;
            Some(thread_entry(&thread, std::str::from_utf8(k).ok()?))
        });
        loop {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(global);
            let mut n = 0;
            for e in entries.by_ref().take(1000) {
                zadd.arg(0).arg(e);
                n += 1;
            }
            if n == 0 {
                break;
            }
            link.command(&zadd).await?;
        }
    }
    // Marked only over layout 1 (or no mark); answers the mark it found otherwise.
    let mark = "local v = redis.call('GET', KEYS[1]) \
                if v and v ~= '1' and v ~= ARGV[1] then return v end \
                redis.call('SET', KEYS[1], ARGV[1]) \
                return false";
    let mut c = redis::cmd("EVAL");
    c.arg(mark).arg(1).arg(layout.layout_key()).arg(LAYOUT);
    Ok(match link.command(&c).await? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    })
}

/// What a server's memory limit lets it delete.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Eviction {
    /// No limit, or `noeviction`.
    Never,
    /// The policy is not known (an `INFO` reply without it).
    Unknown,
    /// Keys that have a TTL (`volatile-*`): the policy.
    KeysWithTtl(String),
    /// Any key (`allkeys-*`): the policy.
    AnyKey(String),
}

/// What the `INFO memory` text of one server says about eviction.
fn eviction(info: &str) -> Eviction {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    if field("maxmemory") == Some("0") {
        return Eviction::Never;
    }
    match field("maxmemory_policy") {
        None => Eviction::Unknown,
        Some("noeviction") => Eviction::Never,
        Some(p) if p.starts_with("allkeys-") => Eviction::AnyKey(p.to_owned()),
        Some(p) if p.starts_with("volatile-") => Eviction::KeysWithTtl(p.to_owned()),
        Some(_) => Eviction::Unknown,
    }
}

/// The texts of a reply: one server's, or each node's of a Cluster.
fn texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| texts(i, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(_, i)| texts(i, out)),
        _ => {}
    }
}

/// What the server (every primary of a Cluster; the worst of them) may evict at its memory
/// limit, from `INFO memory`.
async fn eviction_policy(link: &Link) -> Eviction {
    let info = match link.command(redis::cmd("INFO").arg("memory")).await {
        Ok(v) => v,
        Err(e) => {
            // INFO disabled or renamed: nothing can be checked.
            tracing::warn!(error = %e, "could not read the server's maxmemory-policy");
            return Eviction::Unknown;
        }
    };
    let mut replies = Vec::new();
    texts(&info, &mut replies);
    let worst = replies
        .iter()
        .map(|t| eviction(t))
        .max()
        .unwrap_or(Eviction::Unknown);
    if worst == Eviction::Unknown {
        tracing::warn!("the server's maxmemory-policy is unknown; keys may be evicted");
    }
    worst
}

/// Refuses a server that could evict keys of stored threads (see
/// [`RedisSaverBuilder::allow_eviction`]); the policy when it evicts keys with a TTL and
/// the saver gives none by default (`set_thread_ttl` then refuses to give one).
fn refuse_eviction(policy: &Eviction, default_ttl: bool) -> Result<Option<String>> {
    let refuse = |why: String| Err(Error::from(RedisSaverError::Evicting(why)));
    match policy {
        Eviction::Never | Eviction::Unknown => Ok(None),
        Eviction::AnyKey(p) => refuse(format!(
            "the server evicts keys at its memory limit (maxmemory-policy {p})"
        )),
        Eviction::KeysWithTtl(p) if default_ttl => refuse(format!(
            "the server evicts keys that have a TTL at its memory limit (maxmemory-policy \
             {p}), and default_ttl gives every key of a thread one"
        )),
        Eviction::KeysWithTtl(p) => Ok(Some(p.clone())),
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
    fn cluster_urls_become_one_url_per_node_with_the_same_credentials() {
        assert_eq!(
            cluster_nodes("redis+cluster://a:7000,b:7001").unwrap(),
            ["redis://a:7000", "redis://b:7001"]
        );
        // Credentials once (or before every node alike) apply to all; so do the scheme
        // and what follows the nodes.
        for url in [
            "rediss+cluster://app:p%2Cw@a:7000,[::1]:7001/0#insecure",
            "rediss+cluster://app:p%2Cw@a:7000,app:p%2Cw@[::1]:7001/0#insecure",
        ] {
            assert_eq!(
                cluster_nodes(url).unwrap(),
                [
                    "rediss://app:p%2Cw@a:7000/0#insecure",
                    "rediss://app:p%2Cw@[::1]:7001/0#insecure"
                ],
                "{url}"
            );
        }
        assert_eq!(
            cluster_nodes("redis+cluster://:pw@a").unwrap(),
            ["redis://:pw@a"]
        );
        for bad in [
            "redis://a:7000",
            "redis+cluster:/a:7000",
            "redis+cluster://",
            "redis+cluster://a:7000,",
            "redis+cluster://a:7000,,b:7001",
            "redis+cluster://u:s3cret@a:7000,v:s3cret@b:7001",
            "redis+cluster://u:s3cret@",
        ] {
            match cluster_nodes(bad) {
                Err(Error::InvalidInput { reason }) => {
                    assert!(!reason.contains("s3cret"), "{reason}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn eviction_is_read_from_info_memory() {
        let info = |max: &str, policy: &str| {
            format!(
                "# Memory\r\nused_memory:1000\r\nmaxmemory:{max}\r\nmaxmemory_human:x\r\nmaxmemory_policy:{policy}\r\n"
            )
        };
        assert_eq!(eviction(&info("0", "allkeys-lru")), Eviction::Never);
        assert_eq!(eviction(&info("4194304", "noeviction")), Eviction::Never);
        assert_eq!(
            eviction(&info("4194304", "allkeys-lfu")),
            Eviction::AnyKey("allkeys-lfu".into())
        );
        assert_eq!(
            eviction(&info("4194304", "volatile-ttl")),
            Eviction::KeysWithTtl("volatile-ttl".into())
        );
        assert_eq!(eviction("# Memory\r\nused_memory:1\r\n"), Eviction::Unknown);
        assert_eq!(eviction(&info("1", "something-new")), Eviction::Unknown);
        // `maxmemory_human` and `maxmemory_policy` are other fields, not `maxmemory`.
        assert_eq!(
            eviction("maxmemory_policy:allkeys-lru\r\nmaxmemory_human:0B\r\n"),
            Eviction::AnyKey("allkeys-lru".into())
        );
    }

    #[test]
    fn durations_round_up_to_a_millisecond() {
        assert_eq!(duration_ms(Duration::from_micros(10)), 1);
        assert_eq!(duration_ms(Duration::ZERO), 0);
        assert_eq!(duration_ms(Duration::from_secs(2)), 2000);
    }
}
