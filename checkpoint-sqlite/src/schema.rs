//! The schema, as versioned migrations applied by `setup`, recorded in
//! `checkpoint_rs_migrations`.
//!
//! Every write is one `INSERT` of one row into a view (`checkpoint_put`,
//! `checkpoint_put_writes`) whose `INSTEAD OF` trigger carries all of it out: the expiry of a
//! thread whose TTL ran out, the fence check, the compare-and-set check, the values (a JSON
//! index of `(channel, version, type, offset, length)` over one concatenated blob), the
//! checkpoint, its metadata index entries, the TTL refresh. A statement is atomic in SQLite,
//! and a check that fails raises `ABORT`, which undoes everything the statement did: a put
//! is all or nothing, in one call to the database. Deletions go through the views
//! `checkpoint_forget` (one checkpoint and its index entries) and `checkpoint_forget_thread`.

use sqlx::SqliteConnection;

use crate::error::{SqliteError, SqliteResult};

/// The current time in milliseconds since the Unix epoch, as SQL (the machine's clock, which
/// every process sharing the file shares). Migrations and statements write `NOW_MS` for it.
pub(crate) const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// `sql` with every `NOW_MS` replaced by [`NOW_MS`].
pub(crate) fn with_now(sql: &str) -> String {
    sql.replace("NOW_MS", NOW_MS)
}

/// The migrations, by version (their position). Never edit one that was released: append.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    -- JSON: {v, id, ts, cv: {channel: version key}, vs: versions seen, uc: updated channels}
    checkpoint TEXT NOT NULL,
    -- JSON, exactly as put
    metadata TEXT NOT NULL,
    -- JSON array: this checkpoint's entries in checkpoint_metadata
    entries TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
-- Newest first across the namespaces of a thread, and across every thread.
CREATE INDEX checkpoints_thread_order ON checkpoints (thread_id, checkpoint_id, checkpoint_ns);
CREATE INDEX checkpoints_global_order ON checkpoints (checkpoint_id, thread_id, checkpoint_ns);

-- One row per stored channel version (a version is stored once; type NULL: removed).
CREATE TABLE checkpoint_blobs (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    channel TEXT NOT NULL,
    version TEXT NOT NULL,
    type TEXT,
    blob BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);

CREATE TABLE checkpoint_writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    task_path TEXT NOT NULL,
    channel TEXT NOT NULL,
    type TEXT NOT NULL,
    blob BLOB NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

-- The metadata filter index: one entry per top-level metadata key (see keys::entry). A
-- checkpoint's entries are listed in its `entries` column, so no second index is kept to
-- find them again.
CREATE TABLE checkpoint_metadata (
    entry TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    PRIMARY KEY (entry, checkpoint_id, thread_id, checkpoint_ns)
) WITHOUT ROWID;

-- TTL of threads that have one: ttl_ms NULL (the saver's default), 0 (pinned) or > 0.
CREATE TABLE checkpoint_threads (
    thread_id TEXT PRIMARY KEY,
    ttl_ms INTEGER,
    expires_at_ms INTEGER
);
CREATE INDEX checkpoint_threads_expiry ON checkpoint_threads (expires_at_ms);

CREATE TABLE checkpoint_leases (
    thread_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);

CREATE TABLE checkpoint_ledger (
    key TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'abandoned', 'completed')),
    expires_at_ms INTEGER,
    outcome_type TEXT,
    outcome BLOB
);

-- Deletes a checkpoint and its metadata index entries (not its writes or values: those
-- belong to the namespace and are collected by whoever deletes checkpoints).
CREATE VIEW checkpoint_forget (thread_id, checkpoint_ns, checkpoint_id) AS
    SELECT NULL, NULL, NULL WHERE 0;
CREATE TRIGGER checkpoint_forget INSTEAD OF INSERT ON checkpoint_forget
BEGIN
    DELETE FROM checkpoint_metadata
    WHERE entry IN (
        SELECT j.value FROM checkpoints c, json_each(c.entries) j
        WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = NEW.checkpoint_ns
          AND c.checkpoint_id = NEW.checkpoint_id)
      AND checkpoint_id = NEW.checkpoint_id AND thread_id = NEW.thread_id
      AND checkpoint_ns = NEW.checkpoint_ns;
    DELETE FROM checkpoints
    WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
      AND checkpoint_id = NEW.checkpoint_id;
END;

