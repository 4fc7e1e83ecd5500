//! The SQL of reads, maintenance and coordination, in one place. Statements write `NOW_MS`
//! for the current time (see [`crate::schema::NOW_MS`]); every caller value is a bound
//! parameter.

use std::sync::LazyLock;

use sqlx::SqliteConnection;

use crate::schema::with_now;

/// A statement with `NOW_MS` substituted, built once.
macro_rules! statement {
    ($(#[$doc:meta])* $name:ident = $sql:expr) => {
        $(#[$doc])*
        pub(crate) static $name: LazyLock<String> = LazyLock::new(|| with_now($sql));
    };
}

/// The condition that a checkpoint row `c` belongs to a thread whose TTL has not run out.
pub(crate) const LIVE: &str = "NOT EXISTS (SELECT 1 FROM checkpoint_threads t \
     WHERE t.thread_id = c.thread_id AND t.expires_at_ms <= NOW_MS)";

// Reads return a row per checkpoint and a row per value (see `codec::decode_tuples`). Every
// row costs the driver a hand-off between its worker thread and the caller's task, so a
// checkpoint's pending writes, which are many and small, travel in its row: a JSON index of
// their fields and lengths, and their bytes concatenated by `group_concat` (in a UTF-8
// database a blob's bytes pass through text unchanged; `setup` refuses any other encoding).
// Values stay rows of their own: packing them the same way copies each large value three
// more times inside SQLite, which measured slower than the hand-offs it saves (a
// `get_tuple` of the standard workload: 0.108 ms of SQL instead of 0.056 ms).
//
// `CROSS JOIN` fixes the join order (SQLite never reorders it): the few materialized rows
// drive primary-key lookups. Left to itself, the planner has no statistics for a
// materialized CTE and may scan the whole value or write table instead (measured: 12 ms
// instead of 0.1 ms for a `get_tuple` after the standard workload's W1).

/// The pending writes of checkpoint `c`: their index (`[task_id, idx, task_path, channel,
/// type, length]`, in `(task_id, idx)` order) and their bytes.
const WRITES: &str = "
(SELECT json_group_array(json_array(w.task_id, w.idx, w.task_path, w.channel, w.type,
        length(w.blob)))
 FROM checkpoint_writes w
 WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
   AND w.checkpoint_id = c.checkpoint_id) AS writes_index,
(SELECT CAST(group_concat(w.blob, '') AS BLOB)
 FROM checkpoint_writes w
 WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
   AND w.checkpoint_id = c.checkpoint_id) AS writes_bytes";

/// What follows the `WITH k AS NOT MATERIALIZED (...)` of one checkpoint (see
/// [`one_tuple`]): the checkpoint's row with its writes if its thread is live, then a row
/// per value. The one row of `k` is looked up again by each half of the `UNION ALL` (two
/// index probes) rather than materialized: a materialized CTE is a temporary b-tree that
/// SQLite opens, with its own pager and page buffers, at every execution (5 µs of a
/// `get_tuple`'s 50 µs of SQL). Only the first half checks that the thread is live: the
/// clock is read again at each step of a statement, so a TTL running out between the two
/// halves must not leave the checkpoint's row without its values (value rows without
/// their checkpoint's row are ignored).
const ONE_TUPLE_TAIL: &str = "
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint,
       c.metadata, {WRITES}, NULL, NULL, NULL, NULL
FROM k c WHERE {LIVE}
UNION ALL
SELECT b.thread_id, b.checkpoint_ns, NULL, NULL, NULL, NULL, NULL, NULL, b.channel, b.version,
       b.type, b.blob
FROM k c CROSS JOIN json_each(c.checkpoint, '$.cv') j CROSS JOIN checkpoint_blobs b
  ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
 AND b.channel = j.key AND b.version = j.value";

/// The tuple query of the one checkpoint of `checkpoints c` that `filter` (a `WHERE`
/// clause, `ORDER BY` and `LIMIT` included) selects; see [`ONE_TUPLE_TAIL`].
fn one_tuple(filter: &str) -> String {
    format!(
        "WITH k AS NOT MATERIALIZED (SELECT {CHECKPOINT_COLUMNS} FROM checkpoints c {filter}){}",
        ONE_TUPLE_TAIL
            .replace("{WRITES}", WRITES)
            .replace("{LIVE}", LIVE)
    )
}

/// What follows a `WITH c AS MATERIALIZED (...)` of a page of checkpoints: a row per
/// checkpoint with its writes, then a row per distinct value the page names.
pub(crate) static TUPLE_TAIL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "
, v AS MATERIALIZED (
    SELECT DISTINCT c.thread_id, c.checkpoint_ns, j.key AS channel, j.value AS version
    FROM c, json_each(c.checkpoint, '$.cv') j
)
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint,
       c.metadata, {WRITES}, NULL, NULL, NULL, NULL
FROM c
UNION ALL
SELECT b.thread_id, b.checkpoint_ns, NULL, NULL, NULL, NULL, NULL, NULL, b.channel, b.version,
       b.type, b.blob
FROM v CROSS JOIN checkpoint_blobs b
  ON b.thread_id = v.thread_id AND b.checkpoint_ns = v.checkpoint_ns
 AND b.channel = v.channel AND b.version = v.version"
    )
});

