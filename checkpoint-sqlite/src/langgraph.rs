//! Reading databases written by Python's `langgraph-checkpoint-sqlite` ([`LangGraphSqliteSource`]).
//!
//! LangGraph's SQLite layout is two tables: `checkpoints` (one row per checkpoint: the whole
//! checkpoint, channel values included, serialized with `serde.dumps_typed`, normally one
//! MessagePack map, and the metadata as JSON text) and `writes` (one row per pending write,
//! a type tag and bytes; files written before `langgraph-checkpoint-sqlite` 3 have no
//! `task_path` column). A source reads them as [`CheckpointTuple`]s: each channel value
//! becomes a [`TypedValue`] holding exactly the bytes LangGraph wrote for it (MessagePack
//! extension types included), so a checkpoint imported into a saver reads back in Python as
//! LangGraph wrote it.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use checkpoint_core::backend::legacy::{apply_parent_sends, migrate_pending_sends, sends_parent};
use checkpoint_core::backend::{Page, paged};
use checkpoint_core::msgpack::{array_elements, decode_msgpack, value_end};
use std::time::Duration;

use checkpoint_core::{
    BoxStream, Bytes, Capabilities, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig,
    CheckpointMetadata, CheckpointTuple, Claim, DecodeLimits, Error, IntegrityScan, Lease,
    ListOptions, PendingWrite, PruneStrategy, PutOptions, PutWritesOptions, Result, Saver,
    StorageIssue, TypedValue, ValueType, async_trait,
};
use rmpv::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteRow};
use sqlx::{QueryBuilder, Row, Sqlite};

use crate::error::classify;

/// How many checkpoints one page of [`LangGraphSqliteSource::list`] reads.
const PAGE: usize = 64;

/// The columns of LangGraph's tables this reader needs (`writes.task_path` is optional: files
/// written before `langgraph-checkpoint-sqlite` 3 lack it).
const CHECKPOINT_COLUMNS: &[&str] = &[
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
];
const WRITE_COLUMNS: &[&str] = &[
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "task_id",
    "idx",
    "channel",
    "type",
    "value",
];

/// A database file written by LangGraph's `SqliteSaver`, opened read-only.
///
/// ```no_run
/// # async fn demo() -> checkpoint_core::Result<()> {
/// use futures::TryStreamExt;
/// use checkpoint_core::ListOptions;
/// use checkpoint_sqlite::langgraph::LangGraphSqliteSource;
///
/// let source = LangGraphSqliteSource::open("langgraph.sqlite").await?;
/// for thread in source.threads().await? {
///     let history: Vec<_> = source.list(ListOptions::thread(thread)).try_collect().await?;
///     println!("{} checkpoints", history.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LangGraphSqliteSource {
    pool: SqlitePool,
    has_task_path: bool,
}

