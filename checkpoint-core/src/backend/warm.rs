//! [`Warm`]: connections kept checked out of an sqlx pool between a saver's operations.

use std::ops::{Deref, DerefMut};
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
/// before (or closes a cancelled call's: [`close_cancelled`](Warm::close_cancelled)), and
/// so does:
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
///
/// A server restart or failover closes every connection at once, and the pool learns of
/// each dead one only when a call fails on it. [`warm!`]'s `retry_if` form runs a call that
/// may safely run twice once more when its connection turned out dead, after handing every
/// warm connection back (the pool tests them) and recording the moment in the
/// [`LostConnections`] that the pool's `before_acquire` hook can consult, so the retry gets
/// a connection that answers.
pub struct Warm<DB: Database> {
    pool: Pool<DB>,
    idle: Mutex<Idle<DB>>,
    lost: Arc<LostConnections>,
    /// Whether a connection whose operation was cancelled is closed rather than handed
    /// back (see [`close_cancelled`](Self::close_cancelled)).
    close_cancelled: bool,
}

/// When one of a pool's connections was last found dead, shared between a [`Warm`] and the
/// pool's `before_acquire` hook.
///
/// Whatever killed that connection (a server restart, a failover, a proxy's reset) may have
/// killed every connection that sat idle at the time, so those are worth a ping before
/// their next use; a connection that went idle after the loss was tested on its way back to
/// the pool, or opened since.
///
/// ```ignore
/// let lost = LostConnections::new();
/// let hook = Arc::clone(&lost);
/// let pool = PgPoolOptions::new()
///     .test_before_acquire(false)
///     .before_acquire(move |conn, meta| {
///         let ping = hook.idle_since_before(meta.idle_for);
///         Box::pin(async move {
///             if ping {
///                 sqlx::Connection::ping(conn).await?;
///             }
///             Ok(true)
///         })
///     })
///     .connect_lazy(url)?;
/// let warm = Warm::with_lost_connections(pool, lost);
/// ```
#[derive(Debug, Default)]
pub struct LostConnections {
    last: Mutex<Option<Instant>>,
}

impl LostConnections {
    /// A clock with no loss recorded.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records that a connection was found dead just now.
    pub fn record(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Whether a connection idle for `idle_for` has been idle since before the last loss
    /// (or since before this process could tell).
    pub fn idle_since_before(&self, idle_for: Duration) -> bool {
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.is_some_and(|last| {
            Instant::now()
                .checked_sub(idle_for)
                .is_none_or(|went_idle| went_idle <= last)
        })
    }
}

impl<DB: Database> std::fmt::Debug for Warm<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm")
            .field("warm", &self.idle().conns.len())
            .field("pool_size", &self.pool.size())
            .finish_non_exhaustive()
    }
}

/// The warm connections, the saver's operations waiting for the pool, and the task that
/// returns idle connections; one lock, so a connection is never kept warm while one of the
/// saver's operations has started waiting for the pool.
struct Idle<DB: Database> {
    /// Most recently used last.
    conns: Vec<WarmConn<DB>>,
    /// The saver's operations waiting for a connection from the pool.
    waiting: usize,
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

impl<DB: Database> WarmConn<DB> {
    /// Whether it may serve another operation rather than go back to the pool.
    fn fit(&self) -> bool {
        self.idle_since.elapsed() <= WARM_FOR && self.out_since.elapsed() < OUT_AT_MOST
    }
}

impl<DB: Database> Warm<DB> {
    /// Warm connections of `pool`.
    pub fn new(pool: Pool<DB>) -> Self {
        Self::with_lost_connections(pool, LostConnections::new())
    }

    /// Warm connections of `pool`, recording lost connections in `lost` (which the pool's
    /// `before_acquire` hook may consult; see [`LostConnections`]).
    pub fn with_lost_connections(pool: Pool<DB>, lost: Arc<LostConnections>) -> Self {
        Self {
            pool,
            idle: Mutex::new(Idle {
                conns: Vec::new(),
                waiting: 0,
                returning: false,
                runtime: None,
            }),
            lost,
            close_cancelled: false,
        }
    }

