//! Reads: `get_tuple` (one script), and `list` as pages of index scans completed with
//! pipelined reads of values and writes.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use checkpoint_core::backend::{Page, legacy, paged};
use checkpoint_core::{
    BoxStream, CheckpointConfig, CheckpointTuple, DeltaChannelHistory, Error, ListOptions, Result,
    checkpoint_id_unix_millis,
};
use redis::Value;

use crate::chunk;
use crate::codec::{array, bulk, decode_delta, decode_tuple, number, record_manifests};
use crate::core::Inner;
use crate::error::{corrupt, protocol};
use crate::keys::{
    BL, CP, WI, WV, esc, parse_gref, parse_thread_entry, parse_tref, thread_entries_after, token,
    tref,
};
use crate::scripts::Call;
use crate::scripts::{Args, DeltaArgs, GscanArgs, IndexOp, ListArgs, ThreadScan, ThreadsArgs};

/// Tuples per `list` page.
const PAGE: usize = 64;
/// Index entries one `list` page may examine, so a selective filter never blocks the server
/// for long; the stream simply asks for the next page.
pub(crate) const SCAN_BUDGET: usize = 4096;
/// Value reads per pipeline when completing a list page; a page with more reads is spread
/// over several pooled connections (at most [`MAX_LANES`]) read concurrently.
const VALUE_LANE: usize = 24;
/// Most connections one list page reads values on at once.
const MAX_LANES: usize = 4;
/// In Cluster mode, a global index entry whose checkpoint (or thread) is missing is removed
/// only when its id (or the time it was written) is at least this old: a younger one may
/// belong to a put still in flight (the index is written before the thread).
const REPAIR_GRACE_MS: u64 = 60_000;

fn s(v: impl AsRef<[u8]>) -> Vec<u8> {
    v.as_ref().to_vec()
}

/// `get_tuple`: one `get.lua` call.
pub(crate) async fn get_tuple(
    inner: &Inner,
    config: &CheckpointConfig,
) -> Result<Option<CheckpointTuple>> {
    let thread_id = config.require_thread()?;
    let call = inner.get_call(
        thread_id,
        &config.checkpoint_ns,
        config.checkpoint_id.as_deref(),
        false,
    );
    let mut tuple = match inner.link.eval(&call).await? {
        Value::Nil => return Ok(None),
        v => decode_tuple(thread_id, v)?,
    };
    legacy_sends(inner, std::slice::from_mut(&mut tuple)).await?;
    Ok(Some(tuple))
}

/// Checkpoints of a LangGraph format before 4 read with their parent's sends (see
/// `checkpoint_core::backend::legacy`): the parent is read as stored, one script call per
/// such checkpoint, none otherwise.
async fn legacy_sends(inner: &Inner, tuples: &mut [CheckpointTuple]) -> Result<()> {
    for tuple in tuples {
        let Some(parent) = legacy::sends_parent(tuple).cloned() else {
            continue;
        };
        let call = inner.get_call(
            &parent.thread_id,
            &parent.checkpoint_ns,
            parent.checkpoint_id.as_deref(),
            false,
        );
        let writes = match inner.link.eval(&call).await? {
            Value::Nil => Vec::new(),
            v => decode_tuple(&parent.thread_id, v)?.pending_writes,
        };
        legacy::apply_parent_sends(tuple, &writes);
    }
    Ok(())
}

pub(crate) async fn delta_channel_history(
    inner: &Inner,
    config: &CheckpointConfig,
    channels: &[String],
) -> Result<BTreeMap<String, DeltaChannelHistory>> {
    let thread_id = config.require_thread()?;
    let mut out: BTreeMap<String, DeltaChannelHistory> = checkpoint_core::delta::empty(channels);
    if out.is_empty() {
        return Ok(out);
    }
    let names: Vec<String> = out.keys().cloned().collect();
    let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
    let call = DeltaArgs {
        ttl_ms: inner.default_ttl_ms,
        refresh: inner.refresh_on_read,
        ns: &config.checkpoint_ns,
        id: config.checkpoint_id.as_deref(),
        channels: &wanted,
    }
    .call(inner.thread_keys(thread_id, false));
    let reply = inner.link.eval(&call).await?;
    decode_delta(reply, &wanted, &mut out)?;
    Ok(out)
}

