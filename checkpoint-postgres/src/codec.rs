//! The stored form: the checkpoint column as LangGraph writes it, and decoding the rows of
//! a tuple or list query (checkpoint, value and pending-write rows) back into tuples.

use std::collections::{BTreeMap, HashMap};

use checkpoint_core::{
    Bytes, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple,
    DeltaChannelHistory, Error, PendingWrite, Result, TypedValue, ValueType,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

use crate::error::{PgError, PgResult};

/// Rejects JSON that PostgreSQL's JSONB cannot store (NUL in a key or string).
pub(crate) fn check_json(what: &str, v: &Value) -> Result<()> {
    match v {
        Value::String(s) if s.contains('\0') => Err(Error::invalid(format!(
            "{what} contains a NUL character, which PostgreSQL JSONB cannot store"
        ))),
        Value::Array(a) => a.iter().try_for_each(|x| check_json(what, x)),
        Value::Object(o) => o.iter().try_for_each(|(k, x)| {
            if k.contains('\0') {
                return Err(Error::invalid(format!(
                    "{what} has a key with a NUL character"
                )));
            }
            check_json(what, x)
        }),
        _ => Ok(()),
    }
}

/// Whether a JSON value holds NUL anywhere (such filters can match nothing stored).
pub(crate) fn json_contains_nul(v: &Value) -> bool {
    check_json("", v).is_err()
}

/// The checkpoint column as LangGraph's savers write it, without values (they live in
/// `checkpoint_blobs`).
#[derive(Serialize)]
pub(crate) struct CheckpointColumn<'a> {
    pub(crate) v: u32,
    pub(crate) id: &'a str,
    pub(crate) ts: &'a str,
    pub(crate) channel_values: Map<String, Value>,
    pub(crate) channel_versions: &'a ChannelVersions,
    pub(crate) versions_seen: &'a BTreeMap<String, ChannelVersions>,
    /// Format 4 checkpoints always carry the key (`null` when no channel was updated, as in
    /// a manual state update) and LangGraph reads it back as it wrote it; older formats had
    /// no such key (`None` here: not written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) updated_channels: Option<&'a Option<Vec<String>>>,
}

/// The checkpoint column as read back, from us or from LangGraph (which may keep primitive
/// values inline in `channel_values`).
#[derive(Deserialize)]
struct StoredCheckpoint {
    #[serde(default = "default_v")]
    v: u32,
    id: String,
    #[serde(default)]
    ts: String,
    #[serde(default)]
    channel_values: Map<String, Value>,
    #[serde(default)]
    channel_versions: ChannelVersions,
    #[serde(default)]
    versions_seen: BTreeMap<String, ChannelVersions>,
    #[serde(default)]
    updated_channels: Option<Vec<String>>,
}

fn default_v() -> u32 {
    1
}

/// A checkpoint row (kind `c`) without its blob values and pending writes: the tuple with
/// inline values only, plus its versions to resolve against blobs.
fn decode_head(row: &PgRow) -> PgResult<CheckpointTuple> {
    let thread_id: String = row.try_get("thread_id")?;
    let checkpoint_ns: String = row.try_get("checkpoint_ns")?;
    let checkpoint_id: String = row.try_get("checkpoint_id")?;
    let parent: Option<String> = row.try_get("parent_checkpoint_id")?;
    let Json(stored): Json<StoredCheckpoint> = row.try_get("checkpoint").map_err(|e| {
        PgError::corrupt(
            format!("checkpoint {checkpoint_id:?} has an unreadable checkpoint column"),
            e,
        )
    })?;
    let Json(metadata): Json<Map<String, Value>> = row.try_get("metadata").map_err(|e| {
        PgError::corrupt(
            format!("checkpoint {checkpoint_id:?} has unreadable metadata"),
            e,
        )
    })?;
    head_tuple(
        thread_id,
        checkpoint_ns,
        checkpoint_id,
        parent,
        stored,
        metadata,
    )
}