-- Deletes every row of a thread (not its lease).
CREATE VIEW checkpoint_forget_thread (thread_id) AS SELECT NULL WHERE 0;
CREATE TRIGGER checkpoint_forget_thread INSTEAD OF INSERT ON checkpoint_forget_thread
BEGIN
    INSERT INTO checkpoint_forget
    SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints
    WHERE thread_id = NEW.thread_id;
    DELETE FROM checkpoint_writes WHERE thread_id = NEW.thread_id;
    DELETE FROM checkpoint_blobs WHERE thread_id = NEW.thread_id;
    DELETE FROM checkpoint_threads WHERE thread_id = NEW.thread_id;
END;

-- A thread whose TTL ran out is invisible already; before it is written again, its old data
-- goes, so a write never brings it back.
CREATE VIEW checkpoint_expire (thread_id) AS SELECT NULL WHERE 0;
CREATE TRIGGER checkpoint_expire INSTEAD OF INSERT ON checkpoint_expire
BEGIN
    INSERT INTO checkpoint_forget_thread
    SELECT NEW.thread_id WHERE EXISTS (
        SELECT 1 FROM checkpoint_threads
        WHERE thread_id = NEW.thread_id AND expires_at_ms <= NOW_MS);
END;

-- The thread was written: its TTL starts again. default_ttl_ms: the saver's default (NULL:
-- none). A per-thread TTL (ttl_ms > 0) wins; a pinned thread (ttl_ms = 0) never expires.
CREATE VIEW checkpoint_touch (thread_id, default_ttl_ms) AS SELECT NULL, NULL WHERE 0;
CREATE TRIGGER checkpoint_touch INSTEAD OF INSERT ON checkpoint_touch
BEGIN
    INSERT INTO checkpoint_threads (thread_id, ttl_ms, expires_at_ms)
    SELECT NEW.thread_id, NULL, NOW_MS + NEW.default_ttl_ms WHERE NEW.default_ttl_ms IS NOT NULL
    ON CONFLICT (thread_id) DO UPDATE SET expires_at_ms = CASE
        WHEN ttl_ms = 0 THEN NULL
        WHEN ttl_ms > 0 THEN NOW_MS + ttl_ms
        ELSE excluded.expires_at_ms END;
    UPDATE checkpoint_threads SET expires_at_ms = NOW_MS + ttl_ms
    WHERE NEW.default_ttl_ms IS NULL AND thread_id = NEW.thread_id AND ttl_ms > 0;
END;

-- A write's fence: the token must be the thread's current lease token.
CREATE VIEW checkpoint_fence (thread_id, token) AS SELECT NULL, NULL WHERE 0;
CREATE TRIGGER checkpoint_fence INSTEAD OF INSERT ON checkpoint_fence
BEGIN
    SELECT RAISE(ABORT, 'checkpoint-rs: stale fence')
    WHERE NEW.token IS NOT NULL AND NEW.token IS NOT coalesce(
        (SELECT token FROM checkpoint_leases WHERE thread_id = NEW.thread_id), 0);
END;

