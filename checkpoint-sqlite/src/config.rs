//! [`SqliteSaverBuilder`]: where the database lives, how durable a commit is, and the
//! connections.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use checkpoint_core::{Error, Result};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::core::Inner;
use crate::error::{classify, is_busy};
use crate::guard::FileGuard;
use crate::wal::{BACKSTOP_PAGES, WalCheckpointer};

/// How durable a committed write is (SQLite's `synchronous` setting in WAL mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous=NORMAL` (the default): a commit survives a crash of the process at any
    /// instant, and the database never becomes corrupt; a power loss or an operating system
    /// crash may lose the commits since the last WAL checkpoint.
    #[default]
    Normal,
    /// `synchronous=FULL`: every commit is flushed to disk before it returns, so it also
    /// survives a power loss, at the cost of one `fsync` per write.
    Full,
}

pub use checkpoint_core::ThreadTtl;

#[derive(Clone, Debug)]
enum Location {
    File(PathBuf),
    Memory,
}

/// Configures and opens a [`SqliteSaver`](crate::SqliteSaver).
///
/// ```no_run
/// # async fn demo() -> checkpoint_core::Result<()> {
/// use std::time::Duration;
/// use checkpoint_sqlite::{Durability, SqliteSaver};
///
/// let saver = SqliteSaver::builder("agents.db")
///     .durability(Durability::Full)
///     .readers(8)
///     .default_ttl(Some(Duration::from_secs(30 * 24 * 3600)))
///     .open()
///     .await?;
/// # let _ = saver; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteSaverBuilder {
    location: Location,
    durability: Durability,
    busy_timeout: Duration,
    readers: u32,
    default_ttl: Option<Duration>,
    refresh_on_read: bool,
}

impl fmt::Debug for SqliteSaverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSaverBuilder")
            .field("location", &self.location)
            .field("durability", &self.durability)
            .field("busy_timeout", &self.busy_timeout)
            .field("readers", &self.readers)
            .field("default_ttl", &self.default_ttl)
            .field("refresh_on_read", &self.refresh_on_read)
            .finish()
    }
}

impl SqliteSaverBuilder {
    /// A database file at `path`, created when missing.
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self::with_location(Location::File(path.as_ref().to_owned()))
    }

    /// A private in-memory database: gone when the saver (and its clones) are dropped.
    pub fn in_memory() -> Self {
        Self::with_location(Location::Memory)
    }

    fn with_location(location: Location) -> Self {
        Self {
            location,
            durability: Durability::default(),
            busy_timeout: Duration::from_secs(5),
            readers: 4,
            default_ttl: None,
            refresh_on_read: false,
        }
    }

    /// How durable a commit is (default [`Durability::Normal`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a write waits for another process's write to finish before it fails with a
    /// transient error (default 5 s). Writes of one saver never wait on each other this way:
    /// they queue for the saver's one writer connection.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How many connections serve reads concurrently (default 4; reads never block writes in
    /// WAL mode). An in-memory database has one connection for everything.
    pub fn readers(mut self, n: u32) -> Self {
        self.readers = n;
        self
    }

    /// A TTL for every thread, counted from its last write (`None`, the default: data never
    /// expires). An expired thread is invisible at once; its rows are deleted by
    /// [`Saver::sweep_expired`](checkpoint_core::Saver::sweep_expired) or by its next write.
    pub fn default_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Whether reads of a thread also restart its TTL (default `false`: only writes do).
    pub fn refresh_on_read(mut self, yes: bool) -> Self {
        self.refresh_on_read = yes;
        self
    }

    /// The writer's options: WAL (persistent in the file) and the chosen `synchronous`.
    fn writer_options(&self, path: &Path) -> SqliteConnectOptions {
        self.reader_options(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match self.durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            })
            .create_if_missing(true)
            // Checkpoints run in the background (see the `wal` module); this is the backstop.
            .pragma("wal_autocheckpoint", BACKSTOP_PAGES.to_string())
            // After a checkpoint, a WAL file that grew beyond 64 MiB is cut back to it.
            .pragma("journal_size_limit", (64 << 20).to_string())
    }

    fn reader_options(&self, path: &Path) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(self.busy_timeout)
            .foreign_keys(false)
    }

    fn check(&self) -> Result<()> {
        if self.readers == 0 {
            return Err(Error::invalid("readers must be at least 1"));
        }
        if self.default_ttl.is_some_and(|t| t.as_millis() == 0) {
            return Err(Error::invalid("default_ttl must be at least 1 ms"));
        }
        Ok(())
    }

    /// The writer's pool. Opening a file that other connections are opening at the same
    /// moment can fail with `SQLITE_BUSY` at once, without the busy timeout's wait: setting
    /// a new file to WAL takes an exclusive lock after a shared one, and SQLite does not wait
    /// on such an upgrade (it could deadlock). Retried with backoff until the busy timeout
    /// has passed, so concurrent opens wait like concurrent writes do.
    async fn connect_writer(
        &self,
        path: &Path,
        keep: impl Fn(SqlitePoolOptions) -> SqlitePoolOptions,
    ) -> Result<SqlitePool> {
        let deadline = Instant::now() + self.busy_timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            match keep(SqlitePoolOptions::new().max_connections(1))
                .connect_with(self.writer_options(path))
                .await
            {
                Ok(pool) => return Ok(pool),
                Err(e) if is_busy(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(classify(e)),
            }
        }
    }

    /// Opens the connections: the state of a new saver (whose schema is not set up yet).
    pub(crate) async fn connect(self) -> Result<Inner> {
        self.check()?;
        let keep = |options: SqlitePoolOptions| {
            options
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        };
        let (writer, reader, location, wal, guard) = match &self.location {
            Location::Memory => {
                // One connection for everything: an in-memory database lives and dies with
                // its connection, so the pool keeps it open for good.
                let options = SqliteConnectOptions::new()
                    .in_memory(true)
                    .foreign_keys(false);
                let pool = keep(SqlitePoolOptions::new().max_connections(1))
                    .connect_with(options)
                    .await
                    .map_err(classify)?;
                (pool, None, "memory".to_owned(), None, None)
            }
            Location::File(path) => {
                let writer = self.connect_writer(path, keep).await?;
                // Readers open lazily, after the writer created the file and set WAL mode.
                let reader = SqlitePoolOptions::new()
                    .max_connections(self.readers)
                    .connect_lazy_with(self.reader_options(path).read_only(true));
                let wal = WalCheckpointer::start(self.reader_options(path)).await?;
                // A read opens the WAL and its `-shm` file, which the guard locks.
                sqlx::query("SELECT 1 FROM sqlite_schema LIMIT 1")
                    .execute(&writer)
                    .await
                    .map_err(classify)?;
                let guard_path = path.clone();
                let guard = tokio::task::spawn_blocking(move || FileGuard::acquire(&guard_path))
                    .await
                    .map_err(|e| Error::Backend {
                        backend: "sqlite",
                        source: Box::new(e),
                    })?;
                (
                    writer,
                    Some(reader),
                    path.display().to_string(),
                    Some(wal),
                    Some(guard),
                )
            }
        };
        Ok(Inner::new(
            writer,
            reader,
            location,
            self.default_ttl,
            self.refresh_on_read,
            wal,
            guard,
        ))
    }
}

/// The state of a saver over a pool the caller made: every read and write goes through it.
pub(crate) fn from_pool(pool: SqlitePool) -> Inner {
    Inner::new(pool, None, "pool".to_owned(), None, false, None, None)
}

/// A duration in whole milliseconds, at least 1 for a non-zero duration.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4);
    if ms == 0 && !d.is_zero() { 1 } else { ms }
}