/// The checkpoint columns a tuple query selects into `c`.
pub(crate) const CHECKPOINT_COLUMNS: &str = "c.thread_id, c.checkpoint_ns, c.checkpoint_id, \
     c.parent_checkpoint_id, c.checkpoint, c.metadata";

statement! {
    /// The latest checkpoint of `(?1 thread, ?2 namespace)`, whole.
    GET_LATEST = &one_tuple(
        "WHERE c.thread_id = ?1 AND c.checkpoint_ns = ?2 ORDER BY c.checkpoint_id DESC LIMIT 1"
    )
}

statement! {
    /// Checkpoint `?3` of `(?1 thread, ?2 namespace)`, whole.
    GET_BY_ID = &one_tuple(
        "WHERE c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id = ?3"
    )
}

/// A put: one row of the view `checkpoint_put` (see the `schema` module), its columns in
/// order.
pub(crate) const PUT: &str = "INSERT INTO checkpoint_put VALUES \
     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// A put_writes call: one row of the view `checkpoint_put_writes`.
pub(crate) const PUT_WRITES: &str =
    "INSERT INTO checkpoint_put_writes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// Restarts the TTL of thread `?1` (`?2`: the saver's default TTL in ms, or NULL), as a
/// write does.
pub(crate) const TOUCH: &str = "INSERT INTO checkpoint_touch VALUES (?1, ?2)";

statement! {
    /// The delta history (see `read::delta_channel_history`) of the channels `?4` (a JSON
    /// array of distinct names) for checkpoint `?3` (NULL: the latest) of `(?1 thread, ?2
    /// namespace)`, in one statement: per channel, a recursive walk up the parent links that
    /// stops at the first checkpoint storing the channel. A walk per channel, rather than one
    /// walk carrying the set of channels still open, keeps a step of the recursion to one
    /// primary-key lookup and one probe, with no JSON array rebuilt per step (for the
    /// standard workload's history, 0.114 ms of SQL instead of 0.133 ms). Rows: one `w` row
    /// packing every write (its fourth column a JSON index of `[depth, channel, task_path,
    /// task_id, idx, type, length]`, depth 0 being the target's parent, its last the bytes
    /// concatenated in the index's order, as a checkpoint's writes travel in a tuple query),
    /// then an `s` row per seed: kind, depth, channel, three NULLs, type and bytes.
    DELTA_HISTORY = &format!("
WITH RECURSIVE
target AS (
    SELECT c.parent_checkpoint_id AS parent FROM checkpoints c
    WHERE c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND {LIVE}
      AND c.checkpoint_id = coalesce(?3, (
          SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2))
),
chain(channel, id, parent, cp, depth, stored) AS (
    SELECT o.value, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, 0,
           {stored_root}
    FROM target CROSS JOIN json_each(?4) o CROSS JOIN checkpoints c
      ON c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id = target.parent
    UNION ALL
    SELECT chain.channel, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint,
           chain.depth + 1, {stored_step}
    FROM chain CROSS JOIN checkpoints c
      ON c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id = chain.parent
    -- Ids only decrease along parent links: the walk ends even in a damaged file.
    WHERE NOT chain.stored AND c.checkpoint_id < chain.id
)
SELECT 'w' AS kind, NULL, NULL,
       json_group_array(json_array(x.depth, x.channel, x.task_path, x.task_id, x.idx, x.type,
                                   length(x.blob))),
       NULL, NULL, NULL, CAST(group_concat(x.blob, '') AS BLOB)
FROM (
    SELECT chain.depth, w.channel, w.task_path, w.task_id, w.idx, w.type, w.blob
    FROM chain CROSS JOIN checkpoint_writes w
      ON w.thread_id = ?1 AND w.checkpoint_ns = ?2 AND w.checkpoint_id = chain.id
     AND w.channel = chain.channel
) AS x
UNION ALL
SELECT 's', chain.depth, b.channel, NULL, NULL, NULL, b.type, b.blob
FROM chain CROSS JOIN json_each(chain.cp, '$.cv') v ON v.key = chain.channel
CROSS JOIN checkpoint_blobs b
  ON b.thread_id = ?1 AND b.checkpoint_ns = ?2 AND b.channel = chain.channel
 AND b.version = v.value
WHERE chain.stored",
        stored_root = stored_at("o.value"),
        stored_step = stored_at("chain.channel"),
    )
}

