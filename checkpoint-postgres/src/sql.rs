//! The SQL statements. Every value is a bound parameter; nothing from the caller is ever
//! spliced into SQL text.

/// The rows of one checkpoint tuple, in one query and in the same shape as a list page
/// (see [`LIST_PAGE_TAIL`], decoded by the same code): `$head` selects the checkpoint row
/// (at most one) of thread `$1`, unless the thread expired, into the CTE `c`; the result has one row of kind `c` (the checkpoint), one
/// of kind `b` per stored value it names and one of kind `w` per pending write. Values
/// travel as plain rows, not arrays: building a `bytea[]` copies every detoasted value once
/// more on the server and cost ≈ 0.2 ms per call on the W2 workload.
macro_rules! select_tuple {
    ($head:expr) => {
        concat!(
            "
WITH c AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, c.metadata
    FROM checkpoints c
    WHERE NOT EXISTS (SELECT 1 FROM checkpoint_threads x WHERE x.thread_id = $1 AND x.expires_at <= now())
      AND ",
            $head,
            "
)
SELECT 'c' AS kind, c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, c.metadata,
       NULL::text AS channel, NULL::text AS version, NULL::text AS type, NULL::bytea AS blob,
       NULL::text AS task_id, NULL::text AS task_path, NULL::integer AS idx, 1::bigint AS ord
FROM c
UNION ALL
SELECT 'b', c.thread_id, c.checkpoint_ns, NULL, NULL, NULL, NULL, bl.channel, bl.version, bl.type, bl.blob,
       NULL, NULL, NULL, NULL
FROM c
CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
-- One primary-key probe per version (LIMIT 1 keeps the planner from hash-joining all of
-- the namespace's values).
CROSS JOIN LATERAL (
    SELECT b.channel, b.version, b.type, b.blob FROM checkpoint_blobs b
    WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
      AND b.channel = v.key AND b.version = v.value
    LIMIT 1
) AS bl
UNION ALL
SELECT 'w', c.thread_id, c.checkpoint_ns, c.checkpoint_id, NULL, NULL, NULL,
       cw.channel, NULL, coalesce(cw.type, 'msgpack'), cw.blob, cw.task_id, cw.task_path, cw.idx, NULL
FROM c
JOIN checkpoint_writes cw
  ON cw.thread_id = c.thread_id AND cw.checkpoint_ns = c.checkpoint_ns AND cw.checkpoint_id = c.checkpoint_id
"
        )
    };
}

/// The head of a list page: `WITH page AS (SELECT <checkpoint columns>, row_number() OVER
/// (ORDER BY `, completed by the list query builder with the page's order, `) AS ord FROM
/// checkpoints c`, its conditions, the same order and the limit, then [`LIST_PAGE_TAIL`].
pub(crate) const LIST_PAGE_HEAD: &str = "
WITH page AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, c.metadata,
           row_number() OVER (ORDER BY ";

/// Between the window's order and the page's conditions.
pub(crate) const LIST_PAGE_FROM: &str = ") AS ord
    FROM checkpoints c";

/// The rest of a list page: one row per checkpoint (kind `c`), one per pending write of
/// those checkpoints (kind `w`) and one per distinct value the page's checkpoints name
/// (kind `b`), so a value shared by many checkpoints of the page (an unchanged channel) is
/// sent once. Values and writes travel as plain rows, not arrays (see `select_tuple!`).
///
/// There is no final `ORDER BY`: the checkpoint rows carry their rank in the page (`ord`)
/// and the client puts them in order, so the server streams rows as it produces them
/// instead of sorting the whole page (values included) before sending the first byte.
pub(crate) const LIST_PAGE_TAIL: &str = "
),
needed AS (
    SELECT DISTINCT p.thread_id, p.checkpoint_ns, v.key AS channel, v.value AS version
    FROM page p CROSS JOIN LATERAL jsonb_each_text(p.checkpoint -> 'channel_versions') AS v
)
SELECT 'c' AS kind, p.thread_id, p.checkpoint_ns, p.checkpoint_id, p.parent_checkpoint_id, p.checkpoint, p.metadata,
       NULL::text AS channel, NULL::text AS version, NULL::text AS type, NULL::bytea AS blob,
       NULL::text AS task_id, NULL::text AS task_path, NULL::integer AS idx, p.ord
FROM page p
UNION ALL
SELECT 'w', p.thread_id, p.checkpoint_ns, p.checkpoint_id, NULL, NULL, NULL,
       cw.channel, NULL, coalesce(cw.type, 'msgpack'), cw.blob,
       cw.task_id, cw.task_path, cw.idx, NULL
FROM page p
JOIN checkpoint_writes cw
  ON cw.thread_id = p.thread_id AND cw.checkpoint_ns = p.checkpoint_ns AND cw.checkpoint_id = p.checkpoint_id
UNION ALL
SELECT 'b', n.thread_id, n.checkpoint_ns, NULL, NULL, NULL, NULL,
       bl.channel, bl.version, bl.type, bl.blob,
       NULL, NULL, NULL, NULL
FROM needed n
CROSS JOIN LATERAL (
    SELECT b.channel, b.version, b.type, b.blob FROM checkpoint_blobs b
    WHERE b.thread_id = n.thread_id AND b.checkpoint_ns = n.checkpoint_ns
      AND b.channel = n.channel AND b.version = n.version
    LIMIT 1
) AS bl
";

