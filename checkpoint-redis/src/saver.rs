//! [`RedisSaver`]: the [`Saver`] implementation.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::writes::{replaces_existing, write_index};
use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, Lease, ListOptions, PruneStrategy, PutMode, PutOptions,
    PutWritesOptions, Result, Saver, TypedValue, async_trait, checkpoint_id_unix_millis,
    validate_claim_request, validate_lease_request, validate_put,
};
use futures::stream::{self, StreamExt};
use redis::Value;
use serde_json::Value as Json;

use crate::chunk;
use crate::config::{RedisSaverBuilder, duration_ms};
use crate::conn::{Call, Link};
use crate::error::protocol;
use crate::keys::{
    Layout, blob_field, esc, global_index_args, gref, idx8, pack_list, parse_gref,
    thread_index_args, token, tref,
};
use crate::record::{
    array, bulk, decode_tuple, decode_typed, encode_blob, encode_record, encode_typed,
    encode_write, number, record_manifests, record_tokens, text,
};
use crate::scripts::{Lua, SCRIPTS};

/// Tuples per `list` page.
const PAGE: usize = 64;
/// Index entries one `list` page may examine, so a selective filter never blocks the server
/// for long; the stream simply asks for the next page.
const SCAN_BUDGET: usize = 4096;
/// Value reads per pipeline when completing a list page; a page with more reads is spread
/// over several pooled connections (at most [`MAX_LANES`]) read concurrently.
const VALUE_LANE: usize = 24;
/// Most connections one list page reads values on at once.
const MAX_LANES: usize = 4;
/// References per page when collecting the checkpoints of runs.
const RUN_PAGE: usize = 1024;
/// In Cluster mode, a global index entry whose checkpoint is missing is removed only when
/// its id is at least this old: a younger one may belong to a put still in flight (the
/// index is written before the thread).
const REPAIR_GRACE_MS: u64 = 60_000;

/// How long a thread's keys live (see [`RedisSaver::set_thread_ttl`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadTtl {
    /// The saver's [`default_ttl`](RedisSaverBuilder::default_ttl) (no expiry without one).
    Default,
    /// Expire this long after the last write (or read, with
    /// [`refresh_on_read`](RedisSaverBuilder::refresh_on_read)).
    Expire(Duration),
    /// Never expire, whatever the saver's default.
    Pinned,
}

/// A checkpoint saver on Redis ≥ 7 (single node or Cluster), without modules.
///
/// Clones share one connection pool (or Cluster client). See the crate documentation for
/// the key layout, guarantees and Cluster notes.
#[derive(Clone)]
pub struct RedisSaver {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) link: Link,
    pub(crate) layout: Layout,
    pub(crate) default_ttl_ms: u64,
    pub(crate) refresh_on_read: bool,
    /// Where it connects, password redacted.
    pub(crate) target: String,
    /// Chunk ids of the last list value put per thread and channel.
    pub(crate) chunk_memo: chunk::ChunkMemo,
}

impl fmt::Debug for RedisSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSaver")
            .field("target", &self.inner.target)
            .field("key_prefix", &self.inner.layout.prefix())
            .field("link", &self.inner.link)
            .field("default_ttl_ms", &self.inner.default_ttl_ms)
            .field("refresh_on_read", &self.inner.refresh_on_read)
            .finish()
    }
}

fn s(v: impl AsRef<[u8]>) -> Vec<u8> {
    v.as_ref().to_vec()
}

fn stale_thread(thread_id: &str, token: u64, current: u64) -> Error {
    Error::StaleFence {
        scope: format!("thread {thread_id:?}"),
        token,
        current,
    }
}

impl RedisSaver {
    /// A builder for a single server at `url`.
    pub fn builder(url: impl Into<String>) -> RedisSaverBuilder {
        RedisSaverBuilder::new(url)
    }

