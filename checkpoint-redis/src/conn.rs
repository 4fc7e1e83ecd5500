//! Connections: a bb8 pool of multiplexed connections to one server, or the redis crate's
//! async Cluster client; script invocation with `EVALSHA`/`EVAL`; reconnection.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::join_all;
use redis::aio::MultiplexedConnection;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, ServerErrorKind, Value, cmd};

use crate::error::{RedisSaverError, breaks_connection};
use crate::scripts::{Call, SCRIPTS};

/// One pooled connection and whether it must be replaced.
pub(crate) struct PooledLink {
    conn: MultiplexedConnection,
    broken: bool,
    /// The failure epoch at which this connection was last known good.
    epoch: u64,
}

/// The bb8 manager: connects with the configured timeouts, replaces a connection after a
/// connection-level failure, and re-checks (one `PING`) the idle connections older than the
/// last failure seen on any connection, so a server restart costs at most one failed call.
pub(crate) struct Manager {
    client: redis::Client,
    config: AsyncConnectionConfig,
    epoch: Arc<AtomicU64>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl Manager {
    pub(crate) fn new(
        client: redis::Client,
        config: AsyncConnectionConfig,
        epoch: Arc<AtomicU64>,
    ) -> Self {
        Self {
            client,
            config,
            epoch,
        }
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = PooledLink;
    type Error = RedisError;

    async fn connect(&self) -> Result<PooledLink, RedisError> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        // A new connection often follows a server restart, which empties the script cache:
        // the scripts a put runs after plain commands in one `MULTI` are loaded first, so
        // such a `MULTI` rarely meets `NOSCRIPT` (its plain commands would run before the
        // retry; see the put script for what readers do about that).
        let mut load = redis::pipe();
        for script in [&SCRIPTS.touch, &SCRIPTS.put] {
            load.cmd("SCRIPT").arg("LOAD").arg(script.code).ignore();
        }
        let () = load.query_async(&mut conn).await?;
        Ok(PooledLink {
            conn,
            broken: false,
            epoch,
        })
    }

    async fn is_valid(&self, link: &mut PooledLink) -> Result<(), RedisError> {
        let now = self.epoch.load(Ordering::Acquire);
        if link.epoch >= now {
            return Ok(());
        }
        let _: Value = cmd("PING").query_async(&mut link.conn).await?;
        link.epoch = now;
        Ok(())
    }

    fn has_broken(&self, link: &mut PooledLink) -> bool {
        link.broken
    }
}

/// How the saver reaches Redis.
pub(crate) enum Link {
    /// One server through a bb8 pool.
    Single {
        pool: bb8::Pool<Manager>,
        epoch: Arc<AtomicU64>,
    },
    /// A Cluster through the redis crate's async cluster client (it keeps its own
    /// connections per node, follows redirects and reconnects).
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::Single { pool, .. } => f
                .debug_struct("Single")
                .field("pool", &pool.state())
                .finish(),
            #[cfg(feature = "cluster")]
            Link::Cluster(_) => f.write_str("Cluster"),
        }
    }
}

/// How many times [`Link::eval_after`] loads its script and resends after `NOSCRIPT`.
const NOSCRIPT_RELOADS: usize = 3;

fn no_script(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// Whether a failed call is sent again on a fresh connection (see [`Link::on_single`]): its
/// connection was dropped or refused. The call may or may not have run.
fn retry_on_fresh_connection(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal()
}

async fn eval_on<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    call: &Call<'_>,
) -> Result<Value, RedisError> {
    match call.command(true).query_async::<Value>(conn).await {
        Err(e) if no_script(&e) => call.command(false).query_async(conn).await,
        other => other,
    }
}