/// `list_threads`: the threads whose checkpoint-record hash (`cp`) exists, in pages (growing
/// up to [`SCAN_BUDGET`] ids) read from the global index's thread entries, from `after`
/// when given (`list_threads_after`). The hash is removed with a thread's last checkpoint
/// and expires with its TTL, so no checkpoint is read; an entry whose hash is gone is
/// skipped and removed (see [`thread_page`]).
///
/// Where the index is not known to be complete (a stored layout before 2 that this client
/// could not bring up to date, or a server that may evict any key; see
/// `config::thread_index`), the threads are found by a `SCAN` of the key space (every
/// primary of a Cluster) instead, and sorted.
pub(crate) fn list_threads(
    inner: Arc<Inner>,
    after: Option<&str>,
) -> BoxStream<'static, Result<String>> {
    let after = after.map(str::to_owned);
    if inner.thread_index {
        return checkpoint_core::backend::paged_keys(SCAN_BUDGET, after, move |after, want| {
            let inner = Arc::clone(&inner);
            async move { thread_page(&inner, after.as_deref(), want).await }
        });
    }
    checkpoint_core::backend::collected_keys(async move {
        let keys = inner
            .link
            .scan_keys(&inner.layout.thread_records_pattern())
            .await?;
        Ok(keys
            .iter()
            .filter_map(|k| inner.layout.thread_of_records_key(k))
            .filter(|t| after.as_deref().is_none_or(|a| t.as_str() > a))
            .collect())
    })
}

/// Up to `want` thread ids after `after`, fewer only at the end of the index. On a single
/// node, `threads.lua` checks that each thread exists and removes the entries of those that
/// do not, atomically. On a Cluster the client checks (one `EXISTS` per entry, routed to
/// the thread's node) and removes an entry without its thread only when it was written more
/// than [`REPAIR_GRACE_MS`] ago: a put writes the entry before its thread.
async fn thread_page(inner: &Inner, after: Option<&str>, want: usize) -> Result<Vec<String>> {
    let cluster = inner.link.is_cluster();
    let mut lo = thread_entries_after(after);
    let mut out = Vec::with_capacity(want);
    loop {
        let call = ThreadsArgs {
            lo,
            want: want - out.len(),
            budget: SCAN_BUDGET,
            check: !cluster,
        }
        .call(inner.layout.global_keys());
        let [entries, last, done]: [Value; 3] = array(inner.link.eval(&call).await?)?
            .try_into()
            .map_err(|_| protocol("a thread page has 3 parts"))?;
        let mut found = Vec::new();
        for e in array(entries)? {
            let e = bulk(&e).ok_or_else(|| protocol("thread entry"))?.to_vec();
            // Only something other than a saver can have written an entry that does not
            // parse: it names no thread, so it is passed over, not listed.
            match parse_thread_entry(&e) {
                Some((thread, cp_key)) => found.push((e, thread, cp_key)),
                None => tracing::warn!(entry = ?e, "skipping a malformed thread entry"),
            }
        }
        if cluster {
            found = existing_threads(inner, found).await?;
        }
        out.extend(found.into_iter().map(|(_, thread, _)| thread));
        if number(&done)? == 1 || out.len() >= want {
            return Ok(out);
        }
        let last = bulk(&last).ok_or_else(|| protocol("thread page end"))?;
        lo = [b"(", last].concat();
    }
}

/// On a Cluster: the entries whose thread still has its `cp` hash; the others are removed
/// from the index when old enough (best effort).
async fn existing_threads(
    inner: &Inner,
    found: Vec<(Vec<u8>, String, String)>,
) -> Result<Vec<(Vec<u8>, String, String)>> {
    let checks: Vec<redis::Cmd> = found
        .iter()
        .map(|(_, _, key)| redis::cmd("EXISTS").arg(key).clone())
        .collect();
    let exists = inner.link.pipeline(&checks, false).await?;
    let mut live = Vec::with_capacity(found.len());
    let mut gone = Vec::new();
    for (f, e) in found.into_iter().zip(&exists) {
        if number(e)? == 1 {
            live.push(f);
        } else {
            gone.push(IndexOp::RemoveThreadIfOld {
                entry: f.0,
                grace_ms: REPAIR_GRACE_MS,
            });
        }
    }
    if let Err(e) = inner.gindex(gone).await {
        tracing::debug!(error = %e, "thread index repair failed");
    }
    Ok(live)
}