/// The CTEs `touch` and `touch_own` that restart the TTL of the threads a write wrote:
/// `$source` is a row source with one column `tid` (each thread once), `$default` the
/// parameter holding the saver's default TTL in ms (NULL: none). With a default, every
/// thread gets a TTL row; without one, only threads with their own TTL are touched. A pinned
/// thread (`ttl_ms = 0`) never expires; a thread's own TTL (`ttl_ms > 0`) wins over the
/// default.
macro_rules! touch {
    ($source:literal, $default:literal) => {
        concat!(
            "
touch AS (
    INSERT INTO checkpoint_threads AS t (thread_id, ttl_ms, expires_at)
    SELECT s.tid, NULL::bigint, now() + ",
            $default,
            "::bigint * interval '1 millisecond'
    FROM ",
            $source,
            " AS s
    WHERE ",
            $default,
            "::bigint IS NOT NULL
    ON CONFLICT (thread_id) DO UPDATE SET expires_at = CASE
        WHEN t.ttl_ms = 0 THEN NULL
        WHEN t.ttl_ms > 0 THEN now() + t.ttl_ms * interval '1 millisecond'
        ELSE EXCLUDED.expires_at END
),
touch_own AS (
    UPDATE checkpoint_threads t SET expires_at = now() + t.ttl_ms * interval '1 millisecond'
    FROM ",
            $source,
            " AS s
    WHERE ",
            $default,
            "::bigint IS NULL AND t.thread_id = s.tid AND t.ttl_ms > 0
)"
        )
    };
}

/// The CTEs `seen`, `ttl`, `gate` (one row: `expired`) and `ok` of a write to several
/// threads (`$threads`: a row source with one column `tid`): their TTL rows are locked `FOR
/// KEY SHARE` in thread order, and the write must not happen (`ok` false) when one of them
/// has expired, or was deleted since the statement's snapshot (see [`PUT`]).
macro_rules! ttl_gate {
    ($threads:literal) => {
        concat!(
            "
seen AS (
    SELECT thread_id FROM checkpoint_threads WHERE thread_id IN ",
            $threads,
            "
),
ttl AS (
    SELECT thread_id, coalesce(expires_at <= now(), false) AS expired FROM checkpoint_threads
    WHERE thread_id IN ",
            $threads,
            "
    ORDER BY thread_id
    FOR KEY SHARE
),
gate AS (
    SELECT EXISTS (SELECT 1 FROM ttl WHERE expired)
           OR (SELECT count(*) FROM seen) > (SELECT count(*) FROM ttl) AS expired
),
ok AS (
    SELECT NOT expired AS ok FROM gate
)"
        )
    };
}

/// get_tuple by id: $1 thread, $2 ns, $3 id.
pub(crate) const GET_BY_ID: &str =
    select_tuple!("c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.checkpoint_id = $3");

/// get_tuple latest: $1 thread, $2 ns.
pub(crate) const GET_LATEST: &str = select_tuple!(
    "c.thread_id = $1 AND c.checkpoint_ns = $2 ORDER BY c.checkpoint_id DESC LIMIT 1"
);