    /// Closes the connection of an operation that was cancelled (its future dropped before
    /// it finished) instead of handing it back to the pool (default `false`).
    ///
    /// sqlx's connections are not cancel-safe: one dropped in the middle of an exchange
    /// (while a statement is prepared, say) can be left with the server waiting for a
    /// message the client will never send, and the pool's test of the returned connection
    /// then waits for an answer that never comes, keeping its place in the pool for good.
    /// Closing it frees the place at once. A statement still running on the server runs
    /// on until it ends, so turn this on only where the server bounds statements
    /// (PostgreSQL's `statement_timeout`): otherwise each cancelled call could leave a
    /// server process behind, where today it keeps one of the pool's connections.
    pub fn close_cancelled(mut self, yes: bool) -> Self {
        self.close_cancelled = yes;
        self
    }

    /// A call failed because its connection was dead: records the moment and hands every
    /// warm connection back to the pool, which tests each one, so the next call does not
    /// meet one that died the same way.
    pub fn connection_lost(&self, error: &dyn std::fmt::Display) {
        tracing::debug!(error = %error, "a pooled connection was dead");
        self.lost.record();
        self.hand_back_all();
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
        let waiting = match self.take_or_wait() {
            Ok((conn, out_since)) => return Ok(Conn::new(conn, out_since, self)),
            Err(waiting) => waiting,
        };
        let conn = self.pool.acquire().await?;
        drop(waiting);
        Ok(Conn::new(conn, Instant::now(), self))
    }

    /// Awaits `take`, which takes its connection from the pool itself (`Pool::begin`, say),
    /// as one of the saver's operations waiting for the pool: every warm connection goes
    /// back first, and one in use goes back when its operation ends, so `take` waits for
    /// the pool's own hand-back, never for a warm connection's idle time.
    pub async fn through_pool<T>(&self, take: impl Future<Output = T>) -> T {
        let waiting = self.wait();
        let out = take.await;
        drop(waiting);
        out
    }

    /// The most recently used warm connection that is fit to serve (the unfit ones go
    /// back to the pool); without one, the caller counts as waiting for the pool from this
    /// moment on, under the same lock, so no connection is kept warm after it.
    fn take_or_wait(&self) -> Result<(PoolConnection<DB>, Instant), Waiting<'_, DB>> {
        let mut idle = self.idle();
        let mut back = Vec::new();
        if !self.pool.is_closed() {
            while let Some(last) = idle.conns.pop() {
                if last.fit() {
                    drop(idle);
                    drop(back);
                    return Ok((last.conn, last.out_since));
                }
                back.push(last);
            }
        }
        Err(self.wait_locked(idle, back))
    }

    /// Counts the caller as waiting for the pool and hands every warm connection back.
    fn wait(&self) -> Waiting<'_, DB> {
        self.wait_locked(self.idle(), Vec::new())
    }

    /// [`wait`](Self::wait) under a lock already held, handing `back` back too (outside the
    /// lock: handing a connection back spawns a task).
    fn wait_locked<'a>(
        &'a self,
        mut idle: MutexGuard<'a, Idle<DB>>,
        mut back: Vec<WarmConn<DB>>,
    ) -> Waiting<'a, DB> {
        idle.waiting += 1;
        back.append(&mut idle.conns);
        drop(idle);
        let waiting = Waiting(self);
        drop(back);
        waiting
    }

    /// Hands every warm connection back to the pool.
    pub fn hand_back_all(&self) {
        // Outside the lock: handing a connection back spawns a task.
        let all = std::mem::take(&mut self.idle().conns);
        drop(all);
    }

    /// Keeps `conn`, out of the pool since `out_since`, for the next operation, or hands it
    /// back to the pool.
    fn push(self: &Arc<Self>, conn: PoolConnection<DB>, out_since: Instant) {
        let mut idle = self.idle();
        if self.pool.is_closed() || idle.waiting > 0 || out_since.elapsed() >= OUT_AT_MOST {
            drop(idle);
            // Back to the pool, which tests it (sqlx spawns a task for that).
            drop(conn);
            return;
        }
        idle.conns.push(WarmConn {
            conn,
            out_since,
            idle_since: Instant::now(),
        });
        // The task that returns idle connections needs a runtime; outside one (never the
        // case after an sqlx call, which needs it too) the connection waits for the next
        // operation or for the saver's end.
        let start = match Handle::try_current() {
            Ok(handle) if !idle.returning => {
                idle.returning = true;
                idle.runtime = Some(handle.clone());
                Some(handle)
            }
            _ => None,
        };
        drop(idle);
        // Spawned outside the lock: a runtime shutting down drops the task at once, and its
        // drop takes the lock.
        if let Some(handle) = start {
            let task = Returning {
                warm: Arc::downgrade(self),
                ended: false,
            };
            handle.spawn(return_idle(task, self.pool.close_event()));
        }
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
        let idle = self.idle.get_mut().unwrap_or_else(PoisonError::into_inner);
        let conns = std::mem::take(&mut idle.conns);
        let runtime = idle.runtime.clone();
        if conns.is_empty() {
            return;
        }
        match Handle::try_current() {
            Ok(_) => drop(conns),
            // A thread being torn down can neither spawn nor enter a runtime: another
            // thread hands the connections back in the runtime they were used in.
            Err(e) if e.is_thread_local_destroyed() => hand_back_elsewhere(conns, runtime),
            Err(_) => match runtime {
                Some(runtime) => {
                    let _entered = runtime.enter();
                    drop(conns);
                }
                None => hand_back_elsewhere(conns, None),
            },
        }
    }
}