/// `list`: pages of [`PAGE`] tuples, each a scan of the thread's or the global index
/// completed by [`complete`].
pub(crate) fn list(
    inner: Arc<Inner>,
    options: ListOptions,
) -> BoxStream<'static, Result<CheckpointTuple>> {
    let limit = options.limit;
    paged(
        limit,
        PAGE,
        ListState::new(inner, options),
        |mut st, want| async move {
            let tuples = st.next_page(want).await?;
            let last = st.done;
            Ok((st, Page::new(tuples, last)))
        },
    )
}

/// A decoded global reference: `(id, thread, ns)`.
type GlobalRef = (String, String, String);

/// What a list stream walks.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// One checkpoint by its full address.
    Direct,
    /// One thread's index.
    Thread(ThreadScan),
    /// The global index (every checkpoint, or the filter's tokens).
    Global,
}

struct ListState {
    inner: Arc<Inner>,
    opts: ListOptions,
    plan: Plan,
    tokens: Vec<String>,
    /// Exclusive upper bound of the next page, in the plan's reference space.
    cursor: Option<Vec<u8>>,
    done: bool,
}

impl ListState {
    fn new(inner: Arc<Inner>, opts: ListOptions) -> Self {
        let mut tokens: Vec<String> = opts.filter.iter().map(|(k, v)| token(k, v)).collect();
        tokens.sort();
        tokens.dedup();
        let plan = match (&opts.thread_id, &opts.checkpoint_ns) {
            (Some(_), Some(_)) if opts.checkpoint_id.is_some() => Plan::Direct,
            (Some(_), Some(_)) if tokens.is_empty() => Plan::Thread(ThreadScan::Namespace),
            (Some(_), _) if !tokens.is_empty() => Plan::Thread(ThreadScan::Tokens),
            (Some(_), _) => Plan::Thread(ThreadScan::ById),
            (None, _) => Plan::Global,
        };
        Self {
            inner,
            opts,
            plan,
            tokens,
            cursor: None,
            done: false,
        }
    }

