//! The state every module shares: the pool and the schema. Modules depend on this one,
//! never on `saver.rs`.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use tokio::runtime::Handle;

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    /// The pool, and connections kept out of it between operations (see [`Warm`]).
    pub(crate) warm: Arc<Warm>,
    /// The schema the tables live in, when configured (else the connection's search path).
    pub(crate) schema: Option<String>,
    /// The TTL of threads without their own, in ms (`None`: no expiry).
    pub(crate) default_ttl_ms: Option<i64>,
    /// Whether `get_tuple` restarts the TTL of the thread it read.
    pub(crate) refresh_on_read: bool,
}

impl Inner {
    /// The pool.
    pub(crate) fn pool(&self) -> &PgPool {
        self.warm.pool()
    }

    /// A saver's state over `pool`.
    pub(crate) fn new(
        pool: PgPool,
        schema: Option<String>,
        default_ttl_ms: Option<i64>,
        refresh_on_read: bool,
    ) -> Self {
        Self {
            warm: Arc::new(Warm::new(pool)),
            schema,
            default_ttl_ms,
            refresh_on_read,
        }
    }
}

/// How long a connection stays warm after an operation before it goes back to the pool.
const WARM_FOR: Duration = Duration::from_millis(250);

/// How long a connection stays out of the pool in all, however busy: then it goes back
/// through the pool's release test (and its `max_lifetime` and `after_release`), and
/// whoever waits for the pool gets a turn.
const OUT_AT_MOST: Duration = Duration::from_secs(1);

/// Connections kept checked out of the pool between operations.
///
/// sqlx's pool tests every connection it gets back with a ping, a round trip to the server
/// after each operation that competes with the next one for the client's and the server's
/// CPU (measured: a 70 KB `get_tuple` 0.30 ms through the pool against 0.20 ms on a held
/// connection). An operation that succeeded leaves its connection in a known state, so it
/// is kept here for the next operation instead, without the ping. Anything else (an error,
/// a cancelled call) hands the connection back to the pool, which tests it as before, and
/// so does:
///
/// * a connection idle here for [`WARM_FOR`] (a task returns it), so the pool's other users
///   wait at most that long when the saver is quiet;
/// * a connection out of the pool for [`OUT_AT_MOST`], so they get a turn when it is busy;
/// * any connection while one of the saver's own operations waits for the pool;
/// * every connection once the pool is closed, so `PgPool::close` does not wait for them.
///
/// Warm connections stay counted by the pool and bounded by its size.
pub(crate) struct Warm {
    pool: PgPool,
    idle: Mutex<Idle>,
    /// The saver's operations waiting for a connection from the pool.
    waiting: AtomicUsize,
}

/// The warm connections and the task that returns them.
#[derive(Default)]
struct Idle {
    /// Most recently used last.
    conns: Vec<WarmConn>,
    /// Whether the task returning idle connections runs.
    returning: bool,
    /// The runtime it runs (or last ran) on.
    runtime: Option<Handle>,
}

struct WarmConn {
    conn: PoolConnection<Postgres>,
    /// When it was taken from the pool.
    out_since: Instant,
    /// When it was put here.
    idle_since: Instant,
}

impl Warm {
    fn new(pool: PgPool) -> Self {
        Self {
            pool,
            idle: Mutex::new(Idle::default()),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn idle(&self) -> MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection for one operation: a warm one if there is one, else the pool's. Call
    /// [`Conn::done`] when the operation succeeded.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<Conn, sqlx::Error> {
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

    fn pop(&self) -> Option<(PoolConnection<Postgres>, Instant)> {
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

    /// Hands every warm connection back to the pool (outside the lock: that spawns tasks).
    fn hand_back_all(&self) {
        let all = std::mem::take(&mut self.idle().conns);
        drop(all);
    }

    /// Keeps `conn`, out of the pool since `out_since`, for the next operation, or hands it
    /// back to the pool (see [`Warm`]).
    fn push(self: &Arc<Self>, conn: PoolConnection<Postgres>, out_since: Instant) {
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

impl Drop for Warm {
    fn drop(&mut self) {
        // The connections go back to the pool, which spawns a task for each: in the
        // runtime they were used in when the saver is dropped outside one.
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        match Handle::try_current() {
            Ok(_) => drop(idle),
            // A thread being torn down can neither spawn nor enter a runtime: the
            // connections are closed without going back, and not even that when dropping
            // their empty handles would spawn a task to maintain `min_connections`.
            Err(e) if e.is_thread_local_destroyed() => {
                let spawns = self.pool.options().get_min_connections() > 0;
                for warm in idle.conns {
                    if spawns {
                        std::mem::forget(warm.conn);
                    } else {
                        drop(warm.conn.detach());
                    }
                }
            }
            Err(_) => {
                let _entered = idle.runtime.as_ref().map(Handle::enter);
                drop(idle.conns);
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
struct Returning {
    warm: Weak<Warm>,
    /// It ended by itself, having said so under the lock.
    ended: bool,
}

impl Drop for Returning {
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
async fn return_idle(mut task: Returning, closed: sqlx::pool::CloseEvent) {
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
            let stale: Vec<WarmConn> = idle.conns.drain(..keep).collect();
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
pub(crate) struct Conn {
    conn: PoolConnection<Postgres>,
    /// When it was taken from the pool.
    out_since: Instant,
    warm: Arc<Warm>,
}

impl Conn {
    /// The operation succeeded: the connection is idle and in a known state, so it may stay
    /// warm for the next operation.
    pub(crate) fn done(self) {
        let Self {
            conn,
            out_since,
            warm,
        } = self;
        warm.push(conn, out_since);
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
