//! Maintenance: `delete_thread`, `copy_thread`, `prune`, `delete_for_runs`, thread TTLs and
//! sweeping expired threads, one statement each (atomic), and the integrity scan.

use std::collections::BTreeMap;

use std::time::Duration;

use checkpoint_core::backend::thread_ttl_ms;
use checkpoint_core::{Error, PruneStrategy, Result, StorageIssue, ThreadTtl};

use crate::config::stored_ttl_ms;
use crate::core::{Inner, warm};
use crate::error::classify;
use crate::keys::{IDENTIFIERS, storable};
use crate::sql;
use crate::write::write_live;

pub(crate) async fn delete_thread(inner: &Inner, thread_id: &str) -> Result<()> {
    if thread_id.is_empty() || !storable(thread_id) {
        return Ok(());
    }
    warm!(idempotent inner.conns, |conn| sqlx::query(sql::DELETE_THREAD)
        .bind(thread_id)
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}

pub(crate) async fn copy_thread(inner: &Inner, source: &str, target: &str) -> Result<()> {
    if target.is_empty() {
        return Err(Error::invalid("copy_thread target has an empty thread id"));
    }
    IDENTIFIERS.check("copy_thread target", target)?;
    if source == target || source.is_empty() || !storable(source) {
        return Ok(());
    }
    // An expired target is emptied first, so the copy does not bring its old rows back.
    write_live(inner, &[target], || async {
        let expired: bool =
            warm!(idempotent inner.conns, |conn| sqlx::query_scalar(sql::COPY_THREAD)
            .bind(source)
            .bind(target)
            .bind(inner.default_ttl_ms)
            .fetch_one(conn))
            .map_err(classify)?;
        Ok((expired, ()))
    })
    .await
}

pub(crate) async fn prune(
    inner: &Inner,
    thread_ids: &[String],
    strategy: PruneStrategy,
) -> Result<()> {
    let threads: Vec<&str> = thread_ids
        .iter()
        .map(String::as_str)
        .filter(|t| !t.is_empty() && storable(t))
        .collect();
    if threads.is_empty() {
        return Ok(());
    }
    let keep = strategy.keep_per_namespace();
    let query = || {
        if keep == 0 {
            sqlx::query(sql::PRUNE_ALL).bind(&threads)
        } else {
            sqlx::query(sql::PRUNE_KEEP)
                .bind(&threads)
                .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        }
    };
    warm!(idempotent inner.conns, |conn| query().execute(conn)).map_err(classify)?;
    Ok(())
}

pub(crate) async fn delete_for_runs(inner: &Inner, run_ids: &[String]) -> Result<()> {
    let runs: Vec<&str> = run_ids
        .iter()
        .map(String::as_str)
        .filter(|r| !r.contains('\0'))
        .collect();
    if runs.is_empty() {
        return Ok(());
    }
    warm!(idempotent inner.conns, |conn| sqlx::query(sql::DELETE_FOR_RUNS)
        .bind(&runs)
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}

pub(crate) async fn set_thread_ttl(inner: &Inner, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
    let ttl_ms = thread_ttl_ms(thread_id, ttl)?.map(stored_ttl_ms);
    IDENTIFIERS.check("thread_id", thread_id)?;
    // An expired thread is forgotten first: a new TTL must not bring its old rows back.
    let mut tx = inner.begin().await.map_err(classify)?;
    sqlx::query(sql::FORGET_EXPIRED)
        .bind([thread_id])
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    sqlx::query(sql::SET_THREAD_TTL)
        .bind(thread_id)
        .bind(ttl_ms)
        .bind(inner.default_ttl_ms)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await.map_err(classify)
}

pub(crate) async fn thread_ttl(inner: &Inner, thread_id: &str) -> Result<Option<Duration>> {
    if thread_id.is_empty() || !storable(thread_id) {
        return Ok(None);
    }
    let left: Option<i64> =
        warm!(idempotent inner.conns, |conn| sqlx::query_scalar(sql::THREAD_TTL)
        .bind(thread_id)
        .fetch_optional(conn))
        .map_err(classify)?;
    Ok(left.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
}

pub(crate) async fn sweep_expired(inner: &Inner, limit: usize) -> Result<usize> {
    if limit == 0 {
        return Ok(0);
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    // In a transaction: its `BEGIN` may be sent again after a restart, where the sweep may
    // not (an answer lost after it committed would have it delete a second batch). A batch
    // may take longer than a call's limit, and one cancelled would be started over, the
    // same, by the next sweep. It skips the threads the saver's writes hold.
    let mut tx = inner.begin_unbounded().await.map_err(classify)?;
    let n: i64 = sqlx::query_scalar(sql::SWEEP_EXPIRED)
        .bind(limit)
        .fetch_one(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await.map_err(classify)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The integrity scan of threads (see [`IntegrityScan`](checkpoint_core::IntegrityScan)):
/// two index-driven reads in one transaction, whatever the number of threads.
pub(crate) async fn scan_threads(
    inner: &Inner,
    thread_ids: &[String],
) -> Result<BTreeMap<String, Vec<StorageIssue>>> {
    let mut ids: Vec<&str> = thread_ids
        .iter()
        .map(String::as_str)
        .filter(|t| storable(t))
        .collect();
    // A thread named twice is scanned once.
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    // JIT compilation costs more than these index-driven reads ever take, and a freshly
    // imported database (no statistics yet: estimates in the millions) would pay it.
    let mut tx = inner.begin().await.map_err(classify)?;
    sqlx::query("SET LOCAL jit = off")
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    let missing =
        sqlx::query_as::<_, (String, String, String, String, String)>(sql::SCAN_MISSING_VALUES)
            .bind(&ids)
            .fetch_all(tx.conn())
            .await
            .map_err(classify)?;
    let orphans =
        sqlx::query_as::<_, (String, String, String, i64)>(sql::SCAN_WRITES_WITHOUT_CHECKPOINT)
            .bind(&ids)
            .fetch_all(tx.conn())
            .await
            .map_err(classify)?;
    tx.commit().await.map_err(classify)?;
    let mut by_thread: BTreeMap<String, (Vec<_>, Vec<_>)> = BTreeMap::new();
    for (thread, ns, id, channel, version) in missing {
        by_thread
            .entry(thread)
            .or_default()
            .0
            .push((ns, id, channel, version));
    }
    for (thread, ns, id, n) in orphans {
        by_thread
            .entry(thread)
            .or_default()
            .1
            .push((ns, id, u64::try_from(n).unwrap_or_default()));
    }
    Ok(by_thread
        .into_iter()
        .map(|(thread, (missing, orphans))| (thread, StorageIssue::collect(missing, orphans)))
        .collect())
}