/// Hands `conns` back to their pool from a new thread inside `runtime`. Without a runtime
/// or a thread, they are forgotten: their pool counts them until it is dropped.
fn hand_back_elsewhere<DB: Database>(conns: Vec<WarmConn<DB>>, runtime: Option<Handle>) {
    let Some(runtime) = runtime else {
        std::mem::forget(conns);
        return;
    };
    // Shared with the thread, so a thread that cannot start leaves them here to forget.
    let shared = Arc::new(Mutex::new(Some(conns)));
    let theirs = Arc::clone(&shared);
    let started = std::thread::Builder::new()
        .name("checkpoint-warm-return".into())
        .spawn(move || {
            let _entered = runtime.enter();
            drop(theirs.lock().unwrap_or_else(PoisonError::into_inner).take());
        });
    if started.is_err() {
        std::mem::forget(shared.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
}

/// Counts one of the saver's operations waiting for the pool while it lives.
struct Waiting<'a, DB: Database>(&'a Warm<DB>);

impl<DB: Database> Drop for Waiting<'_, DB> {
    fn drop(&mut self) {
        self.0.idle().waiting -= 1;
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
/// it back to the pool, which tests it, or closes it when its operation did not settle and
/// the [`Warm`] closes cancelled ones ([`Warm::close_cancelled`]).
pub struct Conn<DB: Database> {
    /// `None` once [`done`](Conn::done) kept it warm.
    conn: Option<PoolConnection<DB>>,
    /// When it was taken from the pool.
    out_since: Instant,
    warm: Arc<Warm<DB>>,
    /// Whether its operation ran to its end, with a result or an error (see
    /// [`Warm::close_cancelled`]).
    settled: bool,
}

impl<DB: Database> std::fmt::Debug for Conn<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("out_for", &self.out_since.elapsed())
            .finish_non_exhaustive()
    }
}

impl<DB: Database> Conn<DB> {
    fn new(conn: PoolConnection<DB>, out_since: Instant, warm: &Arc<Warm<DB>>) -> Self {
        Self {
            conn: Some(conn),
            out_since,
            warm: Arc::clone(warm),
            settled: false,
        }
    }

    /// The operation ran to its end (with a result or an error): the connection is not
    /// in the middle of an exchange. Dropped without this, it counts as cancelled.
    pub fn settled(&mut self) {
        self.settled = true;
    }

    /// The operation succeeded: the connection is idle and in a known state, so it may stay
    /// warm for the next operation.
    pub fn done(mut self) {
        if let Some(conn) = self.conn.take() {
            self.warm.push(conn, self.out_since);
        }
    }

    /// The call found the connection unusable: it is closed instead of going back to the
    /// pool, where the next operation would meet the same failure.
    pub fn discard(mut self) {
        if let Some(conn) = &mut self.conn {
            conn.close_on_drop();
        }
    }

    fn conn(&self) -> &PoolConnection<DB> {
        // Taken only by `done`, which consumes `self`.
        self.conn.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<DB: Database> Drop for Conn<DB> {
    fn drop(&mut self) {
        if let Some(conn) = &mut self.conn
            && !self.settled
            && self.warm.close_cancelled
        {
            conn.close_on_drop();
        }
    }
}

impl<DB: Database> Deref for Conn<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        self.conn()
    }
}

impl<DB: Database> DerefMut for Conn<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.conn.as_mut().unwrap_or_else(|| unreachable!())
    }
}

