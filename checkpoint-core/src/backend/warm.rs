//! [`Warm`]: connections kept checked out of an sqlx pool between a saver's operations.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::pool::{CloseEvent, PoolConnection};
use sqlx::{Database, Pool};
use tokio::runtime::Handle;

/// How long a connection stays warm after an operation before it goes back to the pool.
const WARM_FOR: Duration = Duration::from_millis(250);

/// How long a connection stays out of the pool in all, however busy.
const OUT_AT_MOST: Duration = Duration::from_secs(1);

/// A pool, and connections kept checked out of it between a saver's operations (feature
/// `sqlx`).
///
/// sqlx 0.8's pool tests every connection it gets back: the task that takes it back pings
/// it, a round trip to the server (or, for SQLite, to the connection's worker thread)
/// after each operation, which competes with the next operation for the machine's CPU.
/// There is no setting to turn it off. Measured on a 2-core machine, through the pool
/// against one held connection: a PostgreSQL `get_tuple` 0.30 against 0.20 ms; a SQLite
/// 70 KB primary-key `SELECT` 0.05–0.08 against 0.03–0.05 ms and a 7 KB `INSERT` 0.06
/// against 0.03 ms.
///
/// An operation that succeeded leaves its connection idle and in a known state, so
/// [`Warm`] keeps it for the next operation instead, without the ping. Anything else (an
/// error, a cancelled call) hands the connection back to the pool, which tests it as
/// before, and so does:
///
/// * a connection idle here for 250 ms (a task returns it), so the pool's other users wait
///   at most that long when the saver is quiet;
/// * a connection out of the pool for 1 s in all, so they get a turn when it is busy (it
///   then also meets the pool's `max_lifetime` and `after_release` hooks);
/// * any connection while one of the saver's own operations waits for the pool;
/// * every connection once the pool is closed, so `Pool::close` does not wait for them.
///
/// Warm connections stay counted by the pool (`Pool::size`, not `Pool::num_idle`) and
/// bounded by its size.
pub struct Warm<DB: Database> {
    pool: Pool<DB>,
    idle: Mutex<Idle<DB>>,
    /// The saver's operations waiting for a connection from the pool.
    waiting: AtomicUsize,
}

impl<DB: Database> std::fmt::Debug for Warm<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm")
            .field("warm", &self.idle().conns.len())
            .field("pool_size", &self.pool.size())
            .finish_non_exhaustive()
    }
}

/// The warm connections and the task that returns them.
struct Idle<DB: Database> {
    /// Most recently used last.
    conns: Vec<WarmConn<DB>>,
    /// Whether the task returning idle connections runs.
    returning: bool,
    /// The runtime it runs (or last ran) on.
    runtime: Option<Handle>,
}

struct WarmConn<DB: Database> {
    conn: PoolConnection<DB>,
    /// When it was taken from the pool.
    out_since: Instant,
    /// When it was put here.
    idle_since: Instant,
}

impl<DB: Database> Warm<DB> {
    /// Warm connections of `pool`.
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            idle: Mutex::new(Idle {
                conns: Vec::new(),
                returning: false,
                runtime: None,
            }),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    fn idle(&self) -> MutexGuard<'_, Idle<DB>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection for one operation: a warm one if there is one, else the pool's. Call
    /// [`Conn::done`] when the operation succeeded.
    ///
    /// # Errors
    ///
    /// The pool's, when it has no connection to give.
    pub async fn acquire(self: &Arc<Self>) -> Result<Conn<DB>, sqlx::Error> {
        if let Some((conn, out_since)) = self.pop() {
            return Ok(Conn {
                conn,
                out_since,
                warm: Arc::clone(self),
            });
        }
        let waiting = Waiting::new(&self.waiting);
        let conn = self.pool.acquire().await?;
        drop(waiting);
        Ok(Conn {
            conn,
            out_since: Instant::now(),
            warm: Arc::clone(self),
        })
    }

    /// Awaits `take`, which takes its connection from the pool itself (`Pool::begin`, say),
    /// as one of the saver's operations waiting for the pool: every warm connection goes
    /// back first, and one in use goes back when its operation ends, so `take` waits for
    /// the pool's own hand-back, never for a warm connection's idle time.
    pub async fn through_pool<T>(&self, take: impl Future<Output = T>) -> T {
        let waiting = Waiting::new(&self.waiting);
        self.hand_back_all();
        let out = take.await;
        drop(waiting);
        out
    }

    fn pop(&self) -> Option<(PoolConnection<DB>, Instant)> {
        if self.pool.is_closed() {
            self.hand_back_all();
            return None;
        }
        let last = self.idle().conns.pop()?;
        if last.idle_since.elapsed() <= WARM_FOR {
            return Some((last.conn, last.out_since));
        }
        // The others sat even longer: all of them go back to the pool.
        drop(last);
        self.hand_back_all();
        None
    }

    /// Hands every warm connection back to the pool, e.g. before an operation that takes
    /// its connection from the pool itself (a transaction) on a pool of one connection.
    pub fn hand_back_all(&self) {
        // Outside the lock: handing a connection back spawns a task.
        let all = std::mem::take(&mut self.idle().conns);
        drop(all);
    }

