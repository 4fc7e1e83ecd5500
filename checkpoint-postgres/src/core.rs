//! The state every module shares: the pool and the schema. Modules depend on this one,
//! never on `saver.rs`.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use tokio::runtime::Handle;

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    /// Connections between operations, checked out of `pool` (see [`Warm`]).
    pub(crate) warm: Arc<Warm>,
    /// The schema the tables live in, when configured (else the connection's search path).
    pub(crate) schema: Option<String>,
    /// The TTL of threads without their own, in ms (`None`: no expiry).
    pub(crate) default_ttl_ms: Option<i64>,
    /// Whether `get_tuple` restarts the TTL of the thread it read.
    pub(crate) refresh_on_read: bool,
}

impl Inner {
    /// A saver's state over `pool`.
    pub(crate) fn new(
        pool: PgPool,
        schema: Option<String>,
        default_ttl_ms: Option<i64>,
        refresh_on_read: bool,
    ) -> Self {
        Self {
            warm: Arc::new(Warm::new(pool.clone())),
            pool,
            schema,
            default_ttl_ms,
            refresh_on_read,
        }
    }
}

/// How long a connection stays warm after an operation before it goes back to the pool.
const WARM_FOR: Duration = Duration::from_millis(250);

/// Connections kept checked out of the pool between operations.
///
/// sqlx's pool tests every connection it gets back with a ping, a round trip to the server
/// after each operation that competes with the next one for the client's and the server's
/// CPU (measured: a 70 KB `get_tuple` 0.30 ms through the pool against 0.20 ms on a held
/// connection). An operation that succeeded leaves its connection in a known state, so it
/// is kept here for the next operation instead, without the ping. Anything else (an error,
/// a cancelled call, a connection kept longer than [`WARM_FOR`], the pool closing) hands the
/// connection back to the pool, which tests it as before. The connections stay counted by
/// the pool and bounded by its size; a background task returns idle ones after
/// [`WARM_FOR`] so the pool's other users wait at most that long for them, and returns all
/// of them as soon as the pool is closed.
pub(crate) struct Warm {
    pool: PgPool,
    /// Idle warm connections, most recently used last, with when each was put here.
    idle: Mutex<Vec<(PoolConnection<Postgres>, Instant)>>,
    /// Whether the task returning idle connections runs.
    returning: AtomicBool,
    /// The runtime it runs (or last ran) on.
    runtime: Mutex<Option<Handle>>,
}

impl Warm {
    fn new(pool: PgPool) -> Self {
        Self {
            pool,
            idle: Mutex::new(Vec::new()),
            returning: AtomicBool::new(false),
            runtime: Mutex::new(None),
        }
    }

    /// A connection for one operation: a warm one if there is one, else the pool's. Call
    /// [`Conn::done`] when the operation succeeded.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<Conn, sqlx::Error> {
        if let Some(conn) = self.pop() {
            return Ok(Conn {
                conn,
                warm: Arc::clone(self),
            });
        }
        let conn = self.pool.acquire().await?;
        Ok(Conn {
            conn,
            warm: Arc::clone(self),
        })
    }

    fn pop(&self) -> Option<PoolConnection<Postgres>> {
        if self.pool.is_closed() {
            return None;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let (conn, since) = idle.pop()?;
        if since.elapsed() <= WARM_FOR {
            return Some(conn);
        }
        // Older ones sat even longer: all of them go back to the pool.
        let stale: Vec<_> = std::mem::take(&mut *idle);
        drop(idle);
        drop(stale);
        drop(conn);
        None
    }

    fn push(self: &Arc<Self>, conn: PoolConnection<Postgres>) {
        if self.pool.is_closed() {
            return;
        }
        // Only inside a runtime: returning a connection to sqlx's pool spawns a task.
        let Ok(handle) = Handle::try_current() else {
            return;
        };
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((conn, Instant::now()));
        if !self.returning.swap(true, Ordering::AcqRel) {
            *self.runtime.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle.clone());
            let task = Returning(Arc::downgrade(self));
            handle.spawn(return_idle(task, self.pool.close_event()));
        }
    }

    /// Hands back connections idle for longer than `age` (all of them: `Duration::ZERO`).
    fn return_idle(&self, age: Duration) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let keep = idle.partition_point(|(_, since)| since.elapsed() > age);
        let stale: Vec<_> = idle.drain(..keep).collect();
        drop(idle);
        drop(stale);
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        // The connections go back to the pool, which spawns a task for each: in the
        // runtime they were used in when the saver is dropped outside one.
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        match Handle::try_current() {
            Ok(_) => drop(idle),
            // A thread being torn down can neither spawn nor enter a runtime: the
            // connections are closed without going back.
            Err(e) if e.is_thread_local_destroyed() => {
                for (conn, _) in idle {
                    drop(conn.detach());
                }
            }
            Err(_) => {
                let runtime = self
                    .runtime
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner);
                let _entered = runtime.as_ref().map(Handle::enter);
                drop(idle);
            }
        }
    }
}

/// Marks the task returning idle connections as running until it ends, or its runtime
/// shuts down and drops it; the next warm connection then starts a new one.
struct Returning(Weak<Warm>);

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(warm) = self.0.upgrade() {
            warm.returning.store(false, Ordering::Release);
        }
    }
}

/// Returns warm connections to the pool once idle for [`WARM_FOR`], and all of them when the
/// pool closes; ends with the saver.
async fn return_idle(task: Returning, closed: sqlx::pool::CloseEvent) {
    let mut closed = std::pin::pin!(closed);
    loop {
        let tick = tokio::time::sleep(WARM_FOR);
        let closing = tokio::select! {
            () = &mut closed => true,
            () = tick => false,
        };
        let Some(warm) = task.0.upgrade() else { return };
        warm.return_idle(if closing { Duration::ZERO } else { WARM_FOR });
        if closing {
            return;
        }
    }
}

/// A connection for one operation (see [`Warm`]). Dropping it without [`Conn::done`] hands
/// it back to the pool, which tests it.
pub(crate) struct Conn {
    conn: PoolConnection<Postgres>,
    warm: Arc<Warm>,
}

impl Conn {
    /// The operation succeeded: the connection is idle and in a known state, so it stays
    /// warm for the next operation.
    pub(crate) fn done(self) {
        let Self { conn, warm } = self;
        warm.push(conn);
    }
}

impl Deref for Conn {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// Awaits `$run`, one sqlx call on `$conn: &mut PgConnection`, on a connection of `$warm`
/// (an `Arc<Warm>`), which stays warm if the call succeeds (see [`Warm`]). Evaluates to the
/// call's `Result<_, sqlx::Error>`; failing to get a connection returns the classified
/// error from the enclosing function.
macro_rules! warm {
    ($warm:expr, |$conn:ident| $run:expr) => {{
        let mut warm_conn = $warm.acquire().await.map_err($crate::error::classify)?;
        let out = {
            let $conn = &mut *warm_conn;
            $run.await
        };
        if out.is_ok() {
            warm_conn.done();
        }
        out
    }};
}
pub(crate) use warm;
