//! Maintenance: `delete_thread`, `copy_thread`, `prune`, `delete_for_runs`, thread TTLs,
//! `purge` and the integrity scan. Each changes one thread in one script (atomic per thread); on a Cluster the
//! global index is brought along with `gindex.lua` around the thread script.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use checkpoint_core::backend::thread_ttl_ms;
use checkpoint_core::{Error, PruneStrategy, Result, StorageIssue, ThreadTtl};
use redis::Value;
use serde_json::Value as Json;

use crate::chunk;
use crate::codec::{array, bulk, number, parse_blob_field, record_manifests, record_tokens};
use crate::core::Inner;
use crate::error::{RedisSaverError, corrupt, protocol};
use crate::keys::{
    BL, CP, WV, esc, gref, netstr, pack_list, parse_gref, parse_tref, thread_entry, token, tref,
    unesc_str, unpack_list,
};
use crate::read::SCAN_BUDGET;
use crate::scripts::{
    Args, CopyReadArgs, CopyWriteArgs, DeleteRunsArgs, GscanArgs, IndexOp, PruneArgs, SetTtlArgs,
    ThreadArgs, TtlMode,
};

/// References per page when collecting the checkpoints of runs.
const RUN_PAGE: usize = 1024;

pub(crate) async fn delete_thread(inner: &Inner, thread_id: &str) -> Result<()> {
    if thread_id.is_empty() {
        return Ok(());
    }
    inner.chunk_memo.forget_thread(&esc(thread_id));
    let reply = inner
        .eval_thread(ThreadArgs { thread_id }, thread_id, true)
        .await?;
    inner.remove_global(reply.get(1)).await;
    Ok(())
}

/// Copies a thread in two scripts: a snapshot of the source, then one script in the
/// target's slot that inserts only what the target lacks (so an interrupted copy can be
/// repeated).
pub(crate) async fn copy_thread(inner: &Inner, source: &str, target: &str) -> Result<()> {
    if target.is_empty() {
        return Err(Error::invalid("copy_thread target has an empty thread id"));
    }
    if source.is_empty() || source == target {
        return Ok(());
    }
    let snapshot = inner.eval_thread(CopyReadArgs, source, false).await?;
    let [cp, bl, ws, wv]: [Value; 4] = snapshot
        .try_into()
        .map_err(|_| protocol("a thread snapshot has 4 parts"))?;
    let (cp, bl, ws, wv) = (array(cp)?, array(bl)?, array(ws)?, array(wv)?);
    if cp.is_empty() && bl.is_empty() && ws.is_empty() {
        return Ok(());
    }
    let bytes_of = |v: &Value| -> Result<Vec<u8>> {
        bulk(v)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| protocol("snapshot entry"))
    };
    let mut records = Vec::with_capacity(cp.len() / 2);
    let mut global_ops = Vec::new();
    if inner.link.is_cluster() && !cp.is_empty() {
        global_ops.push(IndexOp::AddThread {
            entry: thread_entry(target, &inner.layout.records_key(target)),
        });
    }
    for pair in cp.chunks(2) {
        let [r, rec] = pair else {
            return Err(protocol("odd checkpoint snapshot"));
        };
        let r = bytes_of(r)?;
        let rec = bytes_of(rec)?;
        if inner.link.is_cluster() {
            let (id, ns) =
                parse_tref(&r).ok_or_else(|| protocol("snapshot checkpoint reference"))?;
            let tokens = record_tokens(&rec).ok_or_else(|| protocol("snapshot record"))?;
            global_ops.push(IndexOp::Add {
                gref: gref(&id, target, &ns),
                tokens: pack_list(&tokens),
            });
        }
        records.push((r, rec));
    }
    let values = bl.iter().map(bytes_of).collect::<Result<Vec<_>>>()?;
    let writes = ws
        .iter()
        .zip(wv.iter())
        .filter_map(|(m, v)| Some((bulk(m)?.to_vec(), bulk(v)?.to_vec())))
        .collect();
    while !global_ops.is_empty() {
        let rest = global_ops.split_off(global_ops.len().min(500));
        inner.gindex(global_ops).await?;
        global_ops = rest;
    }
    let args = CopyWriteArgs {
        ttl_ms: inner.default_ttl_ms,
        target,
        records,
        values,
        writes,
    };
    inner.eval_thread(args, target, true).await?;
    Ok(())
}