impl LangGraphSqliteSource {
    /// Opens the file read-only. It must exist and hold LangGraph's `checkpoints` and
    /// `writes` tables; anything else is [`Error::InvalidInput`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .foreign_keys(false);
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .map_err(classify)?;
        let checkpoints = table_columns(&pool, "checkpoints").await?;
        let writes = table_columns(&pool, "writes").await?;
        let has_all =
            |have: &[String], want: &[&str]| want.iter().all(|w| have.iter().any(|h| h == w));
        if !has_all(&checkpoints, CHECKPOINT_COLUMNS) || !has_all(&writes, WRITE_COLUMNS) {
            return Err(Error::invalid(
                "not a LangGraph SQLite database: it lacks LangGraph's `checkpoints` and \
                 `writes` tables",
            ));
        }
        Ok(Self {
            has_task_path: writes.iter().any(|c| c == "task_path"),
            pool,
        })
    }

    /// Every thread id, in ascending order.
    pub async fn threads(&self) -> Result<Vec<String>> {
        sqlx::query_scalar("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
            .fetch_all(&self.pool)
            .await
            .map_err(classify)
    }

    /// One checkpoint (`checkpoint_id`), or the namespace's latest.
    pub async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        config.require_thread()?;
        let mut options = ListOptions::from_config(config);
        options.limit = Some(1);
        let mut page = self.page(&options, None, 1).await?;
        Ok(page.pop())
    }

    /// Checkpoints newest first, as [`Saver::list`] orders
    /// them, with every condition of `options` (metadata filters are checked on the decoded
    /// metadata).
    pub fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let source = self.clone();
        let limit = options.limit;
        paged(
            limit,
            PAGE,
            (source, options, None),
            |(source, options, cursor): (Self, ListOptions, Option<Cursor>), want| async move {
                let tuples = source.page(&options, cursor.as_ref(), want).await?;
                let fetched = tuples.len();
                let next = tuples.last().map(|t| {
                    (
                        t.checkpoint.id.clone(),
                        t.config.thread_id.clone(),
                        t.config.checkpoint_ns.clone(),
                    )
                });
                let admitted = tuples
                    .into_iter()
                    .filter(|t| {
                        options.admits(
                            &t.config.thread_id,
                            &t.config.checkpoint_ns,
                            &t.checkpoint.id,
                            &t.metadata,
                        )
                    })
                    .collect();
                Ok(((source, options, next), Page::new(admitted, fetched < want)))
            },
        )
    }

    /// One page of checkpoints after `cursor`, with their pending writes.
    async fn page(
        &self,
        options: &ListOptions,
        cursor: Option<&Cursor>,
        want: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, \
             checkpoint, metadata FROM checkpoints WHERE true",
        );
        if let Some(t) = &options.thread_id {
            qb.push(" AND thread_id = ").push_bind(t.clone());
        }
        if let Some(ns) = &options.checkpoint_ns {
            qb.push(" AND checkpoint_ns = ").push_bind(ns.clone());
        }
        if let Some(id) = &options.checkpoint_id {
            qb.push(" AND checkpoint_id = ").push_bind(id.clone());
        }
        if let Some(before) = &options.before {
            qb.push(" AND checkpoint_id < ").push_bind(before.clone());
        }
        if let Some((id, thread, ns)) = cursor {
            qb.push(" AND (checkpoint_id, thread_id, checkpoint_ns) < (")
                .push_bind(id.clone())
                .push(", ")
                .push_bind(thread.clone())
                .push(", ")
                .push_bind(ns.clone())
                .push(")");
        }
        qb.push(" ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC LIMIT ")
            .push_bind(i64::try_from(want).unwrap_or(i64::MAX));
        let rows = qb.build().fetch_all(&self.pool).await.map_err(classify)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut tuple = decode_row(row)?;
            tuple.pending_writes = self.writes(&tuple.config).await?;
            if let Some(parent) = sends_parent(&tuple).cloned() {
                let writes = self.writes(&parent).await?;
                apply_parent_sends(&mut tuple, &writes);
            }
            out.push(tuple);
        }
        Ok(out)
    }

    /// The pending writes of a checkpoint, in the contract's order.
    async fn writes(&self, config: &CheckpointConfig) -> Result<Vec<PendingWrite>> {
        let sql = if self.has_task_path {
            "SELECT task_id, channel, type, value, idx, task_path FROM writes \
             WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
        } else {
            "SELECT task_id, channel, type, value, idx, '' FROM writes \
             WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
        };
        let rows = sqlx::query(sql)
            .bind(&config.thread_id)
            .bind(&config.checkpoint_ns)
            .bind(config.checkpoint_id.as_deref())
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let mut writes = Vec::with_capacity(rows.len());
        for row in &rows {
            let ty: Option<String> = row.try_get(2).map_err(classify)?;
            let value: Option<Vec<u8>> = row.try_get(3).map_err(classify)?;
            writes.push(PendingWrite {
                task_id: row.try_get(0).map_err(classify)?,
                channel: row.try_get(1).map_err(classify)?,
                value: TypedValue::new(
                    ValueType::from(ty.as_deref().unwrap_or("null")),
                    Bytes::from(value.unwrap_or_default()),
                ),
                idx: row.try_get(4).map_err(classify)?,
                task_path: row.try_get(5).map_err(classify)?,
            });
        }
        writes.sort_by(|a, b| {
            (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx))
        });
        Ok(writes)
    }
}

