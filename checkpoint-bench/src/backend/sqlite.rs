//! `--backend sqlite`: [`SqliteSaver`] on a fresh database file per repetition (default
//! settings: WAL, `synchronous=NORMAL`), bytes stored as the file's size, and floors
//! measured on a file of their own in the same directory, with the same journal mode and
//! durability, through the same driver.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use checkpoint_core::{Error, Result, Saver, async_trait};
use checkpoint_sqlite::SqliteSaver;
use checkpoint_sqlite::sqlx::{
    self,
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
    },
};

use super::{Backend, BackendOptions, Floors};
use crate::payload::ThreadPayload;

/// Samples per latency floor, and inserts per task for the throughput floor.
const FLOOR_SAMPLES: usize = 200;
const FLOOR_TASKS: usize = 8;
/// Rows, and samples per floor call, of the bulk read floor (as for PostgreSQL).
const BULK_ROWS: i64 = 50;
const BULK_SAMPLES: usize = 15;

fn backend_error(e: sqlx::Error) -> Error {
    Error::Backend {
        backend: "sqlite",
        source: Box::new(e),
    }
}

/// The SQLite backend. Floors, on one connection of a WAL file with `synchronous=NORMAL`:
/// `INSERT`+`COMMIT` p50 of a 1 KB row (as for the server backends), of one row with the
/// bytes of the median W1 put's values (the basis for `put`), and of two 1 KB rows in one
/// statement (the basis for `put_writes`); primary-key `SELECT` p50 of a 70 KB row; one
/// `SELECT` of 50 distinct 70 KB rows; and `INSERT`+`COMMIT` throughput of 8 tasks sharing
/// the one connection (SQLite has one writer; the saver's W4 tasks share its writer too).
#[derive(Debug)]
pub struct SqliteBackend {
    dir: PathBuf,
    floor: SqlitePool,
    /// Bytes of the median W1 put's values.
    put_row: Vec<u8>,
    rep: Mutex<usize>,
    current: Mutex<Option<(SqliteSaver, PathBuf)>>,
}