/// Whether the channel named by the SQL expression `channel` has a stored value at
/// checkpoint row `c` (used inside [`DELTA_HISTORY`]).
fn stored_at(channel: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM json_each(c.checkpoint, '$.cv') v \
         CROSS JOIN checkpoint_blobs b ON b.thread_id = ?1 AND b.checkpoint_ns = ?2 \
         AND b.channel = v.key AND b.version = v.value \
         WHERE v.key = {channel} AND b.type IS NOT NULL)"
    )
}

/// The pending writes to `__pregel_tasks` of checkpoint `?3` of `(?1 thread, ?2
/// namespace)`: the sends of a child of a format before 4.
pub(crate) const PARENT_SENDS: &str = "SELECT task_id, idx, task_path, channel, type, blob
     FROM checkpoint_writes
     WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3
       AND channel = '__pregel_tasks'";

/// Deletes every row of thread `?1` (not its lease).
pub(crate) const DELETE_THREAD: &str = "INSERT INTO checkpoint_forget_thread VALUES (?1)";

/// The temporary tables of the deleting operations (on the writer's connection).
pub(crate) const DOOMED_TABLES: &str = "
CREATE TEMP TABLE IF NOT EXISTS doomed (
    thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TEMP TABLE IF NOT EXISTS touched (
    thread_id TEXT, checkpoint_ns TEXT, PRIMARY KEY (thread_id, checkpoint_ns));
CREATE TEMP TABLE IF NOT EXISTS live (
    thread_id TEXT, checkpoint_ns TEXT, channel TEXT, version TEXT,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version));
DELETE FROM temp.doomed;
DELETE FROM temp.touched;
DELETE FROM temp.live;";

/// Marks for deletion the checkpoints of thread `?1` beyond the newest `?2` of each namespace.
pub(crate) const DOOM_PRUNED: &str = "
INSERT INTO temp.doomed
SELECT ?1, checkpoint_ns, checkpoint_id FROM (
    SELECT checkpoint_ns, checkpoint_id,
           row_number() OVER (PARTITION BY checkpoint_ns ORDER BY checkpoint_id DESC) AS rn
    FROM checkpoints WHERE thread_id = ?1
) WHERE rn > ?2;";

