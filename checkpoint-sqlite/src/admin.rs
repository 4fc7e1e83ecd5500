//! Maintenance: `delete_thread`, `copy_thread`, `prune`, `delete_for_runs`, thread TTLs and
//! sweeping expired threads (each in one `IMMEDIATE` transaction on the writer), and the
//! integrity scan (on a reader).

use std::time::Duration;

use checkpoint_core::backend::thread_ttl_ms;
use checkpoint_core::{Error, PruneStrategy, Result, StorageIssue, ThreadTtl};
use serde_json::Value;
use sqlx::{QueryBuilder, Sqlite};

use crate::core::{Inner, warm};
use crate::error::classify;
use crate::keys::{IDENTIFIERS, entry, parse_version_key};
use crate::sql;

pub(crate) async fn delete_thread(inner: &Inner, thread_id: &str) -> Result<()> {
    if thread_id.is_empty() || !IDENTIFIERS.storable(thread_id) {
        return Ok(());
    }
    let mut tx = inner.begin_write().await?;
    sqlx::query(sql::DELETE_THREAD)
        .bind(thread_id)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await
}

pub(crate) async fn copy_thread(inner: &Inner, source: &str, target: &str) -> Result<()> {
    if target.is_empty() {
        return Err(Error::invalid("copy_thread target has an empty thread id"));
    }
    IDENTIFIERS.check("copy_thread target", target)?;
    if source.is_empty() || source == target || !IDENTIFIERS.storable(source) {
        return Ok(());
    }
    let mut tx = inner.begin_write().await?;
    sqlx::query(sql::COPY_THREAD)
        .bind(source)
        .bind(target)
        .bind(inner.default_ttl_ms)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await
}

pub(crate) async fn prune(
    inner: &Inner,
    thread_ids: &[String],
    strategy: PruneStrategy,
) -> Result<()> {
    let keep = strategy.keep_per_namespace();
    for thread_id in thread_ids {
        if thread_id.is_empty() || !IDENTIFIERS.storable(thread_id) {
            continue;
        }
        if keep == 0 {
            delete_thread(inner, thread_id).await?;
            continue;
        }
        let mut tx = inner.begin_write().await?;
        sqlx::query(sql::DOOMED_TABLES)
            .execute(tx.conn())
            .await
            .map_err(classify)?;
        sqlx::query(sql::DOOM_PRUNED)
            .bind(thread_id)
            .bind(i64::try_from(keep).unwrap_or(i64::MAX))
            .execute(tx.conn())
            .await
            .map_err(classify)?;
        sqlx::query(sql::RESCUE_NEEDED)
            .bind(thread_id)
            .execute(tx.conn())
            .await
            .map_err(classify)?;
        sqlx::query(sql::DELETE_DOOMED)
            .execute(tx.conn())
            .await
            .map_err(classify)?;
        tx.commit().await?;
    }
    Ok(())
}

/// Finds the checkpoints of the runs through the metadata index (their `run_id` entries),
/// checks each exactly (`metadata.run_id` is the run), and deletes them in one transaction.
pub(crate) async fn delete_for_runs(inner: &Inner, run_ids: &[String]) -> Result<()> {
    let runs: Vec<&String> = run_ids.iter().filter(|r| IDENTIFIERS.storable(r)).collect();
    if runs.is_empty() {
        return Ok(());
    }
    let mut tx = inner.begin_write().await?;
    sqlx::query(sql::DOOMED_TABLES)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT OR IGNORE INTO temp.doomed \
             SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id \
             FROM checkpoint_metadata m CROSS JOIN checkpoints c ON c.thread_id = m.thread_id \
             AND c.checkpoint_ns = m.checkpoint_ns AND c.checkpoint_id = m.checkpoint_id \
             WHERE m.entry IN (",
        );
        let mut sep = qb.separated(", ");
        for run in &runs {
            sep.push_bind(entry("run_id", &Value::String((*run).clone())));
        }
        qb.push(") AND json_extract(c.metadata, '$.run_id') IN (");
        let mut sep = qb.separated(", ");
        for run in &runs {
            sep.push_bind((*run).clone());
        }
        qb.push(") AND json_type(c.metadata, '$.run_id') = 'text'");
        qb.build().execute(tx.conn()).await.map_err(classify)?;
    }
    let threads: Vec<String> = sqlx::query_scalar("SELECT DISTINCT thread_id FROM temp.doomed")
        .fetch_all(tx.conn())
        .await
        .map_err(classify)?;
    for thread in threads {
        sqlx::query(sql::RESCUE_NEEDED)
            .bind(thread)
            .execute(tx.conn())
            .await
            .map_err(classify)?;
    }
    sqlx::query(sql::DELETE_DOOMED)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await
}

pub(crate) async fn set_thread_ttl(inner: &Inner, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
    let ttl_ms = thread_ttl_ms(thread_id, ttl)?.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
    IDENTIFIERS.check("thread_id", thread_id)?;
    let mut tx = inner.begin_write().await?;
    sqlx::query(&sql::SET_THREAD_TTL)
        .bind(thread_id)
        .bind(ttl_ms)
        .bind(inner.default_ttl_ms)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await
}

pub(crate) async fn thread_ttl(inner: &Inner, thread_id: &str) -> Result<Option<Duration>> {
    if !IDENTIFIERS.storable(thread_id) {
        return Ok(None);
    }
    let exists: bool = warm!(inner.reader, |conn| sqlx::query_scalar(sql::THREAD_EXISTS)
        .bind(thread_id)
        .fetch_one(conn))
    .map_err(classify)?;
    if !exists {
        return Ok(None);
    }
    let left: Option<i64> = warm!(inner.reader, |conn| sqlx::query_scalar(&sql::THREAD_TTL)
        .bind(thread_id)
        .fetch_optional(conn))
    .map_err(classify)?;
    Ok(left.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
}

pub(crate) async fn sweep_expired(inner: &Inner, limit: usize) -> Result<usize> {
    if limit == 0 {
        return Ok(0);
    }
    let mut tx = inner.begin_write().await?;
    sqlx::query(&sql::DOOM_EXPIRED)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM temp.sweep")
        .fetch_one(tx.conn())
        .await
        .map_err(classify)?;
    sqlx::query(sql::SWEEP)
        .execute(tx.conn())
        .await
        .map_err(classify)?;
    tx.commit().await?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The integrity scan of one thread (see [`IntegrityScan`](checkpoint_core::IntegrityScan)):
/// two indexed reads on a reader connection.
pub(crate) async fn scan_thread(inner: &Inner, thread_id: &str) -> Result<Vec<StorageIssue>> {
    if !IDENTIFIERS.storable(thread_id) {
        return Ok(Vec::new());
    }
    let missing: Vec<(String, String, String, String)> =
        warm!(inner.reader, |conn| sqlx::query_as(
            sql::SCAN_MISSING_VALUES
        )
        .bind(thread_id)
        .fetch_all(conn))
        .map_err(classify)?;
    let orphans: Vec<(String, String, i64)> = warm!(inner.reader, |conn| sqlx::query_as(
        sql::SCAN_WRITES_WITHOUT_CHECKPOINT
    )
    .bind(thread_id)
    .fetch_all(conn))
    .map_err(classify)?;
    Ok(StorageIssue::collect(
        missing.into_iter().map(|(ns, id, channel, key)| {
            let version = parse_version_key(&key).map_or(key, |v| v.to_string());
            (ns, id, channel, version)
        }),
        orphans
            .into_iter()
            .map(|(ns, id, n)| (ns, id, u64::try_from(n).unwrap_or_default())),
    ))
}