/// The column names of `table` (none when it does not exist).
/// The source as a read-only [`Saver`], so every tool that reads a saver (listing,
/// inspecting, verifying, migrating from it) reads LangGraph's file: reads as the methods
/// above; every write is [`Error::Rejected`] (nothing is written) and [`Capabilities`]
/// advertises nothing.
#[async_trait]
impl Saver for LangGraphSqliteSource {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        LangGraphSqliteSource::get_tuple(self, config).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        LangGraphSqliteSource::list(self, options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        let pool = self.pool.clone();
        checkpoint_core::backend::paged_keys(1000, move |after, want| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar(
                    "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > ?1 \
                     ORDER BY thread_id LIMIT ?2",
                )
                .bind(after.unwrap_or_default())
                .bind(i64::try_from(want).unwrap_or(i64::MAX))
                .fetch_all(&pool)
                .await
                .map_err(classify)
            }
        })
    }

    async fn put(
        &self,
        _config: &CheckpointConfig,
        _checkpoint: Checkpoint,
        _metadata: CheckpointMetadata,
        _new_versions: ChannelVersions,
        _options: PutOptions,
    ) -> Result<CheckpointConfig> {
        Err(read_only("put"))
    }

    async fn put_writes(
        &self,
        _config: &CheckpointConfig,
        _writes: Vec<(String, TypedValue)>,
        _task_id: &str,
        _options: PutWritesOptions,
    ) -> Result<()> {
        Err(read_only("put_writes"))
    }

    async fn delete_thread(&self, _thread_id: &str) -> Result<()> {
        Err(read_only("delete_thread"))
    }

    async fn copy_thread(&self, _source: &str, _target: &str) -> Result<()> {
        Err(read_only("copy_thread"))
    }

    async fn prune(&self, _thread_ids: &[String], _strategy: PruneStrategy) -> Result<()> {
        Err(read_only("prune"))
    }

    async fn delete_for_runs(&self, _run_ids: &[String]) -> Result<()> {
        Err(read_only("delete_for_runs"))
    }

    async fn acquire_lease(
        &self,
        _thread_id: &str,
        _holder: &str,
        _ttl: Duration,
    ) -> Result<Option<Lease>> {
        Err(read_only("acquire_lease"))
    }

    async fn renew_lease(&self, _lease: &Lease, _ttl: Duration) -> Result<Lease> {
        Err(read_only("renew_lease"))
    }

    async fn release_lease(&self, _lease: &Lease) -> Result<()> {
        Err(read_only("release_lease"))
    }

    async fn claim(&self, _key: &str, _ttl: Duration) -> Result<Claim> {
        Err(read_only("claim"))
    }

    async fn complete_claim(&self, _key: &str, _token: u64, _outcome: TypedValue) -> Result<()> {
        Err(read_only("complete_claim"))
    }

    async fn abandon_claim(&self, _key: &str, _token: u64) -> Result<()> {
        Err(read_only("abandon_claim"))
    }
}

/// LangGraph's file keeps each checkpoint whole, values included, so no value can go
/// missing from under a checkpoint; what the scan can find is pending writes of
/// checkpoints the file does not hold.
#[async_trait]
impl IntegrityScan for LangGraphSqliteSource {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT w.checkpoint_ns, w.checkpoint_id, count(*) FROM writes w \
             WHERE w.thread_id = ?1 AND NOT EXISTS (SELECT 1 FROM checkpoints c \
               WHERE c.thread_id = ?1 AND c.checkpoint_ns = w.checkpoint_ns \
                 AND c.checkpoint_id = w.checkpoint_id) \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await
        .map_err(classify)?;
        Ok(StorageIssue::collect(
            [],
            rows.into_iter()
                .map(|(ns, id, n)| (ns, id, u64::try_from(n).unwrap_or_default())),
        ))
    }
}

fn read_only(op: &str) -> Error {
    Error::Rejected {
        by: "LangGraphSqliteSource",
        reason: format!("{op}: a LangGraph SQLite file is opened read-only"),
    }
}

async fn table_columns(pool: &SqlitePool, table: &str) -> Result<Vec<String>> {
    sqlx::query_scalar("SELECT name FROM pragma_table_info(?1)")
        .bind(table)
        .fetch_all(pool)
        .await
        .map_err(classify)
}

/// Where a page continues: `(id, thread, namespace)` of the last checkpoint read.
type Cursor = (String, String, String);