/// The delta history (see `read::delta_channel_history`) of the channels `$4` for
/// checkpoint `$3` (NULL: the latest) of `($1 thread, $2 namespace)`, in one statement: a
/// recursive walk up the parent links, carrying the channels whose walk is still open, that
/// stops where none is. A channel is stored at a checkpoint when `get_tuple` would return a
/// value for it there: a blob of the version it names that is not `empty`, or, without a
/// blob, a value LangGraph's Python saver kept inline. Rows: `kind` (`w` a write, `s` a
/// seed), `depth` (0: the target's parent), channel, the write's task path, task id and
/// index, type and bytes, and a seed kept inline.
pub(crate) const DELTA_HISTORY: &str = "
WITH RECURSIVE
target AS (
    SELECT c.parent_checkpoint_id AS parent FROM checkpoints c
    WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND ($3::text IS NULL OR c.checkpoint_id = $3)
      AND NOT EXISTS (SELECT 1 FROM checkpoint_threads x WHERE x.thread_id = $1 AND x.expires_at <= now())
    ORDER BY c.checkpoint_id DESC LIMIT 1
),
chain AS (
    SELECT c.checkpoint_id AS id, c.parent_checkpoint_id AS parent, c.checkpoint AS cp,
           $4::text[] AS open, 0 AS depth
    FROM target JOIN checkpoints c
      ON c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.checkpoint_id = target.parent
    UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint,
           ARRAY(SELECT o FROM unnest(chain.open) AS o WHERE NOT coalesce(
               (SELECT b.type <> 'empty' FROM checkpoint_blobs b
                WHERE b.thread_id = $1 AND b.checkpoint_ns = $2 AND b.channel = o
                  AND b.version = chain.cp -> 'channel_versions' ->> o LIMIT 1),
               (chain.cp -> 'channel_values') ? o)),
           chain.depth + 1
    -- A primary-key probe per step (LIMIT 1 keeps the planner from folding the subquery
    -- into a scan of the thread's checkpoints at each step).
    FROM chain CROSS JOIN LATERAL (
        SELECT c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint FROM checkpoints c
        WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.checkpoint_id = chain.parent
        LIMIT 1
    ) AS c
    -- Ids only decrease along parent links: the walk ends even on damaged rows.
    WHERE cardinality(chain.open) > 0 AND c.checkpoint_id < chain.id
)
SELECT 'w' AS kind, chain.depth, w.channel, w.task_path, w.task_id, w.idx,
       coalesce(w.type, 'msgpack') AS type, w.blob, NULL::jsonb AS inline
FROM chain CROSS JOIN LATERAL unnest(chain.open) AS o
-- Each walked checkpoint's writes by their key's prefix (OFFSET 0 keeps the probe per
-- checkpoint rather than a join of all the thread's writes with the walk).
CROSS JOIN LATERAL (
    SELECT w.channel, w.task_path, w.task_id, w.idx, w.type, w.blob FROM checkpoint_writes w
    WHERE w.thread_id = $1 AND w.checkpoint_ns = $2 AND w.checkpoint_id = chain.id AND w.channel = o
    OFFSET 0
) AS w
UNION ALL
-- A channel's seed can only be at the deepest checkpoint whose walk still had it open: one
-- that stores it closes its walk. One probe per channel.
SELECT 's', last.depth, last.o, NULL, NULL, NULL, bl.type, bl.blob,
       CASE WHEN bl.type IS NULL THEN last.cp -> 'channel_values' -> last.o END
FROM (
    SELECT DISTINCT ON (o) chain.depth, o, chain.cp
    FROM chain CROSS JOIN LATERAL unnest(chain.open) AS o
    ORDER BY o, chain.depth DESC
) AS last
LEFT JOIN LATERAL (
    SELECT b.type, b.blob FROM checkpoint_blobs b
    WHERE b.thread_id = $1 AND b.checkpoint_ns = $2 AND b.channel = last.o
      AND b.version = last.cp -> 'channel_versions' ->> last.o
    LIMIT 1
) AS bl ON true
WHERE coalesce(bl.type <> 'empty', (last.cp -> 'channel_values') ? last.o)
";

/// The pending writes to `__pregel_tasks` of checkpoint `$3` of `($1 thread, $2 namespace)`:
/// the sends of a child of a format before 4 (LangGraph's `SELECT_PENDING_SENDS_SQL`, with
/// the namespace too).
pub(crate) const PARENT_SENDS: &str = "
SELECT channel, coalesce(type, 'msgpack') AS type, blob, task_id, task_path, idx
FROM checkpoint_writes
WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3 AND channel = '__pregel_tasks'";

/// put, one statement (one round trip, one implicit transaction).
///
/// $1 thread, $2 ns, $3 id, $4 parent id (NULL: none), $5 checkpoint JSONB, $6 metadata
/// JSONB, $7..$10 the new values as parallel arrays (channel, version, type, blob), $11
/// compare-and-set, $12 fencing token (NULL: unfenced), $13 the saver's default TTL in ms
/// (NULL: none).
///
/// Returns one row: whether the thread had expired, whether the fence and the
/// compare-and-set passed, the head seen by the compare-and-set, and the thread's current
/// lease token. Nothing is written unless the thread is live and both passed; a written
/// thread's TTL starts again (see [`touch!`]). The thread's TTL row is locked `FOR KEY
/// SHARE` (which concurrent writers share, and which lets them update `expires_at`), so a
/// sweeper (which skips locked rows) never deletes a thread while it is written. A TTL row
/// the statement's snapshot sees but the lock no longer finds was deleted meanwhile (a
/// sweep or another writer's forget): the thread counts as expired, so the write is retried
/// with a fresh snapshot instead of writing from the deleted rows. `inline_copy` turns values a LangGraph Python writer kept inline in the parent's
/// checkpoint JSON into `json` blobs when this checkpoint still names their version, so a
/// thread started in Python and continued here keeps every value (Python reads `json`
/// blobs natively).
pub(crate) const PUT: &str = concat!(
    "
WITH lease AS (
    SELECT token FROM checkpoint_leases
    WHERE thread_id = $1 AND $12::bigint IS NOT NULL
    FOR SHARE
),
seen AS (
    SELECT expires_at FROM checkpoint_threads WHERE thread_id = $1
),
ttl AS (
    SELECT coalesce(expires_at <= now(), false) AS expired FROM checkpoint_threads
    WHERE thread_id = $1 FOR KEY SHARE
),
head AS (
    -- After the TTL lock (the subquery is evaluated first), so a compare-and-set reads the
    -- head of a thread no sweep is deleting.
    SELECT CASE WHEN $11 AND (SELECT count(*) FROM ttl) >= 0 THEN checkpoint_rs_locked_head($1, $2) END AS head
),
gate AS (
    SELECT coalesce((SELECT expired FROM ttl), EXISTS (SELECT 1 FROM seen)) AS expired,
           ($12::bigint IS NULL OR coalesce((SELECT token FROM lease) = $12, false)) AS fence_ok,
           (NOT $11
            OR h.head IS NOT DISTINCT FROM $4::text
            OR (h.head = $3 AND EXISTS (
                SELECT 1 FROM checkpoints p
                WHERE p.thread_id = $1 AND p.checkpoint_ns = $2 AND p.checkpoint_id = $3
                  AND p.parent_checkpoint_id IS NOT DISTINCT FROM $4::text))) AS cas_ok,
           h.head,
           (SELECT token FROM lease) AS current_token
    FROM head h
),
ok AS (
    SELECT NOT expired AND fence_ok AND cas_ok AS ok FROM gate
),
blobs AS (
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT $1, $2, u.channel, u.version, u.type, u.blob
    FROM unnest($7::text[], $8::text[], $9::text[], $10::bytea[]) AS u(channel, version, type, blob)
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
),
inline_copy AS (
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT $1, $2, v.key, v.value, 'json', convert_to((p.checkpoint -> 'channel_values' -> v.key)::text, 'UTF8')
    FROM checkpoints p
    CROSS JOIN LATERAL jsonb_each_text($5::jsonb -> 'channel_versions') AS v
    WHERE $4::text IS NOT NULL
      AND p.thread_id = $1 AND p.checkpoint_ns = $2 AND p.checkpoint_id = $4::text
      AND p.checkpoint -> 'channel_values' ? v.key
      AND p.checkpoint -> 'channel_versions' ->> v.key = v.value
      AND NOT (v.key = ANY($7::text[]))
      AND (SELECT ok FROM ok)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
),
cp AS (
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
    SELECT $1, $2, $3, $4::text, $5, $6
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
        checkpoint = EXCLUDED.checkpoint,
        metadata = EXCLUDED.metadata,
        parent_checkpoint_id = EXCLUDED.parent_checkpoint_id
),
",
    touch!("(SELECT $1::text AS tid WHERE (SELECT ok FROM ok))", "$13"),
    "
SELECT expired, fence_ok, cas_ok, head, current_token FROM gate
");

/// `import`: values, checkpoints and pending writes of any number of checkpoints, as
/// parallel arrays: $1..$6 values (thread, ns, channel, version, type, blob: NULL for a
/// removed channel), kept when the version exists; $7..$12 checkpoints (thread, ns, id,
/// parent, checkpoint JSON text, metadata JSON text), replaced when the address exists;
/// $13..$22 writes (thread, ns, checkpoint id, task, task path, idx, channel, type, blob,
/// replace), kept when `(checkpoint, task, idx)` exists unless `replace` (special
/// channels); $23 the saver's default TTL in ms (the imported threads' TTLs start again).
/// Each key occurs once in its arrays; the caller ensures it. Returns whether one of the
/// threads had expired (see [`ttl_gate!`]): then nothing was written.
pub(crate) const IMPORT: &str = concat!(
    "
WITH threads AS (
    SELECT DISTINCT u AS tid FROM unnest($7::text[] || $13::text[]) AS u
),",
    ttl_gate!("(SELECT tid FROM threads)"),
    ",
blobs AS (
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[])
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
),
cps AS (
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
    SELECT u.t, u.n, u.c, u.p, u.cp::jsonb, u.m::jsonb
    FROM unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) AS u(t, n, c, p, cp, m)
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
        checkpoint = EXCLUDED.checkpoint,
        metadata = EXCLUDED.metadata,
        parent_checkpoint_id = EXCLUDED.parent_checkpoint_id
),
w AS (
    SELECT * FROM unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::text[],
                         $18::int[], $19::text[], $20::text[], $21::bytea[], $22::bool[])
        AS u(t, n, c, task, path, idx, channel, type, blob, replace)
    WHERE (SELECT ok FROM ok)
),
kept AS (
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    SELECT t, n, c, task, path, idx, channel, type, blob FROM w WHERE NOT replace
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING
),
replaced AS (
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    SELECT t, n, c, task, path, idx, channel, type, blob FROM w WHERE replace
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
        channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob, task_path = EXCLUDED.task_path
),",
    touch!("(SELECT tid FROM threads WHERE (SELECT ok FROM ok))", "$23"),
    "
SELECT expired FROM gate
");

macro_rules! put_writes {
    ($conflict:literal) => {
        concat!(
            "
WITH lease AS (
    SELECT token FROM checkpoint_leases
    WHERE thread_id = $1 AND $10::bigint IS NOT NULL
    FOR SHARE
),
seen AS (
    SELECT expires_at FROM checkpoint_threads WHERE thread_id = $1
),
ttl AS (
    SELECT coalesce(expires_at <= now(), false) AS expired FROM checkpoint_threads
    WHERE thread_id = $1 FOR KEY SHARE
),
gate AS (
    SELECT coalesce((SELECT expired FROM ttl), EXISTS (SELECT 1 FROM seen)) AS expired,
           ($10::bigint IS NULL OR coalesce((SELECT token FROM lease) = $10, false)) AS fence_ok,
           (SELECT token FROM lease) AS current_token
),
ok AS (
    SELECT NOT expired AND fence_ok AS ok FROM gate
),
ins AS (
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    SELECT $1, $2, $3, $4, $5, u.idx, u.channel, u.type, u.blob
    FROM unnest($6::int[], $7::text[], $8::text[], $9::bytea[]) WITH ORDINALITY AS u(idx, channel, type, blob, n)
    WHERE (SELECT ok FROM ok)
    ORDER BY u.n
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) ",
            $conflict,
            "
),",
            touch!("(SELECT $1::text AS tid WHERE (SELECT ok FROM ok))", "$11"),
            "
SELECT expired, fence_ok, current_token FROM gate
"
        )
    };
}