    /// `(lo, hi)` range specs of the next page in reference space.
    fn bounds(&self, id_only: bool) -> (Vec<u8>, Vec<u8>) {
        let mut his: Vec<Vec<u8>> = Vec::new();
        let mut lo = s("-");
        if let Some(before) = &self.opts.before {
            his.push(esc(before));
        }
        if !id_only && let Some(id) = &self.opts.checkpoint_id {
            let mut l = s("[");
            l.extend_from_slice(&esc(id));
            lo = l;
            let mut h = esc(id);
            h.push(0xff);
            his.push(h);
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

    /// The next page: at most `want` tuples that pass every condition of the options.
    async fn next_page(&mut self, want: usize) -> Result<Vec<CheckpointTuple>> {
        let inner = Arc::clone(&self.inner);
        let tuples = match self.plan {
            Plan::Direct => {
                self.done = true;
                let config = CheckpointConfig {
                    thread_id: self.opts.thread_id.clone().unwrap_or_default(),
                    checkpoint_ns: self.opts.checkpoint_ns.clone().unwrap_or_default(),
                    checkpoint_id: self.opts.checkpoint_id.clone(),
                    extra: BTreeMap::new(),
                };
                get_tuple(&inner, &config).await?.into_iter().collect()
            }
            Plan::Thread(scan) => {
                let thread = self.opts.thread_id.clone().unwrap_or_default();
                let ns = self.opts.checkpoint_ns.as_deref();
                let (lo, hi) = self.bounds(scan == ThreadScan::Namespace);
                let ns_check = match (ns, scan) {
                    (Some(n), ThreadScan::Tokens) => esc(n),
                    _ => Vec::new(),
                };
                let args = ListArgs {
                    ttl_ms: inner.default_ttl_ms,
                    refresh: inner.refresh_on_read,
                    want,
                    budget: SCAN_BUDGET,
                    lo,
                    hi,
                    ns_check,
                    scan,
                    ns,
                    tokens: &self.tokens,
                };
                let reply = inner.eval_thread(args, &thread, false).await?;
                let [tuples, last, done]: [Value; 3] = reply
                    .try_into()
                    .map_err(|_| protocol("a list page has 3 parts"))?;
                let metas = array(tuples)?
                    .into_iter()
                    .map(|m| (thread.clone(), m))
                    .collect();
                let tuples = complete(&inner, metas).await?;
                self.advance(&last, &done)?;
                tuples
            }
            Plan::Global => {
                let (lo, hi) = self.bounds(false);
                let args = GscanArgs {
                    want,
                    budget: SCAN_BUDGET,
                    lo,
                    hi,
                    ns_check: self
                        .opts
                        .checkpoint_ns
                        .as_deref()
                        .map(esc)
                        .unwrap_or_default(),
                    tokens: &self.tokens,
                };
                let call = args.call(inner.layout.global_keys());
                let reply = array(inner.link.eval(&call).await?)?;
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
                let results = global_metas(&inner, &refs).await?;
                let mut dangling = Vec::new();
                let mut metas = Vec::new();
                for ((raw, (id, thread, ns)), result) in refs.into_iter().zip(results) {
                    match result {
                        Value::Nil => dangling.push((raw, id, thread, ns)),
                        v => metas.push((thread, v)),
                    }
                }
                let tuples = complete(&inner, metas).await?;
                if !dangling.is_empty() {
                    repair(&inner, dangling).await;
                }
                self.advance(&last, &done)?;
                tuples
            }
        };
        // Index lookups over-approximate (hashed tokens, integers beyond 2^53): the exact
        // conditions decide.
        Ok(tuples
            .into_iter()
            .filter(|t| {
                self.opts.admits(
                    &t.config.thread_id,
                    &t.config.checkpoint_ns,
                    &t.checkpoint.id,
                    &t.metadata,
                )
            })
            .collect())
    }

    fn advance(&mut self, last: &Value, done: &Value) -> Result<()> {
        if let Some(b) = bulk(last) {
            self.cursor = Some(b.to_vec());
        }
        self.done = number(done)? == 1 || bulk(last).is_none();
        Ok(())
    }
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

/// What makes two value reads of a list page the same read: thread, value field, and the
/// manifest the record carries for it (`None`: none).
type SharedRead = (String, Vec<u8>, Option<Vec<u8>>);

/// A listed tuple whose values and writes are being read (see [`RedisSaver::complete`]).
struct Pending {
    thread: String,
    tref: Vec<u8>,
    rec: Vec<u8>,
    members: Vec<Value>,
    slots: Vec<Slot>,
    /// Whether an `HMGET` of values was sent for it (not when every slot is [`Slot::Same`]).
    reads_values: bool,
    uniqs: usize,
}

/// How one channel's value is read by [`RedisSaver::complete`].
enum Slot {
    /// Its plain field, then its manifest field (in case it was chunked by an earlier put).
    Plain,
    /// The `count` chunks of `manifest`, which the record carries.
    Chunks { manifest: Vec<u8>, count: usize },
    /// The same stored value as slot `slot` of the page's tuple `tuple` (an earlier one of
    /// the same thread): read once per page, not once per checkpoint naming it.
    Same { tuple: usize, slot: usize },
}

/// Removes global index entries whose checkpoint no longer exists (expired by TTL, or
/// left by an interrupted Cluster write). Best effort.
async fn repair(inner: &Inner, dangling: Vec<(Vec<u8>, String, String, String)>) {
    let mut ops = Vec::with_capacity(dangling.len());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for (raw, id, thread, ns) in dangling {
        if inner.link.is_cluster() {
            // Only entries old enough that no put writing them can still be in flight.
            let old =
                checkpoint_id_unix_millis(&id).is_some_and(|ms| ms + REPAIR_GRACE_MS < now_ms);
            if old {
                ops.push(IndexOp::Remove { gref: raw });
            }
        } else {
            // Atomic check on the single node: remove only if the checkpoint is gone.
            ops.push(IndexOp::RemoveIfGone {
                gref: raw,
                cp_key: inner.layout.records_key(&thread),
                tref: tref(&id, &ns),
            });
        }
    }
    if let Err(e) = inner.gindex(ops).await {
        tracing::debug!(error = %e, "global index repair failed");
    }
}

/// The small part (`{tref, record, write members}`, or nil when gone) of each globally
/// listed checkpoint. On a single server without refresh-on-read: plain `HGET` and
/// `ZRANGEBYLEX` commands in one `MULTI`/`EXEC` pipeline (one round trip, one atomic
/// snapshot of every record and write list, far cheaper than one script per tuple);
/// otherwise one `load_meta` script per checkpoint, run concurrently.
async fn global_metas(inner: &Inner, refs: &[(Vec<u8>, GlobalRef)]) -> Result<Vec<Value>> {
    if inner.link.is_cluster() || inner.refresh_on_read {
        let calls: Vec<Call<'static>> = refs
            .iter()
            .map(|(_, (id, thread, ns))| inner.get_call(thread, ns, Some(id), true))
            .collect();
        return inner
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
        let keys = inner.layout.thread_keys(thread);
        let r = tref(id, ns);
        let mut lo = s("[");
        lo.extend_from_slice(&r);
        let mut hi = s("(");
        hi.extend_from_slice(&r);
        hi.push(0xff);
        let mut get = redis::cmd("HGET");
        get.arg(&keys[CP]).arg(&r[..]);
        let mut range = redis::cmd("ZRANGEBYLEX");
        range.arg(&keys[WI]).arg(lo).arg(hi);
        cmds.push(get);
        cmds.push(range);
        trefs.push(r);
    }
    let replies = inner.link.pipeline(&cmds, true).await?;
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
async fn complete(inner: &Inner, metas: Vec<(String, Value)>) -> Result<Vec<CheckpointTuple>> {
    let mut pending = Vec::with_capacity(metas.len());
    let mut cmds = Vec::new();
    // (thread, value field, the manifest the record carries for it) -> (tuple, slot) of its
    // first read in this page: the checkpoints of a thread share most of their values (a
    // channel a step did not change keeps its version), so each is read, moved and held
    // once. A record's own manifest is part of the key: a put that reused a version (a
    // fork) reads back the value it wrote, not the one stored first under that field.
    let mut first: HashMap<SharedRead, (usize, usize)> = HashMap::new();
    for (thread, meta) in metas {
        let [tref, rec, members]: [Value; 3] = array(meta)?
            .try_into()
            .map_err(|_| protocol("a tuple summary has 3 parts"))?;
        let tref = bulk(&tref)
            .ok_or_else(|| protocol("tuple reference"))?
            .to_vec();
        let rec = bulk(&rec).ok_or_else(|| protocol("tuple record"))?.to_vec();
        let members = array(members)?;
        let corrupt = || corrupt("corrupt checkpoint record");
        let fields = crate::keys::netstr(&rec)
            .and_then(|(cv, _)| crate::keys::unpack_list(cv))
            .ok_or_else(corrupt)?;
        let mut inline: BTreeMap<Vec<u8>, Vec<u8>> = record_manifests(&rec)
            .ok_or_else(corrupt)?
            .into_iter()
            .collect();
        let keys = inner.layout.thread_keys(&thread);
        let mut slots = Vec::with_capacity(fields.len());
        let mut reads_values = false;
        if !fields.is_empty() {
            let mut c = redis::cmd("HMGET");
            c.arg(&keys[BL]);
            for f in &fields {
                let at = (pending.len(), slots.len());
                let manifest = inline.remove(f);
                match first.entry((thread.clone(), f.clone(), manifest.clone())) {
                    Entry::Occupied(e) => {
                        let (tuple, slot) = *e.get();
                        slots.push(Slot::Same { tuple, slot });
                        continue;
                    }
                    Entry::Vacant(e) => {
                        e.insert(at);
                    }
                }
                reads_values = true;
                match manifest {
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
            if reads_values {
                cmds.push(c);
            }
        }
        let mut uniqs = 0;
        if !members.is_empty() {
            let mut c = redis::cmd("HMGET");
            c.arg(&keys[WV]);
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
            reads_values,
            uniqs,
        });
    }
    let lanes = cmds.len().div_ceil(VALUE_LANE);
    let mut results = inner
        .link
        .pipeline_lanes(&cmds, lanes.min(MAX_LANES))
        .await?
        .into_iter();
    let mut fetched = Vec::with_capacity(pending.len());
    for p in &pending {
        let vals = if p.reads_values {
            array(results.next().ok_or_else(|| protocol("missing values"))?)?
        } else {
            Vec::new()
        };
        let wvals = if p.uniqs > 0 {
            array(results.next().ok_or_else(|| protocol("missing writes"))?)?
        } else {
            Vec::new()
        };
        fetched.push((vals, wvals));
    }
    let fetched = assemble(inner, &pending, fetched).await?;
    let mut out = Vec::with_capacity(pending.len());
    for (p, (vals, wvals)) in pending.into_iter().zip(fetched) {
        let raced = vals.iter().any(|v| matches!(v, Value::Nil))
            || wvals.iter().any(|v| matches!(v, Value::Nil));
        if raced {
            let (id, ns) = parse_tref(&p.tref).ok_or_else(|| corrupt("checkpoint reference"))?;
            let config = CheckpointConfig::new(p.thread)
                .with_ns(ns)
                .with_checkpoint_id(id);
            if let Some(t) = get_tuple(inner, &config).await? {
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
    legacy_sends(inner, &mut out).await?;
    checkpoint_core::backend::share_values(&mut out);
    Ok(out)
}

/// Turns each tuple's fetched value slots (see [`Slot`]) into one stored value per
/// channel: the plain value, or a chunked value reassembled from its chunks. Chunks of a
/// value whose manifest the record did not carry (a channel unchanged by the put) are
/// read with one more pipelined step. A [`Slot::Same`] gets a copy of the value it names. A
/// value that is missing, or whose chunks are, becomes `Nil` (the caller reads that tuple
/// again atomically).
async fn assemble(
    inner: &Inner,
    pending: &[Pending],
    fetched: Vec<(Vec<Value>, Vec<Value>)>,
) -> Result<Vec<(Vec<Value>, Vec<Value>)>> {
    let mut out = Vec::with_capacity(fetched.len());
    // (tuple, channel, manifest, chunk count) of the values needing the extra step.
    let mut late = Vec::new();
    // (tuple, channel, tuple, channel) of the values copied from an earlier tuple.
    let mut same = Vec::new();
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
                            .ok_or_else(|| corrupt("corrupt value manifest"))?;
                        let c = late_cmd.get_or_insert_with(|| {
                            let mut c = redis::cmd("HMGET");
                            c.arg(&inner.layout.thread_keys(&p.thread)[BL]);
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
                Slot::Same { tuple, slot } => {
                    values.push(Value::Nil);
                    same.push((t, i, *tuple, *slot));
                }
            }
        }
        cmds.extend(late_cmd);
        out.push((values, wvals));
    }
    if !cmds.is_empty() {
        fetch_late(inner, &cmds, late, &mut out).await?;
    }
    // In page order, so a copy of a copy finds its value filled already.
    for (t, i, t0, i0) in same {
        let v = out
            .get(t0)
            .and_then(|(values, _)| values.get(i0))
            .cloned()
            .ok_or_else(|| protocol("a shared value slot is out of range"))?;
        out[t].0[i] = v;
    }
    Ok(out)
}

/// The extra step of [`assemble`]: the chunks of values whose manifest only the value
/// field carried, reassembled into their slots.
async fn fetch_late(
    inner: &Inner,
    cmds: &[redis::Cmd],
    late: Vec<(usize, usize, Vec<u8>, usize)>,
    out: &mut [(Vec<Value>, Vec<Value>)],
) -> Result<()> {
    let replies = inner.link.pipeline(cmds, false).await?;
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
    Ok(())
}