impl SqliteBackend {
    /// A directory for the run: `options.url` (a directory path) or a new one under the
    /// system's temporary directory.
    pub async fn open(options: &BackendOptions) -> Result<Self> {
        let dir = options.url.as_ref().map_or_else(
            || std::env::temp_dir().join(format!("cpbench-sqlite-{}", std::process::id())),
            PathBuf::from,
        );
        std::fs::create_dir_all(&dir).map_err(|e| Error::Backend {
            backend: "sqlite",
            source: Box::new(e),
        })?;
        let floor = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(dir.join("floor.db"))
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal),
            )
            .await
            .map_err(backend_error)?;
        for statement in [
            "CREATE TABLE IF NOT EXISTS small (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)",
            "CREATE TABLE IF NOT EXISTS big (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)",
        ] {
            sqlx::query(statement)
                .execute(&floor)
                .await
                .map_err(backend_error)?;
        }
        for id in 0..=BULK_ROWS {
            let row = crate::rng::SplitMix64::for_thread(43, id as u64).text(70 * 1024);
            sqlx::query("INSERT OR REPLACE INTO big VALUES (?1, ?2)")
                .bind(id)
                .bind(row.into_bytes())
                .execute(&floor)
                .await
                .map_err(backend_error)?;
        }
        // The values of the put at step S/2 of the default workload (thread 0).
        let steps = crate::Params::default().steps;
        let thread = ThreadPayload::generate(42, 0, "thread-00000".into(), steps)?;
        let median = &thread.steps[steps / 2];
        let put_len = median.messages_value.len() + median.scratch_value.len();
        let put_row = crate::rng::SplitMix64::for_thread(42, 9)
            .text(put_len)
            .into_bytes();
        Ok(Self {
            dir,
            floor,
            put_row,
            rep: Mutex::new(0),
            current: Mutex::new(None),
        })
    }

    fn take_current(&self) -> Option<(SqliteSaver, PathBuf)> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn remove(&self, path: &std::path::Path) {
        if std::env::var_os("CHECKPOINT_BENCH_KEEP").is_some() {
            eprintln!(
                "[sqlite] CHECKPOINT_BENCH_KEEP is set: keeping {}",
                path.display()
            );
            return;
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
    }

    async fn insert_p50(&self, rows: &[&[u8]]) -> Result<f64> {
        let statement = match rows.len() {
            1 => "INSERT INTO small (payload) VALUES (?1)",
            2 => "INSERT INTO small (payload) VALUES (?1), (?2)",
            _ => return Err(Error::invalid("floor inserts of 1 or 2 rows")),
        };
        // On one connection held throughout, as the saver holds a warm one between its
        // operations: a pool acquire and release per sample would add the pool's own work
        // (a release test, a hand-off to the connection's worker thread) to the floor.
        let mut conn = self.floor.acquire().await.map_err(backend_error)?;
        let mut samples = Vec::with_capacity(FLOOR_SAMPLES);
        for _ in 0..FLOOR_SAMPLES {
            let mut query = sqlx::query(statement);
            for row in rows {
                query = query.bind(*row);
            }
            let t = Instant::now();
            query.execute(&mut *conn).await.map_err(backend_error)?;
            samples.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(p50(samples))
    }
}

fn p50(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &str {
        "sqlite"
    }

    async fn fresh(&self) -> Result<Arc<dyn Saver>> {
        if let Some((saver, path)) = self.take_current() {
            saver.pool().close().await;
            self.remove(&path);
        }
        let rep = {
            let mut rep = self.rep.lock().unwrap_or_else(PoisonError::into_inner);
            *rep += 1;
            *rep
        };
        let path = self.dir.join(format!("rep-{rep}.db"));
        self.remove(&path);
        let saver = SqliteSaver::open(&path).await?;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some((saver.clone(), path));
        Ok(Arc::new(saver))
    }

    async fn bytes_stored(&self, _saver: &dyn Saver) -> Result<Option<u64>> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some((saver, _)) = current else {
            return Ok(None);
        };
        // Everything committed moves from the WAL into the database file, which is then the
        // whole of what is stored: pages in use and free pages alike.
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(saver.pool())
            .await
            .map_err(backend_error)?;
        let bytes: i64 = sqlx::query_scalar(
            "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size",
        )
        .fetch_one(saver.pool())
        .await
        .map_err(backend_error)?;
        Ok(u64::try_from(bytes).ok())
    }

    async fn floors(&self) -> Result<Option<Floors>> {
        let kb = crate::rng::SplitMix64::for_thread(42, 8)
            .text(1024)
            .into_bytes();
        let one_kb = self.insert_p50(&[&kb]).await?;
        let put_bytes = self.insert_p50(&[&self.put_row]).await?;
        let two_kb = self.insert_p50(&[&kb, &kb]).await?;
        // Reads on one held connection too (see `insert_p50`).
        let mut conn = self.floor.acquire().await.map_err(backend_error)?;
        let mut selects = Vec::with_capacity(FLOOR_SAMPLES);
        for _ in 0..FLOOR_SAMPLES {
            let t = Instant::now();
            let payload: Vec<u8> = sqlx::query_scalar("SELECT payload FROM big WHERE id = ?1")
                .bind(BULK_ROWS)
                .fetch_one(&mut *conn)
                .await
                .map_err(backend_error)?;
            selects.push(t.elapsed().as_secs_f64() * 1e3);
            debug_assert_eq!(payload.len(), 70 * 1024);
        }
        let mut bulk = Vec::with_capacity(BULK_SAMPLES);
        for _ in 0..BULK_SAMPLES {
            let t = Instant::now();
            let rows: Vec<Vec<u8>> = sqlx::query_scalar("SELECT payload FROM big WHERE id < ?1")
                .bind(BULK_ROWS)
                .fetch_all(&mut *conn)
                .await
                .map_err(backend_error)?;
            bulk.push(t.elapsed().as_secs_f64() * 1e3);
            if rows.len() != BULK_ROWS as usize {
                return Err(Error::invalid("the bulk floor rows vanished"));
            }
        }
        drop(conn);
        // The throughput floor's tasks take turns at the one connection through the pool,
        // as the saver's W4 tasks take turns at its one writer.
        let started = Instant::now();
        let tasks: Vec<_> = (0..FLOOR_TASKS)
            .map(|_| {
                let pool = self.floor.clone();
                let kb = kb.clone();
                tokio::spawn(async move {
                    for _ in 0..FLOOR_SAMPLES / 2 {
                        sqlx::query("INSERT INTO small (payload) VALUES (?1)")
                            .bind(&kb)
                            .execute(&pool)
                            .await?;
                    }
                    Ok::<(), sqlx::Error>(())
                })
            })
            .collect();
        for t in tasks {
            t.await
                .map_err(|e| Error::Backend {
                    backend: "sqlite",
                    source: Box::new(e),
                })?
                .map_err(backend_error)?;
        }
        let per_s = (FLOOR_TASKS * FLOOR_SAMPLES / 2) as f64 / started.elapsed().as_secs_f64();
        sqlx::query("DELETE FROM small")
            .execute(&self.floor)
            .await
            .map_err(backend_error)?;
        Ok(Some(
            Floors::new()
                .figure("insert_commit_p50_ms", one_kb)
                .figure("insert_commit_put_bytes_p50_ms", put_bytes)
                .figure("insert_commit_2x1kb_p50_ms", two_kb)
                .figure("pk_select_70kb_p50_ms", p50(selects))
                .figure("select_50x70kb_p50_ms", p50(bulk))
                .figure("insert_commit_8tasks_per_s", per_s)
                .compare("put_p50_ms", "insert_commit_put_bytes_p50_ms")
                .compare("put_writes_p50_ms", "insert_commit_2x1kb_p50_ms")
                .compare("get_tuple_latest_p50_ms", "pk_select_70kb_p50_ms")
                .compare("get_tuple_by_id_p50_ms", "pk_select_70kb_p50_ms")
                .compare("filtered_list_p50_ms", "select_50x70kb_p50_ms")
                .compare("w4_ops_per_s", "insert_commit_8tasks_per_s"),
        ))
    }

    async fn teardown(&self) -> Result<()> {
        if let Some((saver, path)) = self.take_current() {
            saver.pool().close().await;
            self.remove(&path);
        }
        self.floor.close().await;
        self.remove(&self.dir.join("floor.db"));
        if std::env::var_os("CHECKPOINT_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir(&self.dir);
        }
        Ok(())
    }
}