-- A put. compare_and_set: the parent must be the namespace's head, or this put repeats the
-- winning one (same id, same parent, still the head). value_index: JSON array of
-- [channel, version key, type (null: removed), offset (1-based), length] into value_bytes
-- (`substr` of an empty blob is NULL, hence the `coalesce`); a
-- version already stored keeps its first value. entries: JSON array of metadata index
-- entries. A re-put replaces the checkpoint and its entries and keeps its pending writes.
CREATE VIEW checkpoint_put (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
    compare_and_set, fence, checkpoint, metadata, entries, value_index, value_bytes,
    default_ttl_ms) AS
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;
CREATE TRIGGER checkpoint_put INSTEAD OF INSERT ON checkpoint_put
BEGIN
    INSERT INTO checkpoint_expire VALUES (NEW.thread_id);
    INSERT INTO checkpoint_fence VALUES (NEW.thread_id, NEW.fence);
    SELECT RAISE(ABORT, 'checkpoint-rs: conflict')
    WHERE NEW.compare_and_set AND NOT EXISTS (
        SELECT 1 FROM (
            SELECT max(checkpoint_id) AS head FROM checkpoints
            WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        ) h
        WHERE h.head IS NEW.parent_checkpoint_id
           OR (h.head = NEW.checkpoint_id AND EXISTS (
                SELECT 1 FROM checkpoints
                WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
                  AND checkpoint_id = NEW.checkpoint_id
                  AND parent_checkpoint_id IS NEW.parent_checkpoint_id))
    );
    INSERT OR IGNORE INTO checkpoint_blobs
        (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT NEW.thread_id, NEW.checkpoint_ns, j.value ->> 0, j.value ->> 1, j.value ->> 2,
           CASE WHEN j.value ->> 2 IS NULL THEN NULL
                ELSE coalesce(substr(NEW.value_bytes, j.value ->> 3, j.value ->> 4), X'') END
    FROM json_each(NEW.value_index) j;
    DELETE FROM checkpoint_metadata
    WHERE entry IN (
        SELECT j.value FROM checkpoints c, json_each(c.entries) j
        WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = NEW.checkpoint_ns
          AND c.checkpoint_id = NEW.checkpoint_id)
      AND checkpoint_id = NEW.checkpoint_id AND thread_id = NEW.thread_id
      AND checkpoint_ns = NEW.checkpoint_ns;
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
        checkpoint, metadata, entries)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.parent_checkpoint_id,
        NEW.checkpoint, NEW.metadata, NEW.entries)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
        parent_checkpoint_id = excluded.parent_checkpoint_id,
        checkpoint = excluded.checkpoint,
        metadata = excluded.metadata,
        entries = excluded.entries;
    INSERT OR IGNORE INTO checkpoint_metadata (entry, checkpoint_id, thread_id, checkpoint_ns)
    SELECT j.value, NEW.checkpoint_id, NEW.thread_id, NEW.checkpoint_ns
    FROM json_each(NEW.entries) j;
    INSERT INTO checkpoint_touch VALUES (NEW.thread_id, NEW.default_ttl_ms);
END;

-- A put_writes call. write_index: JSON array of [index, channel, type, offset (1-based),
-- length] into write_bytes, applied in order. replace: the call is made only of
-- special-channel writes, which replace earlier ones (the last of a call wins); any other
-- call keeps the first write of an index.
CREATE VIEW checkpoint_put_writes (thread_id, checkpoint_ns, checkpoint_id, task_id,
    task_path, replace, fence, write_index, write_bytes, default_ttl_ms) AS
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;
CREATE TRIGGER checkpoint_put_writes INSTEAD OF INSERT ON checkpoint_put_writes
BEGIN
    INSERT INTO checkpoint_expire VALUES (NEW.thread_id);
    INSERT INTO checkpoint_fence VALUES (NEW.thread_id, NEW.fence);
    INSERT OR REPLACE INTO checkpoint_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, j.value ->> 0,
           NEW.task_path, j.value ->> 1, j.value ->> 2,
           coalesce(substr(NEW.write_bytes, j.value ->> 3, j.value ->> 4), X'')
    FROM json_each(NEW.write_index) j WHERE NEW.replace;
    INSERT OR IGNORE INTO checkpoint_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
    SELECT NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.task_id, j.value ->> 0,
           NEW.task_path, j.value ->> 1, j.value ->> 2,
           coalesce(substr(NEW.write_bytes, j.value ->> 3, j.value ->> 4), X'')
    FROM json_each(NEW.write_index) j WHERE NOT NEW.replace;
    INSERT INTO checkpoint_touch VALUES (NEW.thread_id, NEW.default_ttl_ms);
END;
",
    "
-- Version 1: the same behaviour for less work per write. A trigger's WHEN clause is checked
-- before its program runs, so the expiry, fence and TTL steps of a write that has nothing to
-- expire, no fence and no TTL open no table. A re-put's old metadata index entries go in a
-- trigger on the checkpoint row's update rather than in a DELETE every put ran (an `IN`
-- over a subquery builds a temporary b-tree, whether or not the checkpoint existed).
DROP TRIGGER checkpoint_expire;
CREATE TRIGGER checkpoint_expire INSTEAD OF INSERT ON checkpoint_expire
WHEN EXISTS (SELECT 1 FROM checkpoint_threads
             WHERE thread_id = NEW.thread_id AND expires_at_ms <= NOW_MS)
BEGIN
    INSERT INTO checkpoint_forget_thread VALUES (NEW.thread_id);
END;

DROP TRIGGER checkpoint_fence;
CREATE TRIGGER checkpoint_fence INSTEAD OF INSERT ON checkpoint_fence
WHEN NEW.token IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'checkpoint-rs: stale fence')
    WHERE NEW.token IS NOT coalesce(
        (SELECT token FROM checkpoint_leases WHERE thread_id = NEW.thread_id), 0);
END;

