//! Reading databases written by Python's `langgraph-checkpoint-sqlite` ([`LangGraphSqliteSource`]).
//!
//! LangGraph's SQLite layout is two tables: `checkpoints` (one row per checkpoint: the whole
//! checkpoint, channel values included, serialized with `serde.dumps_typed`, normally one
//! MessagePack map, and the metadata as JSON text) and `writes` (one row per pending write,
//! a type tag and bytes; files written before `langgraph-checkpoint-sqlite` 3 have no
//! `task_path` column). A source reads them as [`CheckpointTuple`]s: each channel value
//! becomes a [`TypedValue`] holding exactly the bytes LangGraph wrote for it (MessagePack
//! extension types included), so a checkpoint imported into a saver reads back in Python as
//! LangGraph wrote it. [`ReadOnly`](checkpoint_core::backend::ReadOnly)`<LangGraphSqliteSource>`
//! is the file as a [`Saver`](checkpoint_core::Saver) whose writes are rejected.

use std::path::Path;

use checkpoint_core::backend::langgraph::decode_checkpoint;
use checkpoint_core::backend::legacy::{apply_parent_sends, sends_parent};
use checkpoint_core::backend::{Page, ReadSource, paged};
use checkpoint_core::{
    BoxStream, Bytes, CheckpointConfig, CheckpointMetadata, CheckpointTuple, Error, IntegrityScan,
    ListOptions, PendingWrite, Result, StorageIssue, TypedValue, ValueType, async_trait,
};
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

    /// Checkpoints newest first, as [`Saver::list`](checkpoint_core::Saver::list) orders
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
                // The stored row's id (what the query orders by), not the id inside the
                // serialized checkpoint, should the two ever differ.
                let next = tuples.last().map(|t| {
                    (
                        t.config.checkpoint_id.clone().unwrap_or_default(),
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
                            t.config.checkpoint_id.as_deref().unwrap_or_default(),
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

/// The source's reads: [`ReadOnly`](checkpoint_core::backend::ReadOnly)`<Self>` is the file as
/// a [`Saver`](checkpoint_core::Saver) (its writes rejected) for every tool that reads savers.
#[async_trait]
impl ReadSource for LangGraphSqliteSource {
    const NAME: &'static str = "LangGraphSqliteSource";

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        LangGraphSqliteSource::get_tuple(self, config).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        LangGraphSqliteSource::list(self, options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.thread_ids(None)
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.thread_ids(Some(after.to_owned()))
    }
}

impl LangGraphSqliteSource {
    /// The file's thread ids in byte order (the column's `BINARY` collation), after `after`.
    fn thread_ids(&self, after: Option<String>) -> BoxStream<'static, Result<String>> {
        let pool = self.pool.clone();
        checkpoint_core::backend::paged_keys(1000, after, move |after, want| {
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

/// The column names of `table` (none when it does not exist).
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
    let checkpoint = decode_checkpoint(&id, ty.as_deref(), &body)?;
    if checkpoint.id != id {
        return Err(corrupt(
            &id,
            format!("the row holds a checkpoint with id {:?}", checkpoint.id),
        ));
    }
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