    /// Keeps `conn`, out of the pool since `out_since`, for the next operation, or hands it
    /// back to the pool.
    fn push(self: &Arc<Self>, conn: PoolConnection<DB>, out_since: Instant) {
        // Returning a connection to sqlx's pool spawns a task: only inside a runtime.
        let Ok(handle) = Handle::try_current() else {
            return;
        };
        if self.pool.is_closed()
            || self.waiting.load(Ordering::Acquire) > 0
            || out_since.elapsed() >= OUT_AT_MOST
        {
            return;
        }
        let mut idle = self.idle();
        idle.conns.push(WarmConn {
            conn,
            out_since,
            idle_since: Instant::now(),
        });
        if !idle.returning {
            idle.returning = true;
            idle.runtime = Some(handle.clone());
            let task = Returning {
                warm: Arc::downgrade(self),
                ended: false,
            };
            handle.spawn(return_idle(task, self.pool.close_event()));
        }
        drop(idle);
        // The pool may have closed since the check, after the task emptied the list.
        if self.pool.is_closed() {
            self.hand_back_all();
        }
    }
}

impl<DB: Database> Drop for Warm<DB> {
    fn drop(&mut self) {
        // The connections go back to the pool, which spawns a task for each: in the
        // runtime they were used in when the saver is dropped outside one.
        let idle = std::mem::take(
            &mut self
                .idle
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .conns,
        );
        match Handle::try_current() {
            Ok(_) => drop(idle),
            // A thread being torn down can neither spawn nor enter a runtime: the
            // connections are closed without going back, and not even that when dropping
            // their empty handles would spawn a task to maintain `min_connections`.
            Err(e) if e.is_thread_local_destroyed() => {
                let spawns = self.pool.options().get_min_connections() > 0;
                for warm in idle {
                    if spawns {
                        std::mem::forget(warm.conn);
                    } else {
                        drop(warm.conn.detach());
                    }
                }
            }
            Err(_) => {
                let runtime = self
                    .idle
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner)
                    .runtime
                    .clone();
                let _entered = runtime.as_ref().map(Handle::enter);
                drop(idle);
            }
        }
    }
}

/// Counts an operation waiting for the pool while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The task returning idle connections, marked as running until it ends or its runtime
/// shuts down and drops it; the next warm connection then starts a new one.
struct Returning<DB: Database> {
    warm: Weak<Warm<DB>>,
    /// It ended by itself, having said so under the lock.
    ended: bool,
}

impl<DB: Database> Drop for Returning<DB> {
    fn drop(&mut self) {
        if !self.ended
            && let Some(warm) = self.warm.upgrade()
        {
            warm.idle().returning = false;
        }
    }
}

/// Returns each warm connection to the pool once idle for [`WARM_FOR`], and all of them
/// when the pool closes; ends when none is left (or with the saver).
async fn return_idle<DB: Database>(mut task: Returning<DB>, closed: CloseEvent) {
    let mut closed = std::pin::pin!(closed);
    loop {
        let next = {
            let Some(warm) = task.warm.upgrade() else {
                return;
            };
            let mut idle = warm.idle();
            let keep = idle
                .conns
                .partition_point(|w| w.idle_since.elapsed() > WARM_FOR);
            let stale: Vec<WarmConn<DB>> = idle.conns.drain(..keep).collect();
            let next = idle.conns.first().map(|w| w.idle_since + WARM_FOR);
            if next.is_none() {
                // Under the lock: a connection pushed after this starts a new task.
                idle.returning = false;
                task.ended = true;
            }
            drop(idle);
            drop(stale);
            next
        };
        let Some(next) = next else { return };
        let closing = tokio::select! {
            () = &mut closed => true,
            () = tokio::time::sleep_until(next.into()) => false,
        };
        if closing {
            if let Some(warm) = task.warm.upgrade() {
                warm.hand_back_all();
            }
            return;
        }
    }
}

/// A connection for one operation (see [`Warm`]). Dropping it without [`Conn::done`] hands
/// it back to the pool, which tests it.
pub struct Conn<DB: Database> {
    conn: PoolConnection<DB>,
    /// When it was taken from the pool.
    out_since: Instant,
    warm: Arc<Warm<DB>>,
}

impl<DB: Database> std::fmt::Debug for Conn<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("out_for", &self.out_since.elapsed())
            .finish_non_exhaustive()
    }
}

impl<DB: Database> Conn<DB> {
    /// The operation succeeded: the connection is idle and in a known state, so it may stay
    /// warm for the next operation.
    pub fn done(self) {
        let Self {
            conn,
            out_since,
            warm,
        } = self;
        warm.push(conn, out_since);
    }
}

impl<DB: Database> Deref for Conn<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.conn
    }
}

impl<DB: Database> DerefMut for Conn<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.conn
    }
}

/// Awaits `$run`, one sqlx call on `$conn: &mut DB::Connection`, on a connection of
/// `$warm` (an `Arc<`[`Warm`]`>`), which stays warm if the call succeeds. Evaluates to the
/// call's `Result<_, sqlx::Error>`; failing to get a connection returns
/// `Err($classify(error))` from the enclosing function.
///
/// ```ignore
/// let rows = warm!(inner.warm, classify, |conn| sqlx::query(SQL).bind(id).fetch_all(conn))
///     .map_err(classify)?;
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! __warm {
    ($warm:expr, $classify:path, |$conn:ident| $run:expr) => {{
        let mut warm_conn = $warm.acquire().await.map_err($classify)?;
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
#[doc(inline)]
pub use crate::__warm as warm;