/// Awaits `$run`, one sqlx call on `$conn: &mut DB::Connection`, on a connection of
/// `$warm` (an `Arc<`[`Warm`]`>`), which stays warm if the call succeeds. Evaluates to the
/// call's `Result<_, sqlx::Error>`; failing to get a connection returns
/// `Err($classify(error))` from the enclosing function.
///
/// With `retry_if $lost` (a `fn(&sqlx::Error) -> bool` saying the connection is dead or
/// unusable), for a call that may run twice (a read, an idempotent write): when `$lost`
/// holds for its error, the connection is closed ([`Conn::discard`]),
/// [`Warm::connection_lost`] runs and `$run` is evaluated and awaited once more, on another
/// connection. With `discard_if $lost`, for a call that must not run twice, the same
/// happens except the second run: the call fails, and its connection does not go back to
/// the pool to fail the next call too (a connection to a server that turned read-only
/// still answers the pool's liveness test).
///
/// ```ignore
/// let rows = warm!(inner.warm, classify, |conn| sqlx::query(SQL).bind(id).fetch_all(conn))
///     .map_err(classify)?;
/// let rows = warm!(inner.warm, classify, retry_if lost, |conn| sqlx::query(SQL)
///     .bind(id)
///     .fetch_all(conn))
/// .map_err(classify)?;
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! __warm {
    ($warm:expr, $classify:path, retry_if $lost:path, |$conn:ident| $run:expr) => {{
        let mut retried = false;
        loop {
            let mut warm_conn = $warm.acquire().await.map_err($classify)?;
            let out = {
                let $conn = &mut *warm_conn;
                $run.await
            };
            warm_conn.settled();
            match out {
                Ok(out) => {
                    warm_conn.done();
                    break Ok(out);
                }
                Err(e) if $lost(&e) => {
                    warm_conn.discard();
                    if retried {
                        break Err(e);
                    }
                    retried = true;
                    $warm.connection_lost(&e);
                }
                Err(e) => break Err(e),
            }
        }
    }};
    ($warm:expr, $classify:path, discard_if $lost:path, |$conn:ident| $run:expr) => {{
        let mut warm_conn = $warm.acquire().await.map_err($classify)?;
        let out = {
            let $conn = &mut *warm_conn;
            $run.await
        };
        warm_conn.settled();
        match &out {
            Ok(_) => warm_conn.done(),
            Err(e) if $lost(e) => {
                warm_conn.discard();
                $warm.connection_lost(e);
            }
            Err(_) => {}
        }
        out
    }};
    ($warm:expr, $classify:path, |$conn:ident| $run:expr) => {{
        let mut warm_conn = $warm.acquire().await.map_err($classify)?;
        let out = {
            let $conn = &mut *warm_conn;
            $run.await
        };
        warm_conn.settled();
        if out.is_ok() {
            warm_conn.done();
        }
        out
    }};
}
#[doc(inline)]
pub use crate::__warm as warm;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::sqlite::{Sqlite, SqlitePool, SqlitePoolOptions};

    use super::*;

    /// An in-memory SQLite pool of `size` connections.
    async fn pool(size: u32) -> SqlitePool {
        SqlitePoolOptions::new()
            .max_connections(size)
            .acquire_timeout(Duration::from_secs(10))
            .connect("sqlite::memory:")
            .await
            .unwrap()
    }

    /// One statement on a connection of `warm`, kept warm afterwards.
    async fn op(warm: &Arc<Warm<Sqlite>>) {
        let mut conn = warm.acquire().await.unwrap();
        sqlx::query("SELECT 1").execute(&mut *conn).await.unwrap();
        conn.done();
    }

    /// Waits (3 s at most) until every connection of `pool` is back in it, idle.
    async fn all_back(pool: &SqlitePool) {
        let started = Instant::now();
        while !(pool.size() > 0 && pool.num_idle() == pool.size() as usize) {
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "never went back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_connection_stays_out_of_the_pool_between_operations_until_idle() {
        let pool = pool(2).await;
        let warm = Arc::new(Warm::new(pool.clone()));
        for _ in 0..10 {
            op(&warm).await;
        }
        // Ten operations, one connection: kept warm, never handed back between them.
        assert_eq!(pool.size(), 1);
        assert_eq!(pool.num_idle(), 0);
        assert_eq!(warm.idle().conns.len(), 1);
        // Idle for its time (250 ms), it goes back.
        tokio::time::sleep(WARM_FOR + Duration::from_millis(200)).await;
        all_back(&pool).await;
        assert!(warm.idle().conns.is_empty());
    }

    #[tokio::test]
    async fn a_connection_in_use_goes_back_to_an_operation_waiting_for_the_pool() {
        let pool = pool(1).await;
        let warm = Arc::new(Warm::new(pool.clone()));
        // The pool's one connection is in use by an operation of the saver...
        let mut busy = warm.acquire().await.unwrap();
        sqlx::query("SELECT 1").execute(&mut *busy).await.unwrap();
        // ...while another takes a transaction from the pool itself: it counts as waiting.
        let waiter = {
            let warm = Arc::clone(&warm);
            let pool = pool.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let tx = warm.through_pool(pool.begin()).await.unwrap();
                tx.rollback().await.unwrap();
                started.elapsed()
            })
        };
        while warm.idle().waiting == 0 {
            tokio::task::yield_now().await;
        }
        // The first operation ends: its connection goes back at once, not after 250 ms.
        busy.done();
        let waited = waiter.await.unwrap();
        assert!(warm.idle().conns.is_empty(), "kept warm while one waited");
        assert!(waited < WARM_FOR / 2, "the waiter waited {waited:?}");
        assert_eq!(warm.idle().waiting, 0);
    }

    // The bounds below are half the idle time: without the behaviour under test, the
    // connection would come back only after it (a warm connection's last use plus 250 ms).

    #[tokio::test]
    async fn through_pool_hands_warm_connections_back_first() {
        let pool = pool(1).await;
        let warm = Arc::new(Warm::new(pool.clone()));
        op(&warm).await;
        assert_eq!(pool.num_idle(), 0, "not warm");
        let started = Instant::now();
        let tx = warm.through_pool(pool.begin()).await.unwrap();
        assert!(
            started.elapsed() < WARM_FOR / 2,
            "waited {:?}",
            started.elapsed()
        );
        tx.commit().await.unwrap();
        // The saver's next operation takes it from the pool and keeps it warm again.
        op(&warm).await;
        assert_eq!(warm.idle().conns.len(), 1);
    }

    #[tokio::test]
    async fn closing_the_pool_takes_warm_connections_back_at_once() {
        let pool = pool(3).await;
        let warm = Arc::new(Warm::new(pool.clone()));
        let (a, b, c) = tokio::join!(warm.acquire(), warm.acquire(), warm.acquire());
        for conn in [a, b, c] {
            conn.unwrap().done();
        }
        assert_eq!(warm.idle().conns.len(), 3);
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), pool.close())
            .await
            .expect("close waited for the warm connections");
        assert!(
            started.elapsed() < WARM_FOR / 2,
            "closing took {:?}",
            started.elapsed()
        );
        // Closed, the pool has nothing to give: an error, not a wait.
        assert!(warm.acquire().await.is_err());
    }

    /// One statement through `warm!`.
    async fn statement(warm: &Arc<Warm<Sqlite>>, sql: &'static str) -> Result<(), sqlx::Error> {
        warm!(warm, std::convert::identity, |conn| sqlx::query(sql)
            .execute(conn))
        .map(|_| ())
    }

    #[tokio::test]
    async fn warm_keeps_the_connection_of_a_call_that_succeeded_only() {
        let pool = pool(2).await;
        let warm = Arc::new(Warm::new(pool.clone()));
        statement(&warm, "SELECT 1").await.unwrap();
        assert_eq!(warm.idle().conns.len(), 1, "a success is not kept warm");
        // A failed call's connection is not kept: it goes back through the pool's test.
        assert!(
            statement(&warm, "SELECT * FROM no_such_table")
                .await
                .is_err()
        );
        assert!(warm.idle().conns.is_empty(), "kept warm after a failure");
        all_back(&pool).await;
    }

    /// Whether `e` is the error a missing table gives: the stand-in for a dead connection.
    fn no_such_table(e: &sqlx::Error) -> bool {
        e.to_string().contains("no such table")
    }

    /// One statement through `warm!` with `retry_if`: `first` on the first attempt,
    /// `SELECT 1` after; how many attempts ran.
    async fn retried(
        warm: &Arc<Warm<Sqlite>>,
        first: &'static str,
    ) -> (Result<(), sqlx::Error>, usize) {
        let mut attempts = 0;
        let out = async {
            warm!(warm, std::convert::identity, retry_if no_such_table, |conn| {
                attempts += 1;
                sqlx::query(if attempts == 1 { first } else { "SELECT 1" }).execute(conn)
            })
            .map(|_| ())
        }
        .await;
        (out, attempts)
    }

    #[tokio::test]
    async fn a_call_whose_connection_was_lost_runs_once_more() {
        let pool = pool(2).await;
        let lost = LostConnections::new();
        let warm = Arc::new(Warm::with_lost_connections(pool.clone(), Arc::clone(&lost)));
        // Two warm connections, then a call that fails the way a dead connection does.
        let (a, b) = tokio::join!(warm.acquire(), warm.acquire());
        a.unwrap().done();
        b.unwrap().done();
        assert_eq!(warm.idle().conns.len(), 2);
        assert!(!lost.idle_since_before(Duration::from_secs(3600)));
        let (out, attempts) = retried(&warm, "SELECT * FROM no_such_table").await;
        out.unwrap();
        assert_eq!(attempts, 2, "not run again");
        // The loss is recorded for connections that were idle at the time, not for later ones.
        assert!(lost.idle_since_before(Duration::from_secs(1)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!lost.idle_since_before(Duration::from_millis(5)));
        // The warm connections went back to the pool: only the retry's own is warm now.
        assert_eq!(warm.idle().conns.len(), 1);
    }

    #[tokio::test]
    async fn only_a_lost_connection_is_retried_and_only_once() {
        let pool = pool(2).await;
        let warm = Arc::new(Warm::new(pool));
        // Another error: returned as it is, after one attempt.
        let (out, attempts) = retried(&warm, "SELECT * FROM").await;
        assert!(out.is_err());
        assert_eq!(attempts, 1);
        // A loss on the retry too: its error, after two attempts.
        let mut attempts = 0;
        let out = async {
            warm!(warm, std::convert::identity, retry_if no_such_table, |conn| {
                attempts += 1;
                sqlx::query("SELECT * FROM no_such_table").execute(conn)
            })
        }
        .await;
        assert!(out.is_err_and(|e| no_such_table(&e)));
        assert_eq!(attempts, 2);
    }

    #[test]
    fn dropped_outside_its_runtime_it_hands_its_connections_back() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let pool = runtime.block_on(pool(2));
        let warm = Arc::new(Warm::new(pool.clone()));
        runtime.block_on(op(&warm));
        assert_eq!(pool.num_idle(), 0, "not warm");
        // Dropped on a thread without a runtime: no panic, and the connection goes back in
        // the runtime it was used in.
        drop(warm);
        runtime.block_on(async {
            all_back(&pool).await;
            pool.close().await;
        });
    }

    #[tokio::test]
    async fn a_call_whose_connection_is_lost_closes_it_and_runs_once_without_retry() {
        fn lost(_: &sqlx::Error) -> bool {
            true
        }
        fn classify(e: sqlx::Error) -> sqlx::Error {
            e
        }
        let pool = pool(2).await;
        let warm = Arc::new(Warm::new(pool.clone()));
        op(&warm).await;
        assert_eq!(pool.size(), 1);
        let runs = std::sync::atomic::AtomicUsize::new(0);
        let out: Result<_, sqlx::Error> = async {
            warm!(warm, classify, discard_if lost, |conn| {
                runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                sqlx::query("SELECT * FROM no_such_table").execute(conn)
            })
        }
        .await;
        assert!(out.is_err());
        assert_eq!(runs.load(std::sync::atomic::Ordering::Relaxed), 1);
        // The warm connection it ran on was closed, not kept or handed back.
        let started = Instant::now();
        while pool.size() > 0 {
            assert!(started.elapsed() < Duration::from_secs(3), "never closed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(warm.idle().conns.is_empty());
    }

    #[tokio::test]
    async fn a_cancelled_operations_connection_is_closed_when_asked() {
        for close in [false, true] {
            let pool = pool(2).await;
            let warm = Arc::new(Warm::new(pool.clone()).close_cancelled(close));
            // Settled (ran to an error): back to the pool either way.
            let mut conn = warm.acquire().await.unwrap();
            assert!(sqlx::query("SELEC").execute(&mut *conn).await.is_err());
            conn.settled();
            drop(conn);
            all_back(&pool).await;
            // Dropped before its operation settled: closed only when asked.
            let conn = warm.acquire().await.unwrap();
            drop(conn);
            let started = Instant::now();
            if close {
                while pool.size() > 0 {
                    assert!(started.elapsed() < Duration::from_secs(3), "never closed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            } else {
                all_back(&pool).await;
            }
        }
    }
}