/// Takes out of `temp.doomed` every checkpoint of thread `?1` that a checkpoint staying
/// needs for its delta channels (see `checkpoint_core::delta::needed_ancestors`): for each
/// channel a staying checkpoint needs history for (the keys of its
/// `counters_since_delta_snapshot` metadata; with `delta_writes_versioned` and no
/// counters, each channel it names without storing it), its ancestors up to the nearest
/// one storing the channel, and what those need in turn.
pub(crate) const RESCUE_NEEDED: &str = "
WITH RECURSIVE
needs(ns, id, channel) AS (
    SELECT c.checkpoint_ns, c.checkpoint_id, n.key
    FROM checkpoints c, json_each(c.metadata, '$.counters_since_delta_snapshot') n
    WHERE c.thread_id = ?1
      AND json_type(c.metadata, '$.counters_since_delta_snapshot') = 'object'
    UNION
    SELECT c.checkpoint_ns, c.checkpoint_id, v.key
    FROM checkpoints c, json_each(c.checkpoint, '$.cv') v
    WHERE c.thread_id = ?1 AND json_extract(c.metadata, '$.delta_writes_versioned') IS 1
      AND NOT EXISTS (SELECT 1 FROM json_each(c.metadata, '$.counters_since_delta_snapshot'))
      AND NOT EXISTS (
          SELECT 1 FROM checkpoint_blobs b
          WHERE b.thread_id = ?1 AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key
            AND b.version = v.value AND b.type IS NOT NULL)
),
walk(ns, id, channel) AS (
    SELECT c.checkpoint_ns, c.parent_checkpoint_id, n.channel
    FROM checkpoints c CROSS JOIN needs n ON n.ns = c.checkpoint_ns AND n.id = c.checkpoint_id
    WHERE c.thread_id = ?1 AND c.parent_checkpoint_id IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM temp.doomed d
          WHERE d.thread_id = ?1 AND d.checkpoint_ns = c.checkpoint_ns
            AND d.checkpoint_id = c.checkpoint_id)
    UNION
    -- The walk goes on above a checkpoint that does not store the channel.
    SELECT w.ns, c.parent_checkpoint_id, w.channel
    FROM walk w CROSS JOIN checkpoints c
      ON c.thread_id = ?1 AND c.checkpoint_ns = w.ns AND c.checkpoint_id = w.id
    WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM json_each(c.checkpoint, '$.cv') v CROSS JOIN checkpoint_blobs b
          ON b.thread_id = ?1 AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key
         AND b.version = v.value
        WHERE v.key = w.channel AND b.type IS NOT NULL)
    UNION
    -- A needed checkpoint needs its own history too.
    SELECT w.ns, c.parent_checkpoint_id, n.channel
    FROM walk w CROSS JOIN checkpoints c
      ON c.thread_id = ?1 AND c.checkpoint_ns = w.ns AND c.checkpoint_id = w.id
    CROSS JOIN needs n ON n.ns = c.checkpoint_ns AND n.id = c.checkpoint_id
    WHERE c.parent_checkpoint_id IS NOT NULL
)
DELETE FROM temp.doomed
WHERE thread_id = ?1 AND (checkpoint_ns, checkpoint_id) IN (SELECT ns, id FROM walk)";

/// Deletes the checkpoints in `temp.doomed` with their metadata entries, then, in every
/// namespace that lost one, the pending writes of checkpoints that do not exist and the
/// values no remaining checkpoint names.
pub(crate) const DELETE_DOOMED: &str = "
INSERT INTO checkpoint_forget
SELECT thread_id, checkpoint_ns, checkpoint_id FROM temp.doomed;
INSERT OR IGNORE INTO temp.touched SELECT DISTINCT thread_id, checkpoint_ns FROM temp.doomed;
DELETE FROM checkpoint_writes
WHERE (thread_id, checkpoint_ns) IN (SELECT thread_id, checkpoint_ns FROM temp.touched)
  AND NOT EXISTS (SELECT 1 FROM checkpoints c
                  WHERE c.thread_id = checkpoint_writes.thread_id
                    AND c.checkpoint_ns = checkpoint_writes.checkpoint_ns
                    AND c.checkpoint_id = checkpoint_writes.checkpoint_id);
INSERT OR IGNORE INTO temp.live
SELECT c.thread_id, c.checkpoint_ns, j.key, j.value
FROM temp.touched t
JOIN checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns,
     json_each(c.checkpoint, '$.cv') j;
DELETE FROM checkpoint_blobs
WHERE (thread_id, checkpoint_ns) IN (SELECT thread_id, checkpoint_ns FROM temp.touched)
  AND (thread_id, checkpoint_ns, channel, version) NOT IN
      (SELECT thread_id, checkpoint_ns, channel, version FROM temp.live);";

/// Copies thread `?1` into `?2`, keeping what `?2` has at the same address; a checkpoint's
/// metadata entries are copied only with the checkpoint. `?3`: the default TTL in ms.
pub(crate) const COPY_THREAD: &str = "
INSERT INTO checkpoint_expire VALUES (?1), (?2);
INSERT OR IGNORE INTO checkpoint_metadata (entry, checkpoint_id, thread_id, checkpoint_ns)
SELECT j.value, c.checkpoint_id, ?2, c.checkpoint_ns
FROM checkpoints c, json_each(c.entries) j
WHERE c.thread_id = ?1 AND NOT EXISTS (
    SELECT 1 FROM checkpoints t
    WHERE t.thread_id = ?2 AND t.checkpoint_ns = c.checkpoint_ns
      AND t.checkpoint_id = c.checkpoint_id);