/// put_writes keeping existing writes (first write wins). $1 thread, $2 ns, $3 checkpoint
/// id, $4 task id, $5 task path, $6..$9 (idx, channel, type, blob) arrays, $10 fence, $11
/// the saver's default TTL in ms. Nothing is written to an expired thread (see [`PUT`]).
pub(crate) const PUT_WRITES_KEEP: &str = put_writes!("DO NOTHING");

/// put_writes replacing existing writes (a call made only of special channels).
pub(crate) const PUT_WRITES_REPLACE: &str = put_writes!(
    "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob, task_path = EXCLUDED.task_path"
);

/// The highest applied LangGraph migration.
pub(crate) const LANGGRAPH_VERSION: &str = "SELECT max(v) FROM checkpoint_migrations";
/// Records a LangGraph migration: $1 version.
pub(crate) const LANGGRAPH_RECORD: &str =
    "INSERT INTO checkpoint_migrations (v) VALUES ($1) ON CONFLICT DO NOTHING";
/// The highest applied migration of this crate.
pub(crate) const OWN_VERSION: &str = "SELECT max(v) FROM checkpoint_rs_migrations";
/// Records a migration of this crate: $1 version.
pub(crate) const OWN_RECORD: &str =
    "INSERT INTO checkpoint_rs_migrations (v) VALUES ($1) ON CONFLICT DO NOTHING";