pub(crate) async fn prune(
    inner: &Inner,
    thread_ids: &[String],
    strategy: PruneStrategy,
) -> Result<()> {
    let keep = strategy.keep_per_namespace();
    for thread_id in thread_ids {
        if thread_id.is_empty() {
            continue;
        }
        inner.chunk_memo.forget_thread(&esc(thread_id));
        let reply = inner
            .eval_thread(PruneArgs { thread_id, keep }, thread_id, true)
            .await?;
        inner.remove_global(reply.get(1)).await;
    }
    Ok(())
}

/// Finds every checkpoint of each run in the global index (by its `run_id` token), then
/// deletes them thread by thread.
pub(crate) async fn delete_for_runs(inner: &Inner, run_ids: &[String]) -> Result<()> {
    let mut runs: Vec<&String> = run_ids.iter().collect();
    runs.sort();
    runs.dedup();
    for run in runs {
        let run_token = token("run_id", &Json::String(run.clone()));
        let tokens = [run_token];
        // Every checkpoint of the run, from the global index, grouped by thread.
        let mut by_thread: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let hi = match &cursor {
                Some(c) => {
                    let mut h = b"(".to_vec();
                    h.extend_from_slice(c);
                    h
                }
                None => b"+".to_vec(),
            };
            let args = GscanArgs {
                want: RUN_PAGE,
                budget: SCAN_BUDGET,
                lo: b"-".to_vec(),
                hi,
                ns_check: Vec::new(),
                tokens: &tokens,
            };
            let call = args.call(inner.layout.global_keys());
            let reply = array(inner.link.eval(&call).await?)?;
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
            inner.chunk_memo.forget_thread(&esc(&thread));
            for chunk in trefs.chunks(1000) {
                let args = DeleteRunsArgs {
                    thread_id: &thread,
                    run_token: &tokens[0],
                    trefs: chunk,
                };
                let reply = inner.eval_thread(args, &thread, true).await?;
                inner.remove_global(reply.get(1)).await;
            }
        }
    }
    Ok(())
}

pub(crate) async fn set_thread_ttl(inner: &Inner, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
    let mode = match thread_ttl_ms(thread_id, ttl)? {
        None => TtlMode::Default,
        Some(0) => TtlMode::Pin,
        Some(ms) => TtlMode::Expire(ms),
    };
    if let (TtlMode::Expire(_), Some(policy)) = (&mode, &inner.ttl_evictable) {
        return Err(RedisSaverError::Evicting(format!(
            "the server evicts keys that have a TTL at its memory limit (maxmemory-policy \
             {policy}), and this would give thread {thread_id:?} one"
        ))
        .into());
    }
    let call = SetTtlArgs {
        mode,
        default_ttl_ms: inner.default_ttl_ms,
    }
    .call(inner.layout.thread_keys(thread_id));
    inner.link.eval(&call).await?;
    Ok(())
}

pub(crate) async fn thread_ttl(inner: &Inner, thread_id: &str) -> Result<Option<Duration>> {
    let key = &inner.layout.thread_keys(thread_id)[0];
    let v = inner.link.command(redis::cmd("PTTL").arg(key)).await?;
    match v {
        Value::Int(ms) if ms >= 0 => Ok(Some(Duration::from_millis(ms.unsigned_abs()))),
        Value::Int(_) => Ok(None),
        other => Err(protocol(format!("PTTL answered {other:?}"))),
    }
}

pub(crate) async fn purge(inner: &Inner) -> Result<u64> {
    inner.chunk_memo.clear();
    Ok(inner.link.delete_matching(&inner.layout.pattern()).await?)
}

/// Pairs of a `HGETALL` reply (RESP2 flat array or RESP3 map).
fn hash_pairs(v: Value) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let pair = |f: &Value, v: &Value| match (bulk(f), bulk(v)) {
        (Some(f), Some(v)) => Ok((f.to_vec(), v.to_vec())),
        _ => Err(protocol("a hash field or value")),
    };
    match v {
        Value::Map(pairs) => pairs.iter().map(|(f, v)| pair(f, v)).collect(),
        v => array(v)?
            .chunks(2)
            .map(|p| match p {
                [f, v] => pair(f, v),
                _ => Err(protocol("an odd HGETALL reply")),
            })
            .collect(),
    }
}

fn bulk_set(v: Value) -> Result<HashSet<Vec<u8>>> {
    array(v)?
        .iter()
        .map(|f| {
            bulk(f)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| protocol("a hash field"))
        })
        .collect()
}