    /// A builder for a Redis Cluster reached through `nodes`.
    pub fn cluster_builder<I, S>(nodes: I) -> RedisSaverBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisSaverBuilder::cluster(nodes)
    }

    /// Connects to a single server with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        RedisSaverBuilder::new(url).build().await
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The prefix of every key this saver writes.
    pub fn key_prefix(&self) -> &str {
        self.inner.layout.prefix()
    }

    /// Whether this saver talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.link.is_cluster()
    }

    /// Sets how long the keys of `thread_id` live, applied at once to every existing key of
    /// the thread, atomically, and on every later write. [`ThreadTtl::Pinned`] keeps the
    /// thread forever even when the saver has a default TTL.
    ///
    /// Lease records are never subject to a TTL: a fencing token must never be handed out
    /// twice, also after the thread's data expired.
    pub async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        if thread_id.is_empty() {
            return Err(Error::invalid("set_thread_ttl on an empty thread id"));
        }
        let (mode, ms) = match ttl {
            ThreadTtl::Default => ("default", 0),
            ThreadTtl::Pinned => ("pin", 0),
            ThreadTtl::Expire(d) if d.is_zero() => {
                return Err(Error::invalid("a thread TTL must be at least 1 ms"));
            }
            ThreadTtl::Expire(d) => ("ms", duration_ms(d)),
        };
        let call = Call {
            script: &SCRIPTS.set_ttl,
            keys: self.inner.layout.thread_keys(thread_id),
            args: vec![
                s(mode),
                s(ms.to_string()),
                s(self.inner.default_ttl_ms.to_string()),
            ],
        };
        self.inner.link.eval(&call, true).await?;
        Ok(())
    }

    /// Time left before the data of `thread_id` expires: `None` when it has no TTL or no
    /// data.
    pub async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        let key = &self.inner.layout.thread_keys(thread_id)[0];
        let v = self.inner.link.command(redis::cmd("PTTL").arg(key)).await?;
        match v {
            Value::Int(ms) if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
            Value::Int(_) => Ok(None),
            other => Err(protocol(format!("PTTL answered {other:?}"))),
        }
    }

    /// Deletes every key under this saver's prefix (checkpoints, indexes, leases, ledger)
    /// with `SCAN` + `DEL`, and returns how many were deleted. Meant for tests and
    /// benchmarks that own their prefix; never used on the hot path.
    pub async fn purge(&self) -> Result<u64> {
        self.inner.chunk_memo.clear();
        Ok(self
            .inner
            .link
            .delete_matching(&self.inner.layout.pattern())
            .await?)
    }

    fn thread_keys(&self, thread_id: &str, with_global: bool) -> Vec<String> {
        let mut keys = self.inner.layout.thread_keys(thread_id);
        if with_global && !self.inner.link.is_cluster() {
            keys.extend(self.inner.layout.global_keys());
        }
        keys
    }

    fn ttl_arg(&self) -> Vec<u8> {
        s(self.inner.default_ttl_ms.to_string())
    }

    /// Runs a Cluster global-index update (see the crate README, "Cluster").
    async fn gindex(&self, ops: Vec<Vec<u8>>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let call = Call {
            script: &SCRIPTS.gindex,
            keys: self.inner.layout.global_keys(),
            args: ops,
        };
        self.inner.link.eval(&call, true).await?;
        Ok(())
    }

    /// After a thread script on a Cluster: removes the returned global references
    /// (best effort: a failure leaves harmless entries that reads skip and repair).
    async fn remove_global(&self, reply: Option<&Value>) {
        if !self.inner.link.is_cluster() {
            return;
        }
        let Some(Value::Array(refs)) = reply else {
            return;
        };
        let mut ops = Vec::new();
        for r in refs {
            if let Some(b) = bulk(r) {
                ops.push(s("R"));
                ops.push(b.to_vec());
            }
        }
        for chunk in ops.chunks(2000) {
            if let Err(e) = self.gindex(chunk.to_vec()).await {
                tracing::warn!(error = %e, "could not remove global index entries; reads will skip them");
            }
        }
    }

    async fn eval_thread(
        &self,
        script: &Lua,
        thread_id: &str,
        args: Vec<Vec<u8>>,
        with_global: bool,
    ) -> Result<Vec<Value>> {
        let call = Call {
            script,
            keys: self.thread_keys(thread_id, with_global),
            args,
        };
        array(self.inner.link.eval(&call, true).await?)
    }

    fn get_call(&self, thread_id: &str, ns: &str, id: Option<&str>) -> Call<'static> {
        Call {
            script: &SCRIPTS.get,
            keys: self.thread_keys(thread_id, false),
            args: vec![
                self.ttl_arg(),
                s(if self.inner.refresh_on_read { "1" } else { "0" }),
                esc(ns),
                id.map(esc).unwrap_or_default(),
            ],
        }
    }
}

/// A decoded global reference: `(id, thread, ns)`.
type GlobalRef = (String, String, String);

