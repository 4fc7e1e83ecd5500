//! The stored form: the checkpoint column, and decoding the rows of a tuple or list query
//! (checkpoint, value and pending-write rows) back into tuples.

use std::collections::{BTreeMap, HashMap};

use checkpoint_core::{
    Bytes, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple,
    DeltaChannelHistory, PendingWrite, Result, TypedValue, ValueType,
};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::error::{SqliteError, SqliteResult};
use crate::keys::{parse_version_key, version_key};

/// The checkpoint column: the checkpoint without its values, its channel versions as version
/// keys (so the read query can join the values in SQL), versions seen and updated channels.
#[derive(Serialize)]
struct CheckpointOut<'a> {
    v: u32,
    id: &'a str,
    ts: &'a str,
    cv: BTreeMap<&'a str, String>,
    vs: &'a BTreeMap<String, ChannelVersions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uc: &'a Option<Vec<String>>,
}

#[derive(Deserialize)]
struct CheckpointIn {
    v: u32,
    id: String,
    ts: String,
    cv: BTreeMap<String, String>,
    #[serde(default)]
    vs: BTreeMap<String, ChannelVersions>,
    #[serde(default)]
    uc: Option<Vec<String>>,
}

/// The checkpoint column of `checkpoint` (its values are not part of it).
pub(crate) fn checkpoint_column(checkpoint: &Checkpoint) -> Result<String> {
    let column = CheckpointOut {
        v: checkpoint.v,
        id: &checkpoint.id,
        ts: &checkpoint.ts,
        cv: checkpoint
            .channel_versions
            .iter()
            .map(|(c, v)| (c.as_str(), version_key(v)))
            .collect(),
        vs: &checkpoint.versions_seen,
        uc: &checkpoint.updated_channels,
    };
    serde_json::to_string(&column)
        .map_err(|e| checkpoint_core::Error::serialization("encoding a checkpoint column", e))
}

/// The metadata column: the metadata's JSON text, read back exactly.
pub(crate) fn metadata_column(metadata: &CheckpointMetadata) -> Result<String> {
    serde_json::to_string(metadata)
        .map_err(|e| checkpoint_core::Error::serialization("encoding metadata", e))
}

/// The columns of a tuple query's rows (`sql::TUPLE_TAIL`, `sql::ONE_TUPLE_TAIL`), by
/// position: a checkpoint row has the first eight (its pending writes packed), a value row
/// the thread, namespace and the last four.
const THREAD: usize = 0;
const NS: usize = 1;
const ID: usize = 2;
const PARENT: usize = 3;
const CHECKPOINT: usize = 4;
const METADATA: usize = 5;
const WRITES_INDEX: usize = 6;
const WRITES_BYTES: usize = 7;
const CHANNEL: usize = 8;
const VERSION: usize = 9;
const TYPE: usize = 10;
const BLOB: usize = 11;

fn get<'r, T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>>(
    row: &'r SqliteRow,
    column: usize,
) -> SqliteResult<T> {
    Ok(row.try_get(column)?)
}

/// An entry of a writes index: task id, index, task path, channel, type, length.
type WriteEntry = (String, i64, String, String, String, usize);

/// A write in the packed row of a delta history: depth, channel, task path, task id, index,
/// type, length.
type HistoryEntry = (i64, String, String, String, i64, String, usize);

/// Cuts `bytes` into the pieces an index lists, in order, by their lengths.
fn split<'b, E>(
    what: impl std::fmt::Display,
    index: &[E],
    len: impl Fn(&E) -> usize,
    bytes: &'b [u8],
) -> SqliteResult<Vec<&'b [u8]>> {
    let mut at: usize = 0;
    let mut out = Vec::with_capacity(index.len());
    for e in index {
        let piece = at
            .checked_add(len(e))
            .and_then(|end| bytes.get(at..end))
            .ok_or_else(|| SqliteError::corrupt(format!("{what}: the bytes end early")))?;
        out.push(piece);
        at += piece.len();
    }
    if at != bytes.len() {
        return Err(SqliteError::corrupt(format!("{what}: bytes left over")));
    }
    Ok(out)
}

fn index<T: serde::de::DeserializeOwned>(what: &str, json: Option<String>) -> SqliteResult<Vec<T>> {
    match json {
        None => Ok(Vec::new()),
        Some(json) => serde_json::from_str(&json)
            .map_err(|e| SqliteError::corrupt_because(format!("{what} index"), e)),
    }
}

type ValueKey = (String, String, String, String);

/// The columns of a checkpoint row of a tuple query, as read.
pub(crate) struct HeadRow {
    pub(crate) thread: String,
    pub(crate) ns: String,
    pub(crate) id: String,
    pub(crate) parent: Option<String>,
    pub(crate) checkpoint: String,
    pub(crate) metadata: String,
    /// JSON array of [`WriteEntry`]s, the index into `writes_bytes`.
    pub(crate) writes_index: Option<String>,
    pub(crate) writes_bytes: Option<Vec<u8>>,
}

