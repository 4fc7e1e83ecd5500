//! Maintenance: `delete_thread`, `copy_thread`, `prune`, `delete_for_runs`, thread TTLs and
//! `purge`. Each changes one thread in one script (atomic per thread); on a Cluster the
//! global index is brought along with `gindex.lua` around the thread script.

use std::collections::BTreeMap;
use std::time::Duration;

use checkpoint_core::{Error, PruneStrategy, Result};
use redis::Value;
use serde_json::Value as Json;

use crate::codec::{array, bulk, number, record_tokens};
use crate::config::{ThreadTtl, duration_ms};
use crate::core::Inner;
use crate::error::protocol;
use crate::keys::{esc, gref, pack_list, parse_gref, parse_tref, token, tref};
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
            let reply = array(inner.link.eval(&call, true).await?)?;
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
    if thread_id.is_empty() {
        return Err(Error::invalid("set_thread_ttl on an empty thread id"));
    }
    let mode = match ttl {
        ThreadTtl::Default => TtlMode::Default,
        ThreadTtl::Pinned => TtlMode::Pin,
        ThreadTtl::Expire(d) if d.is_zero() => {
            return Err(Error::invalid("a thread TTL must be at least 1 ms"));
        }
        ThreadTtl::Expire(d) => TtlMode::Expire(duration_ms(d)),
    };
    let call = SetTtlArgs {
        mode,
        default_ttl_ms: inner.default_ttl_ms,
    }
    .call(inner.layout.thread_keys(thread_id));
    inner.link.eval(&call, true).await?;
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