-- Only a thread with a row here, or a saver with a default TTL, has a clock to restart.
DROP TRIGGER checkpoint_touch;
CREATE TRIGGER checkpoint_touch INSTEAD OF INSERT ON checkpoint_touch
WHEN NEW.default_ttl_ms IS NOT NULL
  OR EXISTS (SELECT 1 FROM checkpoint_threads WHERE thread_id = NEW.thread_id)
BEGIN
    INSERT INTO checkpoint_threads (thread_id, ttl_ms, expires_at_ms)
    SELECT NEW.thread_id, NULL, NOW_MS + NEW.default_ttl_ms WHERE NEW.default_ttl_ms IS NOT NULL
    ON CONFLICT (thread_id) DO UPDATE SET expires_at_ms = CASE
        WHEN ttl_ms = 0 THEN NULL
        WHEN ttl_ms > 0 THEN NOW_MS + ttl_ms
        ELSE excluded.expires_at_ms END;
    UPDATE checkpoint_threads SET expires_at_ms = NOW_MS + ttl_ms
    WHERE NEW.default_ttl_ms IS NULL AND thread_id = NEW.thread_id AND ttl_ms > 0;
END;

-- A checkpoint row's entries change (a re-put): its old index entries go.
CREATE TRIGGER checkpoint_entries AFTER UPDATE OF entries ON checkpoints
BEGIN
    DELETE FROM checkpoint_metadata
    WHERE entry IN (SELECT value FROM json_each(OLD.entries))
      AND checkpoint_id = OLD.checkpoint_id AND thread_id = OLD.thread_id
      AND checkpoint_ns = OLD.checkpoint_ns;
END;

-- A put, as in version 0 without its DELETE of the old index entries (see
-- checkpoint_entries).
DROP TRIGGER checkpoint_put;
CREATE TRIGGER checkpoint_put INSTEAD OF INSERT ON checkpoint_put
BEGIN
    INSERT INTO checkpoint_expire VALUES (NEW.thread_id);
    INSERT INTO checkpoint_fence VALUES (NEW.thread_id, NEW.fence);
    SELECT RAISE(ABORT, 'checkpoint-rs: conflict')
    WHERE NEW.compare_and_set AND NOT EXISTS (
        SELECT 1 FROM (
            SELECT max(checkpoint_id) AS head FROM checkpoints
            WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
        ) h
        WHERE h.head IS NEW.parent_checkpoint_id
           OR (h.head = NEW.checkpoint_id AND EXISTS (
                SELECT 1 FROM checkpoints
                WHERE thread_id = NEW.thread_id AND checkpoint_ns = NEW.checkpoint_ns
                  AND checkpoint_id = NEW.checkpoint_id
                  AND parent_checkpoint_id IS NEW.parent_checkpoint_id))
    );
    INSERT OR IGNORE INTO checkpoint_blobs
        (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT NEW.thread_id, NEW.checkpoint_ns, j.value ->> 0, j.value ->> 1, j.value ->> 2,
           CASE WHEN j.value ->> 2 IS NULL THEN NULL
                ELSE coalesce(substr(NEW.value_bytes, j.value ->> 3, j.value ->> 4), X'') END
    FROM json_each(NEW.value_index) j;
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
        checkpoint, metadata, entries)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id, NEW.parent_checkpoint_id,
        NEW.checkpoint, NEW.metadata, NEW.entries)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
        parent_checkpoint_id = excluded.parent_checkpoint_id,
        checkpoint = excluded.checkpoint,
        metadata = excluded.metadata,
        entries = excluded.entries;
    INSERT OR IGNORE INTO checkpoint_metadata (entry, checkpoint_id, thread_id, checkpoint_ns)
    SELECT j.value, NEW.checkpoint_id, NEW.thread_id, NEW.checkpoint_ns
    FROM json_each(NEW.entries) j;
    INSERT INTO checkpoint_touch VALUES (NEW.thread_id, NEW.default_ttl_ms);
END;
",
];

