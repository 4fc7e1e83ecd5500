//! Schema: LangGraph's migrations, replayed exactly, plus this crate's own objects, and
//! `setup`, which applies them.
//!
//! LangGraph's PostgreSQL saver numbers its migrations by position and records them in
//! `checkpoint_migrations`. We apply the same statements under the same numbers (creating
//! its indexes without `CONCURRENTLY`, since our setup runs in one transaction), so a Python
//! service and a Rust service can share the tables and either may run its setup first. This
//! crate's own objects (lease, ledger and thread-TTL tables, list and filter indexes, the
//! compare-and-set helper function) are versioned separately in `checkpoint_rs_migrations`,
//! so they never shift LangGraph's numbering.

use crate::config::{check_search_path, quoted_schema};
use crate::core::Inner;
use crate::error::{PgError, PgResult};
use crate::sql;

/// Applies every migration not yet recorded, in one transaction serialized by an advisory
/// lock (see `PostgresSaver::setup`), without the saver's `statement_timeout`.
pub(crate) async fn setup(inner: &Inner) -> PgResult<()> {
    // Migrations of a large table may take longer than any call's limit.
    let mut tx = inner.begin_unbounded().await?;
    let lock_name = format!(
        "checkpoint-rs setup {}",
        inner.schema.as_deref().unwrap_or("")
    );
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(&lock_name)
        .execute(tx.conn())
        .await?;
    if let Some(schema) = &inner.schema {
        // A lazily connected saver's first check (see `connect`).
        check_search_path(tx.conn(), schema).await?;
        let create = format!("CREATE SCHEMA IF NOT EXISTS {}", quoted_schema(schema));
        sqlx::query(&create).execute(tx.conn()).await?;
    }
    for (steps, version, record, ours) in [
        (
            LANGGRAPH,
            sql::LANGGRAPH_VERSION,
            sql::LANGGRAPH_RECORD,
            false,
        ),
        (OWN, sql::OWN_VERSION, sql::OWN_RECORD, true),
    ] {
        sqlx::Executor::execute(tx.conn(), steps[0]).await?;
        let applied: Option<i32> = sqlx::query_scalar(version).fetch_one(tx.conn()).await?;
        if ours {
            // Rolled back on drop: nothing is changed in a schema from the future.
            check_own_version(applied)?;
        }
        let start = applied.map_or(0, |v| v + 1);
        for (v, step) in steps
            .iter()
            .enumerate()
            .skip(usize::try_from(start).unwrap_or(0))
        {
            sqlx::Executor::execute(tx.conn(), *step).await?;
            sqlx::query(record)
                .bind(i32::try_from(v).unwrap_or(i32::MAX))
                .execute(tx.conn())
                .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Refuses a schema whose own objects (`checkpoint_rs_migrations`) are at a migration this
/// build does not know. LangGraph's table of migrations is not checked: a newer LangGraph
/// may add migrations to the tables both share, which this crate reads as before.
pub(crate) fn check_own_version(applied: Option<i32>) -> PgResult<()> {
    let known = i32::try_from(OWN.len()).unwrap_or(i32::MAX) - 1;
    match applied {
        Some(found) if found > known => Err(PgError::SchemaTooNew { found, known }),
        _ => Ok(()),
    }
}

/// The migration of this crate's objects in the schema a connection uses, or `None` when
/// they were never set up there.
pub(crate) async fn own_version<'c, E>(conn: E) -> PgResult<Option<i32>>
where
    E: sqlx::PgExecutor<'c>,
{
    match sqlx::query_scalar(sql::OWN_VERSION).fetch_one(conn).await {
        Ok(applied) => Ok(applied),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// LangGraph's migrations (langgraph-checkpoint-postgres 3.x), by version.
pub(crate) const LANGGRAPH: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS checkpoint_migrations (v INTEGER PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS checkpoints (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL,
        parent_checkpoint_id TEXT,
        type TEXT,
        checkpoint JSONB NOT NULL,
        metadata JSONB NOT NULL DEFAULT '{}',
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    )",
    "CREATE TABLE IF NOT EXISTS checkpoint_blobs (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        channel TEXT NOT NULL,
        version TEXT NOT NULL,
        type TEXT NOT NULL,
        blob BYTEA,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
    )",
    "CREATE TABLE IF NOT EXISTS checkpoint_writes (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        channel TEXT NOT NULL,
        type TEXT,
        blob BYTEA NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    )",
    "ALTER TABLE checkpoint_blobs ALTER COLUMN blob DROP NOT NULL",
    "SELECT 1",
    "CREATE INDEX IF NOT EXISTS checkpoints_thread_id_idx ON checkpoints(thread_id)",
    "CREATE INDEX IF NOT EXISTS checkpoint_blobs_thread_id_idx ON checkpoint_blobs(thread_id)",
    "CREATE INDEX IF NOT EXISTS checkpoint_writes_thread_id_idx ON checkpoint_writes(thread_id)",
    "ALTER TABLE checkpoint_writes ADD COLUMN IF NOT EXISTS task_path TEXT NOT NULL DEFAULT ''",
];

/// This crate's own objects, by version (recorded in `checkpoint_rs_migrations`).
pub(crate) const OWN: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS checkpoint_rs_migrations (v INTEGER PRIMARY KEY)",
    // Thread leases: the token only ever grows; rows outlive delete_thread.
    "CREATE TABLE IF NOT EXISTS checkpoint_leases (
        thread_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    )",
    // The idempotency ledger.
    "CREATE TABLE IF NOT EXISTS checkpoint_ledger (
        key TEXT PRIMARY KEY,
        token BIGINT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'abandoned', 'completed')),
        expires_at TIMESTAMPTZ NOT NULL,
        outcome_type TEXT,
        outcome BYTEA,
        updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )",
    // Metadata containment filters (list with a filter, global or per thread).
    "CREATE INDEX IF NOT EXISTS checkpoints_rs_metadata_idx ON checkpoints USING gin (metadata jsonb_path_ops)",
    // Newest-first listing of one thread across namespaces, and of every thread.
    "CREATE INDEX IF NOT EXISTS checkpoints_rs_thread_order_idx ON checkpoints (thread_id, checkpoint_id, checkpoint_ns)",
    "CREATE INDEX IF NOT EXISTS checkpoints_rs_global_order_idx ON checkpoints (checkpoint_id, thread_id, checkpoint_ns)",
    // delete_for_runs.
    "CREATE INDEX IF NOT EXISTS checkpoints_rs_run_id_idx ON checkpoints ((metadata ->> 'run_id'))",
    // Compare-and-set: serialize the puts of one (thread, namespace) and read the head with a
    // snapshot taken after the lock (each statement of a VOLATILE function gets a fresh
    // snapshot under READ COMMITTED), so the loser of a race sees the winner's commit.
    "CREATE OR REPLACE FUNCTION checkpoint_rs_locked_head(p_thread TEXT, p_ns TEXT) RETURNS TEXT
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '/' || p_thread), hashtext(p_ns));
            RETURN (SELECT max(checkpoint_id) FROM checkpoints
                    WHERE thread_id = p_thread AND checkpoint_ns = p_ns);
        END
    $$",
    // Large values are compressed with lz4 instead of pglz (docs/design/postgres.md):
    // a catalog-only change that applies to values written from now on (older ones stay
    // readable as they are). Skipped where the server cannot do it: before PostgreSQL 14
    // (no SET COMPRESSION) or built without lz4. The tables are altered in the order reads
    // take them (checkpoints, then values, then writes), so a read running beside the
    // migration waits for it rather than deadlocking with it.
    "DO $$
    BEGIN
        EXECUTE 'ALTER TABLE checkpoints ALTER COLUMN checkpoint SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE checkpoint_blobs ALTER COLUMN blob SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE checkpoint_writes ALTER COLUMN blob SET COMPRESSION lz4';
    EXCEPTION WHEN feature_not_supported OR syntax_error THEN
        NULL;
    END
    $$",
    // Thread retention: a row for each thread with a TTL. ttl_ms NULL: the saver's default;
    // 0: pinned; > 0: the thread's own TTL. expires_at NULL: never.
    "CREATE TABLE IF NOT EXISTS checkpoint_threads (
        thread_id TEXT PRIMARY KEY,
        ttl_ms BIGINT CHECK (ttl_ms >= 0),
        expires_at TIMESTAMPTZ
    )",
    "CREATE INDEX IF NOT EXISTS checkpoint_threads_expiry_idx ON checkpoint_threads (expires_at)",
];