INSERT OR IGNORE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, checkpoint, metadata, entries)
SELECT ?2, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, entries
FROM checkpoints WHERE thread_id = ?1;
INSERT OR IGNORE INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT ?2, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = ?1;
INSERT OR IGNORE INTO checkpoint_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
SELECT ?2, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob
FROM checkpoint_writes WHERE thread_id = ?1;
INSERT INTO checkpoint_touch VALUES (?2, ?3);";

/// Whether thread `?1` has any row (checkpoints or pending writes).
pub(crate) const THREAD_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = ?1) \
     OR EXISTS (SELECT 1 FROM checkpoint_writes WHERE thread_id = ?1)";

statement! {
    /// Sets the TTL of thread `?1`: `?2` NULL (the default, `?3` ms or none), 0 (pinned) or
    /// ms; applied at once. A thread that expired already is cleared first.
    SET_THREAD_TTL = "
INSERT INTO checkpoint_expire VALUES (?1);
INSERT INTO checkpoint_threads (thread_id, ttl_ms, expires_at_ms)
VALUES (?1, ?2, CASE WHEN ?2 = 0 THEN NULL
                     WHEN ?2 > 0 THEN NOW_MS + ?2
                     WHEN ?3 IS NOT NULL THEN NOW_MS + ?3
                     ELSE NULL END)
ON CONFLICT (thread_id) DO UPDATE SET
    ttl_ms = excluded.ttl_ms, expires_at_ms = excluded.expires_at_ms;"
}

statement! {
    /// Milliseconds until thread `?1` expires (none: no TTL, or expired).
    THREAD_TTL = "SELECT expires_at_ms - NOW_MS FROM checkpoint_threads
                  WHERE thread_id = ?1 AND expires_at_ms > NOW_MS"
}

statement! {
    /// Marks at most `?1` expired threads for sweeping.
    DOOM_EXPIRED = "
CREATE TEMP TABLE IF NOT EXISTS sweep (thread_id TEXT PRIMARY KEY);
DELETE FROM temp.sweep;
INSERT INTO temp.sweep
SELECT thread_id FROM checkpoint_threads WHERE expires_at_ms <= NOW_MS LIMIT ?1;"
}

/// Deletes every row of the threads in `temp.sweep` (not their leases).
pub(crate) const SWEEP: &str =
    "INSERT INTO checkpoint_forget_thread SELECT thread_id FROM temp.sweep";

statement! {
    /// Grants thread `?1`'s lease to `?2` for `?3` ms, or extends `?2`'s live lease; no row
    /// while another holder's lease is live.
    ACQUIRE_LEASE = "
INSERT INTO checkpoint_leases (thread_id, holder, token, expires_at_ms)
VALUES (?1, ?2, 1, NOW_MS + ?3)
ON CONFLICT (thread_id) DO UPDATE SET
    token = CASE WHEN expires_at_ms > NOW_MS THEN token ELSE token + 1 END,
    holder = excluded.holder,
    expires_at_ms = excluded.expires_at_ms
WHERE expires_at_ms <= NOW_MS OR holder = excluded.holder
RETURNING token"
}

statement! {
    /// Extends lease `?3` of thread `?1` held by `?2` to `?4` ms from now.
    RENEW_LEASE = "UPDATE checkpoint_leases SET expires_at_ms = NOW_MS + ?4
                   WHERE thread_id = ?1 AND holder = ?2 AND token = ?3 RETURNING token"
}

statement! {
    /// Ends lease `?3` of thread `?1` held by `?2` (its token stays spent).
    RELEASE_LEASE = "UPDATE checkpoint_leases SET expires_at_ms = NOW_MS, holder = ''
                     WHERE thread_id = ?1 AND holder = ?2 AND token = ?3"
}

/// The current lease token of thread `?1`.
pub(crate) const LEASE_TOKEN: &str = "SELECT token FROM checkpoint_leases WHERE thread_id = ?1";