/// What a list stream walks.
#[derive(Clone, Debug)]
enum Plan {
    /// One checkpoint by its full address.
    Direct,
    /// A thread: `mode` is `byns` (one namespace, no filter), `byid` (all namespaces, no
    /// filter) or `mi` (metadata tokens).
    Thread { mode: &'static str },
    /// Every thread: `mode` is `all` or `mi`.
    Global { mode: &'static str },
}

/// The stored form of a chunked value from its chunk replies, or `Nil` if any is missing.
fn reassemble(manifest: &[u8], parts: &[Value]) -> Value {
    let mut chunks = Vec::with_capacity(parts.len());
    for p in parts {
        match bulk(p) {
            Some(b) => chunks.push(b),
            None => return Value::Nil,
        }
    }
    chunk::reassemble(manifest, chunks.into_iter()).map_or(Value::Nil, Value::BulkString)
}

/// A listed tuple whose values and writes are being read (see [`RedisSaver::complete`]).
struct Pending {
    thread: String,
    tref: Vec<u8>,
    rec: Vec<u8>,
    members: Vec<Value>,
    slots: Vec<Slot>,
    uniqs: usize,
}

/// How one channel's value is read by [`RedisSaver::complete`].
enum Slot {
    /// Its plain field, then its manifest field (in case it was chunked by an earlier put).
    Plain,
    /// The `count` chunks of `manifest`, which the record carries.
    Chunks { manifest: Vec<u8>, count: usize },
}

struct ListState {
    saver: RedisSaver,
    opts: ListOptions,
    plan: Plan,
    tokens: Vec<String>,
    /// Exclusive upper bound of the next page, in the plan's reference space.
    cursor: Option<Vec<u8>>,
    done: bool,
    remaining: Option<usize>,
    buffer: VecDeque<CheckpointTuple>,
}

impl ListState {
    fn new(saver: RedisSaver, opts: ListOptions) -> Self {
        let mut tokens: Vec<String> = opts.filter.iter().map(|(k, v)| token(k, v)).collect();
        tokens.sort();
        tokens.dedup();
        let plan = match (&opts.thread_id, &opts.checkpoint_ns) {
            (Some(_), Some(_)) if opts.checkpoint_id.is_some() => Plan::Direct,
            (Some(_), Some(_)) if tokens.is_empty() => Plan::Thread { mode: "byns" },
            (Some(_), _) if !tokens.is_empty() => Plan::Thread { mode: "mi" },
            (Some(_), _) => Plan::Thread { mode: "byid" },
            (None, _) if tokens.is_empty() => Plan::Global { mode: "all" },
            (None, _) => Plan::Global { mode: "mi" },
        };
        Self {
            saver,
            remaining: opts.limit,
            opts,
            plan,
            tokens,
            cursor: None,
            done: false,
            buffer: VecDeque::new(),
        }
    }

    /// `(lo, hi)` range specs of the next page in reference space.
    fn bounds(&self, id_only: bool) -> (Vec<u8>, Vec<u8>) {
        let mut his: Vec<Vec<u8>> = Vec::new();
        let mut lo = s("-");
        if let Some(before) = &self.opts.before {
            his.push(esc(before));
        }
        if !id_only {
            if let Some(id) = &self.opts.checkpoint_id {
                let mut l = s("[");
                l.extend_from_slice(&esc(id));
                lo = l;
                let mut h = esc(id);
                h.push(0xff);
                his.push(h);
            }
        }
        if let Some(c) = &self.cursor {
            his.push(c.clone());
        }
        let hi = match his.into_iter().min() {
            Some(h) => {
                let mut out = s("(");
                out.extend_from_slice(&h);
                out
            }
            None => s("+"),
        };
        (lo, hi)
    }

    async fn next_page(&mut self) -> Result<()> {
        let want = self.remaining.map_or(PAGE, |r| r.min(PAGE));
        let saver = self.saver.clone();
        match self.plan.clone() {
            Plan::Direct => {
                self.done = true;
                let config = CheckpointConfig {
                    thread_id: self.opts.thread_id.clone().unwrap_or_default(),
                    checkpoint_ns: self.opts.checkpoint_ns.clone().unwrap_or_default(),
                    checkpoint_id: self.opts.checkpoint_id.clone(),
                    extra: BTreeMap::new(),
                };
                if let Some(t) = saver.get_tuple(&config).await? {
                    self.admit(t);
                }
            }
            Plan::Thread { mode } => {
                let thread = self.opts.thread_id.clone().unwrap_or_default();
                let ns = self.opts.checkpoint_ns.clone();
                let (lo, hi) = self.bounds(mode == "byns");
                let nscheck = match (&ns, mode) {
                    (Some(n), "mi") => esc(n),
                    _ => Vec::new(),
                };
                let mut args = vec![
                    saver.ttl_arg(),
                    s(if saver.inner.refresh_on_read {
                        "1"
                    } else {
                        "0"
                    }),
                    s(want.to_string()),
                    s(SCAN_BUDGET.to_string()),
                    lo,
                    hi,
                    nscheck,
                    s(mode),
                    ns.as_deref().map(esc).unwrap_or_default(),
                ];
                args.extend(self.tokens.iter().map(s));
                let reply = saver
                    .eval_thread(&SCRIPTS.list, &thread, args, false)
                    .await?;
                let [tuples, last, done]: [Value; 3] = reply
                    .try_into()
                    .map_err(|_| protocol("a list page has 3 parts"))?;
                let metas = array(tuples)?
                    .into_iter()
                    .map(|m| (thread.clone(), m))
                    .collect();
                for t in saver.complete(metas).await? {
                    self.admit(t);
                }
                self.advance(&last, &done)?;
            }
            Plan::Global { mode } => {
                let (lo, hi) = self.bounds(false);
                let mut args = vec![
                    s(want.to_string()),
                    s(SCAN_BUDGET.to_string()),
                    lo,
                    hi,
                    self.opts
                        .checkpoint_ns
                        .as_deref()
                        .map(esc)
                        .unwrap_or_default(),
                    s(mode),
                ];
                args.extend(self.tokens.iter().map(s));
                let call = Call {
                    script: &SCRIPTS.gscan,
                    keys: saver.inner.layout.global_keys(),
                    args,
                };
                let reply = array(saver.inner.link.eval(&call, true).await?)?;
                let [refs, last, done]: [Value; 3] = reply
                    .try_into()
                    .map_err(|_| protocol("a global page has 3 parts"))?;
                let refs: Vec<(Vec<u8>, GlobalRef)> = array(refs)?
                    .iter()
                    .filter_map(|r| {
                        let b = bulk(r)?.to_vec();
                        let parsed = parse_gref(&b)?;
                        Some((b, parsed))
                    })
                    .collect();
                let results = saver.global_metas(&refs).await?;
                let mut dangling = Vec::new();
                let mut metas = Vec::new();
                for ((raw, (id, thread, ns)), result) in refs.into_iter().zip(results) {
                    match result {
                        Value::Nil => dangling.push((raw, id, thread, ns)),
                        v => metas.push((thread, v)),
                    }
                }
                for t in saver.complete(metas).await? {
                    self.admit(t);
                }
                if !dangling.is_empty() {
                    saver.repair(dangling).await;
                }
                self.advance(&last, &done)?;
            }
        }
        Ok(())
    }

    fn admit(&mut self, t: CheckpointTuple) {
        if self.opts.admits(
            &t.config.thread_id,
            &t.config.checkpoint_ns,
            &t.checkpoint.id,
            &t.metadata,
        ) {
            self.buffer.push_back(t);
        }
    }

    fn advance(&mut self, last: &Value, done: &Value) -> Result<()> {
        if let Some(b) = bulk(last) {
            self.cursor = Some(b.to_vec());
        }
        self.done = number(done)? == 1 || bulk(last).is_none();
        Ok(())
    }
}

impl RedisSaver {
    /// Removes global index entries whose checkpoint no longer exists (expired by TTL, or
    /// left by an interrupted Cluster write). Best effort.
    async fn repair(&self, dangling: Vec<(Vec<u8>, String, String, String)>) {
        let mut ops = Vec::new();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for (raw, id, thread, ns) in dangling {
            if self.inner.link.is_cluster() {
                // Only entries old enough that no put writing them can still be in flight.
                let old =
                    checkpoint_id_unix_millis(&id).is_some_and(|ms| ms + REPAIR_GRACE_MS < now_ms);
                if old {
                    ops.push(s("R"));
                    ops.push(raw);
                }
            } else {
                // Atomic check on the single node: remove only if the checkpoint is gone.
                ops.push(s("X"));
                ops.push(raw);
                ops.push(s(&self.inner.layout.thread_keys(&thread)[0]));
                ops.push(tref(&id, &ns));
            }
        }
        if let Err(e) = self.gindex(ops).await {
            tracing::debug!(error = %e, "global index repair failed");
        }
    }

    /// The small part (`{tref, record, write members}`, or nil when gone) of each globally
    /// listed checkpoint. On a single server without refresh-on-read: plain `HGET` and
    /// `ZRANGEBYLEX` commands in one `MULTI`/`EXEC` pipeline (one round trip, one atomic
    /// snapshot of every record and write list, far cheaper than one script per tuple);
    /// otherwise one `load_meta` script per checkpoint, run concurrently.
    async fn global_metas(&self, refs: &[(Vec<u8>, GlobalRef)]) -> Result<Vec<Value>> {
        if self.inner.link.is_cluster() || self.inner.refresh_on_read {
            let calls: Vec<Call<'static>> = refs
                .iter()
                .map(|(_, (id, thread, ns))| {
                    let mut c = self.get_call(thread, ns, Some(id));
                    c.args.push(s("1"));
                    c
                })
                .collect();
            return self
                .inner
                .link
                .eval_many(&calls)
                .await?
                .into_iter()
                .map(|r| r.map_err(Error::from))
                .collect();
        }
        let mut cmds = Vec::with_capacity(refs.len() * 2);
        let mut trefs = Vec::with_capacity(refs.len());
        for (_, (id, thread, ns)) in refs {
            let keys = self.inner.layout.thread_keys(thread);
            let r = tref(id, ns);
            let mut lo = s("[");
            lo.extend_from_slice(&r);
            let mut hi = s("(");
            hi.extend_from_slice(&r);
            hi.push(0xff);
            let mut get = redis::cmd("HGET");
            get.arg(&keys[crate::keys::CP]).arg(&r[..]);
            let mut range = redis::cmd("ZRANGEBYLEX");
            range.arg(&keys[crate::keys::WI]).arg(lo).arg(hi);
            cmds.push(get);
            cmds.push(range);
            trefs.push(r);
        }
        let replies = self.inner.link.pipeline(&cmds, true).await?;
        if replies.len() != cmds.len() {
            return Err(protocol("a pipelined read lost replies"));
        }
        let mut replies = replies.into_iter();
        let mut out = Vec::with_capacity(trefs.len());
        for r in trefs {
            let (Some(rec), Some(members)) = (replies.next(), replies.next()) else {
                return Err(protocol("a pipelined read lost replies"));
            };
            out.push(match rec {
                Value::Nil => Value::Nil,
                rec => Value::Array(vec![Value::BulkString(r), rec, members]),
            });
        }
        Ok(out)
    }

    /// Completes `{tref, record, write members}` replies of `load_meta` into tuples: the
    /// values and writes are read with plain `HMGET`s, all pipelined in one step (a value the
    /// record carries the manifest of is read as its chunks in that same step). A tuple
    /// whose values changed in between (it was deleted concurrently) is read again
    /// atomically, so a listed tuple is always complete.
    async fn complete(&self, metas: Vec<(String, Value)>) -> Result<Vec<CheckpointTuple>> {
        let mut pending = Vec::with_capacity(metas.len());
        let mut cmds = Vec::new();
        for (thread, meta) in metas {
            let [tref, rec, members]: [Value; 3] = array(meta)?
                .try_into()
                .map_err(|_| protocol("a tuple summary has 3 parts"))?;
            let tref = bulk(&tref)
                .ok_or_else(|| protocol("tuple reference"))?
                .to_vec();
            let rec = bulk(&rec).ok_or_else(|| protocol("tuple record"))?.to_vec();
            let members = array(members)?;
            let corrupt = || crate::error::corrupt("corrupt checkpoint record");
            let fields = crate::keys::netstr(&rec)
                .and_then(|(cv, _)| crate::keys::unpack_list(cv))
                .ok_or_else(corrupt)?;
            let mut inline: BTreeMap<Vec<u8>, Vec<u8>> = record_manifests(&rec)
                .ok_or_else(corrupt)?
                .into_iter()
                .collect();
            let keys = self.inner.layout.thread_keys(&thread);
            let mut slots = Vec::with_capacity(fields.len());
            if !fields.is_empty() {
                let mut c = redis::cmd("HMGET");
                c.arg(&keys[crate::keys::BL]);
                for f in &fields {
                    match inline.remove(f) {
                        Some(manifest) => {
                            let chunks = chunk::manifest_chunks(&manifest).ok_or_else(corrupt)?;
                            for cf in &chunks {
                                c.arg(&cf[..]);
                            }
                            slots.push(Slot::Chunks {
                                manifest,
                                count: chunks.len(),
                            });
                        }
                        None => {
                            c.arg(&f[..]).arg(chunk::manifest_field(f));
                            slots.push(Slot::Plain);
                        }
                    }
                }
                cmds.push(c);
            }
            let mut uniqs = 0;
            if !members.is_empty() {
                let mut c = redis::cmd("HMGET");
                c.arg(&keys[crate::keys::WV]);
                for m in &members {
                    let m = bulk(m).ok_or_else(|| protocol("write member"))?;
                    let rest = m.get(tref.len()..).unwrap_or_default();
                    let z = rest
                        .iter()
                        .position(|&b| b == 0)
                        .ok_or_else(|| protocol("write member"))?;
                    let mut uniq = tref.clone();
                    uniq.extend_from_slice(&rest[z + 1..]);
                    c.arg(uniq);
                    uniqs += 1;
                }
                cmds.push(c);
            }
            pending.push(Pending {
                thread,
                tref,
                rec,
                members,
                slots,
                uniqs,
            });
        }
        let lanes = cmds.len().div_ceil(VALUE_LANE);
        let mut results = self
            .inner
            .link
            .pipeline_lanes(&cmds, lanes.min(MAX_LANES))
            .await?
            .into_iter();
        let mut fetched = Vec::with_capacity(pending.len());
        for p in &pending {
            let vals = if p.slots.is_empty() {
                Vec::new()
            } else {
                array(results.next().ok_or_else(|| protocol("missing values"))?)?
            };
            let wvals = if p.uniqs > 0 {
                array(results.next().ok_or_else(|| protocol("missing writes"))?)?
            } else {
                Vec::new()
            };
            fetched.push((vals, wvals));
        }
        let fetched = self.assemble(&pending, fetched).await?;
        let mut out = Vec::with_capacity(pending.len());
        for (p, (vals, wvals)) in pending.into_iter().zip(fetched) {
            let raced = vals.iter().any(|v| matches!(v, Value::Nil))
                || wvals.iter().any(|v| matches!(v, Value::Nil));
            if raced {
                let (id, ns) = crate::keys::parse_tref(&p.tref)
                    .ok_or_else(|| crate::error::corrupt("checkpoint reference"))?;
                let config = CheckpointConfig::new(p.thread)
                    .with_ns(ns)
                    .with_checkpoint_id(id);
                if let Some(t) = self.get_tuple(&config).await? {
                    out.push(t);
                }
                continue;
            }
            let full = Value::Array(vec![
                Value::BulkString(p.tref),
                Value::BulkString(p.rec),
                Value::Array(vals),
                Value::Array(p.members),
                Value::Array(wvals),
            ]);
            out.push(decode_tuple(&p.thread, full)?);
        }
        Ok(out)
    }

    /// Turns each tuple's fetched value slots (see [`Slot`]) into one stored value per
    /// channel: the plain value, or a chunked value reassembled from its chunks. Chunks of a
    /// value whose manifest the record did not carry (a channel unchanged by the put) are
    /// read with one more pipelined step. A value that is missing, or whose chunks are,
    /// becomes `Nil` (the caller reads that tuple again atomically).
    async fn assemble(
        &self,
        pending: &[Pending],
        fetched: Vec<(Vec<Value>, Vec<Value>)>,
    ) -> Result<Vec<(Vec<Value>, Vec<Value>)>> {
        let mut out = Vec::with_capacity(fetched.len());
        // (tuple, channel, manifest, chunk count) of the values needing the extra step.
        let mut late = Vec::new();
        let mut cmds = Vec::new();
        for (t, (p, (vals, wvals))) in pending.iter().zip(fetched).enumerate() {
            let mut it = vals.into_iter();
            let mut values = Vec::with_capacity(p.slots.len());
            let mut late_cmd: Option<redis::Cmd> = None;
            for (i, slot) in p.slots.iter().enumerate() {
                match slot {
                    Slot::Plain => {
                        let (v, m) = (it.next(), it.next());
                        let (Some(v), Some(m)) = (v, m) else {
                            return Err(protocol("missing values"));
                        };
                        if !matches!(v, Value::Nil) {
                            values.push(v);
                            continue;
                        }
                        values.push(Value::Nil);
                        if let Some(m) = bulk(&m) {
                            let fields = chunk::manifest_chunks(m)
                                .ok_or_else(|| crate::error::corrupt("corrupt value manifest"))?;
                            let c = late_cmd.get_or_insert_with(|| {
                                let mut c = redis::cmd("HMGET");
                                c.arg(&self.inner.layout.thread_keys(&p.thread)[crate::keys::BL]);
                                c
                            });
                            for f in &fields {
                                c.arg(&f[..]);
                            }
                            late.push((t, i, m.to_vec(), fields.len()));
                        }
                    }
                    Slot::Chunks { manifest, count } => {
                        let parts: Vec<Value> = it.by_ref().take(*count).collect();
                        values.push(reassemble(manifest, &parts));
                    }
                }
            }
            cmds.extend(late_cmd);
            out.push((values, wvals));
        }
        if cmds.is_empty() {
            return Ok(out);
        }
        let replies = self.inner.link.pipeline(&cmds, false).await?;
        let mut replies = replies.into_iter();
        let mut current: Option<(usize, std::vec::IntoIter<Value>)> = None;
        for (t, i, manifest, count) in late {
            if current.as_ref().is_none_or(|(ct, _)| *ct != t) {
                let reply = replies.next().ok_or_else(|| protocol("missing chunks"))?;
                current = Some((t, array(reply)?.into_iter()));
            }
            let Some((_, parts)) = current.as_mut() else {
                return Err(protocol("missing chunks"));
            };
            let parts: Vec<Value> = parts.by_ref().take(count).collect();
            out[t].0[i] = reassemble(&manifest, &parts);
        }
        Ok(out)
    }

    fn reply_status(reply: &[Value]) -> Result<&str> {
        text(reply.first().ok_or_else(|| protocol("empty reply"))?)
    }
}

#[async_trait]
impl Saver for RedisSaver {
    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        let thread_id = config.require_thread()?;
        let call = self.get_call(
            thread_id,
            &config.checkpoint_ns,
            config.checkpoint_id.as_deref(),
        );
        match self.inner.link.eval(&call, true).await? {
            Value::Nil => Ok(None),
            v => decode_tuple(thread_id, v).map(Some),
        }
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let state = ListState::new(self.clone(), options);
        stream::unfold(state, |mut st| async move {
            loop {
                if st.remaining == Some(0) {
                    return None;
                }
                if let Some(t) = st.buffer.pop_front() {
                    st.remaining = st.remaining.map(|r| r - 1);
                    return Some((Ok(t), st));
                }
                if st.done {
                    return None;
                }
                if let Err(e) = st.next_page().await {
                    st.done = true;
                    st.buffer.clear();
                    return Some((Err(e), st));
                }
            }
        })
        .boxed()
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        mut checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        validate_put(config, &checkpoint, &new_versions)?;
        let thread_id = config.thread_id.as_str();
        let ns = config.checkpoint_ns.as_str();
        let parent = config.checkpoint_id.as_deref();
        let id = checkpoint.id.clone();
        let values = std::mem::take(&mut checkpoint.channel_values);
        // (field, value) pairs written with HSETNX, and the chunks of list values (see the
        // `chunk` module), which are content-addressed and written with one HSET.
        let mut blobs = Vec::with_capacity(new_versions.len() * 2);
        let mut chunks = Vec::new();
        let mut manifests = Vec::new();
        let mut memo_key = esc(thread_id);
        crate::keys::esc_into(&mut memo_key, ns.as_bytes());
        let memo_base = memo_key.len();
        for (channel, version) in &new_versions {
            let field = blob_field(ns, channel, version);
            let value = values.get(channel);
            memo_key.truncate(memo_base);
            crate::keys::esc_into(&mut memo_key, channel.as_bytes());
            match value.and_then(|v| self.inner.chunk_memo.split(&memo_key, v)) {
                Some(split) => {
                    blobs.push(chunk::manifest_field(&field));
                    manifests.push(field);
                    manifests.push(split.manifest.clone());
                    blobs.push(split.manifest);
                    chunks.extend(split.chunks);
                }
                None => {
                    blobs.push(field);
                    blobs.push(encode_blob(value));
                }
            }
        }
        let record = encode_record(ns, checkpoint, metadata, parent, &manifests)?;
        let cas = options.mode == PutMode::CompareAndSet;
        let cluster = self.inner.link.is_cluster();
        let g = gref(&id, thread_id, ns);
        if cluster {
            // The global index first: an entry without its checkpoint is invisible (reads
            // check), a checkpoint without its entry would be missing from global lists.
            self.gindex(vec![s("A"), g.clone(), pack_list(&record.tokens)])
                .await?;
        }
        // The put script's arguments: ttl, thread, fence, cas, ns, id, parent, record, then
        // the mode and its own arguments (see `PUT` in the scripts module).
        let script_args = |record: Vec<u8>| {
            vec![
                self.ttl_arg(),
                esc(thread_id),
                options.fence.map(|f| s(f.to_string())).unwrap_or_default(),
                s(if cas { "1" } else { "0" }),
                esc(ns),
                esc(&id),
                parent.map(esc).unwrap_or_default(),
                record,
            ]
        };
        let mi = thread_index_args(&id, ns, &record.tokens);
        let reply = if cluster {
            let mut args = script_args(record.bytes);
            args.push(s("V"));
            args.push(s(mi.len().to_string()));
            args.extend(mi);
            args.push(s("0"));
            for (field, chunk) in chunks {
                args.push(field);
                args.push(chunk.to_vec());
            }
            args.extend(blobs);
            self.eval_thread(&SCRIPTS.put, thread_id, args, true)
                .await?
        } else {
            // Single node: the values go in as plain `HSETNX`es in the same `MULTI`/`EXEC`
            // as the script, so they never pass through Lua (converting a 64 KB argument
            // into a Lua string costs more than the whole rest of the script).
            let keys = self.thread_keys(thread_id, true);
            let gmi = global_index_args(&g, &record.tokens);
            let refusable = cas || options.fence.is_some();
            // Chunks first (a manifest never names a chunk that is not there yet), then
            // the values, then, unless the script adds them once it accepts the put, the
            // index entries.
            let prelude = |index: bool| {
                let mut prelude = Vec::with_capacity(blobs.len() / 2 + 4);
                if !chunks.is_empty() {
                    let mut c = redis::cmd("HSET");
                    c.arg(&keys[crate::keys::BL]);
                    for (field, chunk) in &chunks {
                        c.arg(&field[..]).arg(&chunk[..]);
                    }
                    prelude.push(c);
                }
                for pair in blobs.chunks_exact(2) {
                    let mut c = redis::cmd("HSETNX");
                    c.arg(&keys[crate::keys::BL])
                        .arg(&pair[0][..])
                        .arg(&pair[1][..]);
                    prelude.push(c);
                }
                if index {
                    let mut c = redis::cmd("ZADD");
                    c.arg(&keys[crate::keys::MI]).arg(&mi);
                    prelude.push(c);
                    let mut c = redis::cmd("ZADD");
                    c.arg(&keys[crate::keys::GMI]).arg(&gmi);
                    prelude.push(c);
                }
                prelude
            };
            if !refusable {
                // An unconditional put (mode P): nothing can refuse it, so the record too
                // is a plain `HSETNX`, and the only script is the TTL refresh, which needs
                // the thread's settings. Every Lua argument and call costs, so this is the
                // cheapest put that still applies a TTL atomically.
                let mut first = prelude(true);
                let mut c = redis::cmd("HSETNX");
                c.arg(&keys[crate::keys::CP])
                    .arg(tref(&id, ns))
                    .arg(&record.bytes[..]);
                first.push(c);
                let touch = Call {
                    script: &SCRIPTS.touch,
                    keys: keys[..=crate::keys::OPT].to_vec(),
                    args: vec![self.ttl_arg()],
                };
                let replies = match self.inner.link.eval_after(first, 1, &touch).await {
                    Some(r) => r?,
                    None => return Err(protocol("a single-node put found a cluster link")),
                };
                if number(replies.first().ok_or_else(|| protocol("put reply"))?)? == 1 {
                    return Ok(CheckpointConfig::new(thread_id)
                        .with_ns(ns)
                        .with_checkpoint_id(id));
                }
                // The id exists already: a re-put, which the script does (it replaces
                // the record and drops what only the old one named). Sent whole again,
                // so it stands alone whatever ran in between.
            }
            let prelude = prelude(!refusable);
            let mut args = script_args(record.bytes);
            if refusable {
                args.push(s("F"));
                args.push(s(mi.len().to_string()));
                args.extend(mi);
                args.push(s(gmi.len().to_string()));
                args.extend(gmi);
                args.extend(chunks.into_iter().map(|(field, _)| field));
                args.extend(blobs.into_iter().step_by(2));
            } else {
                args.push(s("P"));
            }
            let call = Call {
                script: &SCRIPTS.put,
                keys,
                args,
            };
            match self.inner.link.eval_after(prelude, 0, &call).await {
                Some(reply) => array(reply?.pop().ok_or_else(|| protocol("put reply"))?)?,
                None => return Err(protocol("a single-node put found a cluster link")),
            }
        };
        match Self::reply_status(&reply)? {
            "OK" => {
                if cluster {
                    if let Some(old) = reply.get(1).and_then(bulk) {
                        let old = crate::keys::unpack_list(old).unwrap_or_default();
                        let stale = old
                            .iter()
                            .any(|t| !record.tokens.iter().any(|n| n.as_bytes() == t.as_slice()));
                        if stale {
                            let ops = vec![s("S"), g, pack_list(&record.tokens)];
                            if let Err(e) = self.gindex(ops).await {
                                tracing::warn!(error = %e, "could not drop replaced metadata from the global index");
                            }
                        }
                    }
                }
                Ok(CheckpointConfig::new(thread_id)
                    .with_ns(ns)
                    .with_checkpoint_id(id))
            }
            "CONFLICT" => {
                let found = match reply.get(1).and_then(bulk) {
                    Some(b) => Some(
                        crate::keys::unesc_str(b)
                            .ok_or_else(|| protocol("conflict head"))?
                            .0,
                    ),
                    None => None,
                };
                Err(Error::Conflict {
                    thread_id: thread_id.to_owned(),
                    checkpoint_ns: ns.to_owned(),
                    expected: parent.map(str::to_owned),
                    found,
                })
            }
            "FENCE" => {
                let current = number(reply.get(1).ok_or_else(|| protocol("fence"))?)?;
                Err(stale_thread(
                    thread_id,
                    options.fence.unwrap_or_default(),
                    current,
                ))
            }
            other => Err(protocol(format!("put answered {other:?}"))),
        }
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        let checkpoint_id = config.require_checkpoint_id()?;
        if writes.is_empty() {
            return Ok(());
        }
        let replace = replaces_existing(&writes);
        let path = esc(&options.task_path);
        let mut args = vec![
            self.ttl_arg(),
            esc(&config.thread_id),
            options.fence.map(|f| s(f.to_string())).unwrap_or_default(),
            tref(checkpoint_id, &config.checkpoint_ns),
            s(if replace { "1" } else { "0" }),
            path.clone(),
        ];
        for (position, (channel, value)) in writes.iter().enumerate() {
            let mut tail = esc(task_id);
            tail.extend_from_slice(&idx8(write_index(channel, position)));
            args.push(tail);
            // In its stored form, so the script stores it as is (no concatenation in Lua).
            args.push(encode_write(&path, channel, value));
        }
        let reply = self
            .eval_thread(&SCRIPTS.put_writes, &config.thread_id, args, false)
            .await?;
        match Self::reply_status(&reply)? {
            "OK" => Ok(()),
            "FENCE" => {
                let current = number(reply.get(1).ok_or_else(|| protocol("fence"))?)?;
                Err(stale_thread(
                    &config.thread_id,
                    options.fence.unwrap_or_default(),
                    current,
                ))
            }
            other => Err(protocol(format!("put_writes answered {other:?}"))),
        }
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        if thread_id.is_empty() {
            return Ok(());
        }
        self.inner.chunk_memo.forget_thread(&esc(thread_id));
        let reply = self
            .eval_thread(
                &SCRIPTS.delete_thread,
                thread_id,
                vec![s("0"), esc(thread_id)],
                true,
            )
            .await?;
        self.remove_global(reply.get(1)).await;
        Ok(())
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        if target.is_empty() {
            return Err(Error::invalid("copy_thread target has an empty thread id"));
        }
        if source.is_empty() || source == target {
            return Ok(());
        }
        let snapshot = self
            .eval_thread(&SCRIPTS.copy_read, source, Vec::new(), false)
            .await?;
        let [cp, bl, ws, wv]: [Value; 4] = snapshot
            .try_into()
            .map_err(|_| protocol("a thread snapshot has 4 parts"))?;
        let cp = array(cp)?;
        let bl = array(bl)?;
        let ws = array(ws)?;
        let wv = array(wv)?;
        if cp.is_empty() && bl.is_empty() && ws.is_empty() {
            return Ok(());
        }
        let bytes_of = |v: &Value| -> Result<Vec<u8>> {
            bulk(v)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| protocol("snapshot entry"))
        };
        let mut args = vec![self.ttl_arg(), esc(target), s((cp.len() / 2).to_string())];
        let mut global_ops = Vec::new();
        for pair in cp.chunks(2) {
            let [r, rec] = pair else {
                return Err(protocol("odd checkpoint snapshot"));
            };
            let r = bytes_of(r)?;
            let rec = bytes_of(rec)?;
            if self.inner.link.is_cluster() {
                let (id, ns) = crate::keys::parse_tref(&r)
                    .ok_or_else(|| protocol("snapshot checkpoint reference"))?;
                let tokens = record_tokens(&rec).ok_or_else(|| protocol("snapshot record"))?;
                global_ops.push(s("A"));
                global_ops.push(gref(&id, target, &ns));
                global_ops.push(pack_list(&tokens));
            }
            args.push(r);
            args.push(rec);
        }
        args.push(s((bl.len() / 2).to_string()));
        for v in &bl {
            args.push(bytes_of(v)?);
        }
        for (m, v) in ws.iter().zip(wv.iter()) {
            if let (Some(m), Some(v)) = (bulk(m), bulk(v)) {
                args.push(m.to_vec());
                args.push(v.to_vec());
            }
        }
        for chunk in global_ops.chunks(3 * 500) {
            self.gindex(chunk.to_vec()).await?;
        }
        self.eval_thread(&SCRIPTS.copy_write, target, args, true)
            .await?;
        Ok(())
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        let keep = match strategy {
            PruneStrategy::KeepLatest => 1,
            PruneStrategy::KeepLast(n) => n,
            PruneStrategy::DeleteAll => 0,
            _ => {
                return Err(Error::Unsupported {
                    op: "prune with this strategy",
                });
            }
        };
        for thread_id in thread_ids {
            if thread_id.is_empty() {
                continue;
            }
            self.inner.chunk_memo.forget_thread(&esc(thread_id));
            let reply = self
                .eval_thread(
                    &SCRIPTS.prune,
                    thread_id,
                    vec![s("0"), esc(thread_id), s(keep.to_string())],
                    true,
                )
                .await?;
            self.remove_global(reply.get(1)).await;
        }
        Ok(())
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        let mut runs: Vec<&String> = run_ids.iter().collect();
        runs.sort();
        runs.dedup();
        for run in runs {
            let tok = token("run_id", &Json::String(run.clone()));
            // Every checkpoint of the run, from the global index, grouped by thread.
            let mut by_thread: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
            let mut cursor: Option<Vec<u8>> = None;
            loop {
                let hi = match &cursor {
                    Some(c) => {
                        let mut h = s("(");
                        h.extend_from_slice(c);
                        h
                    }
                    None => s("+"),
                };
                let call = Call {
                    script: &SCRIPTS.gscan,
                    keys: self.inner.layout.global_keys(),
                    args: vec![
                        s(RUN_PAGE.to_string()),
                        s(SCAN_BUDGET.to_string()),
                        s("-"),
                        hi,
                        Vec::new(),
                        s("mi"),
                        s(&tok),
                    ],
                };
                let reply = array(self.inner.link.eval(&call, true).await?)?;
                let [refs, last, done]: [Value; 3] = reply
                    .try_into()
                    .map_err(|_| protocol("a global page has 3 parts"))?;
                for r in array(refs)? {
                    if let Some((id, thread, ns)) = bulk(&r).and_then(parse_gref) {
                        by_thread.entry(thread).or_default().push(tref(&id, &ns));
                    }
                }
                match bulk(&last) {
                    Some(l) if number(&done)? != 1 => cursor = Some(l.to_vec()),
                    _ => break,
                }
            }
            for (thread, trefs) in by_thread {
                self.inner.chunk_memo.forget_thread(&esc(&thread));
                for chunk in trefs.chunks(1000) {
                    let mut args = vec![s("0"), esc(&thread), s(&tok)];
                    args.extend(chunk.iter().cloned());
                    let reply = self
                        .eval_thread(&SCRIPTS.delete_runs, &thread, args, true)
                        .await?;
                    self.remove_global(reply.get(1)).await;
                }
            }
        }
        Ok(())
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_lease_request(thread_id, holder, ttl)?;
        let call = Call {
            script: &SCRIPTS.lease_acquire,
            keys: vec![self.inner.layout.thread_keys(thread_id)[crate::keys::LEASE].clone()],
            args: vec![s(holder), s(duration_ms(ttl).to_string())],
        };
        match self.inner.link.eval(&call, true).await? {
            Value::Nil => Ok(None),
            v => Ok(Some(Lease {
                thread_id: thread_id.to_owned(),
                holder: holder.to_owned(),
                token: number(&v)?,
                ttl,
            })),
        }
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_lease_request(&lease.thread_id, &lease.holder, ttl)?;
        let call = Call {
            script: &SCRIPTS.lease_renew,
            keys: vec![self.inner.layout.thread_keys(&lease.thread_id)[crate::keys::LEASE].clone()],
            args: vec![
                s(&lease.holder),
                s(lease.token.to_string()),
                s(duration_ms(ttl).to_string()),
            ],
        };
        let reply = array(self.inner.link.eval(&call, true).await?)?;
        match Self::reply_status(&reply)? {
            "OK" => Ok(Lease {
                ttl,
                ..lease.clone()
            }),
            "FENCE" => Err(stale_thread(
                &lease.thread_id,
                lease.token,
                number(reply.get(1).ok_or_else(|| protocol("fence"))?)?,
            )),
            other => Err(protocol(format!("renew answered {other:?}"))),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        if lease.thread_id.is_empty() {
            return Ok(());
        }
        let call = Call {
            script: &SCRIPTS.lease_release,
            keys: vec![self.inner.layout.thread_keys(&lease.thread_id)[crate::keys::LEASE].clone()],
            args: vec![s(&lease.holder), s(lease.token.to_string())],
        };
        self.inner.link.eval(&call, true).await?;
        Ok(())
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        validate_claim_request(key, ttl)?;
        let call = Call {
            script: &SCRIPTS.claim,
            keys: vec![self.inner.layout.ledger_key(key)],
            args: vec![s(duration_ms(ttl).to_string())],
        };
        // Not retried on a lost connection: a repeated claim could find its own claim.
        let reply = array(self.inner.link.eval(&call, false).await?)?;
        let arg = reply.get(1).ok_or_else(|| protocol("claim reply"))?;
        match Self::reply_status(&reply)? {
            "A" => Ok(Claim::Acquired {
                token: number(arg)?,
            }),
            "P" => Ok(Claim::Pending {
                expires_in: Duration::from_millis(number(arg)?),
            }),
            "C" => Ok(Claim::Completed {
                outcome: bulk(arg)
                    .and_then(decode_typed)
                    .ok_or_else(|| crate::error::corrupt(format!("outcome of {key:?}")))?,
            }),
            other => Err(protocol(format!("claim answered {other:?}"))),
        }
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        let call = Call {
            script: &SCRIPTS.claim_complete,
            keys: vec![self.inner.layout.ledger_key(key)],
            args: vec![s(token.to_string()), encode_typed(&outcome)],
        };
        let reply = array(self.inner.link.eval(&call, true).await?)?;
        match Self::reply_status(&reply)? {
            "OK" => Ok(()),
            "ABANDONED" => Err(Error::StaleFence {
                scope: format!("ledger key {key:?} (abandoned)"),
                token,
                current: number(reply.get(1).ok_or_else(|| protocol("fence"))?)?,
            }),
            "FENCE" => Err(Error::StaleFence {
                scope: format!("ledger key {key:?}"),
                token,
                current: number(reply.get(1).ok_or_else(|| protocol("fence"))?)?,
            }),
            other => Err(protocol(format!("complete_claim answered {other:?}"))),
        }
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        let call = Call {
            script: &SCRIPTS.claim_abandon,
            keys: vec![self.inner.layout.ledger_key(key)],
            args: vec![s(token.to_string())],
        };
        self.inner.link.eval(&call, true).await?;
        Ok(())
    }
}
