//! Writes: `put` and `put_writes`, each one atomic round trip, and `import`.
//!
//! A put takes one of three paths (see `lua/put.lua` for the script's side):
//!
//! * **single node, unconditional** (the common case): values, chunks, index entries and the
//!   record are plain commands (`HSETNX`, `HSET`, `ZADD`) in one `MULTI`/`EXEC` whose only
//!   script is the TTL refresh (`touch.lua`). A re-put of an existing id sends a second,
//!   self-contained transaction in which `put.lua` replaces the record (mode `P`);
//! * **single node, compare-and-set or fenced**: the values go in as plain commands, then
//!   `put.lua` checks the head or the fence and writes the record and index entries, or
//!   refuses and sweeps what the transaction wrote (mode `F`);
//! * **Cluster**: the global index entries first (its own slot, `gindex.lua`), then one
//!   `put.lua` call in the thread's slot with the values as arguments (mode `V`).

use checkpoint_core::backend::{Identifiers, put_address};
use checkpoint_core::writes::{replaces_existing, special_index, write_index};
use checkpoint_core::{
    Bytes, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple,
    Error, PendingWrite, PutMode, PutOptions, PutWritesOptions, Result, TypedValue,
};
use redis::{Cmd, Value};

use crate::chunk::manifest_field;
use crate::codec::{EncodedRecord, array, bulk, encode_blob, encode_record, encode_write, number};
use crate::core::{Inner, reply_status};
use crate::error::protocol;
use crate::keys::{
    BL, CP, GMI, MI, OPT, blob_field, esc, esc_into, global_index_args, gref, idx8, pack_list,
    thread_entry, thread_index_args, tref, unesc_str, unpack_list,
};
use crate::scripts::{self, Args, IndexOp, PutArgs, PutWritesArgs, TouchArgs};

/// Redis stores any string: keys and fields are binary safe, and identifiers inside them
/// are escaped.
pub(crate) const IDENTIFIERS: Identifiers = Identifiers::any("Redis");

/// Everything a put writes, prepared before any I/O.
struct Prepared {
    /// `(field, stored value)` pairs for `HSETNX` into `BL`: plain values, and the manifests
    /// of chunked ones.
    blobs: Vec<Vec<u8>>,
    /// Content-addressed chunks of list values (see the `chunk` module), written with `HSET`.
    chunks: Vec<(Vec<u8>, Bytes)>,
    record: EncodedRecord,
    /// Members of the thread index `ZADD` (score, member pairs).
    thread_index: Vec<Vec<u8>>,
}