fn corrupt(id: &str, what: impl std::fmt::Display) -> Error {
    Error::Serialization {
        reason: format!("LangGraph checkpoint {id:?}: {what}"),
        source: None,
    }
}

/// A `checkpoints` row as a tuple (without its pending writes).
fn decode_row(row: &SqliteRow) -> Result<CheckpointTuple> {
    let thread: String = row.try_get(0).map_err(classify)?;
    let ns: String = row.try_get(1).map_err(classify)?;
    let id: String = row.try_get(2).map_err(classify)?;
    let parent: Option<String> = row.try_get(3).map_err(classify)?;
    let ty: Option<String> = row.try_get(4).map_err(classify)?;
    let body: Option<Vec<u8>> = row.try_get(5).map_err(classify)?;
    let metadata: Option<Vec<u8>> = row.try_get(6).map_err(classify)?;
    let body = body.ok_or_else(|| corrupt(&id, "no checkpoint bytes"))?;
    let checkpoint = match ty.as_deref() {
        Some("msgpack") => decode_msgpack_checkpoint(&id, &body)?,
        Some("json") => decode_json_checkpoint(&id, &body)?,
        other => {
            return Err(corrupt(
                &id,
                format!(
                    "checkpoints serialized as {other:?} cannot be read (only msgpack and json)"
                ),
            ));
        }
    };
    let metadata = match metadata {
        None => CheckpointMetadata::new(),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            Error::serialization(format!("LangGraph checkpoint {id:?}: metadata"), e)
        })?,
    };
    let address = |checkpoint_id: String| {
        CheckpointConfig::new(thread.clone())
            .with_ns(ns.clone())
            .with_checkpoint_id(checkpoint_id)
    };
    Ok(CheckpointTuple {
        config: address(id),
        checkpoint,
        metadata,
        parent_config: parent.filter(|p| !p.is_empty()).map(address),
        pending_writes: Vec::new(),
    })
}

/// The `(key, value range)` entries of the msgpack map at `range` of `bytes`.
fn map_entries(id: &str, bytes: &[u8], range: Range<usize>) -> Result<Vec<(String, Range<usize>)>> {
    let buf = &bytes[..range.end];
    let mut pos = range.start;
    let marker = *buf.get(pos).ok_or_else(|| corrupt(id, "truncated map"))?;
    let be = |at: usize, n: usize| -> Result<usize> {
        let b = buf
            .get(at..at + n)
            .ok_or_else(|| corrupt(id, "truncated map"))?;
        Ok(b.iter().fold(0usize, |acc, &x| (acc << 8) | usize::from(x)))
    };
    let count = match marker {
        0x80..=0x8f => {
            pos += 1;
            usize::from(marker & 0x0f)
        }
        0xde => {
            let n = be(pos + 1, 2)?;
            pos += 3;
            n
        }
        0xdf => {
            let n = be(pos + 1, 4)?;
            pos += 5;
            n
        }
        _ => return Err(corrupt(id, "expected a msgpack map")),
    };
    if count > buf.len().saturating_sub(pos) {
        return Err(corrupt(
            id,
            "a map declares more entries than there are bytes",
        ));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let key_end = value_end(buf, pos)?;
        let key = match decode_msgpack(&buf[pos..key_end], &DecodeLimits::default())? {
            Value::String(s) => s
                .into_str()
                .ok_or_else(|| corrupt(id, "a map key is not UTF-8"))?,
            other => other.to_string(),
        };
        let value_end_at = value_end(buf, key_end)?;
        out.push((key, key_end..value_end_at));
        pos = value_end_at;
    }
    Ok(out)
}

fn version_of(id: &str, v: &Value) -> Result<ChannelVersion> {
    Ok(match v {
        Value::String(s) => ChannelVersion::Str(
            s.as_str()
                .ok_or_else(|| corrupt(id, "a version is not UTF-8"))?
                .to_owned(),
        ),
        Value::Integer(i) => ChannelVersion::Int(
            i.as_u64()
                .ok_or_else(|| corrupt(id, "a negative channel version"))?,
        ),
        // A float version (custom `get_next_version`): integral ones as integers, others
        // as their text.
        Value::F64(f) if f.fract() == 0.0 && *f >= 0.0 && *f < 2f64.powi(63) => {
            ChannelVersion::Int(*f as u64)
        }
        Value::F64(f) => ChannelVersion::Str(f.to_string()),
        Value::F32(f) => ChannelVersion::Str(f.to_string()),
        other => return Err(corrupt(id, format!("channel version {other}"))),
    })
}

