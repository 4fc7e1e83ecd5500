//! The state every module shares: the connections and the settings. Modules depend on this
//! one, never on `saver.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::Result;
use sqlx::sqlite::{Sqlite, SqlitePool};
use sqlx::{SqliteConnection, Transaction};
use tokio::sync::{Mutex, MutexGuard};

use crate::config::duration_ms;
use crate::error::classify;
use crate::guard::FileGuard;
use crate::wal::WalCheckpointer;

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    /// The one connection that writes (SQLite has one writer at a time: the saver's writes
    /// queue here instead of failing with `SQLITE_BUSY`), kept out of its pool between
    /// writes (see [`Warm`]).
    pub(crate) writer: Arc<Warm>,
    /// Connections that read, concurrently with the writer (WAL); the same as `writer`
    /// when one pool does both.
    pub(crate) reader: Arc<Warm>,
    /// Serializes this saver's writes also when the caller's pool has several connections.
    write_gate: Mutex<()>,
    /// Where the database lives, for `Debug`.
    pub(crate) location: String,
    /// The default TTL of threads, in ms.
    pub(crate) default_ttl_ms: Option<i64>,
    pub(crate) refresh_on_read: bool,
    /// The background WAL checkpointer of a file this saver opened (none in memory or on a
    /// caller's pool).
    wal: Option<WalCheckpointer>,
    /// The locks that keep another copy of SQLite in this process from deleting the WAL of
    /// a file this saver opened (see the `guard` module).
    guard: Option<FileGuard>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSaver")
            .field("location", &self.location)
            .field(
                "readers",
                &self.reader.pool().options().get_max_connections(),
            )
            .field("default_ttl_ms", &self.default_ttl_ms)
            .field("refresh_on_read", &self.refresh_on_read)
            .field("wal_guarded", &self.wal_guarded())
            .finish()
    }
}

impl Inner {
    /// The state over `writer` and `reader` pools (`None`: the writer's pool reads too).
    pub(crate) fn new(
        writer: SqlitePool,
        reader: Option<SqlitePool>,
        location: String,
        default_ttl: Option<Duration>,
        refresh_on_read: bool,
        wal: Option<WalCheckpointer>,
        guard: Option<FileGuard>,
    ) -> Self {
        let writer = Arc::new(Warm::new(writer));
        let reader = reader.map_or_else(|| Arc::clone(&writer), |r| Arc::new(Warm::new(r)));
        Self {
            writer,
            reader,
            write_gate: Mutex::new(()),
            location,
            default_ttl_ms: default_ttl.map(duration_ms),
            refresh_on_read,
            wal,
            guard,
        }
    }

    /// Whether this saver holds the locks that keep another copy of SQLite in the process
    /// from deleting its WAL (see the `guard` module).
    pub(crate) fn wal_guarded(&self) -> bool {
        self.guard.as_ref().is_some_and(FileGuard::active)
    }

    /// Records that a write committed (the background checkpointer counts them).
    pub(crate) fn wrote(&self) {
        if let Some(wal) = &self.wal {
            wal.wrote();
        }
    }

    /// Waits for this saver's turn to write.
    pub(crate) async fn write_turn(&self) -> MutexGuard<'_, ()> {
        self.write_gate.lock().await
    }

    /// Waits for this saver's turn to write and begins a `BEGIN IMMEDIATE` transaction on
    /// the writer (taking SQLite's write lock up front, so it never fails half-way on a
    /// lock another process holds). Dropped without [`WriteTx::commit`], it rolls back.
    pub(crate) async fn begin_write(&self) -> Result<WriteTx<'_>> {
        let turn = self.write_turn().await;
        let tx = self
            .writer
            .through_pool(self.writer.pool().begin_with("BEGIN IMMEDIATE"))
            .await
            .map_err(classify)?;
        Ok(WriteTx {
            tx,
            inner: self,
            _turn: turn,
        })
    }
}

/// A pool and the connections the saver keeps out of it between operations (see
/// [`checkpoint_core::backend::Warm`]).
pub(crate) type Warm = checkpoint_core::backend::Warm<Sqlite>;

/// Awaits `$run`, one sqlx call on `$conn: &mut SqliteConnection`, on a connection of
/// `$warm` (an `Arc<Warm>`), which stays warm if the call succeeds; failing to get a
/// connection returns the classified error from the enclosing function.
macro_rules! warm {
    ($warm:expr, |$conn:ident| $run:expr) => {
        checkpoint_core::backend::warm!($warm, $crate::error::classify, |$conn| $run)
    };
}
pub(crate) use warm;

/// A write transaction of this saver (see [`Inner::begin_write`]).
pub(crate) struct WriteTx<'a> {
    tx: Transaction<'static, Sqlite>,
    inner: &'a Inner,
    _turn: MutexGuard<'a, ()>,
}

impl WriteTx<'_> {
    /// The transaction's connection.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    /// Commits everything done through [`conn`](Self::conn).
    pub(crate) async fn commit(self) -> Result<()> {
        self.tx.commit().await.map_err(classify)?;
        self.inner.wrote();
        Ok(())
    }
}