impl Prepared {
    fn new(
        inner: &Inner,
        config: &CheckpointConfig,
        mut checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: &ChannelVersions,
    ) -> Result<Self> {
        let ns = config.checkpoint_ns.as_str();
        let values = std::mem::take(&mut checkpoint.channel_values);
        let mut blobs = Vec::with_capacity(new_versions.len() * 2);
        let mut chunks = Vec::new();
        let mut manifests = Vec::new();
        // The memo of split lists is keyed by thread, namespace and channel.
        let mut memo_key = esc(&config.thread_id);
        esc_into(&mut memo_key, ns.as_bytes());
        let memo_base = memo_key.len();
        for (channel, version) in new_versions {
            let field = blob_field(ns, channel, version);
            let value = values.get(channel);
            memo_key.truncate(memo_base);
            esc_into(&mut memo_key, channel.as_bytes());
            match value.and_then(|v| inner.chunk_memo.split(&memo_key, v)) {
                Some(split) => {
                    blobs.push(manifest_field(&field));
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
        let id = checkpoint.id.clone();
        let record = encode_record(
            ns,
            checkpoint,
            metadata,
            config.checkpoint_id.as_deref(),
            &manifests,
        )?;
        let thread_index = thread_index_args(&id, ns, &record.tokens);
        Ok(Self {
            blobs,
            chunks,
            record,
            thread_index,
        })
    }
}

pub(crate) async fn put(
    inner: &Inner,
    config: &CheckpointConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    options: PutOptions,
) -> Result<CheckpointConfig> {
    IDENTIFIERS.check_put(config, &checkpoint, &new_versions)?;
    let id = checkpoint.id.clone();
    let stored = CheckpointConfig::new(config.thread_id.clone())
        .with_ns(config.checkpoint_ns.clone())
        .with_checkpoint_id(id.clone());
    let p = Prepared::new(inner, config, checkpoint, metadata, &new_versions)?;
    // A Cluster re-put reconciles the global index with the new tokens afterwards.
    let tokens = inner.link.is_cluster().then(|| p.record.tokens.clone());
    let reply = if inner.link.is_cluster() {
        put_cluster(inner, config, &id, p, &options).await?
    } else {
        match put_single(inner, config, &id, p, &options).await? {
            Some(reply) => reply,
            None => return Ok(stored),
        }
    };
    match reply_status(&reply)? {
        "OK" => {
            if let Some(tokens) = tokens {
                drop_replaced_tokens(inner, config, &id, &tokens, reply.get(1)).await;
            }
            Ok(stored)
        }
        "CONFLICT" => {
            let found = match reply.get(1).and_then(bulk) {
                Some(b) => Some(unesc_str(b).ok_or_else(|| protocol("conflict head"))?.0),
                None => None,
            };
            Err(Error::Conflict {
                thread_id: config.thread_id.clone(),
                checkpoint_ns: config.checkpoint_ns.clone(),
                expected: config.checkpoint_id.clone(),
                found,
            })
        }
        "FENCE" => {
            let current = number(reply.get(1).ok_or_else(|| protocol("fence"))?)?;
            Err(Error::stale_lease(
                &config.thread_id,
                options.fence.unwrap_or_default(),
                current,
            ))
        }
        other => Err(protocol(format!("put answered {other:?}"))),
    }
}

/// A Cluster put: the global index entries of the thread and the checkpoint first (an
/// entry without its checkpoint is invisible, since reads check; a checkpoint without its
/// entries would be missing from global and thread lists), then `put.lua` in the thread's
/// slot with the values as arguments.
async fn put_cluster(
    inner: &Inner,
    config: &CheckpointConfig,
    id: &str,
    p: Prepared,
    options: &PutOptions,
) -> Result<Vec<Value>> {
    let g = gref(id, &config.thread_id, &config.checkpoint_ns);
    let cp_key = inner.layout.records_key(&config.thread_id);
    inner
        .gindex(vec![
            IndexOp::AddThread {
                entry: thread_entry(&config.thread_id, &cp_key),
            },
            IndexOp::Add {
                gref: g,
                tokens: pack_list(&p.record.tokens),
            },
        ])
        .await?;
    let mut values = Vec::with_capacity(2 * p.chunks.len() + p.blobs.len());
    for (field, chunk) in p.chunks {
        values.push(field);
        values.push(chunk.to_vec());
    }
    values.extend(p.blobs);
    let args = put_args(
        inner,
        config,
        id,
        options,
        p.record.bytes,
        scripts::PutMode::Cluster {
            thread_index: p.thread_index,
            values,
        },
    );
    inner.eval_thread(args, &config.thread_id, true).await
}

/// A single-node put: values as plain commands in one `MULTI`/`EXEC` with the script.
/// `None` when an unconditional put stored a new checkpoint with plain commands only.
async fn put_single(
    inner: &Inner,
    config: &CheckpointConfig,
    id: &str,
    p: Prepared,
    options: &PutOptions,
) -> Result<Option<Vec<Value>>> {
    let ns = config.checkpoint_ns.as_str();
    let keys = inner.thread_keys(&config.thread_id, true);
    let global_index = global_index_args(
        &thread_entry(&config.thread_id, &keys[CP]),
        &gref(id, &config.thread_id, ns),
        &p.record.tokens,
    );
    let refusable = options.mode == PutMode::CompareAndSet || options.fence.is_some();
    // Chunks first (a manifest never names a chunk that is not there yet), then the
    // values, then, unless the script adds them once it accepts the put, the index entries.
    let prelude = |index: bool| {
        let mut prelude = Vec::with_capacity(p.blobs.len() / 2 + 4);
        if !p.chunks.is_empty() {
            let mut c = redis::cmd("HSET");
            c.arg(&keys[BL]);
            for (field, chunk) in &p.chunks {
                c.arg(&field[..]).arg(&chunk[..]);
            }
            prelude.push(c);
        }
        for pair in p.blobs.chunks_exact(2) {
            let mut c = redis::cmd("HSETNX");
            c.arg(&keys[BL]).arg(&pair[0][..]).arg(&pair[1][..]);
            prelude.push(c);
        }
        if index {
            let mut c = redis::cmd("ZADD");
            c.arg(&keys[MI]).arg(&p.thread_index);
            prelude.push(c);
            let mut c = redis::cmd("ZADD");
            c.arg(&keys[GMI]).arg(&global_index);
            prelude.push(c);
        }
        prelude
    };
    if !refusable && store_new(inner, &keys, ns, id, prelude(true), &p.record.bytes).await? {
        return Ok(None);
    }
    // A refusable put, or a re-put (the id exists already), which the script does: it
    // replaces the record and drops what only the old one named. Sent whole again, so it
    // stands alone whatever ran in between.
    let prelude = prelude(!refusable);
    let mode = if refusable {
        let mut written: Vec<Vec<u8>> = p.chunks.into_iter().map(|(field, _)| field).collect();
        written.extend(p.blobs.into_iter().step_by(2));
        scripts::PutMode::Refusable {
            thread_index: p.thread_index,
            global_index,
            written,
        }
    } else {
        scripts::PutMode::Prewritten
    };
    let call = put_args(inner, config, id, options, p.record.bytes, mode).call(keys);
    match inner.link.eval_after(prelude, 0, &call).await {
        Some(reply) => Ok(Some(array(
            reply?.pop().ok_or_else(|| protocol("put reply"))?,
        )?)),
        None => Err(protocol("a single-node put found a cluster link")),
    }
}

/// An unconditional put of a new checkpoint (mode `P` of nothing): nothing can refuse it,
/// so the record too is a plain `HSETNX`, and the only script is the TTL refresh, which
/// needs the thread's settings. Every Lua argument and call costs, so this is the cheapest
/// put that still applies a TTL atomically. `false` when the id exists already (a re-put).
async fn store_new(
    inner: &Inner,
    keys: &[String],
    ns: &str,
    id: &str,
    mut prelude: Vec<Cmd>,
    record: &[u8],
) -> Result<bool> {
    let mut c = redis::cmd("HSETNX");
    c.arg(&keys[CP]).arg(tref(id, ns)).arg(record);
    prelude.push(c);
    let touch = TouchArgs {
        ttl_ms: inner.default_ttl_ms,
    }
    .call(keys[..=OPT].to_vec());
    let replies = match inner.link.eval_after(prelude, 1, &touch).await {
        Some(r) => r?,
        None => return Err(protocol("a single-node put found a cluster link")),
    };
    Ok(number(replies.first().ok_or_else(|| protocol("put reply"))?)? == 1)
}

fn put_args<'a>(
    inner: &Inner,
    config: &'a CheckpointConfig,
    id: &'a str,
    options: &PutOptions,
    record: Vec<u8>,
    mode: scripts::PutMode,
) -> PutArgs<'a> {
    PutArgs {
        ttl_ms: inner.default_ttl_ms,
        thread_id: &config.thread_id,
        fence: options.fence,
        compare_and_set: options.mode == PutMode::CompareAndSet,
        ns: &config.checkpoint_ns,
        id,
        parent: config.checkpoint_id.as_deref(),
        record,
        mode,
    }
}

/// After a Cluster re-put: drops the global entries of metadata tokens the replaced record
/// had and the new one lacks (best effort; reads re-check metadata anyway).
async fn drop_replaced_tokens(
    inner: &Inner,
    config: &CheckpointConfig,
    id: &str,
    tokens: &[String],
    old: Option<&Value>,
) {
    let Some(old) = old.and_then(bulk) else {
        return;
    };
    let old = unpack_list(old).unwrap_or_default();
    let stale = old
        .iter()
        .any(|t| !tokens.iter().any(|n| n.as_bytes() == t.as_slice()));
    if stale {
        let op = IndexOp::Set {
            gref: gref(id, &config.thread_id, &config.checkpoint_ns),
            tokens: pack_list(tokens),
        };
        if let Err(e) = inner.gindex(vec![op]).await {
            tracing::warn!(error = %e, "could not drop replaced metadata from the global index");
        }
    }
}

pub(crate) async fn put_writes(
    inner: &Inner,
    config: &CheckpointConfig,
    writes: Vec<(String, TypedValue)>,
    task_id: &str,
    options: PutWritesOptions,
) -> Result<()> {
    let Some(checkpoint_id) = IDENTIFIERS.check_put_writes(config, &writes, task_id, &options)?
    else {
        return Ok(());
    };
    let task_path = esc(&options.task_path);
    let mut stored = Vec::with_capacity(writes.len());
    for (position, (channel, value)) in writes.iter().enumerate() {
        let mut tail = esc(task_id);
        tail.extend_from_slice(&idx8(write_index(channel, position)));
        // In its stored form, so the script stores it as is (no concatenation in Lua).
        stored.push((tail, encode_write(&task_path, channel, value)));
    }
    let args = PutWritesArgs {
        ttl_ms: inner.default_ttl_ms,
        fence: options.fence,
        tref: tref(checkpoint_id, &config.checkpoint_ns),
        replace: replaces_existing(&writes),
        task_path,
        writes: stored,
    };
    let reply = inner.eval_thread(args, &config.thread_id, false).await?;
    match reply_status(&reply)? {
        "OK" => Ok(()),
        "FENCE" => {
            let current = number(reply.get(1).ok_or_else(|| protocol("fence"))?)?;
            Err(Error::stale_lease(
                &config.thread_id,
                options.fence.unwrap_or_default(),
                current,
            ))
        }
        other => Err(protocol(format!("put_writes answered {other:?}"))),
    }
}

/// `import` on a single server (a Cluster uses the default, `put` by `put`). Every tuple is
/// checked first. Per thread, the checkpoints go in one `MULTI`/`EXEC` written as `put`
/// writes a new checkpoint (chunks, values, index entries, the record with `HSETNX`, one
/// TTL refresh); a tuple whose id was stored already is then put again through `put`
/// (which replaces the record). A tuple whose parent is the tuple before it sends only the
/// channels whose version changed. Then the pending writes, with their indexes as given, in
/// one `put_writes` script call per task and kind (regular writes kept if present, special
/// ones replaced), all sent at once.
pub(crate) async fn import(inner: &Inner, tuples: Vec<CheckpointTuple>) -> Result<()> {
    for t in &tuples {
        IDENTIFIERS.check_put(
            &put_address(t),
            &t.checkpoint,
            &t.checkpoint.channel_versions,
        )?;
        for w in &t.pending_writes {
            IDENTIFIERS.check("task_id", &w.task_id)?;
            IDENTIFIERS.check("task_path", &w.task_path)?;
            IDENTIFIERS.check("write channel", &w.channel)?;
        }
    }
    for thread in tuples.chunk_by(|a, b| a.config.thread_id == b.config.thread_id) {
        import_thread(inner, thread).await?;
    }
    Ok(())
}

async fn import_thread(inner: &Inner, tuples: &[CheckpointTuple]) -> Result<()> {
    let Some(first) = tuples.first() else {
        return Ok(());
    };
    let thread = first.config.thread_id.as_str();
    let keys = inner.thread_keys(thread, true);
    let entry = thread_entry(thread, &keys[CP]);
    let mut prelude = Vec::new();
    let mut records = Vec::with_capacity(tuples.len());
    let mut last: Option<(&str, &str, &ChannelVersions)> = None;
    for t in tuples {
        let at = put_address(t);
        let ns = at.checkpoint_ns.as_str();
        let parent_versions = last
            .filter(|(last_ns, last_id, _)| {
                *last_ns == ns && at.checkpoint_id.as_deref() == Some(*last_id)
            })
            .map(|(_, _, versions)| versions);
        let new_versions: ChannelVersions = t
            .checkpoint
            .channel_versions
            .iter()
            .filter(|(c, v)| parent_versions.is_none_or(|p| p.get(*c) != Some(*v)))
            .map(|(c, v)| (c.clone(), v.clone()))
            .collect();
        let id = t.checkpoint.id.as_str();
        let p = Prepared::new(
            inner,
            &at,
            t.checkpoint.clone(),
            t.metadata.clone(),
            &new_versions,
        )?;
        if !p.chunks.is_empty() {
            let mut c = redis::cmd("HSET");
            c.arg(&keys[BL]);
            for (field, chunk) in &p.chunks {
                c.arg(&field[..]).arg(&chunk[..]);
            }
            prelude.push(c);
        }
        for pair in p.blobs.chunks_exact(2) {
            let mut c = redis::cmd("HSETNX");
            c.arg(&keys[BL]).arg(&pair[0][..]).arg(&pair[1][..]);
            prelude.push(c);
        }
        let mut c = redis::cmd("ZADD");
        c.arg(&keys[MI]).arg(&p.thread_index);
        prelude.push(c);
        let mut c = redis::cmd("ZADD");
        c.arg(&keys[GMI]).arg(global_index_args(
            &entry,
            &gref(id, thread, ns),
            &p.record.tokens,
        ));
        prelude.push(c);
        let mut c = redis::cmd("HSETNX");
        c.arg(&keys[CP]).arg(tref(id, ns)).arg(&p.record.bytes[..]);
        records.push(c);
        last = Some((
            t.config.checkpoint_ns.as_str(),
            id,
            &t.checkpoint.channel_versions,
        ));
    }
    let stored = records.len();
    prelude.extend(records);
    let touch = TouchArgs {
        ttl_ms: inner.default_ttl_ms,
    }
    .call(keys[..=OPT].to_vec());
    let replies = match inner.link.eval_after(prelude, stored, &touch).await {
        Some(r) => r?,
        None => return Err(protocol("a single-node import found a cluster link")),
    };
    for (t, reply) in tuples.iter().zip(&replies) {
        if number(reply)? == 0 {
            put(
                inner,
                &put_address(t),
                t.checkpoint.clone(),
                t.metadata.clone(),
                t.checkpoint.channel_versions.clone(),
                PutOptions::new(),
            )
            .await?;
        }
    }
    let mut calls = Vec::new();
    for t in tuples {
        let mut groups: std::collections::BTreeMap<(&str, &str, bool), Vec<&PendingWrite>> =
            std::collections::BTreeMap::new();
        for w in &t.pending_writes {
            let replace = special_index(&w.channel) == Some(w.idx);
            groups
                .entry((w.task_id.as_str(), w.task_path.as_str(), replace))
                .or_default()
                .push(w);
        }
        for ((task_id, task_path, replace), writes) in groups {
            let task_path = esc(task_path);
            let writes = writes
                .into_iter()
                .map(|w| {
                    let mut tail = esc(task_id);
                    tail.extend_from_slice(&idx8(w.idx));
                    (tail, encode_write(&task_path, &w.channel, &w.value))
                })
                .collect();
            calls.push(PutWritesArgs {
                ttl_ms: inner.default_ttl_ms,
                fence: None,
                tref: tref(&t.checkpoint.id, &t.config.checkpoint_ns),
                replace,
                task_path,
                writes,
            });
        }
    }
    let replies = futures::future::try_join_all(
        calls
            .into_iter()
            .map(|a| inner.eval_thread(a, thread, false)),
    )
    .await?;
    for reply in replies {
        match reply_status(&reply)? {
            "OK" => {}
            other => return Err(protocol(format!("put_writes answered {other:?}"))),
        }
    }
    Ok(())
}