/// Applies every migration not yet recorded, in one `IMMEDIATE` transaction (so concurrent
/// `setup` calls from several processes serialize), and sets the file to WAL mode.
pub(crate) async fn setup(conn: &mut SqliteConnection) -> SqliteResult<()> {
    use sqlx::{Connection, Executor};
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    // `Executor::execute` rather than `RawSql::execute`: the latter's future is not `Send`
    // for every caller's lifetime (rustc's higher-ranked auto-trait limitation).
    tx.execute(sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS checkpoint_rs_migrations (
            v INTEGER PRIMARY KEY,
            applied_at TEXT NOT NULL DEFAULT (datetime('now'))
        )",
    ))
    .await?;
    let applied: Option<i64> = sqlx::query_scalar("SELECT max(v) FROM checkpoint_rs_migrations")
        .fetch_one(&mut *tx)
        .await?;
    // Reads pack blobs into text aggregates (see `sql`), which keeps their bytes only in a
    // UTF-8 database: the encoding of every database this crate creates.
    let encoding: String = sqlx::query_scalar("SELECT encoding FROM pragma_encoding")
        .fetch_one(&mut *tx)
        .await?;
    if encoding != "UTF-8" {
        return Err(SqliteError::Unsupported(format!(
            "the database's text encoding is {encoding}; checkpoint-sqlite needs UTF-8"
        )));
    }
    let known = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX) - 1;
    if let Some(found) = applied.filter(|v| *v > known) {
        // Rolled back on drop: nothing is changed in a database from the future.
        return Err(SqliteError::SchemaTooNew { found, known });
    }
    let start = applied.map_or(0, |v| v + 1);
    for (v, step) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(start).unwrap_or(usize::MAX))
    {
        let step = with_now(step);
        tx.execute(sqlx::raw_sql(&step)).await?;
        sqlx::query("INSERT INTO checkpoint_rs_migrations (v) VALUES (?1)")
            .bind(i64::try_from(v).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor, SqliteConnection};

    use super::*;

    /// A put through the `checkpoint_put` view of whatever version the file has.
    async fn put(conn: &mut SqliteConnection, id: &str, entries: &str) {
        sqlx::query(
            "INSERT INTO checkpoint_put VALUES ('t', '', ?1, NULL, 0, NULL, '{\"cv\":{}}', \
             '{}', ?2, '[]', X'', NULL)",
        )
        .bind(id)
        .bind(entries)
        .execute(&mut *conn)
        .await
        .unwrap();
    }

    async fn index(conn: &mut SqliteConnection) -> Vec<(String, String)> {
        sqlx::query_as("SELECT entry, checkpoint_id FROM checkpoint_metadata ORDER BY 1, 2")
            .fetch_all(&mut *conn)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_version_0_database_migrates_and_keeps_its_index_right() {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        conn.execute(sqlx::raw_sql(
            "CREATE TABLE checkpoint_rs_migrations (
                v INTEGER PRIMARY KEY,
                applied_at TEXT NOT NULL DEFAULT (datetime('now'))
            )",
        ))
        .await
        .unwrap();
        conn.execute(sqlx::raw_sql(&with_now(MIGRATIONS[0])))
            .await
            .unwrap();
        conn.execute("INSERT INTO checkpoint_rs_migrations (v) VALUES (0)")
            .await
            .unwrap();
        put(&mut conn, "a", r#"["\"k\"1"]"#).await;

        setup(&mut conn).await.unwrap();
        let versions: Vec<i64> = sqlx::query_scalar("SELECT v FROM checkpoint_rs_migrations")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        assert_eq!(versions, [0, 1]);
        assert_eq!(index(&mut conn).await, [(r#""k"1"#.into(), "a".into())]);

        // A re-put replaces the entries of the checkpoint written before the migration, and
        // leaves the other checkpoint's alone.
        put(&mut conn, "b", r#"["\"k\"1"]"#).await;
        put(&mut conn, "a", r#"["\"k\"2", "\"x\"0"]"#).await;
        assert_eq!(
            index(&mut conn).await,
            [
                (r#""k"1"#.into(), "b".into()),
                (r#""k"2"#.into(), "a".into()),
                (r#""x"0"#.into(), "a".into()),
            ]
        );
        // The same entries again: still indexed once each; and a checkpoint first written
        // after the migration is put again.
        put(&mut conn, "a", r#"["\"k\"2", "\"x\"0"]"#).await;
        assert_eq!(index(&mut conn).await.len(), 3);
        put(&mut conn, "b", r#"["\"y\"1"]"#).await;
        assert_eq!(
            index(&mut conn).await,
            [
                (r#""k"2"#.into(), "a".into()),
                (r#""x"0"#.into(), "a".into()),
                (r#""y"1"#.into(), "b".into()),
            ]
        );
        // Setup again does nothing.
        setup(&mut conn).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM checkpoint_rs_migrations")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 2);
    }
}