/// The tuples of a tuple query's rows, in list order (id, then thread, then namespace,
/// descending). Each distinct value is decoded once and shared by every checkpoint of the
/// page that names it.
pub(crate) fn decode_tuples(rows: &[SqliteRow]) -> SqliteResult<Vec<CheckpointTuple>> {
    let mut values: HashMap<ValueKey, Option<TypedValue>> = HashMap::new();
    let mut heads = Vec::with_capacity(rows.len());
    for row in rows {
        let thread: String = get(row, THREAD)?;
        let ns: String = get(row, NS)?;
        match get::<Option<String>>(row, ID)? {
            Some(id) => heads.push(HeadRow {
                thread,
                ns,
                id,
                parent: get(row, PARENT)?,
                checkpoint: get(row, CHECKPOINT)?,
                metadata: get(row, METADATA)?,
                writes_index: get(row, WRITES_INDEX)?,
                writes_bytes: get(row, WRITES_BYTES)?,
            }),
            None => {
                let ty: Option<&str> = get(row, TYPE)?;
                let value = match ty {
                    None => None,
                    Some(ty) => Some(TypedValue::new(
                        ValueType::from(ty),
                        Bytes::from(get::<Option<Vec<u8>>>(row, BLOB)?.unwrap_or_default()),
                    )),
                };
                values.insert((thread, ns, get(row, CHANNEL)?, get(row, VERSION)?), value);
            }
        }
    }
    assemble_tuples(heads, &values)
}

/// Tuples from checkpoint rows and the value rows they name, keyed by (thread, namespace,
/// channel, version key); `None` marks a removed channel. Checks everything read: a row
/// that cannot be decoded is `Corrupt`, never a panic.
pub(crate) fn assemble_tuples(
    mut heads: Vec<HeadRow>,
    values: &HashMap<ValueKey, Option<TypedValue>>,
) -> SqliteResult<Vec<CheckpointTuple>> {
    heads.sort_by(|a, b| (&b.id, &b.thread, &b.ns).cmp(&(&a.id, &a.thread, &a.ns)));
    let mut out = Vec::with_capacity(heads.len());
    for head in heads {
        let HeadRow {
            thread,
            ns,
            id,
            parent,
            checkpoint,
            metadata,
            writes_index,
            writes_bytes,
        } = head;
        let stored: CheckpointIn = serde_json::from_str(&checkpoint).map_err(|e| {
            SqliteError::corrupt_because(format!("checkpoint {id:?} has an unreadable column"), e)
        })?;
        let metadata: CheckpointMetadata = serde_json::from_str(&metadata).map_err(|e| {
            SqliteError::corrupt_because(format!("checkpoint {id:?} has unreadable metadata"), e)
        })?;
        let mut channel_versions = ChannelVersions::new();
        let mut channel_values = BTreeMap::new();
        for (channel, key) in stored.cv {
            let version = parse_version_key(&key).ok_or_else(|| {
                SqliteError::corrupt(format!("checkpoint {id:?} names version key {key:?}"))
            })?;
            let value_key = (thread.clone(), ns.clone(), channel, key);
            if let Some(Some(value)) = values.get(&value_key) {
                channel_values.insert(value_key.2.clone(), value.clone());
            }
            channel_versions.insert(value_key.2, version);
        }
        let pending_writes = decode_writes(&id, writes_index, writes_bytes)?;
        let address = |checkpoint_id: String| {
            CheckpointConfig::new(thread.clone())
                .with_ns(ns.clone())
                .with_checkpoint_id(checkpoint_id)
        };
        out.push(CheckpointTuple {
            config: address(id),
            checkpoint: Checkpoint {
                v: stored.v,
                id: stored.id,
                ts: stored.ts,
                channel_values,
                channel_versions,
                versions_seen: stored.vs,
                updated_channels: stored.uc,
            },
            metadata,
            parent_config: parent.map(address),
            pending_writes,
        });
    }
    Ok(out)
}

/// The pending writes packed into a checkpoint row, in the contract's order.
fn decode_writes(
    id: &str,
    index_json: Option<String>,
    bytes: Option<Vec<u8>>,
) -> SqliteResult<Vec<PendingWrite>> {
    let entries: Vec<WriteEntry> = index("writes", index_json)?;
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let bytes = Bytes::from(bytes.unwrap_or_default());
    let pieces = split(format_args!("writes of {id:?}"), &entries, |e| e.5, &bytes)?;
    let mut writes: Vec<PendingWrite> = entries
        .into_iter()
        .zip(pieces)
        .map(|(e, piece)| PendingWrite {
            task_id: e.0,
            idx: e.1,
            task_path: e.2,
            channel: e.3,
            value: TypedValue::new(ValueType::from(e.4.as_str()), bytes.slice_ref(piece)),
        })
        .collect();
    // The contract's order, compared as bytes (independent of any collation).
    writes
        .sort_by(|a, b| (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx)));
    Ok(writes)
}