statement! {
    /// Claims ledger key `?1` for `?2` ms when it is new, abandoned or expired; no row
    /// otherwise.
    CLAIM = "
INSERT INTO checkpoint_ledger (key, token, state, expires_at_ms)
VALUES (?1, 1, 'pending', NOW_MS + ?2)
ON CONFLICT (key) DO UPDATE SET
    token = token + 1, state = 'pending', expires_at_ms = excluded.expires_at_ms,
    outcome_type = NULL, outcome = NULL
WHERE state = 'abandoned' OR (state = 'pending' AND expires_at_ms <= NOW_MS)
RETURNING token"
}

statement! {
    /// The state of ledger key `?1`: state, ms left, outcome.
    CLAIM_STATE = "SELECT state, expires_at_ms - NOW_MS, outcome_type, outcome
                   FROM checkpoint_ledger WHERE key = ?1"
}

/// Completes claim `?2` of key `?1` with outcome (`?3` type, `?4` bytes), then reads the
/// key's token and state.
pub(crate) const COMPLETE_CLAIM: &str = "
UPDATE checkpoint_ledger SET state = 'completed', outcome_type = ?3, outcome = ?4,
    expires_at_ms = NULL
WHERE key = ?1 AND token = ?2 AND state = 'pending'";

/// The token and state of ledger key `?1`.
pub(crate) const CLAIM_TOKEN: &str = "SELECT token, state FROM checkpoint_ledger WHERE key = ?1";

/// Gives up claim `?2` of key `?1`.
pub(crate) const ABANDON_CLAIM: &str = "UPDATE checkpoint_ledger SET state = 'abandoned'
     WHERE key = ?1 AND token = ?2 AND state = 'pending'";

/// The head (newest checkpoint id) of namespace `?2` of thread `?1`.
pub(crate) async fn head(
    conn: &mut SqliteConnection,
    thread_id: &str,
    ns: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2",
    )
    .bind(thread_id)
    .bind(ns)
    .fetch_one(conn)
    .await
}

/// The current lease token of a thread (0: never leased).
pub(crate) async fn lease_token(
    conn: &mut SqliteConnection,
    thread_id: &str,
) -> Result<u64, sqlx::Error> {
    let token: Option<i64> = sqlx::query_scalar(LEASE_TOKEN)
        .bind(thread_id)
        .fetch_optional(conn)
        .await?;
    Ok(token.map_or(0, |t| u64::try_from(t).unwrap_or(0)))
}

/// Integrity scan of thread ?1: every (namespace, checkpoint, channel, version key) a
/// checkpoint names with no row in `checkpoint_blobs` (an emptied channel has a row with a
/// NULL type, so a missing row is a lost value).
pub(crate) const SCAN_MISSING_VALUES: &str = "
SELECT c.checkpoint_ns, c.checkpoint_id, v.key, v.value
FROM checkpoints c, json_each(c.checkpoint, '$.cv') v
WHERE c.thread_id = ?1 AND NOT EXISTS (
    SELECT 1 FROM checkpoint_blobs b
    WHERE b.thread_id = ?1 AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key
      AND b.version = v.value)
ORDER BY 1, 2, 3";

/// Integrity scan of thread ?1: pending writes per (namespace, checkpoint) whose checkpoint
/// is not stored.
pub(crate) const SCAN_WRITES_WITHOUT_CHECKPOINT: &str = "
SELECT w.checkpoint_ns, w.checkpoint_id, count(*)
FROM checkpoint_writes w
WHERE w.thread_id = ?1 AND NOT EXISTS (
    SELECT 1 FROM checkpoints c
    WHERE c.thread_id = ?1 AND c.checkpoint_ns = w.checkpoint_ns
      AND c.checkpoint_id = w.checkpoint_id)
GROUP BY 1, 2
ORDER BY 1, 2";

statement!(
    /// A page of `list_threads`: up to ?2 distinct live thread ids after ?1, ascending (the
    /// primary key's order, BINARY collation).
    LIST_THREADS = "
SELECT DISTINCT c.thread_id FROM checkpoints c
WHERE c.thread_id > ?1 AND NOT EXISTS (SELECT 1 FROM checkpoint_threads t
    WHERE t.thread_id = c.thread_id AND t.expires_at_ms <= NOW_MS)
ORDER BY c.thread_id
LIMIT ?2"
);
