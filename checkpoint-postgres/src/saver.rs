//! [`PostgresSaver`]: the [`Saver`] implementation.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use checkpoint_core::writes::{replaces_existing, write_index};
use checkpoint_core::{
    Bytes, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, Lease, ListOptions, PendingWrite, PruneStrategy, PutMode,
    PutOptions, PutWritesOptions, Result, Saver, TypedValue, ValueType, async_trait,
    validate_claim_request, validate_lease_request, validate_put,
};
use futures::stream::{self, BoxStream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{Postgres, QueryBuilder, Row};

use crate::error::{PgError, PgResult, classify};
use crate::{migrations, sql};

/// Longest identifier (thread id, namespace, checkpoint id, channel, task id, version,
/// ledger key), in bytes. Primary keys combine up to four of them and PostgreSQL limits a
/// btree index entry to about 2.7 KB; longer identifiers are rejected up front with
/// [`Error::InvalidInput`] instead of failing inside the server.
pub const MAX_IDENTIFIER_BYTES: usize = 512;

/// How many rows one `list` page fetches.
const PAGE: usize = 64;

/// A [`Saver`] on PostgreSQL, sharing LangGraph's checkpoint tables.
///
/// Build it with [`PostgresSaver::connect`] or [`PostgresSaver::builder`], or wrap an
/// existing pool with [`PostgresSaver::from_pool`]; call [`setup`](PostgresSaver::setup)
/// once (it is idempotent and safe to run concurrently) before use. Cloning is cheap and
/// shares the pool.
#[derive(Clone)]
pub struct PostgresSaver {
    pool: PgPool,
    schema: Option<String>,
}

impl fmt::Debug for PostgresSaver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.pool.connect_options();
        f.debug_struct("PostgresSaver")
            .field("host", &o.get_host())
            .field("port", &o.get_port())
            .field("database", &o.get_database())
            .field("username", &o.get_username())
            .field("schema", &self.schema)
            .field("pool_size", &self.pool.size())
            .finish_non_exhaustive()
    }
}

/// Connections idle for longer than this are pinged before use.
const IDLE_PING_AFTER: Duration = Duration::from_secs(10);

/// The default pool: 10 connections, a 10 s acquire timeout, and a liveness ping only for
/// connections that sat idle for more than [`IDLE_PING_AFTER`].
///
/// sqlx's default pings every connection on every acquire: one extra round trip in front of
/// each operation (measured: ≈ 0.1 ms of a 0.8 ms get_tuple). A busy connection does not
/// need it: sqlx already pings each connection in the background when it is released and
/// drops it if the server no longer answers, and a connection that breaks mid-call fails
/// with a transient error ([`Error::is_transient`]) and is not reused. Connections that sat
/// idle, the ones a server restart or a firewall timeout silently kills, are still checked.
fn default_pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > IDLE_PING_AFTER {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// Configures and connects a [`PostgresSaver`].
pub struct PostgresSaverBuilder {
    options: PgConnectOptions,
    pool: PgPoolOptions,
    schema: Option<String>,
}

impl fmt::Debug for PostgresSaverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSaverBuilder")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("database", &self.options.get_database())
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresSaverBuilder {
    /// Uses `options` (host, credentials, TLS `sslmode`/certificates, application name...)
    /// exactly as sqlx accepts them.
    pub fn new(options: PgConnectOptions) -> Self {
        Self {
            options,
            pool: default_pool_options(),
            schema: None,
        }
    }

    /// Puts the tables in this schema (created by [`PostgresSaver::setup`]) instead of the
    /// connection's default `search_path`. Letters, digits and `_` only.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Replaces the pool options (size, timeouts, lifetimes). This replaces the default
    /// liveness policy too (see the crate README); sqlx's own default pings every connection
    /// on every acquire.
    pub fn pool_options(mut self, pool: PgPoolOptions) -> Self {
        self.pool = pool;
        self
    }

    /// Sets the pool's maximum number of connections (default 10).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.pool = self.pool.max_connections(n);
        self
    }

    /// Connects the pool (lazily: connections open on first use, so a server that is down
    /// now does not prevent building the saver).
    pub fn connect_lazy(self) -> Result<PostgresSaver> {
        let options = self.options_with_schema()?;
        Ok(PostgresSaver {
            pool: self.pool.connect_lazy_with(options),
            schema: self.schema,
        })
    }

    /// Connects the pool, opening a first connection to check the server answers.
    pub async fn connect(self) -> Result<PostgresSaver> {
        let options = self.options_with_schema()?;
        let pool = self.pool.connect_with(options).await.map_err(classify)?;
        Ok(PostgresSaver {
            pool,
            schema: self.schema,
        })
    }

    fn options_with_schema(&self) -> Result<PgConnectOptions> {
        // PostgreSQL's default plan caching is kept on purpose: a generic plan of the
        // filtered list cannot see the filter's selectivity and walks the global order index
        // instead of the metadata GIN index (a full index scan for a rare filter on a large
        // table). Forcing generic plans measured no faster on any W1-W4 operation.
        let options = self.options.clone();
        match &self.schema {
            None => Ok(options),
            Some(schema) => {
                check_schema_name(schema)?;
                Ok(options.options([("search_path", schema.as_str())]))
            }
        }
    }
}