/// delete_thread: $1 thread (its TTL setting too, not its lease).
pub(crate) const DELETE_THREAD: &str = "
WITH c AS (DELETE FROM checkpoints WHERE thread_id = $1),
     b AS (DELETE FROM checkpoint_blobs WHERE thread_id = $1),
     t AS (DELETE FROM checkpoint_threads WHERE thread_id = $1)
DELETE FROM checkpoint_writes WHERE thread_id = $1
";

/// copy_thread: $1 source (nothing when it expired), $2 target, $3 the saver's default TTL
/// in ms (the target was written: its TTL starts again). Existing target rows are kept.
/// Returns whether the target had expired (see [`ttl_gate!`]): then nothing was copied.
pub(crate) const COPY_THREAD: &str = concat!(
    "
WITH",
    ttl_gate!("(SELECT $2::text)"),
    ",
live AS (
    SELECT (SELECT ok FROM ok) AND NOT EXISTS (
        SELECT 1 FROM checkpoint_threads x WHERE x.thread_id = $1 AND x.expires_at <= now()) AS live
),
c AS (
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
    SELECT $2, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata
    FROM checkpoints WHERE thread_id = $1 AND (SELECT live FROM live)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO NOTHING
),
b AS (
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT $2, checkpoint_ns, channel, version, type, blob
    FROM checkpoint_blobs WHERE thread_id = $1 AND (SELECT live FROM live)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
),
cw AS (
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    SELECT $2, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
    FROM checkpoint_writes WHERE thread_id = $1 AND (SELECT live FROM live)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING
),",
    touch!(
        "(SELECT $2::text AS tid WHERE (SELECT live FROM live) AND EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = $1))",
        "$3"
    ),
    "
SELECT expired FROM gate
");

/// The recursive part of the delta-aware deletions (see
/// `checkpoint_core::delta::needed_ancestors`), over a CTE `scope` of checkpoints with
/// columns `thread_id, checkpoint_ns, checkpoint_id, parent, versions, inline, metadata,
/// stays`: `needs` lists the channels each checkpoint needs history for (the keys of its
/// `counters_since_delta_snapshot` metadata; with `delta_writes_versioned` and no counters,
/// each channel it names without storing it), and `walk` the ancestors that the staying
/// checkpoints need, transitively. A channel is stored at a checkpoint as `get_tuple` reads
/// it: a blob that is not `empty`, or without a blob a value kept inline.
macro_rules! delta_needs {
    () => {
        "
needs AS (
    SELECT s.thread_id, s.checkpoint_ns, s.checkpoint_id, n.channel
    FROM scope s CROSS JOIN LATERAL jsonb_object_keys(
        CASE WHEN jsonb_typeof(s.metadata -> 'counters_since_delta_snapshot') = 'object'
             THEN s.metadata -> 'counters_since_delta_snapshot' ELSE '{}'::jsonb END) AS n(channel)
    UNION
    SELECT s.thread_id, s.checkpoint_ns, s.checkpoint_id, v.key
    FROM scope s CROSS JOIN LATERAL jsonb_each_text(s.versions) AS v
    WHERE s.metadata -> 'delta_writes_versioned' = 'true'::jsonb
      AND coalesce(s.metadata -> 'counters_since_delta_snapshot', '{}'::jsonb) IN ('{}'::jsonb, 'null'::jsonb)
      AND NOT coalesce(
          (SELECT b.type <> 'empty' FROM checkpoint_blobs b
           WHERE b.thread_id = s.thread_id AND b.checkpoint_ns = s.checkpoint_ns
             AND b.channel = v.key AND b.version = v.value LIMIT 1),
          s.inline ? v.key)
),
walk AS (
    SELECT s.thread_id, s.checkpoint_ns, s.parent AS id, n.channel
    FROM scope s JOIN needs n USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE s.stays AND s.parent IS NOT NULL
    UNION
    SELECT w.thread_id, w.checkpoint_ns, s.parent, x.channel
    FROM walk w JOIN scope s
      ON s.thread_id = w.thread_id AND s.checkpoint_ns = w.checkpoint_ns AND s.checkpoint_id = w.id
    CROSS JOIN LATERAL (
        -- The walk goes on above a checkpoint that does not store the channel ...
        SELECT w.channel AS channel
        WHERE NOT coalesce(
            (SELECT b.type <> 'empty' FROM checkpoint_blobs b
             WHERE b.thread_id = s.thread_id AND b.checkpoint_ns = s.checkpoint_ns
               AND b.channel = w.channel AND b.version = s.versions ->> w.channel LIMIT 1),
            s.inline ? w.channel)
        UNION
        -- ... and a needed checkpoint needs its own history too.
        SELECT n.channel FROM needs n
        WHERE n.thread_id = s.thread_id AND n.checkpoint_ns = s.checkpoint_ns
          AND n.checkpoint_id = s.checkpoint_id
    ) AS x
    WHERE s.parent IS NOT NULL AND s.parent < s.checkpoint_id
),
"
    };
}

/// prune keeping the newest $2 (> 0) checkpoints of each namespace of the threads $1, and
/// what those need for their delta channels. Deletes the rest, their writes, and values no
/// kept checkpoint names.
pub(crate) const PRUNE_KEEP: &str = concat!(
    "
WITH RECURSIVE
scope AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id AS parent,
           checkpoint -> 'channel_versions' AS versions,
           coalesce(checkpoint -> 'channel_values', '{}'::jsonb) AS inline, metadata,
           row_number() OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id DESC) <= $2 AS stays
    FROM checkpoints WHERE thread_id = ANY($1)
),
",
    delta_needs!(),
    "