/// The integrity scan of one thread (see [`IntegrityScan`](checkpoint_core::IntegrityScan)):
/// the thread's checkpoint records, the fields of its value hash and of its write hash in
/// one pipeline (values are not read), then the manifests of chunked values kept in the
/// value hash, to check their chunks.
pub(crate) async fn scan_thread(inner: &Inner, thread_id: &str) -> Result<Vec<StorageIssue>> {
    let keys = inner.layout.thread_keys(thread_id);
    let cmds = [
        redis::cmd("HGETALL").arg(&keys[CP]).clone(),
        redis::cmd("HKEYS").arg(&keys[BL]).clone(),
        redis::cmd("HKEYS").arg(&keys[WV]).clone(),
    ];
    let [records, values, writes]: [Value; 3] = inner
        .link
        .pipeline(&cmds, false)
        .await?
        .try_into()
        .map_err(|_| protocol("three replies"))?;
    let records = hash_pairs(records)?;
    let values = bulk_set(values)?;
    let writes = bulk_set(writes)?;
    let corrupt_record = |id: &str| corrupt(format!("corrupt record of checkpoint {id:?}"));

    let mut checkpoints: HashSet<(String, String)> = HashSet::new();
    // (ns, id, value field), for values whose presence is not settled yet.
    let mut to_check: Vec<(String, String, Vec<u8>)> = Vec::new();
    // Manifests kept in the value hash, fetched to check their chunks.
    let mut stored_manifests: Vec<Vec<u8>> = Vec::new();
    let mut missing: Vec<(String, String, Vec<u8>)> = Vec::new();
    for (tref, rec) in &records {
        let (id, ns) =
            parse_tref(tref).ok_or_else(|| corrupt("undecodable checkpoint reference"))?;
        let fields = netstr(rec)
            .and_then(|(cv, _)| unpack_list(cv))
            .ok_or_else(|| corrupt_record(&id))?;
        let inline: HashMap<Vec<u8>, Vec<u8>> = record_manifests(rec)
            .ok_or_else(|| corrupt_record(&id))?
            .into_iter()
            .collect();
        for field in fields {
            let present = match inline.get(&field) {
                Some(manifest) => chunk::manifest_chunks(manifest)
                    .ok_or_else(|| corrupt_record(&id))?
                    .iter()
                    .all(|c| values.contains(c)),
                None if values.contains(&field) => true,
                None => {
                    let manifest = chunk::manifest_field(&field);
                    if values.contains(&manifest) {
                        stored_manifests.push(manifest);
                        to_check.push((ns.clone(), id.clone(), field));
                        continue;
                    }
                    false
                }
            };
            if !present {
                missing.push((ns.clone(), id.clone(), field));
            }
        }
        checkpoints.insert((ns, id));
    }
    if !stored_manifests.is_empty() {
        stored_manifests.sort();
        stored_manifests.dedup();
        let mut c = redis::cmd("HMGET");
        c.arg(&keys[BL]);
        for m in &stored_manifests {
            c.arg(&m[..]);
        }
        let fetched = array(inner.link.command(&c).await?)?;
        let complete: HashMap<&[u8], bool> = stored_manifests
            .iter()
            .zip(&fetched)
            .map(|(field, v)| {
                let ok = bulk(v)
                    .and_then(chunk::manifest_chunks)
                    .is_some_and(|cs| cs.iter().all(|c| values.contains(c)));
                (&field[chunk::MANIFEST_PREFIX.len()..], ok)
            })
            .collect();
        for (ns, id, field) in to_check {
            if !complete.get(&field[..]).copied().unwrap_or(false) {
                missing.push((ns, id, field));
            }
        }
    }
    let missing = missing
        .into_iter()
        .map(|(ns, id, field)| {
            let (channel, version) = parse_blob_field(&field).ok_or_else(|| corrupt_record(&id))?;
            Ok((ns, id, channel, version.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut orphans: BTreeMap<(String, String), u64> = BTreeMap::new();
    for field in &writes {
        let (id, rest) = unesc_str(field).ok_or_else(|| corrupt("undecodable write field"))?;
        let (ns, _) = unesc_str(rest).ok_or_else(|| corrupt("undecodable write field"))?;
        if !checkpoints.contains(&(ns.clone(), id.clone())) {
            *orphans.entry((ns, id)).or_default() += 1;
        }
    }
    Ok(StorageIssue::collect(
        missing,
        orphans.into_iter().map(|((ns, id), n)| (ns, id, n)),
    ))
}