fn check_schema_name(schema: &str) -> Result<()> {
    if schema.is_empty()
        || schema.len() > 63
        || !schema
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        || schema.as_bytes()[0].is_ascii_digit()
    {
        return Err(Error::invalid(format!(
            "schema name {schema:?} must be 1-63 ASCII letters, digits or '_', not starting with a digit"
        )));
    }
    Ok(())
}

fn check_ident(what: &str, s: &str) -> Result<()> {
    if s.len() > MAX_IDENTIFIER_BYTES {
        return Err(Error::invalid(format!(
            "{what} is {} bytes; PostgreSQL keys allow at most {MAX_IDENTIFIER_BYTES}",
            s.len()
        )));
    }
    if s.contains('\0') {
        return Err(Error::invalid(format!(
            "{what} contains a NUL character, which PostgreSQL text cannot store"
        )));
    }
    Ok(())
}

/// Rejects JSON that PostgreSQL's JSONB cannot store (NUL in a key or string).
fn check_json(what: &str, v: &Value) -> Result<()> {
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

/// Whether a string can name something stored here (reads of anything else find nothing).
fn storable(s: &str) -> bool {
    s.len() <= MAX_IDENTIFIER_BYTES && !s.contains('\0')
}

fn json_contains_nul(v: &Value) -> bool {
    check_json("", v).is_err()
}

/// The checkpoint column as LangGraph's savers write it, without values (they live in
/// `checkpoint_blobs`).
#[derive(Serialize)]
struct CheckpointColumn<'a> {
    v: u32,
    id: &'a str,
    ts: &'a str,
    channel_values: Map<String, Value>,
    channel_versions: &'a ChannelVersions,
    versions_seen: &'a BTreeMap<String, ChannelVersions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_channels: &'a Option<Vec<String>>,
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

/// A pending-write row (kind `w`) of a tuple or list query.
fn decode_write(row: &PgRow) -> PgResult<PendingWrite> {
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

/// The rows of a list page or of [`sql::GET_BY_ID`] / [`sql::GET_LATEST`], in any order:
/// checkpoint rows (kind `c`, with their rank `ord` in the page), value rows (kind `b`) and
/// pending-write rows (kind `w`). Each distinct value is
/// decoded once and shared (reference-counted) by every checkpoint of the page that names
/// it.
fn decode_page(rows: &[PgRow]) -> PgResult<Vec<CheckpointTuple>> {
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

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX).max(1)
}

fn token_i64(token: u64) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}

fn token_u64(token: i64) -> u64 {
    u64::try_from(token).unwrap_or(0)
}

impl PostgresSaver {
    /// A builder from a connection string (`postgres://user:pass@host:port/db?sslmode=...`).
    pub fn builder(url: &str) -> Result<PostgresSaverBuilder> {
        let options: PgConnectOptions = url.parse().map_err(|e| Error::InvalidInput {
            reason: format!("invalid PostgreSQL connection string: {e}"),
        })?;
        Ok(PostgresSaverBuilder::new(options))
    }

