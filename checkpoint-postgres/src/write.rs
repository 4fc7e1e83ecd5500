//! Writes: `put` and `put_writes`, one statement each (values, checkpoint, compare-and-set
//! and fence check in one round trip; see `sql::PUT`), and `import`, one statement for any
//! number of checkpoints (`sql::IMPORT`).

use std::collections::BTreeMap;

use checkpoint_core::backend::put_address;
use checkpoint_core::writes::{replaces_existing, special_index, write_index};
use checkpoint_core::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple, Error,
    PutMode, PutOptions, PutWritesOptions, Result, TypedValue,
};
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::types::Json;

use crate::codec::{CheckpointColumn, check_json};
use crate::core::{Inner, warm};
use crate::error::classify;
use crate::keys::{IDENTIFIERS, token_i64, token_u64};
use crate::sql;

/// How many times a write may find its thread expired, forget it and try again.
const EXPIRED_RETRIES: u32 = 3;

/// Runs a write whose statement writes nothing to an expired thread (answering `expired`):
/// then deletes the expired threads' rows ([`forget_expired`]) and runs it again, with a new
/// snapshot. Once in practice; the bound guards against a clock gone wild.
pub(crate) async fn write_live<T, F, Fut>(
    inner: &Inner,
    threads: &[&str],
    mut write: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(bool, T)>>,
{
    let mut forgotten = 0;
    loop {
        let (expired, out) = write().await?;
        if !expired {
            return Ok(out);
        }
        if forgotten == EXPIRED_RETRIES {
            return Err(expired_retries(
                threads.first().copied().unwrap_or_default(),
            ));
        }
        forgotten += 1;
        forget_expired(inner, threads).await?;
    }
}

/// Whether a write's gate found its thread expired (it wrote nothing).
fn expired(row: &sqlx::postgres::PgRow) -> Result<bool> {
    row.try_get("expired").map_err(classify)
}

fn expired_retries(thread_id: &str) -> Error {
    Error::Unavailable {
        backend: "postgres",
        source: format!(
            "thread {thread_id:?} kept expiring while it was written ({EXPIRED_RETRIES} retries)"
        )
        .into(),
    }
}

/// Deletes the rows of those of `threads` whose TTL ran out (see `sql::FORGET_EXPIRED`).
async fn forget_expired(inner: &Inner, threads: &[&str]) -> Result<()> {
    if threads.is_empty() {
        return Ok(());
    }
    warm!(idempotent inner.conns, |conn| sqlx::query(sql::FORGET_EXPIRED)
        .bind(threads)
        .execute(conn))
    .map_err(classify)?;
    Ok(())
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
    let metadata_json = Value::Object(metadata.0);
    check_json("metadata", &metadata_json)?;
    let column = checkpoint_column(&checkpoint)?;

    let mut channels = Vec::with_capacity(new_versions.len());
    let mut versions = Vec::with_capacity(new_versions.len());
    let mut types = Vec::with_capacity(new_versions.len());
    let mut blobs: Vec<Option<&[u8]>> = Vec::with_capacity(new_versions.len());
    for (channel, version) in &new_versions {
        let version = version.to_string();
        match checkpoint.channel_values.get(channel) {
            Some(value) => {
                types.push(value.type_tag.as_str().to_owned());
                blobs.push(Some(&value.bytes[..]));
            }
            None => {
                types.push("empty".to_owned());
                blobs.push(None);
            }
        }
        channels.push(channel.as_str());
        versions.push(version);
    }
    let thread = [config.thread_id.as_str()];
    let row = write_live(inner, &thread, || async {
        let row = warm!(idempotent inner.conns, |conn| sqlx::query(sql::PUT)
            .bind(&config.thread_id)
            .bind(&config.checkpoint_ns)
            .bind(&checkpoint.id)
            .bind(config.checkpoint_id.as_deref())
            .bind(Json(&column))
            .bind(Json(&metadata_json))
            .bind(&channels)
            .bind(&versions)
            .bind(&types)
            .bind(&blobs)
            .bind(options.mode == PutMode::CompareAndSet)
            .bind(options.fence.map(token_i64))
            .bind(inner.default_ttl_ms)
            .fetch_one(conn))
        .map_err(classify)?;
        Ok((expired(&row)?, row))
    })
    .await?;
    let fence_ok: bool = row.try_get("fence_ok").map_err(classify)?;
    let cas_ok: bool = row.try_get("cas_ok").map_err(classify)?;
    if !fence_ok {
        let current: Option<i64> = row.try_get("current_token").map_err(classify)?;
        return Err(Error::stale_lease(
            &config.thread_id,
            options.fence.unwrap_or(0),
            current.map_or(0, token_u64),
        ));
    }
    if !cas_ok {
        return Err(Error::Conflict {
            thread_id: config.thread_id.clone(),
            checkpoint_ns: config.checkpoint_ns.clone(),
            expected: config.checkpoint_id.clone(),
            found: row.try_get("head").map_err(classify)?,
        });
    }
    Ok(CheckpointConfig::new(config.thread_id.clone())
        .with_ns(config.checkpoint_ns.clone())
        .with_checkpoint_id(checkpoint.id))
}

/// The `checkpoints.checkpoint` JSONB of a checkpoint: everything but its values (those are
/// blobs), checked for what JSONB cannot store.
fn checkpoint_column(checkpoint: &Checkpoint) -> Result<Value> {
    let column = CheckpointColumn {
        v: checkpoint.v,
        id: &checkpoint.id,
        ts: &checkpoint.ts,
        channel_values: Map::new(),
        channel_versions: &checkpoint.channel_versions,
        versions_seen: &checkpoint.versions_seen,
        updated_channels: (checkpoint.v >= 4 || checkpoint.updated_channels.is_some())
            .then_some(&checkpoint.updated_channels),
    };
    let column =
        serde_json::to_value(&column).map_err(|e| Error::serialization("checkpoint column", e))?;
    check_json(
        "checkpoint (channel names, versions, node names, ts)",
        &column,
    )?;
    Ok(column)
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
    let replace = replaces_existing(&writes);
    // One row per (task, idx): first wins, or last wins for a replacing call (a single
    // INSERT ... ON CONFLICT DO UPDATE may not touch one row twice).
    let mut rows: Vec<(i32, &str, &TypedValue)> = Vec::with_capacity(writes.len());
    for (position, (channel, value)) in writes.iter().enumerate() {
        let idx = i32::try_from(write_index(channel, position))
            .map_err(|_| Error::invalid("more than 2^31 writes in one call"))?;
        match rows.iter_mut().find(|(i, _, _)| *i == idx) {
            Some(row) if replace => *row = (idx, channel, value),
            Some(_) => {}
            None => rows.push((idx, channel, value)),
        }
    }
    let idxs: Vec<i32> = rows.iter().map(|r| r.0).collect();
    let channels: Vec<&str> = rows.iter().map(|r| r.1).collect();
    let types: Vec<&str> = rows.iter().map(|r| r.2.type_tag.as_str()).collect();
    let blobs: Vec<&[u8]> = rows.iter().map(|r| &r.2.bytes[..]).collect();
    let statement = if replace {
        sql::PUT_WRITES_REPLACE
    } else {
        sql::PUT_WRITES_KEEP
    };
    let thread = [config.thread_id.as_str()];
    let row = write_live(inner, &thread, || async {
        let row = warm!(idempotent inner.conns, |conn| sqlx::query(statement)
            .bind(&config.thread_id)
            .bind(&config.checkpoint_ns)
            .bind(checkpoint_id)
            .bind(task_id)
            .bind(&options.task_path)
            .bind(&idxs)
            .bind(&channels)
            .bind(&types)
            .bind(&blobs)
            .bind(options.fence.map(token_i64))
            .bind(inner.default_ttl_ms)
            .fetch_one(conn))
        .map_err(classify)?;
        Ok((expired(&row)?, row))
    })
    .await?;
    let fence_ok: bool = row.try_get("fence_ok").map_err(classify)?;
    if !fence_ok {
        let current: Option<i64> = row.try_get("current_token").map_err(classify)?;
        return Err(Error::stale_lease(
            &config.thread_id,
            options.fence.unwrap_or(0),
            current.map_or(0, token_u64),
        ));
    }
    Ok(())
}

/// `import`: every tuple's values, checkpoint and pending writes in one statement
/// (`sql::IMPORT`), so one round trip and one transaction whatever the number of tuples.
/// Everything is checked before anything is sent. Within the call, a value version is sent
/// once (the first tuple naming it wins, as a later `put` would keep it), a checkpoint
/// address once (the last wins, as a later `put` replaces it), and a write key once (the
/// first regular write or the last special one, as `put_writes` would leave them).
pub(crate) async fn import(inner: &Inner, tuples: Vec<CheckpointTuple>) -> Result<()> {
    let mut blobs = ImportBlobs::default();
    let mut checkpoints: BTreeMap<(String, String, String), ImportCheckpoint> = BTreeMap::new();
    let mut writes: BTreeMap<(String, String, String, String, i32), ImportWrite> = BTreeMap::new();
    for tuple in tuples {
        let at = put_address(&tuple);
        IDENTIFIERS.check_put(&at, &tuple.checkpoint, &tuple.checkpoint.channel_versions)?;
        let metadata = Value::Object(tuple.metadata.0);
        check_json("metadata", &metadata)?;
        let column = checkpoint_column(&tuple.checkpoint)?;
        let (thread, ns) = (at.thread_id, at.checkpoint_ns);
        for (channel, version) in &tuple.checkpoint.channel_versions {
            blobs.push(
                &thread,
                &ns,
                channel,
                version.to_string(),
                tuple.checkpoint.channel_values.get(channel),
            );
        }
        for w in tuple.pending_writes {
            IDENTIFIERS.check("task_id", &w.task_id)?;
            IDENTIFIERS.check("task_path", &w.task_path)?;
            IDENTIFIERS.check("write channel", &w.channel)?;
            let idx = i32::try_from(w.idx)
                .map_err(|_| Error::invalid(format!("write index {} out of range", w.idx)))?;
            let key = (
                thread.clone(),
                ns.clone(),
                tuple.checkpoint.id.clone(),
                w.task_id.clone(),
                idx,
            );
            let replace = special_index(&w.channel) == Some(w.idx);
            if replace || !writes.contains_key(&key) {
                writes.insert(
                    key,
                    ImportWrite {
                        task_path: w.task_path,
                        channel: w.channel,
                        value: w.value,
                        replace,
                    },
                );
            }
        }
        checkpoints.insert(
            (thread, ns, tuple.checkpoint.id),
            ImportCheckpoint {
                parent: at.checkpoint_id,
                checkpoint: column.to_string(),
                metadata: metadata.to_string(),
            },
        );
    }
    if checkpoints.is_empty() {
        return Ok(());
    }
    let mut c = ImportColumns::default();
    for ((thread, ns, id), cp) in checkpoints {
        c.cp_thread.push(thread);
        c.cp_ns.push(ns);
        c.cp_id.push(id);
        c.cp_parent.push(cp.parent);
        c.cp_checkpoint.push(cp.checkpoint);
        c.cp_metadata.push(cp.metadata);
    }
    let mut w_types = Vec::with_capacity(writes.len());
    let mut w_blobs = Vec::with_capacity(writes.len());
    for ((thread, ns, id, task, idx), w) in writes {
        c.w_thread.push(thread);
        c.w_ns.push(ns);
        c.w_id.push(id);
        c.w_task.push(task);
        c.w_path.push(w.task_path);
        c.w_idx.push(idx);
        c.w_channel.push(w.channel);
        c.w_replace.push(w.replace);
        w_types.push(w.value.type_tag.as_str().to_owned());
        w_blobs.push(w.value.bytes);
    }
    let w_blobs: Vec<&[u8]> = w_blobs.iter().map(|b| &b[..]).collect();
    let b_blobs: Vec<Option<&[u8]>> = blobs.blob.iter().map(|b| b.as_deref()).collect();
    let mut threads: Vec<&str> = c
        .cp_thread
        .iter()
        .chain(&c.w_thread)
        .map(String::as_str)
        .collect();
    threads.sort_unstable();
    threads.dedup();
    write_live(inner, &threads, || async {
        let expired: bool = warm!(idempotent inner.conns, |conn| sqlx::query_scalar(sql::IMPORT)
            .bind(&blobs.thread)
            .bind(&blobs.ns)
            .bind(&blobs.channel)
            .bind(&blobs.version)
            .bind(&blobs.ty)
            .bind(&b_blobs)
            .bind(&c.cp_thread)
            .bind(&c.cp_ns)
            .bind(&c.cp_id)
            .bind(&c.cp_parent)
            .bind(&c.cp_checkpoint)
            .bind(&c.cp_metadata)
            .bind(&c.w_thread)
            .bind(&c.w_ns)
            .bind(&c.w_id)
            .bind(&c.w_task)
            .bind(&c.w_path)
            .bind(&c.w_idx)
            .bind(&c.w_channel)
            .bind(&w_types)
            .bind(&w_blobs)
            .bind(&c.w_replace)
            .bind(inner.default_ttl_ms)
            .fetch_one(conn))
        .map_err(classify)?;
        Ok((expired, ()))
    })
    .await
}

/// The values of an import, one per `(thread, namespace, channel, version)`: the first
/// named (a removed channel: type `empty`, no blob).
#[derive(Default)]
struct ImportBlobs {
    seen: std::collections::HashSet<(String, String, String, String)>,
    thread: Vec<String>,
    ns: Vec<String>,
    channel: Vec<String>,
    version: Vec<String>,
    ty: Vec<String>,
    blob: Vec<Option<checkpoint_core::Bytes>>,
}

impl ImportBlobs {
    fn push(
        &mut self,
        thread: &str,
        ns: &str,
        channel: &str,
        version: String,
        value: Option<&TypedValue>,
    ) {
        let key = (
            thread.to_owned(),
            ns.to_owned(),
            channel.to_owned(),
            version.clone(),
        );
        if !self.seen.insert(key) {
            return;
        }
        self.thread.push(thread.to_owned());
        self.ns.push(ns.to_owned());
        self.channel.push(channel.to_owned());
        self.version.push(version);
        match value {
            Some(v) => {
                self.ty.push(v.type_tag.as_str().to_owned());
                self.blob.push(Some(v.bytes.clone()));
            }
            None => {
                self.ty.push("empty".to_owned());
                self.blob.push(None);
            }
        }
    }
}

struct ImportCheckpoint {
    parent: Option<String>,
    checkpoint: String,
    metadata: String,
}

struct ImportWrite {
    task_path: String,
    channel: String,
    value: TypedValue,
    replace: bool,
}

/// The checkpoint and write columns of `sql::IMPORT`, as parallel arrays.
#[derive(Default)]
struct ImportColumns {
    cp_thread: Vec<String>,
    cp_ns: Vec<String>,
    cp_id: Vec<String>,
    cp_parent: Vec<Option<String>>,
    cp_checkpoint: Vec<String>,
    cp_metadata: Vec<String>,
    w_thread: Vec<String>,
    w_ns: Vec<String>,
    w_id: Vec<String>,
    w_task: Vec<String>,
    w_path: Vec<String>,
    w_idx: Vec<i32>,
    w_channel: Vec<String>,
    w_replace: Vec<bool>,
}