fn versions_of(id: &str, v: &Value) -> Result<ChannelVersions> {
    match v {
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| Ok((text_of(id, k)?, version_of(id, v)?)))
            .collect(),
        Value::Nil => Ok(ChannelVersions::new()),
        other => Err(corrupt(id, format!("versions {other}"))),
    }
}

fn text_of(id: &str, v: &Value) -> Result<String> {
    match v {
        Value::String(s) => s
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| corrupt(id, "a string is not UTF-8")),
        other => Ok(other.to_string()),
    }
}

/// A msgpack checkpoint: the fields decoded, each channel value kept as its own bytes.
fn decode_msgpack_checkpoint(id: &str, bytes: &[u8]) -> Result<Checkpoint> {
    let limits = DecodeLimits::default();
    let mut checkpoint = Checkpoint {
        v: 1,
        id: id.to_owned(),
        ts: String::new(),
        channel_values: BTreeMap::new(),
        channel_versions: ChannelVersions::new(),
        versions_seen: BTreeMap::new(),
        updated_channels: None,
    };
    let mut pending_sends = None;
    for (key, range) in map_entries(id, bytes, 0..bytes.len())? {
        let field = || decode_msgpack(&bytes[range.clone()], &limits);
        match key.as_str() {
            "channel_values" => {
                for (channel, value) in map_entries(id, bytes, range.clone())? {
                    checkpoint
                        .channel_values
                        .insert(channel, standalone(&bytes[value]));
                }
            }
            "v" => {
                checkpoint.v = field()?
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| corrupt(id, "field v"))?;
            }
            "id" => checkpoint.id = text_of(id, &field()?)?,
            "ts" => checkpoint.ts = text_of(id, &field()?)?,
            "channel_versions" => checkpoint.channel_versions = versions_of(id, &field()?)?,
            "versions_seen" => {
                if let Value::Map(nodes) = field()? {
                    for (node, versions) in &nodes {
                        checkpoint
                            .versions_seen
                            .insert(text_of(id, node)?, versions_of(id, versions)?);
                    }
                }
            }
            "updated_channels" => {
                checkpoint.updated_channels = match field()? {
                    Value::Array(items) => Some(
                        items
                            .iter()
                            .map(|c| text_of(id, c))
                            .collect::<Result<_>>()?,
                    ),
                    _ => None,
                };
            }
            "pending_sends" => pending_sends = Some(range),
            // Any future field: not part of the model.
            _ => {}
        }
    }
    if checkpoint.v < 4
        && let Some(range) = pending_sends
    {
        let sends = array_elements(&bytes[range.clone()])?.unwrap_or_default();
        let sends: Vec<TypedValue> = sends
            .into_iter()
            .map(|r| {
                TypedValue::new(
                    ValueType::Msgpack,
                    Bytes::copy_from_slice(&bytes[range.start + r.start..range.start + r.end]),
                )
            })
            .collect();
        migrate_pending_sends(&mut checkpoint, sends.iter());
    }
    Ok(checkpoint)
}

/// A channel value cut out of a checkpoint's MessagePack map, as the `TypedValue` LangGraph's
/// serializer gives the value on its own (`dumps_typed`): `None` is `null` without bytes,
/// `bytes` are `bytes` with the raw payload, anything else is the MessagePack as written.
fn standalone(bytes: &[u8]) -> TypedValue {
    if bytes == [0xc0] {
        TypedValue::new(ValueType::Null, Bytes::new())
    } else if let Some(payload) = decode_bin(bytes) {
        TypedValue::new(ValueType::Bytes, Bytes::copy_from_slice(payload))
    } else {
        TypedValue::new(ValueType::Msgpack, Bytes::copy_from_slice(bytes))
    }
}