    /// Connects to `url` with default pool settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url)?.connect().await
    }

    /// Uses an existing pool (its connections' `search_path` decides the schema).
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool, schema: None }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema configured with [`PostgresSaverBuilder::schema`], if any.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// Creates or upgrades the tables: LangGraph's migrations (recorded in
    /// `checkpoint_migrations`, as LangGraph does) and this crate's own objects (recorded in
    /// `checkpoint_rs_migrations`). Idempotent; concurrent calls from several processes
    /// serialize on an advisory lock and all succeed.
    pub async fn setup(&self) -> Result<()> {
        self.setup_inner().await.map_err(Error::from)
    }

    async fn setup_inner(&self) -> PgResult<()> {
        let mut tx = self.pool.begin().await?;
        let lock_name = format!(
            "checkpoint-rs setup {}",
            self.schema.as_deref().unwrap_or("")
        );
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(&lock_name)
            .execute(&mut *tx)
            .await?;
        if let Some(schema) = &self.schema {
            // Validated by check_schema_name: letters, digits and '_' only.
            let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
            sqlx::query(&create).execute(&mut *tx).await?;
        }
        for (steps, version, record) in [
            (
                migrations::LANGGRAPH,
                sql::LANGGRAPH_VERSION,
                sql::LANGGRAPH_RECORD,
            ),
            (migrations::OWN, sql::OWN_VERSION, sql::OWN_RECORD),
        ] {
            sqlx::Executor::execute(&mut *tx, steps[0]).await?;
            let applied: Option<i32> = sqlx::query_scalar(version).fetch_one(&mut *tx).await?;
            let start = applied.map_or(0, |v| v + 1);
            for (v, step) in steps
                .iter()
                .enumerate()
                .skip(usize::try_from(start).unwrap_or(0))
            {
                sqlx::Executor::execute(&mut *tx, *step).await?;
                sqlx::query(record)
                    .bind(i32::try_from(v).unwrap_or(i32::MAX))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn put_inner(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        validate_put(config, &checkpoint, &new_versions)?;
        check_ident("thread_id", &config.thread_id)?;
        check_ident("checkpoint_ns", &config.checkpoint_ns)?;
        check_ident("checkpoint id", &checkpoint.id)?;
        if let Some(parent) = &config.checkpoint_id {
            check_ident("parent checkpoint id", parent)?;
        }
        let metadata_json = Value::Object(metadata.0);
        check_json("metadata", &metadata_json)?;
        let column = CheckpointColumn {
            v: checkpoint.v,
            id: &checkpoint.id,
            ts: &checkpoint.ts,
            channel_values: Map::new(),
            channel_versions: &checkpoint.channel_versions,
            versions_seen: &checkpoint.versions_seen,
            updated_channels: &checkpoint.updated_channels,
        };
        let column = serde_json::to_value(&column)
            .map_err(|e| Error::serialization("checkpoint column", e))?;
        check_json(
            "checkpoint (channel names, versions, node names, ts)",
            &column,
        )?;

        let mut channels = Vec::with_capacity(new_versions.len());
        let mut versions = Vec::with_capacity(new_versions.len());
        let mut types = Vec::with_capacity(new_versions.len());
        let mut blobs: Vec<Option<&[u8]>> = Vec::with_capacity(new_versions.len());
        for (channel, version) in &new_versions {
            check_ident("channel name", channel)?;
            let version = version.to_string();
            check_ident("channel version", &version)?;
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
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        let fence_ok: bool = row.try_get("fence_ok").map_err(classify)?;
        let cas_ok: bool = row.try_get("cas_ok").map_err(classify)?;
        if !fence_ok {
            let current: Option<i64> = row.try_get("current_token").map_err(classify)?;
            return Err(Error::StaleFence {
                scope: format!("thread {:?}", config.thread_id),
                token: options.fence.unwrap_or(0),
                current: current.map_or(0, token_u64),
            });
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
}

/// Which index order a list query walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListMode {
    /// One thread and namespace: by id.
    Namespace,
    /// One thread, every namespace: by (id, namespace).
    Thread,
    /// Every thread: by (id, thread, namespace).
    Global,
}

struct ListState {
    pool: PgPool,
    opts: ListOptions,
    mode: ListMode,
    cursor: Option<(String, String, String)>,
    remaining: Option<usize>,
    buffer: std::collections::VecDeque<CheckpointTuple>,
    done: bool,
}

fn page_query(
    opts: &ListOptions,
    mode: ListMode,
    cursor: Option<&(String, String, String)>,
    limit: usize,
) -> QueryBuilder<'static, Postgres> {
    let order = match mode {
        ListMode::Namespace => "c.checkpoint_id DESC",
        ListMode::Thread => "c.checkpoint_id DESC, c.checkpoint_ns DESC",
        ListMode::Global => "c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC",
    };
    let mut qb = QueryBuilder::<Postgres>::new(sql::LIST_PAGE_HEAD);
    qb.push(order).push(sql::LIST_PAGE_FROM);
    qb.push(" WHERE true");
    if let Some(t) = &opts.thread_id {
        qb.push(" AND c.thread_id = ").push_bind(t.clone());
    }
    if let Some(ns) = &opts.checkpoint_ns {
        qb.push(" AND c.checkpoint_ns = ").push_bind(ns.clone());
    }
    if let Some(id) = &opts.checkpoint_id {
        qb.push(" AND c.checkpoint_id = ").push_bind(id.clone());
    }
    if let Some(b) = &opts.before {
        qb.push(" AND c.checkpoint_id < ").push_bind(b.clone());
    }
    if !opts.filter.is_empty() {
        let filter = Value::Object(opts.filter.clone());
        // Containment is served by the GIN index; the NOT EXISTS makes it exact equality
        // per key (containment alone would accept supersets of nested objects and arrays).
        qb.push(" AND c.metadata @> ")
            .push_bind(Json(filter.clone()))
            .push("::jsonb AND NOT EXISTS (SELECT 1 FROM jsonb_each(")
            .push_bind(Json(filter))
            .push("::jsonb) AS f WHERE c.metadata -> f.key IS DISTINCT FROM f.value)");
    }
    if let Some((id, thread, ns)) = cursor {
        match mode {
            ListMode::Namespace => {
                qb.push(" AND c.checkpoint_id < ").push_bind(id.clone());
            }
            ListMode::Thread => {
                qb.push(" AND (c.checkpoint_id, c.checkpoint_ns) < (")
                    .push_bind(id.clone())
                    .push(", ")
                    .push_bind(ns.clone())
                    .push(")");
            }
            ListMode::Global => {
                qb.push(" AND (c.checkpoint_id, c.thread_id, c.checkpoint_ns) < (")
                    .push_bind(id.clone())
                    .push(", ")
                    .push_bind(thread.clone())
                    .push(", ")
                    .push_bind(ns.clone())
                    .push(")");
            }
        }
    }
    qb.push(" ORDER BY ").push(order);
    qb.push(" LIMIT ")
        .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    qb.push(sql::LIST_PAGE_TAIL);
    qb
}

async fn next_page(st: &mut ListState) -> Result<()> {
    let want = st.remaining.map_or(PAGE, |r| r.min(PAGE));
    let mut qb = page_query(&st.opts, st.mode, st.cursor.as_ref(), want);
    let rows = qb.build().fetch_all(&st.pool).await.map_err(classify)?;
    let page = decode_page(&rows).map_err(Error::from)?;
    if page.len() < want {
        st.done = true;
    }
    for t in page {
        st.cursor = Some((
            t.checkpoint.id.clone(),
            t.config.thread_id.clone(),
            t.config.checkpoint_ns.clone(),
        ));
        st.buffer.push_back(t);
    }
    Ok(())
}

#[async_trait]
impl Saver for PostgresSaver {
    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        config.require_thread()?;
        if !storable(&config.thread_id)
            || !storable(&config.checkpoint_ns)
            || config
                .checkpoint_id
                .as_deref()
                .is_some_and(|id| !storable(id))
        {
            return Ok(None);
        }
        let rows = match &config.checkpoint_id {
            Some(id) => {
                sqlx::query(sql::GET_BY_ID)
                    .bind(&config.thread_id)
                    .bind(&config.checkpoint_ns)
                    .bind(id)
                    .fetch_all(&self.pool)
                    .await
            }
            None => {
                sqlx::query(sql::GET_LATEST)
                    .bind(&config.thread_id)
                    .bind(&config.checkpoint_ns)
                    .fetch_all(&self.pool)
                    .await
            }
        }
        .map_err(classify)?;
        Ok(decode_page(&rows)?.into_iter().next())
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let unmatchable = [
            &options.thread_id,
            &options.checkpoint_ns,
            &options.checkpoint_id,
            &options.before,
        ]
        .into_iter()
        .flatten()
        .any(|s| s.contains('\0'))
            || json_contains_nul(&Value::Object(options.filter.clone()));
        if unmatchable || options.limit == Some(0) {
            // Nothing stored can contain NUL: the answer is empty without asking the server.
            return stream::empty().boxed();
        }
        let mode = match (&options.thread_id, &options.checkpoint_ns) {
            (Some(_), Some(_)) => ListMode::Namespace,
            (Some(_), None) => ListMode::Thread,
            (None, _) => ListMode::Global,
        };
        let state = ListState {
            pool: self.pool.clone(),
            remaining: options.limit,
            opts: options,
            mode,
            cursor: None,
            buffer: Default::default(),
            done: false,
        };
        stream::unfold(state, |mut st| async move {
            loop {
                if st.remaining == Some(0) {
                    return None;
                }
                if let Some(t) = st.buffer.pop_front() {
                    st.remaining = st.remaining.map(|r| r - 1);
                    return Some((Ok(t), st));
                }
                if st.done {
                    return None;
                }
                if let Err(e) = next_page(&mut st).await {
                    st.done = true;
                    st.buffer.clear();
                    return Some((Err(e), st));
                }
            }
        })
        .boxed()
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        self.put_inner(config, checkpoint, metadata, new_versions, options)
            .await
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        let checkpoint_id = config.require_checkpoint_id()?;
        if writes.is_empty() {
            return Ok(());
        }
        check_ident("thread_id", &config.thread_id)?;
        check_ident("checkpoint_ns", &config.checkpoint_ns)?;
        check_ident("checkpoint id", checkpoint_id)?;
        check_ident("task_id", task_id)?;
        check_ident("task_path", &options.task_path)?;
        let replace = replaces_existing(&writes);
        // One row per (task, idx): first wins, or last wins for a replacing call (a single
        // INSERT ... ON CONFLICT DO UPDATE may not touch one row twice).
        let mut rows: Vec<(i32, &str, &TypedValue)> = Vec::with_capacity(writes.len());
        for (position, (channel, value)) in writes.iter().enumerate() {
            check_ident("channel name", channel)?;
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
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        let fence_ok: bool = row.try_get("fence_ok").map_err(classify)?;
        if !fence_ok {
            let current: Option<i64> = row.try_get("current_token").map_err(classify)?;
            return Err(Error::StaleFence {
                scope: format!("thread {:?}", config.thread_id),
                token: options.fence.unwrap_or(0),
                current: current.map_or(0, token_u64),
            });
        }
        Ok(())
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        if thread_id.is_empty() || !storable(thread_id) {
            return Ok(());
        }
        sqlx::query(sql::DELETE_THREAD)
            .bind(thread_id)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(())
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        if target.is_empty() {
            return Err(Error::invalid("copy_thread target has an empty thread id"));
        }
        check_ident("copy_thread target", target)?;
        if source == target || source.is_empty() || !storable(source) {
            return Ok(());
        }
        sqlx::query(sql::COPY_THREAD)
            .bind(source)
            .bind(target)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(())
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        let threads: Vec<&str> = thread_ids
            .iter()
            .map(String::as_str)
            .filter(|t| !t.is_empty() && storable(t))
            .collect();
        if threads.is_empty() {
            return Ok(());
        }
        let keep = strategy.keep_per_namespace();
        let query = if keep == 0 {
            sqlx::query(sql::PRUNE_ALL).bind(&threads)
        } else {
            sqlx::query(sql::PRUNE_KEEP)
                .bind(&threads)
                .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        };
        query.execute(&self.pool).await.map_err(classify)?;
        Ok(())
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        let runs: Vec<&str> = run_ids
            .iter()
            .map(String::as_str)
            .filter(|r| !r.contains('\0'))
            .collect();
        if runs.is_empty() {
            return Ok(());
        }
        sqlx::query(sql::DELETE_FOR_RUNS)
            .bind(&runs)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(())
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_lease_request(thread_id, holder, ttl)?;
        check_ident("thread_id", thread_id)?;
        check_ident("lease holder", holder)?;
        let token: Option<i64> = sqlx::query_scalar(sql::ACQUIRE_LEASE)
            .bind(thread_id)
            .bind(holder)
            .bind(micros(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?;
        Ok(token.map(|token| Lease {
            thread_id: thread_id.to_owned(),
            holder: holder.to_owned(),
            token: token_u64(token),
            ttl,
        }))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_lease_request(&lease.thread_id, &lease.holder, ttl)?;
        check_ident("thread_id", &lease.thread_id)?;
        check_ident("lease holder", &lease.holder)?;
        let row = sqlx::query(sql::RENEW_LEASE)
            .bind(&lease.thread_id)
            .bind(&lease.holder)
            .bind(token_i64(lease.token))
            .bind(micros(ttl))
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        let renewed: bool = row.try_get("renewed").map_err(classify)?;
        if renewed {
            return Ok(Lease {
                ttl,
                ..lease.clone()
            });
        }
        let current: i64 = row.try_get("current").map_err(classify)?;
        Err(Error::StaleFence {
            scope: format!("thread {:?}", lease.thread_id),
            token: lease.token,
            current: token_u64(current),
        })
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        if !storable(&lease.thread_id) || !storable(&lease.holder) {
            return Ok(());
        }
        sqlx::query(sql::RELEASE_LEASE)
            .bind(&lease.thread_id)
            .bind(&lease.holder)
            .bind(token_i64(lease.token))
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(())
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        validate_claim_request(key, ttl)?;
        check_ident("ledger key", key)?;
        // A concurrent claimer may commit between the two statements; a few rounds settle it.
        for _ in 0..8 {
            let acquired: Option<i64> = sqlx::query_scalar(sql::CLAIM)
                .bind(key)
                .bind(micros(ttl))
                .fetch_optional(&self.pool)
                .await
                .map_err(classify)?;
            if let Some(token) = acquired {
                return Ok(Claim::Acquired {
                    token: token_u64(token),
                });
            }
            let state = sqlx::query(sql::CLAIM_STATE)
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(classify)?;
            let Some(row) = state else { continue };
            let status: String = row.try_get("state").map_err(classify)?;
            match status.as_str() {
                "completed" => {
                    let ty: Option<String> = row.try_get("outcome_type").map_err(classify)?;
                    let outcome: Option<Vec<u8>> = row.try_get("outcome").map_err(classify)?;
                    return Ok(Claim::Completed {
                        outcome: TypedValue::new(
                            ValueType::from(ty.as_deref().unwrap_or("null")),
                            outcome.unwrap_or_default(),
                        ),
                    });
                }
                "pending" => {
                    let us: i64 = row.try_get("expires_in_us").map_err(classify)?;
                    if us > 0 {
                        return Ok(Claim::Pending {
                            expires_in: Duration::from_micros(u64::try_from(us).unwrap_or(0)),
                        });
                    }
                }
                _ => {}
            }
        }
        Err(Error::Unavailable {
            backend: "postgres",
            source: format!("ledger key {key:?} kept changing state while being claimed").into(),
        })
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        check_ident("ledger key", key)?;
        let row = sqlx::query(sql::COMPLETE_CLAIM)
            .bind(key)
            .bind(token_i64(token))
            .bind(outcome.type_tag.as_str())
            .bind(&outcome.bytes[..])
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        let current: i64 = row.try_get("token").map_err(classify)?;
        let state: String = row.try_get("state").map_err(classify)?;
        if token_u64(current) == token && state == "completed" {
            return Ok(());
        }
        Err(Error::StaleFence {
            scope: format!(
                "ledger key {key:?}{}",
                if state == "abandoned" {
                    " (abandoned)"
                } else {
                    ""
                }
            ),
            token,
            current: token_u64(current),
        })
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        if !storable(key) {
            return Ok(());
        }
        sqlx::query(sql::ABANDON_CLAIM)
            .bind(key)
            .bind(token_i64(token))
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(())
    }
}