doomed AS (
    SELECT s.thread_id, s.checkpoint_ns, s.checkpoint_id FROM scope s
    WHERE NOT s.stays AND NOT EXISTS (
        SELECT 1 FROM walk w
        WHERE w.thread_id = s.thread_id AND w.checkpoint_ns = s.checkpoint_ns AND w.id = s.checkpoint_id)
),
del_cp AS (
    DELETE FROM checkpoints c USING doomed d
    WHERE c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
      AND c.checkpoint_id = d.checkpoint_id
),
del_w AS (
    DELETE FROM checkpoint_writes w USING doomed d
    WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
      AND w.checkpoint_id = d.checkpoint_id
),
live AS (
    SELECT DISTINCT s.thread_id, s.checkpoint_ns, v.key AS channel, v.value AS version
    FROM scope s CROSS JOIN LATERAL jsonb_each_text(s.versions) AS v
    WHERE NOT EXISTS (
        SELECT 1 FROM doomed d
        WHERE d.thread_id = s.thread_id AND d.checkpoint_ns = s.checkpoint_ns
          AND d.checkpoint_id = s.checkpoint_id)
),
touched AS (
    SELECT DISTINCT thread_id, checkpoint_ns FROM doomed
)
DELETE FROM checkpoint_blobs b USING touched t
WHERE b.thread_id = t.thread_id AND b.checkpoint_ns = t.checkpoint_ns
  AND NOT EXISTS (
      SELECT 1 FROM live l
      WHERE l.thread_id = b.thread_id AND l.checkpoint_ns = b.checkpoint_ns
        AND l.channel = b.channel AND l.version = b.version)
"
);

/// prune deleting everything of the threads $1.
pub(crate) const PRUNE_ALL: &str = "
WITH c AS (DELETE FROM checkpoints WHERE thread_id = ANY($1)),
     b AS (DELETE FROM checkpoint_blobs WHERE thread_id = ANY($1)),
     t AS (DELETE FROM checkpoint_threads WHERE thread_id = ANY($1))
DELETE FROM checkpoint_writes WHERE thread_id = ANY($1)
";

/// delete_for_runs: $1 run ids. Deletes matching checkpoints everywhere, except what the
/// remaining checkpoints need for their delta channels, their writes, and values no
/// remaining checkpoint of the same namespace names.
pub(crate) const DELETE_FOR_RUNS: &str = concat!(
    "
WITH RECURSIVE
touched AS (
    SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints
    WHERE metadata ->> 'run_id' = ANY($1) AND jsonb_typeof(metadata -> 'run_id') = 'string'
),
scope AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id AS parent,
           c.checkpoint -> 'channel_versions' AS versions,
           coalesce(c.checkpoint -> 'channel_values', '{}'::jsonb) AS inline, c.metadata,
           NOT coalesce(c.metadata ->> 'run_id' = ANY($1)
                        AND jsonb_typeof(c.metadata -> 'run_id') = 'string', false) AS stays
    FROM checkpoints c JOIN touched t USING (thread_id, checkpoint_ns)
),
",
    delta_needs!(),
    "
doomed AS (
    DELETE FROM checkpoints c USING scope s
    WHERE NOT s.stays AND c.thread_id = s.thread_id AND c.checkpoint_ns = s.checkpoint_ns
      AND c.checkpoint_id = s.checkpoint_id
      AND NOT EXISTS (
          SELECT 1 FROM walk w
          WHERE w.thread_id = s.thread_id AND w.checkpoint_ns = s.checkpoint_ns
            AND w.id = s.checkpoint_id)
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id
),
del_w AS (
    DELETE FROM checkpoint_writes w USING doomed d
    WHERE w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns AND w.checkpoint_id = d.checkpoint_id
)
DELETE FROM checkpoint_blobs b USING touched t
WHERE b.thread_id = t.thread_id AND b.checkpoint_ns = t.checkpoint_ns
  AND NOT EXISTS (
      SELECT 1 FROM scope s CROSS JOIN LATERAL jsonb_each_text(s.versions) AS v
      WHERE s.thread_id = b.thread_id AND s.checkpoint_ns = b.checkpoint_ns
        AND v.key = b.channel AND v.value = b.version
        AND NOT EXISTS (
            SELECT 1 FROM doomed d
            WHERE d.thread_id = s.thread_id AND d.checkpoint_ns = s.checkpoint_ns
              AND d.checkpoint_id = s.checkpoint_id))
