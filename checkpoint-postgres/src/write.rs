//! Writes: `put` and `put_writes`, one statement each (values, checkpoint, compare-and-set
//! and fence check in one round trip; see `sql::PUT`).

use checkpoint_core::writes::{replaces_existing, write_index};
use checkpoint_core::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, Error, PutMode, PutOptions,
    PutWritesOptions, Result, TypedValue,
};
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::types::Json;

use crate::codec::{CheckpointColumn, check_json};
use crate::core::Inner;
use crate::error::classify;
use crate::keys::{IDENTIFIERS, token_i64, token_u64};
use crate::sql;

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
    let row = sqlx::query(sql::PUT)
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
        .fetch_one(&inner.pool)
        .await
        .map_err(classify)?;
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
    let row = sqlx::query(statement)
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
        .fetch_one(&inner.pool)
        .await
        .map_err(classify)?;
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
