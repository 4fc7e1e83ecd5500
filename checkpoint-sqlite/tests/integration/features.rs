//! What is particular to SQLite: persistence across reopening, one writer with many
//! concurrent callers (in one saver and across savers on one file), value dedup, TTLs,
//! savers on a caller's pool, schema versions, and typed errors for unusable files.

use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::backend::{SweeperReport, SweeperStatus, spawn_sweeper_reporting};
use checkpoint_core::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, Error, ListOptions,
    PutOptions, PutWritesOptions, Saver, SaverExt, TypedValue,
};
use checkpoint_sqlite::{Durability, SqliteSaver, ThreadTtl};
use futures::future::join_all;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

use crate::common::{remove_db, scratch_dir};

/// A file in a fresh scratch directory, removed (with the directory) on drop.
struct TempDb {
    path: std::path::PathBuf,
}

impl TempDb {
    fn new(tag: &str) -> Self {
        Self {
            path: scratch_dir(tag).join("db.sqlite"),
        }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        remove_db(&self.path);
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Continues `config` (`None` parent: a new thread) with a checkpoint whose channel `step`
/// is `step` and, when given, channel `big` is `big`.
async fn put_step(
    saver: &dyn Saver,
    config: &CheckpointConfig,
    parent: Option<&Checkpoint>,
    step: u64,
    big: Option<&[u8]>,
) -> checkpoint_core::Result<(CheckpointConfig, Checkpoint)> {
    let mut next = parent.map_or_else(Checkpoint::new, Checkpoint::successor);
    let mut versions = ChannelVersions::new();
    versions.insert("step".into(), next.set("step", &step)?);
    if let Some(big) = big {
        versions.insert(
            "big".into(),
            next.set_typed("big", TypedValue::from_bytes(big.to_vec())),
        );
    }
    let stored = next.clone();
    let config = saver
        .put(
            config,
            next,
            CheckpointMetadata::new().with("step", step),
            versions,
            PutOptions::compare_and_set(),
        )
        .await?;
    Ok((config, stored))
}

async fn count(saver: &SqliteSaver, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(saver.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_survives_closing_and_reopening_the_file() {
    let db = TempDb::new("reopen");
    let big = vec![7u8; 70_000];
    let config = {
        let saver = SqliteSaver::open(&db.path).await.unwrap();
        let (c1, cp1) = put_step(&saver, &CheckpointConfig::new("t"), None, 1, Some(&big))
            .await
            .unwrap();
        let (c2, _) = put_step(&saver, &c1, Some(&cp1), 2, None).await.unwrap();
        saver
            .put_writes(
                &c2,
                vec![("out".into(), TypedValue::msgpack(&"x").unwrap())],
                "task-1",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        c2
    };
    let saver = SqliteSaver::open(&db.path).await.unwrap();
    let t = saver
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .expect("the latest checkpoint is still there");
    assert_eq!(t.config, config);
    assert_eq!(t.checkpoint.require::<u64>("step").unwrap(), 2);
    assert_eq!(t.checkpoint.channel_values["big"].bytes.as_ref(), &big[..]);
    assert_eq!(t.pending_writes.len(), 1);
    assert_eq!(
        saver
            .list_all(ListOptions::thread("t"))
            .await
            .unwrap()
            .len(),
        2
    );
}

/// The standard workload's W4 shape: 8 tasks on one saver, each continuing its own thread
/// with puts and put_writes as fast as it can. SQLite has one writer; the calls queue for
/// it and none fails (no `SQLITE_BUSY`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_on_one_saver_never_fail() {
    let db = TempDb::new("w4");
    let saver = SqliteSaver::open(&db.path).await.unwrap();
    let tasks = (0..8).map(|task| {
        let saver = saver.clone();
        tokio::spawn(async move {
            let thread = format!("w4-{task}");
            let mut config = CheckpointConfig::new(thread.as_str());
            let mut parent: Option<Checkpoint> = None;
            for step in 0..40 {
                let (c, cp) = put_step(&saver, &config, parent.as_ref(), step, None).await?;
                saver
                    .put_writes(
                        &c,
                        vec![("w".into(), TypedValue::msgpack(&step)?)],
                        "task",
                        PutWritesOptions::new(),
                    )
                    .await?;
                // Reads run beside the writes (WAL readers).
                saver.get_tuple(&c).await?.expect("just written");
                config = c;
                parent = Some(cp);
            }
            Ok::<(), Error>(())
        })
    });
    for result in join_all(tasks).await {
        result.unwrap().unwrap();
    }
    assert_eq!(count(&saver, "checkpoints").await, 8 * 40);
    assert_eq!(count(&saver, "checkpoint_writes").await, 8 * 40);
}

/// Two savers on one file (as two processes would be): their writes serialize on SQLite's
/// lock within the busy timeout, and of two compare-and-set puts on one parent exactly one
/// wins, whichever saver made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savers_sharing_a_file_serialize_and_compare_and_set_across_them() {
    let db = TempDb::new("shared");
    let a = SqliteSaver::open(&db.path).await.unwrap();
    let b = SqliteSaver::open(&db.path).await.unwrap();
    let (root, cp) = put_step(&a, &CheckpointConfig::new("shared"), None, 0, None)
        .await
        .unwrap();
    for round in 0..20u64 {
        let head = a
            .get_tuple(&CheckpointConfig::new("shared"))
            .await
            .unwrap()
            .unwrap();
        let (ra, rb) = tokio::join!(
            put_step(&a, &head.config, Some(&head.checkpoint), round + 1, None),
            put_step(&b, &head.config, Some(&head.checkpoint), round + 1, None),
        );
        let wins = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {ra:?} {rb:?}");
        for r in [ra, rb] {
            if let Err(e) = r {
                assert!(matches!(e, Error::Conflict { .. }), "round {round}: {e:?}");
            }
        }
    }
    // Unrelated threads written from both savers at once: none fails.
    let writers = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            tokio::spawn(async move {
                let thread = format!("side-{i}");
                let mut config = CheckpointConfig::new(thread.as_str());
                let mut parent = None;
                for step in 0..30 {
                    let (c, next) = put_step(&s, &config, parent.as_ref(), step, None).await?;
                    config = c;
                    parent = Some(next);
                }
                Ok::<(), Error>(())
            })
        });
    for r in join_all(writers).await {
        r.unwrap().unwrap();
    }
    assert_eq!(
        a.list_all(ListOptions::thread("shared"))
            .await
            .unwrap()
            .len(),
        21
    );
    let _ = (root, cp);
}

#[tokio::test]
async fn an_unchanged_value_is_stored_once() {
    let saver = SqliteSaver::open_in_memory().await.unwrap();
    let big = vec![1u8; 64 * 1024];
    let (mut config, mut parent) =
        put_step(&saver, &CheckpointConfig::new("dedup"), None, 0, Some(&big))
            .await
            .unwrap();
    for step in 1..20 {
        (config, parent) = put_step(&saver, &config, Some(&parent), step, None)
            .await
            .unwrap();
    }
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM checkpoint_blobs WHERE channel = 'big'")
            .fetch_one(saver.pool())
            .await
            .unwrap();
    assert_eq!(rows, 1);
    let all = saver.list_all(ListOptions::thread("dedup")).await.unwrap();
    assert_eq!(all.len(), 20);
    assert!(
        all.iter()
            .all(|t| t.checkpoint.channel_values["big"].bytes.len() == big.len())
    );
}

#[tokio::test]
async fn expired_threads_are_invisible_then_swept_and_pinned_ones_stay() {
    let db = TempDb::new("ttl");
    let saver = SqliteSaver::builder(&db.path)
        .default_ttl(Some(Duration::from_secs(3600)))
        .open()
        .await
        .unwrap();
    for thread in ["short", "pinned", "default"] {
        put_step(&saver, &CheckpointConfig::new(thread), None, 0, None)
            .await
            .unwrap();
    }
    let lease = saver
        .acquire_lease("short", "worker", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    saver
        .set_thread_ttl("pinned", ThreadTtl::Pinned)
        .await
        .unwrap();
    saver
        .set_thread_ttl("short", ThreadTtl::Expire(Duration::from_millis(1)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    assert_eq!(saver.thread_ttl("pinned").await.unwrap(), None);
    let left = saver.thread_ttl("default").await.unwrap().unwrap();
    assert!(left > Duration::from_secs(3000) && left <= Duration::from_secs(3600));
    assert!(
        saver
            .get_tuple(&CheckpointConfig::new("short"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        saver
            .list_all(ListOptions::thread("short"))
            .await
            .unwrap()
            .is_empty()
    );
    let everywhere = saver.list_all(ListOptions::default()).await.unwrap();
    let mut threads: Vec<_> = everywhere
        .iter()
        .map(|t| t.config.thread_id.as_str())
        .collect();
    threads.sort_unstable();
    assert_eq!(threads, ["default", "pinned"]);

    assert_eq!(
        count(&saver, "checkpoints").await,
        3,
        "invisible, not yet deleted"
    );
    assert_eq!(saver.sweep_expired(10).await.unwrap(), 1);
    assert_eq!(saver.sweep_expired(10).await.unwrap(), 0);
    assert_eq!(count(&saver, "checkpoints").await, 2);
    // The lease outlives the thread's data: its token still fences.
    let renewed = saver
        .renew_lease(&lease, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(renewed.token, lease.token);
}

/// Polls `status` until its report satisfies `done` (at most 20 s) and returns that report.
async fn wait_for(
    status: &SweeperStatus,
    what: &str,
    done: impl Fn(&SweeperReport) -> bool,
) -> SweeperReport {
    let start = std::time::Instant::now();
    loop {
        let report = status.report();
        if done(&report) {
            return report;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the sweeper never {what}: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_sweeper_reports_failures_and_recovers() {
    let db = TempDb::new("sweeper");
    let saver = SqliteSaver::builder(&db.path)
        .busy_timeout(Duration::from_millis(100))
        .open()
        .await
        .unwrap();
    for thread in ["a", "b"] {
        put_step(&saver, &CheckpointConfig::new(thread), None, 0, None)
            .await
            .unwrap();
        saver
            .set_thread_ttl(thread, ThreadTtl::Expire(Duration::from_millis(1)))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Another connection holds the file's write lock, beyond the saver's busy timeout.
    let other = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&db.path))
        .await
        .unwrap();
    let mut lock = other.begin_with("BEGIN EXCLUSIVE").await.unwrap();
    sqlx::query("INSERT INTO checkpoint_threads (thread_id, ttl_ms) VALUES ('other', 0)")
        .execute(&mut *lock)
        .await
        .unwrap();

    let status = Arc::new(SweeperStatus::default());
    let sweeper = spawn_sweeper_reporting(
        Arc::new(saver.clone()),
        Duration::from_millis(20),
        1,
        Arc::clone(&status),
    );
    let failed = wait_for(&status, "failed", |r| r.failures >= 1).await;
    assert_eq!(failed.swept, 0, "{failed:?}");
    let (at, error) = failed.last_failure.clone().unwrap();
    assert!(Some(at) <= failed.last_sweep, "{failed:?}");
    assert!(
        error.contains("locked") || error.contains("busy"),
        "{error}"
    );
    assert_eq!(
        error.matches("database is locked").count(),
        1,
        "the error and its sources, each cause once: {error}"
    );
    assert_eq!(count(&saver, "checkpoints").await, 2, "nothing deleted yet");

    lock.rollback().await.unwrap();
    // Batches of one: a sweep goes on while batches come back full.
    let done = wait_for(&status, "swept both threads", |r| r.swept >= 2).await;
    assert_eq!(done.swept, 2, "{done:?}");
    assert!(done.sweeps > done.failures, "{done:?}");
    assert!(
        done.failures >= failed.failures && done.last_failure.is_some(),
        "failures stay reported after sweeps succeed: {done:?}"
    );
    assert_eq!(count(&saver, "checkpoints").await, 0);
    sweeper.abort();
}

#[tokio::test]
async fn writing_an_expired_thread_starts_it_afresh() {
    let saver = SqliteSaver::open_in_memory().await.unwrap();
    let (c1, _) = put_step(&saver, &CheckpointConfig::new("t"), None, 1, Some(b"old"))
        .await
        .unwrap();
    saver
        .set_thread_ttl("t", ThreadTtl::Expire(Duration::from_millis(1)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A plain put naming the vanished parent: stored as the first checkpoint of the thread;
    // the old checkpoint and its value do not come back.
    let mut next = Checkpoint::new();
    let v = next.set("step", &2u64).unwrap();
    saver
        .put(
            &c1,
            next,
            CheckpointMetadata::new(),
            [("step".to_owned(), v)].into(),
            PutOptions::default(),
        )
        .await
        .unwrap();
    let all = saver.list_all(ListOptions::thread("t")).await.unwrap();
    assert_eq!(all.len(), 1);
    assert!(!all[0].checkpoint.channel_values.contains_key("big"));
    assert_eq!(count(&saver, "checkpoint_blobs").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_restart_the_ttl_only_when_asked_to() {
    for refresh in [false, true] {
        let db = TempDb::new("refresh");
        let saver = SqliteSaver::builder(&db.path)
            .refresh_on_read(refresh)
            .open()
            .await
            .unwrap();
        let (config, _) = put_step(&saver, &CheckpointConfig::new("t"), None, 0, None)
            .await
            .unwrap();
        saver
            .set_thread_ttl("t", ThreadTtl::Expire(Duration::from_secs(60)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = saver.thread_ttl("t").await.unwrap().unwrap();
        assert!(before <= Duration::from_millis(58_500), "{before:?}");
        saver.get_tuple(&config).await.unwrap().unwrap();
        let after = saver.thread_ttl("t").await.unwrap().unwrap();
        assert_eq!(
            after > before,
            refresh,
            "refresh_on_read({refresh}): {before:?} -> {after:?}"
        );
    }
}

#[tokio::test]
async fn a_saver_on_the_callers_pool() {
    let db = TempDb::new("pool");
    let options = SqliteConnectOptions::new()
        .filename(&db.path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    let pool = SqlitePoolOptions::new()
        .max_connections(3)
        .connect_with(options)
        .await
        .unwrap();
    let saver = SqliteSaver::from_pool(pool.clone()).await.unwrap();
    saver.setup().await.unwrap();
    let tasks = (0..6).map(|i| {
        let saver = saver.clone();
        async move {
            put_step(
                &saver,
                &CheckpointConfig::new(format!("p{i}")),
                None,
                0,
                None,
            )
            .await
        }
    });
    for r in join_all(tasks).await {
        r.unwrap();
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM checkpoints")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 6);
    // The caller's pool still works for the caller's own tables.
    sqlx::query("CREATE TABLE app (x INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_is_idempotent_and_safe_from_many_savers_at_once() {
    let db = TempDb::new("setup");
    let opens = (0..6).map(|_| SqliteSaver::open(&db.path));
    let savers: Vec<SqliteSaver> = join_all(opens)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    for s in &savers {
        s.setup().await.unwrap();
    }
    let versions: Vec<i64> = sqlx::query_scalar("SELECT v FROM checkpoint_rs_migrations")
        .fetch_all(savers[0].pool())
        .await
        .unwrap();
    assert_eq!(versions, [0, 1]);
}

#[tokio::test]
async fn a_database_from_a_newer_version_is_refused_untouched() {
    let db = TempDb::new("future");
    {
        let saver = SqliteSaver::open(&db.path).await.unwrap();
        put_step(&saver, &CheckpointConfig::new("t"), None, 0, None)
            .await
            .unwrap();
        sqlx::query("INSERT INTO checkpoint_rs_migrations (v) VALUES (99)")
            .execute(saver.pool())
            .await
            .unwrap();
    }
    let err = SqliteSaver::open(&db.path).await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let why = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        why.as_deref().is_some_and(|w| w.contains("version 99")),
        "{why:?}"
    );
    // Nothing was changed: the data is there for the newer build.
    let pool = SqlitePoolOptions::new()
        .connect_with(SqliteConnectOptions::new().filename(&db.path))
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM checkpoints")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn unusable_files_and_settings_are_typed_errors() {
    let dir = scratch_dir("bad");
    // Not a database.
    let garbage = dir.join("garbage.db");
    std::fs::write(&garbage, vec![0xAB; 8192]).unwrap();
    let err = SqliteSaver::open(&garbage).await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert_eq!(
        std::fs::read(&garbage).unwrap(),
        vec![0xAB; 8192],
        "left untouched"
    );
    // A directory that does not exist.
    let err = SqliteSaver::open(dir.join("missing/dir/db.sqlite"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Backend { .. } | Error::Unavailable { .. }),
        "{err:?}"
    );
    // A database in UTF-16 (reads pack bytes through text, which needs UTF-8).
    let utf16 = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(dir.join("utf16.db"))
                .create_if_missing(true),
        )
        .await
        .unwrap();
    sqlx::query("PRAGMA encoding = 'UTF-16le'")
        .execute(&utf16)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE app (x TEXT)")
        .execute(&utf16)
        .await
        .unwrap();
    let err = SqliteSaver::from_pool(utf16.clone()).await.unwrap_err();
    let why = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        why.as_deref().is_some_and(|w| w.contains("UTF-8")),
        "{err:?}"
    );
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table'")
        .fetch_one(&utf16)
        .await
        .unwrap();
    assert_eq!(tables, 1, "nothing was created in it");
    utf16.close().await;
    // Settings.
    let err = SqliteSaver::builder(dir.join("x.db"))
        .readers(0)
        .open()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    let err = SqliteSaver::open_in_memory()
        .await
        .unwrap()
        .set_thread_ttl("t", ThreadTtl::Expire(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    let _ = std::fs::remove_file(&garbage);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn full_durability_flushes_every_commit() {
    let db = TempDb::new("full");
    let saver = SqliteSaver::builder(&db.path)
        .durability(Durability::Full)
        .open()
        .await
        .unwrap();
    let (config, _) = put_step(&saver, &CheckpointConfig::new("t"), None, 0, None)
        .await
        .unwrap();
    let (journal, synchronous): (String, i64) =
        sqlx::query_as("SELECT * FROM pragma_journal_mode, pragma_synchronous")
            .fetch_one(saver.pool())
            .await
            .unwrap();
    assert_eq!((journal.as_str(), synchronous), ("wal", 2));
    assert!(saver.get_tuple(&config).await.unwrap().is_some());
}

#[tokio::test]
async fn an_in_memory_saver_is_private_and_shared_by_its_clones() {
    let a = SqliteSaver::open_in_memory().await.unwrap();
    let b = SqliteSaver::open_in_memory().await.unwrap();
    let (config, _) = put_step(&a, &CheckpointConfig::new("t"), None, 0, None)
        .await
        .unwrap();
    let clone: Arc<dyn Saver> = Arc::new(a.clone());
    assert!(clone.get_tuple(&config).await.unwrap().is_some());
    assert!(b.get_tuple(&config).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_integrity_scan_finds_a_lost_value_and_orphan_writes() {
    let db = TempDb::new("integrity");
    let saver = SqliteSaver::open(&db.path).await.unwrap();
    let pool = saver.pool().clone();
    checkpoint_conformance::integrity::integrity_scan_scenario(
        &saver,
        "scanned",
        |thread, version| async move {
            let key = match version {
                checkpoint_core::ChannelVersion::Int(n) => format!("i{n}"),
                checkpoint_core::ChannelVersion::Str(s) => format!("s{s}"),
            };
            let gone = sqlx::query(
                "DELETE FROM checkpoint_blobs WHERE thread_id = ? AND channel = ? AND version = ?",
            )
            .bind(&thread)
            .bind(checkpoint_conformance::integrity::LOST_CHANNEL)
            .bind(&key)
            .execute(&pool)
            .await
            .unwrap();
            assert_eq!(gone.rows_affected(), 1);
        },
    )
    .await;
}

/// Another copy of SQLite in this process (Python's `sqlite3` module beside the Python
/// binding, say) deletes the WAL when it closes if it can take SQLite's exclusive lock on the
/// database file, and truncates the `-shm` file when it opens if nothing holds the
/// dead-man-switch byte. This process's POSIX locks never stop it; the saver's
/// open-file-description locks must. The test asks for those locks as SQLite's unix VFS does
/// (`os_unix.c`), from this process, and closes its descriptors, which drops every POSIX
/// lock this process holds on the files, as the other copy's closing does.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm",
        target_arch = "riscv64"
    )
))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sqlite_in_the_process_cannot_take_the_locks_that_delete_the_log() {
    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;

    fn write_lock(l_start: libc::off_t, l_len: libc::off_t) -> libc::flock {
        libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start,
            l_len,
            l_pid: 0,
        }
    }
    // SQLite's shared-lock range (its exclusive lock covers it) and the `-shm` file's
    // dead-man-switch byte.
    let exclusive = write_lock(0x4000_0002, 510);
    let dms = write_lock(128, 1);
    let open_rw = |path: &std::path::Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    };
    let exclusive_refused = |path: &std::path::Path| {
        let file = open_rw(path);
        let outcome = fcntl(&file, FcntlArg::F_SETLK(&exclusive));
        // Dropping `file` closes it: this process's POSIX locks on the file are gone now,
        // the saver's connections' included.
        match outcome {
            Err(Errno::EAGAIN | Errno::EACCES) => true,
            Ok(_) => false,
            Err(e) => panic!("{e}"),
        }
    };

    let db = TempDb::new("guard");
    let mut shm_path = db.path.clone().into_os_string();
    shm_path.push("-shm");
    let shm_path = std::path::PathBuf::from(shm_path);

    let saver = SqliteSaver::open(&db.path).await.unwrap();
    assert!(saver.wal_guarded());
    let (c1, cp1) = put_step(&saver, &CheckpointConfig::new("t"), None, 1, None)
        .await
        .unwrap();
    assert!(
        exclusive_refused(&db.path),
        "the exclusive lock that deletes the log was granted"
    );
    {
        let shm = open_rw(&shm_path);
        let mut probe = dms;
        fcntl(&shm, FcntlArg::F_GETLK(&mut probe)).unwrap();
        assert_eq!(
            probe.l_type,
            libc::F_RDLCK as libc::c_short,
            "nothing holds the -shm file's dead-man-switch byte"
        );
    }
    // The saver goes on; a second saver of the file shares the locks, which stay while
    // either is open.
    let (c2, _) = put_step(&saver, &c1, Some(&cp1), 2, None).await.unwrap();
    let again = SqliteSaver::open(&db.path).await.unwrap();
    assert!(again.wal_guarded());
    let latest = again.get_tuple(&CheckpointConfig::new("t")).await.unwrap();
    assert_eq!(latest.map(|t| t.config), Some(c2));
    drop(saver);
    assert!(exclusive_refused(&db.path));
    // Once no saver of this process has the file open, the locks are released; a saver
    // that opens it later takes them again.
    drop(again);
    assert!(
        !exclusive_refused(&db.path),
        "the locks outlived their savers"
    );
    let reopened = SqliteSaver::open(&db.path).await.unwrap();
    assert!(reopened.wal_guarded() && exclusive_refused(&db.path));
    assert_eq!(count(&reopened, "checkpoints").await, 2);
    // In memory and on a caller's pool there is nothing to guard.
    assert!(!SqliteSaver::open_in_memory().await.unwrap().wal_guarded());
}