impl Link {
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self, Link::Cluster(_));
        #[cfg(not(feature = "cluster"))]
        false
    }

    async fn pooled(
        pool: &bb8::Pool<Manager>,
    ) -> Result<bb8::PooledConnection<'_, Manager>, RedisSaverError> {
        pool.get().await.map_err(|e| match e {
            bb8::RunError::User(e) => RedisSaverError::Redis(e),
            bb8::RunError::TimedOut => RedisSaverError::PoolTimeout,
        })
    }

    fn mark(link: &mut PooledLink, epoch: &AtomicU64, e: &RedisError) {
        if breaks_connection(e) {
            link.broken = true;
            epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Runs `op` on a connection of a single node's pool. A connection-level failure marks
    /// the connection for replacement, and a call whose connection turned out dead is sent
    /// once more on a fresh connection: every operation of this crate may run twice (a
    /// read, or a script whose repeat after a lost reply has the first one's outcome; a
    /// `claim` repeated finds its own claim pending, as the caller's own retry would, and
    /// `purge` repeated counts only the keys its second run deleted).
    async fn on_single<T, F, Fut>(
        pool: &bb8::Pool<Manager>,
        epoch: &AtomicU64,
        mut op: F,
    ) -> Result<T, RedisSaverError>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut link = Self::pooled(pool).await?;
            match op(link.conn.clone()).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    Self::mark(&mut link, epoch, &e);
                    drop(link);
                    if attempt == 1 && retry_on_fresh_connection(&e) {
                        tracing::debug!(error = %e, "redis connection lost; retrying once");
                        continue;
                    }
                    return Err(e.into());
                }
            }
        }
    }

    /// Runs one script (sent once more on a fresh connection when its connection had died,
    /// see [`on_single`](Self::on_single)).
    pub(crate) async fn eval(&self, call: &Call<'_>) -> Result<Value, RedisSaverError> {
        match self {
            Link::Single { pool, epoch } => {
                Self::on_single(pool, epoch, |mut conn| async move {
                    eval_on(&mut conn, call).await
                })
                .await
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => {
                let mut conn = conn.clone();
                Ok(eval_on(&mut conn, call).await?)
            }
        }
    }

    /// Single node only: runs `prelude` (plain commands) and then the script in one
    /// `MULTI`/`EXEC`, one round trip, and returns the replies of the last `keep` prelude
    /// commands followed by the script's. Nothing else runs in between. The transaction is
    /// built once: if the server does not know the script (`NOSCRIPT`, after a script cache
    /// flush), the script is loaded and the same transaction sent again, prelude included
    /// (up to [`NOSCRIPT_RELOADS`] times), so the prelude must be idempotent; the call is
    /// retried like [`Link::eval`]. `None` on a Cluster, where the caller
    /// uses [`Link::eval`].
    pub(crate) async fn eval_after(
        &self,
        prelude: Vec<Cmd>,
        keep: usize,
        call: &Call<'_>,
    ) -> Option<Result<Vec<Value>, RedisSaverError>> {
        #[allow(irrefutable_let_patterns)] // without the `cluster` feature
        let Link::Single { pool, epoch } = self else {
            return None;
        };
        let ignored = prelude.len().saturating_sub(keep);
        let mut transaction = redis::pipe();
        transaction.atomic();
        for (i, c) in prelude.into_iter().enumerate() {
            transaction.add_command(c);
            if i < ignored {
                transaction.ignore();
            }
        }
        transaction.add_command(call.command(true));
        let transaction = &transaction;
        let replies = Self::on_single(pool, epoch, |mut conn| async move {
            // A flush can land between the load and the resend: a few tries.
            let mut loads = 0;
            loop {
                match transaction.query_async::<Vec<Value>>(&mut conn).await {
                    Err(e) if no_script(&e) && loads < NOSCRIPT_RELOADS => {
                        loads += 1;
                        tracing::debug!(
                            script = call.script.name,
                            "the server lost the script (NOSCRIPT); loading it and resending"
                        );
                        let _: Value = cmd("SCRIPT")
                            .arg("LOAD")
                            .arg(call.script.code)
                            .query_async(&mut conn)
                            .await?;
                    }
                    other => return other,
                }
            }
        })
        .await;
        Some(replies.and_then(|replies| {
            if replies.len() == keep + 1 {
                Ok(replies)
            } else {
                Err(RedisSaverError::Protocol(
                    "a MULTI/EXEC put answered an unexpected number of replies".into(),
                ))
            }
        }))
    }

    /// Runs several scripts concurrently: pipelined on one multiplexed connection, or spread
    /// over the Cluster's nodes. Results are in call order.
    pub(crate) async fn eval_many(
        &self,
        calls: &[Call<'_>],
    ) -> Result<Vec<Result<Value, RedisSaverError>>, RedisSaverError> {
        match self {
            Link::Single { pool, epoch } => {
                let results = Self::on_single(pool, epoch, |base| async move {
                    let mut results = join_all(calls.iter().map(|call| {
                        let mut c = base.clone();
                        async move { eval_on(&mut c, call).await }
                    }))
                    .await;
                    // A connection-level failure fails the batch, which is sent again.
                    match results
                        .iter()
                        .position(|r| r.as_ref().is_err_and(breaks_connection))
                    {
                        Some(i) => Err(results
                            .swap_remove(i)
                            .err()
                            .unwrap_or_else(|| unreachable!())),
                        None => Ok(results),
                    }
                })
                .await?;
                Ok(results
                    .into_iter()
                    .map(|r| r.map_err(RedisSaverError::from))
                    .collect())
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => {
                let results = join_all(calls.iter().map(|call| {
                    let mut c = conn.clone();
                    async move { eval_on(&mut c, call).await }
                }))
                .await;
                Ok(results
                    .into_iter()
                    .map(|r| r.map_err(RedisSaverError::from))
                    .collect())
            }
        }
    }

    /// Runs several plain commands concurrently (pipelined on one multiplexed connection,
    /// or routed per key on a Cluster). Results are in command order.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) async fn commands_many(
        &self,
        cmds: &[Cmd],
    ) -> Result<Vec<Result<Value, RedisSaverError>>, RedisSaverError> {
        let results = match self {
            Link::Single { pool, epoch } => {
                let mut link = Self::pooled(pool).await?;
                let base = link.conn.clone();
                let results = join_all(cmds.iter().map(|c| {
                    let mut conn = base.clone();
                    async move { c.query_async::<Value>(&mut conn).await }
                }))
                .await;
                if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
                    Self::mark(&mut link, epoch, e);
                }
                results
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => {
                join_all(cmds.iter().map(|c| {
                    let mut conn = conn.clone();
                    async move { c.query_async::<Value>(&mut conn).await }
                }))
                .await
            }
        };
        Ok(results
            .into_iter()
            .map(|r| r.map_err(RedisSaverError::from))
            .collect())
    }

    /// Runs plain commands as one pipeline on one connection of a single server (one
    /// packed write, one round trip), optionally as one `MULTI`/`EXEC` transaction; on a
    /// Cluster they are routed per key like [`commands_many`](Self::commands_many) (never
    /// atomic there: callers only ask for atomicity on a single server).
    pub(crate) async fn pipeline(
        &self,
        cmds: &[Cmd],
        atomic: bool,
    ) -> Result<Vec<Value>, RedisSaverError> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Link::Single { pool, epoch } => {
                let mut p = redis::pipe();
                if atomic {
                    p.atomic();
                }
                for c in cmds {
                    p.add_command(c.clone());
                }
                let p = &p;
                Self::on_single(pool, epoch, |mut conn| async move {
                    p.query_async::<Vec<Value>>(&mut conn).await
                })
                .await
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(_) => self.commands_many(cmds).await?.into_iter().collect(),
        }
    }

    /// Runs read-only plain commands in up to `lanes` pipelines on as many pooled
    /// connections at once (one round trip each, concurrently), results in command order.
    /// Large replies come back faster this way: the server writes a bounded amount per
    /// connection and event-loop turn, and the replies are parsed by several tasks. On a
    /// Cluster this is [`commands_many`](Self::commands_many).
    pub(crate) async fn pipeline_lanes(
        &self,
        cmds: &[Cmd],
        lanes: usize,
    ) -> Result<Vec<Value>, RedisSaverError> {
        if self.is_cluster() || lanes <= 1 || cmds.len() < 2 {
            return self.pipeline(cmds, false).await;
        }
        let per = cmds.len().div_ceil(lanes);
        let parts = join_all(cmds.chunks(per).map(|part| self.pipeline(part, false))).await;
        let mut out = Vec::with_capacity(cmds.len());
        for part in parts {
            out.extend(part?);
        }
        Ok(out)
    }

    /// Runs one plain command (routed by its key on a Cluster).
    pub(crate) async fn command(&self, c: &Cmd) -> Result<Value, RedisSaverError> {
        match self {
            Link::Single { pool, epoch } => {
                Self::on_single(pool, epoch, |mut conn| async move {
                    c.query_async::<Value>(&mut conn).await
                })
                .await
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => Ok(c.query_async(&mut conn.clone()).await?),
        }
    }

    /// Loads every script into the server's cache (single node; a Cluster node caches a
    /// script on its first `EVAL` fallback).
    pub(crate) async fn preload(&self) -> Result<(), RedisSaverError> {
        if self.is_cluster() {
            return Ok(());
        }
        for s in SCRIPTS.all() {
            let mut c = cmd("SCRIPT");
            c.arg("LOAD").arg(s.code);
            self.command(&c).await?;
        }
        Ok(())
    }

    /// Every key matching `pattern`: a `SCAN` of the server, or of every primary of a
    /// Cluster. A key may come more than once (`SCAN` guarantees each key present
    /// throughout is returned, not that it is returned once).
    pub(crate) async fn scan_keys(&self, pattern: &str) -> Result<Vec<Vec<u8>>, RedisSaverError> {
        let scan = |cursor: u64| {
            let mut c = cmd("SCAN");
            c.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            c
        };
        let mut out = Vec::new();
        match self {
            Link::Single { .. } => {
                let mut cursor: u64 = 0;
                loop {
                    let (next, keys) = scan_reply(self.command(&scan(cursor)).await?)?;
                    out.extend(keys);
                    if next == 0 {
                        return Ok(out);
                    }
                    cursor = next;
                }
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => {
                let mut conn = conn.clone();
                let nodes = conn
                    .route_command(
                        cmd("CLUSTER").arg("NODES").clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
                    )
                    .await?;
                let text = match nodes {
                    Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                    Value::VerbatimString { text, .. } => text,
                    Value::SimpleString(s) => s,
                    other => {
                        return Err(RedisSaverError::Protocol(format!(
                            "CLUSTER NODES answered {other:?}"
                        )));
                    }
                };
                for (host, port) in primaries(&text) {
                    let mut cursor: u64 = 0;
                    loop {
                        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        });
                        let (next, keys) =
                            scan_reply(conn.route_command(scan(cursor), route).await?)?;
                        out.extend(keys);
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                }
                Ok(out)
            }
        }
    }

    /// Deletes every key matching `pattern` (see [`scan_keys`](Self::scan_keys)); returns
    /// how many were deleted.
    pub(crate) async fn delete_matching(&self, pattern: &str) -> Result<u64, RedisSaverError> {
        let keys = self.scan_keys(pattern).await?;
        let mut deleted = 0;
        match self {
            Link::Single { .. } => {
                for batch in keys.chunks(1000) {
                    let mut del = cmd("DEL");
                    for k in batch {
                        del.arg(&k[..]);
                    }
                    if let Value::Int(n) = self.command(&del).await? {
                        deleted += u64::try_from(n).unwrap_or_default();
                    }
                }
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(conn) => {
                let mut conn = conn.clone();
                for k in &keys {
                    // Keys of one node may live in many slots: delete one by one, each
                    // routed by its own slot.
                    let mut del = cmd("DEL");
                    del.arg(&k[..]);
                    let n: u64 = del.query_async(&mut conn).await?;
                    deleted += n;
                }
            }
        }
        Ok(deleted)
    }
}

/// `(host, port)` of every primary in `CLUSTER NODES` output.
#[cfg(feature = "cluster")]
fn primaries(text: &str) -> Vec<(String, u16)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let _id = parts.next()?;
            let addr = parts.next()?;
            let flags = parts.next()?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let hostport = addr.split('@').next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

fn scan_reply(v: Value) -> Result<(u64, Vec<Vec<u8>>), RedisSaverError> {
    let bad = || RedisSaverError::Protocol("SCAN reply".into());
    let Value::Array(mut parts) = v else {
        return Err(bad());
    };
    if parts.len() != 2 {
        return Err(bad());
    }
    let keys = match parts.pop() {
        Some(Value::Array(keys)) => keys
            .into_iter()
            .filter_map(|k| match k {
                Value::BulkString(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => return Err(bad()),
    };
    let cursor = match parts.pop() {
        Some(Value::BulkString(b)) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    Ok((cursor, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "cluster")]
    fn parses_cluster_nodes() {
        let text = "a 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460\n\
                    b 127.0.0.1:7102@17102 master - 0 0 2 connected 5461-10922\n\
                    c 127.0.0.1:7104@17104 slave a 0 0 1 connected\n\
                    d 127.0.0.1:7105@17105 master,fail - 0 0 3 disconnected\n";
        assert_eq!(
            primaries(text),
            vec![("127.0.0.1".into(), 7101), ("127.0.0.1".into(), 7102)]
        );
    }
}