/// Pending writes from rows of `task_id, idx, task_path, channel, type, blob`.
pub(crate) fn decode_writes_rows(rows: &[SqliteRow]) -> SqliteResult<Vec<PendingWrite>> {
    rows.iter()
        .map(|row| {
            let ty: String = get(row, 4)?;
            Ok(PendingWrite {
                task_id: get(row, 0)?,
                idx: get(row, 1)?,
                task_path: get(row, 2)?,
                channel: get(row, 3)?,
                value: TypedValue::new(
                    ValueType::from(ty.as_str()),
                    Bytes::from(get::<Vec<u8>>(row, 5)?),
                ),
            })
        })
        .collect()
}

/// Fills `out` from the rows of `sql::DELTA_HISTORY`: each channel's seed, and its writes
/// oldest checkpoint first (greatest depth first), each checkpoint's in `(task_path,
/// task_id, idx)` order.
pub(crate) fn decode_delta(
    rows: &[SqliteRow],
    out: &mut BTreeMap<String, DeltaChannelHistory>,
) -> SqliteResult<()> {
    let mut writes: Vec<(i64, PendingWrite)> = Vec::new();
    for row in rows {
        let kind: String = get(row, 0)?;
        if kind == "w" {
            let entries: Vec<HistoryEntry> = index("delta writes", get(row, 3)?)?;
            let bytes = Bytes::from(get::<Option<Vec<u8>>>(row, 7)?.unwrap_or_default());
            let pieces = split("delta writes", &entries, |e| e.6, &bytes)?;
            for (e, piece) in entries.into_iter().zip(pieces) {
                let value = TypedValue::new(ValueType::from(e.5.as_str()), bytes.slice_ref(piece));
                writes.push((
                    e.0,
                    PendingWrite {
                        channel: e.1,
                        task_path: e.2,
                        task_id: e.3,
                        idx: e.4,
                        value,
                    },
                ));
            }
            continue;
        }
        let channel: String = get(row, 2)?;
        let ty: String = get(row, 6)?;
        let value = TypedValue::new(
            ValueType::from(ty.as_str()),
            Bytes::from(get::<Option<Vec<u8>>>(row, 7)?.unwrap_or_default()),
        );
        if let Some(h) = out.get_mut(&channel) {
            h.seed = Some(value);
        }
    }
    checkpoint_core::delta::push_writes(out, writes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::ChannelVersion;

    #[test]
    fn packed_writes_with_impossible_lengths_are_corrupt_not_a_panic() {
        let head = |index: &str, bytes: &[u8]| HeadRow {
            thread: "t".into(),
            ns: String::new(),
            id: "c".into(),
            parent: None,
            checkpoint: r#"{"v":4,"id":"c","ts":"","cv":{}}"#.into(),
            metadata: "{}".into(),
            writes_index: Some(index.into()),
            writes_bytes: Some(bytes.to_vec()),
        };
        let huge = usize::MAX;
        for (index, bytes) in [
            // The second length would overflow the offset.
            (
                format!(r#"[["k",0,"","a","json",1],["k",1,"","b","json",{huge}]]"#),
                &b"1x"[..],
            ),
            (r#"[["k",0,"","a","json",3]]"#.to_owned(), &b"1"[..]),
            (r#"[["k",0,"","a","json",1]]"#.to_owned(), &b"12"[..]),
        ] {
            let err = assemble_tuples(vec![head(&index, bytes)], &HashMap::new())
                .err()
                .unwrap_or_else(|| panic!("{index} over {bytes:?} decoded"));
            assert!(matches!(err, SqliteError::Corrupt { .. }), "{index}");
        }
        let ok = assemble_tuples(
            vec![head(r#"[["k",0,"","a","json",1]]"#, b"1")],
            &HashMap::new(),
        )
        .unwrap();
        assert_eq!(&ok[0].pending_writes[0].value.bytes[..], b"1");
    }

    #[test]
    fn the_checkpoint_column_keeps_versions_exact() {
        let mut cp = Checkpoint::new();
        cp.channel_versions
            .insert("big".into(), ChannelVersion::Int(u64::MAX));
        cp.channel_versions.insert(
            "s".into(),
            ChannelVersion::Str("00000000000000000000000000000003.5".into()),
        );
        cp.versions_seen.insert(
            "agent".into(),
            [("big".to_owned(), ChannelVersion::Int(u64::MAX))].into(),
        );
        let column = checkpoint_column(&cp).unwrap();
        let back: CheckpointIn = serde_json::from_str(&column).unwrap();
        assert_eq!(back.cv["big"], format!("i{}", u64::MAX));
        assert_eq!(back.cv["s"], "s00000000000000000000000000000003.5");
        assert_eq!(back.vs, cp.versions_seen);
        assert!(!column.contains("channel_values"));
    }
}