"
);

/// acquire_lease: $1 thread, $2 holder, $3 ttl in microseconds. Returns the token, or no row
/// while another holder's lease is live.
pub(crate) const ACQUIRE_LEASE: &str = "
INSERT INTO checkpoint_leases AS l (thread_id, holder, token, expires_at)
VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 microsecond')
ON CONFLICT (thread_id) DO UPDATE SET
    token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > clock_timestamp()
                 THEN l.token ELSE l.token + 1 END,
    holder = EXCLUDED.holder,
    expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= clock_timestamp() OR l.holder = EXCLUDED.holder
RETURNING token
";

/// renew_lease: $1 thread, $2 holder, $3 token, $4 ttl µs. Returns the row's token and
/// whether it was renewed.
pub(crate) const RENEW_LEASE: &str = "
WITH r AS (
    UPDATE checkpoint_leases
    SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
    WHERE thread_id = $1 AND holder = $2 AND token = $3
    RETURNING token
)
SELECT EXISTS (SELECT 1 FROM r) AS renewed,
       coalesce((SELECT token FROM r), (SELECT token FROM checkpoint_leases WHERE thread_id = $1), 0) AS current
";

/// release_lease: $1 thread, $2 holder, $3 token.
pub(crate) const RELEASE_LEASE: &str = "
UPDATE checkpoint_leases SET expires_at = clock_timestamp(), holder = ''
WHERE thread_id = $1 AND holder = $2 AND token = $3
";

/// claim: $1 key, $2 ttl µs. Returns the new token when acquired.
pub(crate) const CLAIM: &str = "
INSERT INTO checkpoint_ledger AS l (key, token, state, expires_at)
VALUES ($1, 1, 'pending', clock_timestamp() + $2::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE SET
    token = l.token + 1, state = 'pending', expires_at = EXCLUDED.expires_at, updated_at = now()
WHERE l.state = 'abandoned' OR (l.state = 'pending' AND l.expires_at <= clock_timestamp())
RETURNING token
";

/// The state of a ledger key: $1 key.
pub(crate) const CLAIM_STATE: &str = "
SELECT token, state, outcome_type, outcome,
       greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1e6))::bigint AS expires_in_us
FROM checkpoint_ledger WHERE key = $1
";

/// complete_claim: $1 key, $2 token, $3 outcome type, $4 outcome. Returns the key's token and
/// state after the call.
pub(crate) const COMPLETE_CLAIM: &str = "
WITH u AS (
    UPDATE checkpoint_ledger
    SET state = 'completed', outcome_type = $3, outcome = $4, updated_at = now()
    WHERE key = $1 AND token = $2 AND state = 'pending'
    RETURNING token, state
)
SELECT coalesce((SELECT token FROM u), l.token, 0) AS token,
       coalesce((SELECT state FROM u), l.state, '') AS state
FROM (SELECT 1) AS one LEFT JOIN checkpoint_ledger l ON l.key = $1
";

/// abandon_claim: $1 key, $2 token.
pub(crate) const ABANDON_CLAIM: &str = "
UPDATE checkpoint_ledger SET state = 'abandoned', updated_at = now()
WHERE key = $1 AND token = $2 AND state = 'pending'
";

/// Integrity scan of the threads $1 (an array): values a checkpoint names (through its
/// `channel_versions`, and not inline in its JSON) that no blob holds, as (thread,
/// namespace, checkpoint id, channel, version).
///
/// Both scans are written as index probes the planner cannot reorder: each thread's rows
/// through its index (a `LATERAL` subquery kept apart by `OFFSET 0`), each named value or
/// checkpoint probed once (`LATERAL ... LIMIT 1`). With `thread_id = ANY($1)` and
/// `NOT EXISTS`, PostgreSQL planned a freshly imported database (no statistics yet) with
/// sequential scans and sorted anti-joins: 0.7 s per 64 threads of a 200,000-checkpoint set
/// instead of 22 ms (14 ms with statistics).
pub(crate) const SCAN_MISSING_VALUES: &str = "
SELECT t.id, c.checkpoint_ns, c.checkpoint_id, v.key, v.value
FROM unnest($1::text[]) AS t(id)
CROSS JOIN LATERAL (
    SELECT c.checkpoint_ns, c.checkpoint_id, c.checkpoint FROM checkpoints c
    WHERE c.thread_id = t.id OFFSET 0) c
CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
LEFT JOIN LATERAL (
    SELECT 1 AS found FROM checkpoint_blobs b
    WHERE b.thread_id = t.id AND b.checkpoint_ns = c.checkpoint_ns
      AND b.channel = v.key AND b.version = v.value
    LIMIT 1) x ON true
WHERE x.found IS NULL
  AND NOT coalesce(c.checkpoint -> 'channel_values' ? v.key, false)
ORDER BY 1, 2, 3, 4";