/// The payload of a MessagePack `bin` value that is all of `bytes`.
fn decode_bin(bytes: &[u8]) -> Option<&[u8]> {
    let (&marker, rest) = bytes.split_first()?;
    let width = match marker {
        0xc4 => 1,
        0xc5 => 2,
        0xc6 => 4,
        _ => return None,
    };
    let (len, payload) = rest.split_at_checked(width)?;
    let len = len
        .iter()
        .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
    (payload.len() == len).then_some(payload)
}

/// A legacy JSON checkpoint (`langgraph-checkpoint` before 3): channel values kept as their
/// JSON text.
fn decode_json_checkpoint(id: &str, bytes: &[u8]) -> Result<Checkpoint> {
    #[derive(serde::Deserialize)]
    struct Legacy<'a> {
        #[serde(default = "one")]
        v: u32,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        ts: String,
        #[serde(default, borrow)]
        channel_values: BTreeMap<String, &'a serde_json::value::RawValue>,
        #[serde(default)]
        channel_versions: ChannelVersions,
        #[serde(default)]
        versions_seen: BTreeMap<String, ChannelVersions>,
        #[serde(default)]
        updated_channels: Option<Vec<String>>,
        #[serde(default, borrow)]
        pending_sends: Vec<&'a serde_json::value::RawValue>,
    }
    fn one() -> u32 {
        1
    }
    let legacy: Legacy<'_> = serde_json::from_slice(bytes)
        .map_err(|e| Error::serialization(format!("LangGraph checkpoint {id:?}"), e))?;
    let json = |raw: &serde_json::value::RawValue| {
        TypedValue::new(
            ValueType::Json,
            Bytes::copy_from_slice(raw.get().as_bytes()),
        )
    };
    let mut checkpoint = Checkpoint {
        v: legacy.v,
        id: legacy.id.unwrap_or_else(|| id.to_owned()),
        ts: legacy.ts,
        channel_values: legacy
            .channel_values
            .into_iter()
            .map(|(c, raw)| (c, json(raw)))
            .collect(),
        channel_versions: legacy.channel_versions,
        versions_seen: legacy.versions_seen,
        updated_channels: legacy.updated_channels,
    };
    if checkpoint.v < 4 {
        let sends: Vec<TypedValue> = legacy.pending_sends.into_iter().map(json).collect();
        migrate_pending_sends(&mut checkpoint, sends.iter());
    }
    Ok(checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::writes::TASKS;

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn channel_values_keep_their_exact_bytes_extensions_included() {
        let message = Value::Ext(
            5,
            encode(&Value::Array(vec![
                Value::from("langchain_core.messages.ai"),
                Value::from("AIMessage"),
                Value::Map(vec![(Value::from("content"), Value::from("hi"))]),
            ])),
        );
        let checkpoint = Value::Map(vec![
            (Value::from("v"), Value::from(4)),
            (
                Value::from("ts"),
                Value::from("2026-11-23T20:04:04.284026+00:00"),
            ),
            (
                Value::from("id"),
                Value::from("1f1e7790-8612-698c-bfff-8884add5aa23"),
            ),
            (
                Value::from("channel_values"),
                Value::Map(vec![
                    (Value::from("messages"), Value::Array(vec![message.clone()])),
                    (Value::from("counter"), Value::from(3)),
                ]),
            ),
            (
                Value::from("channel_versions"),
                Value::Map(vec![
                    (
                        Value::from("messages"),
                        Value::from("00000000000000000000000000000002.0.5"),
                    ),
                    (Value::from("counter"), Value::from(7)),
                ]),
            ),
            (
                Value::from("versions_seen"),
                Value::Map(vec![(Value::from("__input__"), Value::Map(vec![]))]),
            ),
            (
                Value::from("updated_channels"),
                Value::Array(vec![Value::from("messages")]),
            ),
        ]);
        let bytes = encode(&checkpoint);
        let cp = decode_msgpack_checkpoint("x", &bytes).unwrap();
        assert_eq!(cp.v, 4);
        assert_eq!(cp.id, "1f1e7790-8612-698c-bfff-8884add5aa23");
        assert_eq!(
            cp.channel_values["messages"].bytes[..],
            encode(&Value::Array(vec![message]))[..]
        );
        assert_eq!(cp.channel_values["counter"].bytes[..], [3]);
        assert_eq!(cp.channel_versions["counter"], ChannelVersion::Int(7));
        assert_eq!(
            cp.channel_versions["messages"],
            ChannelVersion::Str("00000000000000000000000000000002.0.5".into())
        );
        assert!(cp.versions_seen["__input__"].is_empty());
        assert_eq!(
            cp.updated_channels.as_deref(),
            Some(&["messages".to_owned()][..])
        );
        // Truncations are typed errors, never panics.
        for cut in 0..bytes.len() {
            assert!(decode_msgpack_checkpoint("x", &bytes[..cut]).is_err());
        }
    }

    #[test]
    fn values_read_as_langgraph_serializes_them_alone() {
        assert_eq!(
            standalone(&[0xc0]),
            TypedValue::new(ValueType::Null, Bytes::new())
        );
        assert_eq!(
            standalone(&[0xc4, 2, 0xfe, 0xff]),
            TypedValue::new(ValueType::Bytes, Bytes::from_static(&[0xfe, 0xff]))
        );
        let long = encode(&Value::Binary(vec![7; 300]));
        assert_eq!(standalone(&long).type_tag, ValueType::Bytes);
        assert_eq!(standalone(&long).bytes.len(), 300);
        // Not a whole bin value: kept as MessagePack.
        assert_eq!(standalone(&[0xc4, 5, 1]).type_tag, ValueType::Msgpack);
        assert_eq!(
            standalone(&[0x03]),
            TypedValue::new(ValueType::Msgpack, Bytes::from_static(&[3]))
        );
    }

    #[test]
    fn pending_sends_of_old_checkpoints_move_into_the_tasks_channel() {
        let send = |node: &str| {
            Value::Ext(
                2,
                encode(&Value::Array(vec![
                    Value::from("langgraph.types"),
                    Value::from("Send"),
                    Value::Map(vec![(Value::from("node"), Value::from(node))]),
                ])),
            )
        };
        let checkpoint = |v: i64, sends: Vec<Value>| {
            encode(&Value::Map(vec![
                (Value::from("v"), Value::from(v)),
                (Value::from("id"), Value::from("c")),
                (
                    Value::from("channel_values"),
                    Value::Map(vec![(Value::from("x"), Value::from(1))]),
                ),
                (
                    Value::from("channel_versions"),
                    Value::Map(vec![
                        (
                            Value::from("x"),
                            Value::from("00000000000000000000000000000002.0.5"),
                        ),
                        (
                            Value::from("y"),
                            Value::from("00000000000000000000000000000007.0.1"),
                        ),
                    ]),
                ),
                (Value::from("pending_sends"), Value::Array(sends)),
            ]))
        };
        let cp =
            decode_msgpack_checkpoint("c", &checkpoint(3, vec![send("a"), send("b")])).unwrap();
        assert_eq!(
            cp.channel_values[TASKS],
            TypedValue::new(
                ValueType::Msgpack,
                Bytes::from(encode(&Value::Array(vec![send("a"), send("b")])))
            )
        );
        assert_eq!(
            cp.channel_versions[TASKS],
            ChannelVersion::Str("00000000000000000000000000000007.0.1".into())
        );
        // No sends, or the current format: nothing added.
        let cp = decode_msgpack_checkpoint("c", &checkpoint(3, vec![])).unwrap();
        assert!(!cp.channel_values.contains_key(TASKS));
        let cp = decode_msgpack_checkpoint("c", &checkpoint(4, vec![send("a")])).unwrap();
        assert!(!cp.channel_values.contains_key(TASKS));

        // Legacy JSON checkpoints: the sends' JSON text, as one array.
        let json = br#"{"v": 1, "id": "j", "channel_values": {"x": {"a": [1, 2]}},
            "channel_versions": {"x": 3}, "pending_sends": [{"node": "a"}, {"node": "b"}]}"#;
        let cp = decode_json_checkpoint("j", json).unwrap();
        assert_eq!(cp.channel_values["x"].bytes.as_ref(), br#"{"a": [1, 2]}"#);
        assert_eq!(
            cp.channel_values[TASKS],
            TypedValue::new(
                ValueType::Json,
                Bytes::from_static(br#"[{"node": "a"},{"node": "b"}]"#)
            )
        );
        assert_eq!(cp.channel_versions[TASKS], ChannelVersion::Int(3));
    }
}