/// The tuple of a checkpoint row's decoded columns (inline values only; blobs and writes
/// are applied by the caller).
fn head_tuple(
    thread_id: String,
    checkpoint_ns: String,
    checkpoint_id: String,
    parent: Option<String>,
    stored: StoredCheckpoint,
    metadata: Map<String, Value>,
) -> PgResult<CheckpointTuple> {
    // Values kept inline by LangGraph's Python saver (primitives); blobs are applied later
    // and win.
    let mut channel_values = BTreeMap::new();
    for (channel, value) in &stored.channel_values {
        let bytes = serde_json::to_vec(value).map_err(|e| PgError::corrupt("inline value", e))?;
        channel_values.insert(channel.clone(), TypedValue::new(ValueType::Json, bytes));
    }

    let address = |id: String| {
        CheckpointConfig::new(thread_id.clone())
            .with_ns(checkpoint_ns.clone())
            .with_checkpoint_id(id)
    };
    Ok(CheckpointTuple {
        config: address(checkpoint_id),
        checkpoint: Checkpoint {
            v: stored.v,
            id: stored.id,
            ts: stored.ts,
            channel_values,
            channel_versions: stored.channel_versions,
            versions_seen: stored.versions_seen,
            updated_channels: stored.updated_channels,
        },
        metadata: CheckpointMetadata(metadata),
        parent_config: parent.map(address),
        pending_writes: Vec::new(),
    })
}

/// Decodes `bytes` as the stored columns of a checkpoint row would be: `checkpoint` and
/// `metadata` as the JSON text of their `jsonb` columns (what the driver hands to serde),
/// then every value row with `value_type` and `blob` applied to each channel the
/// checkpoint names. For the fuzz targets; must return an error, never panic.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_row(
    checkpoint: &[u8],
    metadata: &[u8],
    value_type: &str,
    blob: &[u8],
) -> PgResult<CheckpointTuple> {
    let stored: StoredCheckpoint = serde_json::from_slice(checkpoint)
        .map_err(|e| PgError::corrupt("unreadable checkpoint column", e))?;
    let metadata: Map<String, Value> =
        serde_json::from_slice(metadata).map_err(|e| PgError::corrupt("unreadable metadata", e))?;
    let mut t = head_tuple(
        "t".into(),
        String::new(),
        "c".into(),
        None,
        stored,
        metadata,
    )?;
    let channels: Vec<String> = t.checkpoint.channel_versions.keys().cloned().collect();
    for channel in channels {
        apply_blob(
            &mut t.checkpoint.channel_values,
            channel,
            value_type,
            Some(Bytes::copy_from_slice(blob)),
        );
    }
    Ok(t)
}

/// A pending-write row (kind `w`) of a tuple or list query.
pub(crate) fn decode_write(row: &PgRow) -> PgResult<PendingWrite> {
    let ty: String = row.try_get("type")?;
    let blob: Option<Vec<u8>> = row.try_get("blob")?;
    Ok(PendingWrite {
        task_id: row.try_get("task_id")?,
        channel: row.try_get("channel")?,
        value: TypedValue::new(
            ValueType::from(ty.as_str()),
            Bytes::from(blob.unwrap_or_default()),
        ),
        idx: i64::from(row.try_get::<i32, _>("idx")?),
        task_path: row.try_get("task_path")?,
    })
}

/// Pending writes in the contract's order: task path, task id, index, compared as bytes
/// (independent of the database's collation).
fn sort_writes(writes: &mut [PendingWrite]) {
    writes
        .sort_by(|a, b| (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx)));
}

/// Applies one stored value (`empty` marks a removed channel).
fn apply_blob(
    values: &mut BTreeMap<String, TypedValue>,
    channel: String,
    ty: &str,
    blob: Option<Bytes>,
) {
    if ty == "empty" {
        values.remove(&channel);
    } else {
        values.insert(
            channel,
            TypedValue::new(ValueType::from(ty), blob.unwrap_or_default()),
        );
    }
}