/// Integrity scan of the threads $1 (an array): pending writes per (thread, namespace,
/// checkpoint) whose checkpoint is not stored (see [`SCAN_MISSING_VALUES`] for the form).
pub(crate) const SCAN_WRITES_WITHOUT_CHECKPOINT: &str = "
SELECT t.id, w.checkpoint_ns, w.checkpoint_id, count(*)
FROM unnest($1::text[]) AS t(id)
CROSS JOIN LATERAL (
    SELECT w.checkpoint_ns, w.checkpoint_id FROM checkpoint_writes w
    WHERE w.thread_id = t.id OFFSET 0) w
LEFT JOIN LATERAL (
    SELECT 1 AS found FROM checkpoints c
    WHERE c.thread_id = t.id AND c.checkpoint_ns = w.checkpoint_ns
      AND c.checkpoint_id = w.checkpoint_id
    LIMIT 1) x ON true
WHERE x.found IS NULL
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3";

/// A page of `list_threads`: up to $2 distinct thread ids after $1, ascending (the primary
/// key's order), expired threads left out.
pub(crate) const LIST_THREADS: &str = "
SELECT DISTINCT c.thread_id FROM checkpoints c
WHERE c.thread_id > $1
  AND NOT EXISTS (SELECT 1 FROM checkpoint_threads x WHERE x.thread_id = c.thread_id AND x.expires_at <= now())
ORDER BY c.thread_id
LIMIT $2";

/// Deletes every row of the threads `$1` whose TTL ran out (not their leases) and forgets
/// their TTL settings. A thread written again after it expired goes through this first, so
/// its old data never reappears. The TTL row is deleted first and decides: of racing calls,
/// one deletes the thread's rows.
pub(crate) const FORGET_EXPIRED: &str = "
WITH gone AS (
    DELETE FROM checkpoint_threads WHERE thread_id = ANY($1::text[]) AND expires_at <= now()
    RETURNING thread_id
),
c AS (DELETE FROM checkpoints WHERE thread_id IN (SELECT thread_id FROM gone)),
b AS (DELETE FROM checkpoint_blobs WHERE thread_id IN (SELECT thread_id FROM gone)),
w AS (DELETE FROM checkpoint_writes WHERE thread_id IN (SELECT thread_id FROM gone))
SELECT 1
";

/// `sweep_expired`: deletes every row of at most `$1` expired threads, oldest expiry first,
/// skipping threads a write holds (their TTL row is locked) so neither waits for the other;
/// returns how many threads it deleted.
pub(crate) const SWEEP_EXPIRED: &str = "
WITH doomed AS (
    SELECT thread_id FROM checkpoint_threads
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM checkpoint_threads t USING doomed d WHERE t.thread_id = d.thread_id
    RETURNING t.thread_id
),
c AS (DELETE FROM checkpoints WHERE thread_id IN (SELECT thread_id FROM gone)),
b AS (DELETE FROM checkpoint_blobs WHERE thread_id IN (SELECT thread_id FROM gone)),
w AS (DELETE FROM checkpoint_writes WHERE thread_id IN (SELECT thread_id FROM gone))
SELECT count(*) FROM gone
";

/// `set_thread_ttl` of `$1`: `$2` NULL (the saver's default, `$3` ms or none), 0 (pinned) or
/// the TTL in ms, applied from now. Run after [`FORGET_EXPIRED`], so an expired thread is
/// not brought back.
pub(crate) const SET_THREAD_TTL: &str = "
INSERT INTO checkpoint_threads (thread_id, ttl_ms, expires_at)
VALUES ($1, $2, CASE WHEN $2::bigint = 0 THEN NULL
                     WHEN $2::bigint > 0 THEN now() + $2::bigint * interval '1 millisecond'
                     WHEN $3::bigint IS NOT NULL THEN now() + $3::bigint * interval '1 millisecond'
                     END)
ON CONFLICT (thread_id) DO UPDATE SET ttl_ms = EXCLUDED.ttl_ms, expires_at = EXCLUDED.expires_at
";

/// Milliseconds until thread `$1` expires: no row when it has no TTL, no data or has
/// expired.
pub(crate) const THREAD_TTL: &str = "
SELECT ceil(extract(epoch FROM (t.expires_at - now())) * 1000)::bigint
FROM checkpoint_threads t
WHERE t.thread_id = $1 AND t.expires_at > now()
  AND (EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = $1)
       OR EXISTS (SELECT 1 FROM checkpoint_writes w WHERE w.thread_id = $1))
";

/// Refresh on read: thread `$1`'s TTL starts again (its own, else the default `$2` ms; a
/// thread read before it had a TTL row gets one), unless it is pinned or expired meanwhile.
pub(crate) const REFRESH_TTL: &str = "
WITH up AS (
    INSERT INTO checkpoint_threads AS t (thread_id, ttl_ms, expires_at)
    SELECT $1, NULL, now() + $2::bigint * interval '1 millisecond'
    WHERE $2::bigint IS NOT NULL
    ON CONFLICT (thread_id) DO UPDATE SET expires_at = CASE
        WHEN t.ttl_ms = 0 THEN NULL
        WHEN t.ttl_ms > 0 THEN now() + t.ttl_ms * interval '1 millisecond'
        ELSE EXCLUDED.expires_at END
    WHERE t.expires_at > now()
)
UPDATE checkpoint_threads t SET expires_at = now() + t.ttl_ms * interval '1 millisecond'
WHERE $2::bigint IS NULL AND t.thread_id = $1 AND t.ttl_ms > 0 AND t.expires_at > now()
";
