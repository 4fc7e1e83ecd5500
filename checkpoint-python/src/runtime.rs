//! The tokio runtime every call runs on: one per process, so a process forked from one that
//! used the extension (gunicorn's `--preload`, Celery's prefork pool, `multiprocessing`'s
//! default start method on Linux) gets a runtime of its own.
//!
//! A forked child inherits the parent's runtime without its worker threads, so a task
//! spawned there, and an I/O wait, would never run: every call hung. pyo3-async-runtimes'
//! runtime is a process-wide `OnceLock` that cannot be replaced, so the awaitables are
//! bridged through [`Tokio`] instead, which spawns on the runtime of the calling process.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{self, ContextExt};
use tokio::runtime::{Builder, Runtime};

/// The runtime of the process whose id it holds. A child finds its parent's here and builds
/// its own; the parent's is left as it is (dropping it would wait for threads the child does
/// not have), like every object the child inherits that lives on it.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// This process's id (it changes in a forked child).
pub(crate) fn process_id() -> u32 {
    std::process::id()
}

/// The runtime of this process, built at its first call.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let pid = process_id();
    let mut slot = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    match *slot {
        Some((owner, runtime)) if owner == pid => Ok(runtime),
        _ => {
            let runtime = Builder::new_multi_thread()
                .enable_all()
                .thread_name("checkpoint-rs")
                .build()
                .map_err(|e| {
                    PyRuntimeError::new_err(format!("cannot start the tokio runtime: {e}"))
                })?;
            let runtime: &'static Runtime = Box::leak(Box::new(runtime));
            *slot = Some((pid, runtime));
            Ok(runtime)
        }
    }
}

/// How often a blocking call lets the main thread's signal handlers run.
const SIGNAL_CHECKS: Duration = Duration::from_millis(50);

/// How many times blocking calls of this process ran the signal handlers' check (for the
/// tests: `_native._signal_checks()`).
static SIGNAL_CHECKS_RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of signal checks blocking calls have run in this process.
#[pyfunction]
pub(crate) fn _signal_checks() -> u64 {
    SIGNAL_CHECKS_RUN.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the calling thread is Python's main thread, the only one whose signal handlers
/// run (`PyErr_CheckSignals` does nothing elsewhere).
fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?;
    let current = threading.call_method0("current_thread")?;
    Ok(main.is(&current))
}

/// `fut` run to completion on this process's runtime without the GIL. On the main thread,
/// its signal handlers still run every [`SIGNAL_CHECKS`]: Ctrl-C's `KeyboardInterrupt` (or
/// any exception a handler raises) ends a call that waits on a lock or an unreachable
/// server, as it does psycopg's. The call's future is then dropped, as the `timeout` option
/// drops it: it may have taken effect or not. Other threads never run signal handlers, so
/// their calls wait without taking the GIL back until they end (a check every 50 ms from
/// each of a thread pool's waiting calls would make the threads running Python hand the
/// GIL over each time).
pub(crate) fn block_on<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    if !on_main_thread(py)? {
        return Ok(py.detach(|| runtime.block_on(fut)));
    }
    py.detach(|| {
        runtime.block_on(async {
            let mut fut = std::pin::pin!(fut);
            loop {
                tokio::select! {
                    biased;
                    out = &mut fut => return Ok(out),
                    () = tokio::time::sleep(SIGNAL_CHECKS) => {
                        SIGNAL_CHECKS_RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    })
}

/// An awaitable of `fut` on this process's runtime, its result converted by `result` in the
/// event loop's thread.
pub(crate) fn future_into_py<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    // `Tokio::spawn` spawns on the runtime entered here.
    let _runtime = runtime()?.enter();
    generic::future_into_py::<Tokio, F, T>(py, fut)
}

/// pyo3-async-runtimes' bridge to [`runtime`]: the calling process's runtime, which
/// [`future_into_py`] enters before the bridge spawns.
struct Tokio;

tokio::task_local! {
    /// The event loop and context of the awaitable a task serves.
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

impl generic::Runtime for Tokio {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        tokio::task::spawn_blocking(f)
    }
}

impl ContextExt for Tokio {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        Box::pin(TASK_LOCALS.scope(OnceCell::from(locals), fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|cell| cell.get().cloned())
            .unwrap_or_default()
    }
}