/// The rows of a list page or of [`GET_BY_ID`](crate::sql::GET_BY_ID) / [`GET_LATEST`](crate::sql::GET_LATEST), in any order:
/// checkpoint rows (kind `c`, with their rank `ord` in the page), value rows (kind `b`) and
/// pending-write rows (kind `w`). Each distinct value is
/// decoded once and shared (reference-counted) by every checkpoint of the page that names
/// it.
pub(crate) fn decode_page(rows: &[PgRow]) -> PgResult<Vec<CheckpointTuple>> {
    type Key = (String, String, String, String);
    let mut blobs: HashMap<Key, (String, Option<Bytes>)> = HashMap::new();
    let mut writes: HashMap<(String, String, String), Vec<PendingWrite>> = HashMap::new();
    let mut heads = Vec::new();
    for row in rows {
        let kind: String = row.try_get("kind")?;
        match kind.as_str() {
            "b" => {
                let key = (
                    row.try_get("thread_id")?,
                    row.try_get("checkpoint_ns")?,
                    row.try_get("channel")?,
                    row.try_get("version")?,
                );
                let ty: String = row.try_get("type")?;
                let blob: Option<Vec<u8>> = row.try_get("blob")?;
                blobs.insert(key, (ty, blob.map(Bytes::from)));
            }
            "w" => {
                let key = (
                    row.try_get("thread_id")?,
                    row.try_get("checkpoint_ns")?,
                    row.try_get("checkpoint_id")?,
                );
                writes.entry(key).or_default().push(decode_write(row)?);
            }
            _ => heads.push((row.try_get::<i64, _>("ord")?, row)),
        }
    }
    heads.sort_by_key(|(ord, _)| *ord);
    let mut out = Vec::with_capacity(heads.len());
    for (_, row) in heads {
        let mut t = decode_head(row)?;
        for (channel, version) in &t.checkpoint.channel_versions {
            let key = (
                t.config.thread_id.clone(),
                t.config.checkpoint_ns.clone(),
                channel.clone(),
                version.to_string(),
            );
            if let Some((ty, blob)) = blobs.get(&key) {
                apply_blob(
                    &mut t.checkpoint.channel_values,
                    channel.clone(),
                    ty,
                    blob.clone(),
                );
            }
        }
        let key = (
            t.config.thread_id.clone(),
            t.config.checkpoint_ns.clone(),
            t.config.checkpoint_id.clone().unwrap_or_default(),
        );
        if let Some(mut w) = writes.remove(&key) {
            sort_writes(&mut w);
            t.pending_writes = w;
        }
        out.push(t);
    }
    Ok(out)
}
/// Fills `out` from the rows of [`DELTA_HISTORY`](crate::sql::DELTA_HISTORY): each
/// channel's seed (a blob, or a value kept inline by LangGraph's Python saver, as
/// `get_tuple` reads it), and its writes oldest checkpoint first (greatest depth first), each
/// checkpoint's in the contract's order.
pub(crate) fn decode_delta(
    rows: &[PgRow],
    out: &mut BTreeMap<String, DeltaChannelHistory>,
) -> PgResult<()> {
    let mut writes: Vec<(i32, PendingWrite)> = Vec::new();
    for row in rows {
        let kind: String = row.try_get("kind")?;
        let depth: i32 = row.try_get("depth")?;
        if kind == "w" {
            writes.push((depth, decode_write(row)?));
            continue;
        }
        let channel: String = row.try_get("channel")?;
        let ty: Option<String> = row.try_get("type")?;
        let seed = match ty {
            Some(ty) => {
                let blob: Option<Vec<u8>> = row.try_get("blob")?;
                TypedValue::new(
                    ValueType::from(ty.as_str()),
                    Bytes::from(blob.unwrap_or_default()),
                )
            }
            None => {
                let Json(inline): Json<Value> = row.try_get("inline")?;
                let bytes =
                    serde_json::to_vec(&inline).map_err(|e| PgError::corrupt("inline value", e))?;
                TypedValue::new(ValueType::Json, bytes)
            }
        };
        if let Some(h) = out.get_mut(&channel) {
            h.seed = Some(seed);
        }
    }
    checkpoint_core::delta::push_writes(out, writes);
    Ok(())
}
