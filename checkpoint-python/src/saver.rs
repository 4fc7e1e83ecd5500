//! `NativeSaver`: one opened backend (with its wrappers) and every operation, each callable
//! blocking (the GIL released while Rust works) or as an asyncio awaitable (a tokio future
//! bridged to the running event loop, which it never blocks).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use checkpoint_core::backend::{SweeperStatus, spawn_sweeper_reporting};
use checkpoint_core::{
    Capabilities, CheckpointConfig, Error, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Result, RetryLayer, Saver, ThreadTtl, TypedValue,
};
use futures::StreamExt;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tokio::task::JoinHandle;

use crate::convert;
use crate::effects::{self, Effects};
use crate::errors::{IntoPyResult, closed, left_by_fork, to_py};
use crate::open::{self, Admin, Backend, CallPolicy, Options, Wrappers};
use crate::runtime::{block_on, future_into_py, process_id, runtime};
use crate::stream::TupleStream;

/// Threads the background sweeper deletes per call (it calls again while a batch is full).
const SWEEP_BATCH: usize = 500;

pub(crate) type Convert<R> = fn(Python<'_>, R) -> PyResult<Py<PyAny>>;

/// Runs `fut` to completion without the GIL (`blocking`), or returns an awaitable of it;
/// either way `convert` builds the Python result.
pub(crate) fn call<R, F>(
    py: Python<'_>,
    blocking: bool,
    fut: F,
    convert: Convert<R>,
) -> PyResult<Py<PyAny>>
where
    R: Send + 'static,
    F: Future<Output = Result<R>> + Send + 'static,
{
    if blocking {
        let out = block_on(py, fut)?.py()?;
        convert(py, out)
    } else {
        let awaitable = future_into_py(py, async move {
            let out = fut.await.map_err(to_py)?;
            Python::attach(|py| convert(py, out))
        })?;
        Ok(awaitable.unbind())
    }
}

pub(crate) fn none(py: Python<'_>, (): ()) -> PyResult<Py<PyAny>> {
    Ok(py.None())
}

fn config(thread_id: String, checkpoint_ns: String, id: Option<String>) -> CheckpointConfig {
    CheckpointConfig {
        thread_id,
        checkpoint_ns,
        checkpoint_id: id,
        ..CheckpointConfig::default()
    }
}

/// A new checkpoint id (UUID v6, time-ordered), as LangGraph makes them.
#[pyfunction]
pub(crate) fn new_checkpoint_id() -> String {
    checkpoint_core::new_checkpoint_id()
}

/// An opened saver. Built by the Python classes of `checkpoint_rs`; not meant to be used
/// directly.
#[pyclass(frozen, module = "checkpoint_rs._native")]
pub(crate) struct NativeSaver {
    state: Mutex<State>,
    /// How the saver was opened, to open it again in a forked child.
    recipe: Recipe,
    compare_and_set: bool,
    /// The saver's description and capabilities, which stay readable after closing.
    description: String,
    capabilities: Capabilities,
    /// What the background sweeper did, when there is one; readable after closing too.
    sweeper: Option<Arc<SweeperStatus>>,
}

enum State {
    Open(Opened),
    /// [`NativeSaver::close`] ran.
    Closed,
    /// A SQLite saver inherited by a forked child, which cannot use it (see `reopen`).
    LeftByFork {
        parent: u32,
    },
}

/// What opens the saver: the backend and its options (the background sweeper's interval
/// among them), the wrappers and the `timeout` and `retries` options.
#[derive(Clone)]
struct Recipe {
    backend: Backend,
    options: Options,
    wrappers: Wrappers,
    calls: CallPolicy,
}

/// What an open `NativeSaver` holds.
struct Opened {
    /// The process that opened it: a forked child opens its own (see `reopen`).
    pid: u32,
    /// The saver every call but `list` goes to: `stack` behind the `timeout` and `retries`
    /// options.
    inner: Arc<dyn Saver>,
    /// The backend and its wrappers.
    stack: Arc<dyn Saver>,
    /// The saver `list` and `list_threads` go to: `stack` behind the `retries` option (the
    /// stream gets the `timeout` for each batch it waits for: see `TupleStream`).
    lister: Arc<dyn Saver>,
    /// The backend alone: the background sweeper's, whose batches no `timeout` bounds
    /// (the `Idempotent` wrapper's inner saver has it).
    backend: Arc<dyn Saver>,
    /// The `Idempotent` wrapper of `stack`, when chosen (`once`, `lock_thread`).
    effects: Option<Effects>,
    admin: Admin,
    /// The background sweeper of expired threads, when asked for; stops with the saver.
    sweeper: Option<JoinHandle<()>>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some(sweeper) = &self.sweeper {
            sweeper.abort();
        }
    }
}

impl Opened {
    /// Opens the recipe's backend, with its wrappers and sweeper, in this process.
    fn open(
        py: Python<'_>,
        recipe: &Recipe,
        sweeper: Option<&Arc<SweeperStatus>>,
    ) -> PyResult<Self> {
        let (backend, options) = (recipe.backend.clone(), recipe.options.clone());
        let (saver, admin) = block_on(py, open::open(backend, options))?.py()?;
        let (stack, effects) = open::wrap(Arc::clone(&saver), &recipe.wrappers, recipe.calls);
        Self::around(recipe, saver, stack, effects, admin, sweeper)
    }

    /// The calls' saver (`stack` behind the `timeout` option) and the sweeper, in this
    /// process.
    fn around(
        recipe: &Recipe,
        backend: Arc<dyn Saver>,
        stack: Arc<dyn Saver>,
        effects: Option<Effects>,
        admin: Admin,
        sweeper: Option<&Arc<SweeperStatus>>,
    ) -> PyResult<Self> {
        // The deadline goes around every call (each attempt of it) but the listings, whose
        // streams get it for each batch they wait for, retries included (see `TupleStream`),
        // and the
        // background sweeper's, which finishes its batch however long it takes; the retries
        // go outermost.
        let inner = recipe.calls.around(Arc::clone(&stack));
        let lister = CallPolicy {
            timeout: None,
            ..recipe.calls
        }
        .around(Arc::clone(&stack));
        // Backends without thread TTLs refused the option before opening.
        let sweeper = match recipe.options.sweep_interval.zip(sweeper) {
            Some((every, status)) => {
                let _runtime = runtime()?.enter();
                Some(spawn_sweeper_reporting(
                    Arc::clone(&backend),
                    every,
                    SWEEP_BATCH,
                    Arc::clone(status),
                ))
            }
            None => None,
        };
        Ok(Self {
            pid: process_id(),
            inner,
            stack,
            lister,
            backend,
            effects,
            admin,
            sweeper,
        })
    }
}

impl NativeSaver {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `pick` of the open saver, opening it first in a forked child; `ClosedError` once
    /// closed. (The lock is released before an error is built, or the saver reopened: both
    /// run Python, which may switch threads.)
    fn with_opened<T>(&self, py: Python<'_>, pick: impl Fn(&Opened) -> T) -> PyResult<T> {
        let pid = process_id();
        // `Err(Some(parent))`: opened by the process this one forked from.
        let found = match &*self.state() {
            State::Open(o) if o.pid == pid => Ok(pick(o)),
            State::Open(o) => Err(Some(o.pid)),
            State::LeftByFork { parent } => Err(Some(*parent)),
            State::Closed => Err(None),
        };
        let parent = match found {
            Ok(picked) => return Ok(picked),
            Err(None) => return Err(closed()),
            Err(Some(parent)) => parent,
        };
        let mut reopened = Some(self.reopen(py, parent)?);
        let mut state = self.state();
        if matches!(&*state, State::Open(o) if o.pid != pid)
            && let Some(reopened) = reopened.take()
        {
            // The inherited saver's connections and tasks belong to the parent: dropping
            // them here would close the parent's sockets or wait for its threads.
            std::mem::forget(std::mem::replace(&mut *state, State::Open(reopened)));
        }
        let found = match &*state {
            State::Open(o) if o.pid == pid => Some(pick(o)),
            _ => None,
        };
        drop(state);
        // Another thread reopened it first, or it was closed meanwhile: as `close` does.
        if let Some(unused) = reopened {
            let runtime = runtime()?;
            py.detach(|| {
                let _runtime = runtime.enter();
                drop(unused);
            });
        }
        found.ok_or_else(closed)
    }

    /// The saver for a process forked from `parent`, which opened it. A network backend is
    /// opened again (its tables exist: no setup), as is the background sweeper; the in-memory
    /// saver keeps the data it had at the fork (the child's copy, as a Python dict would).
    /// SQLite cannot be: its connections, and the locks they hold on the file, belong to the
    /// parent, and SQLite keeps a process's locks on a file in memory the child inherits.
    fn reopen(&self, py: Python<'_>, parent: u32) -> PyResult<Opened> {
        match &self.recipe.backend {
            Backend::Sqlite(_) => {
                let mut state = self.state();
                if let State::Open(o) = &*state
                    && o.pid == parent
                {
                    std::mem::forget(std::mem::replace(&mut *state, State::LeftByFork { parent }));
                }
                drop(state);
                Err(left_by_fork(parent))
            }
            Backend::Memory => {
                let inherited = match &*self.state() {
                    State::Open(o) => Some((
                        Arc::clone(&o.backend),
                        Arc::clone(&o.stack),
                        o.effects.clone(),
                        o.admin.clone(),
                    )),
                    _ => None,
                };
                let (backend, stack, effects, admin) = inherited.ok_or_else(closed)?;
                let sweeper = self.sweeper.as_ref();
                Opened::around(&self.recipe, backend, stack, effects, admin, sweeper)
            }
            _ => {
                let recipe = Recipe {
                    options: Options {
                        setup: false,
                        ..self.recipe.options.clone()
                    },
                    ..self.recipe.clone()
                };
                Opened::open(py, &recipe, self.sweeper.as_ref())
            }
        }
    }

    /// The saver.
    fn saver(&self, py: Python<'_>) -> PyResult<Arc<dyn Saver>> {
        self.with_opened(py, |o| Arc::clone(&o.inner))
    }

    /// The `Idempotent` wrapper, or `UnsupportedError` for `op` on a saver opened without it.
    fn effects(&self, py: Python<'_>, op: &'static str) -> PyResult<Effects> {
        self.with_opened(py, |o| o.effects.clone())?
            .ok_or_else(|| effects::not_enabled(op))
    }

    /// [`call`] with an operation on the saver.
    fn run<R, F>(
        &self,
        py: Python<'_>,
        blocking: bool,
        op: impl FnOnce(Arc<dyn Saver>) -> F,
        convert: Convert<R>,
    ) -> PyResult<Py<PyAny>>
    where
        R: Send + 'static,
        F: Future<Output = Result<R>> + Send + 'static,
    {
        call(py, blocking, op(self.saver(py)?), convert)
    }
}

impl Drop for NativeSaver {
    fn drop(&mut self) {
        // A saver dropped in a forked child without being used there: as in `with_opened`.
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if matches!(state, State::Open(o) if o.pid != process_id()) {
            std::mem::forget(std::mem::replace(state, State::Closed));
        }
    }
}

#[pymethods]
impl NativeSaver {
    /// Opens `kind` (`memory`, `sqlite`, `postgres`, `redis`, `redis-cluster`, `mongodb`) at
    /// `target` (a path or URL; for `redis-cluster`, a `redis[s]+cluster://` URL).
    #[new]
    #[pyo3(signature = (
        kind, target, *, schema=None, key_prefix=None, database=None, collection_prefix=None,
        transactions=None, write_concern=None, max_connections=None, transaction_pooling=None,
        allow_eviction=None, setup=true,
        default_ttl_minutes=None, refresh_on_read=None, sweep_interval_minutes=None,
        collection_ttl_seconds=None, timeout_seconds=None, retries=None, sanitize_on_load=false, pending_markers=false, skip_unsafe_put=false, idempotent=false,
        idempotent_settings=None, compare_and_set=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        kind: &str,
        target: String,
        schema: Option<String>,
        key_prefix: Option<String>,
        database: Option<String>,
        collection_prefix: Option<String>,
        transactions: Option<String>,
        write_concern: Option<String>,
        max_connections: Option<u32>,
        transaction_pooling: Option<bool>,
        allow_eviction: Option<bool>,
        setup: bool,
        default_ttl_minutes: Option<f64>,
        refresh_on_read: Option<bool>,
        sweep_interval_minutes: Option<f64>,
        collection_ttl_seconds: Option<f64>,
        timeout_seconds: Option<f64>,
        retries: Option<usize>,
        sanitize_on_load: bool,
        pending_markers: bool,
        skip_unsafe_put: bool,
        idempotent: bool,
        idempotent_settings: Option<HashMap<String, f64>>,
        compare_and_set: bool,
    ) -> PyResult<Self> {
        let backend = match kind {
            "memory" => Backend::Memory,
            "sqlite" => Backend::Sqlite(target),
            "postgres" => Backend::Postgres(target),
            "redis" => Backend::Redis(target),
            "redis-cluster" => {
                Backend::RedisCluster(checkpoint_redis::cluster_nodes(&target).map_err(to_py)?)
            }
            "mongodb" => Backend::Mongo(target),
            other => return Err(PyValueError::new_err(format!("unknown backend {other:?}"))),
        };
        let timeout = timeout_seconds.map(call_timeout).transpose()?;
        let options = Options {
            statement_timeout: timeout.map(server_bound),
            schema,
            key_prefix,
            database,
            collection_prefix,
            transactions,
            write_concern,
            max_connections,
            transaction_pooling,
            allow_eviction,
            setup,
            default_ttl: default_ttl_minutes
                .map(|m| ttl_duration("default_ttl", m * 60.0))
                .transpose()?,
            refresh_on_read,
            sweep_interval: sweep_interval_minutes
                .map(|m| ttl_duration("sweep_interval_minutes", m * 60.0))
                .transpose()?,
            collection_ttl: collection_ttl_seconds
                .map(|s| ttl_duration("ttl", s))
                .transpose()?,
        };
        let recipe = Recipe {
            backend,
            calls: CallPolicy {
                timeout,
                // `retries=0` makes no call twice, as no retries.
                retry: retries
                    .filter(|&n| n > 0)
                    .map(|n| RetryLayer::new().max_retries(n)),
            },
            wrappers: Wrappers {
                sanitize_on_load,
                pending_markers,
                skip_unsafe_put,
                idempotent: match (idempotent, idempotent_settings) {
                    (true, settings) => Some(effects::config(settings)?),
                    (false, None) => None,
                    (false, Some(_)) => {
                        return Err(to_py(Error::invalid(
                            "idempotent settings given without idempotent=True",
                        )));
                    }
                },
            },
            options,
        };
        let status = recipe
            .options
            .sweep_interval
            .map(|_| Arc::new(SweeperStatus::default()));
        let opened = Opened::open(py, &recipe, status.as_ref())?;
        if compare_and_set && !opened.inner.capabilities().compare_and_set {
            return Err(PyValueError::new_err(
                "compare_and_set: this backend does not provide compare-and-set puts",
            ));
        }
        Ok(Self {
            description: format!("{:?}", opened.inner),
            capabilities: opened.inner.capabilities(),
            state: Mutex::new(State::Open(opened)),
            recipe,
            compare_and_set,
            sweeper: status,
        })
    }

    /// The optional operations the saver provides.
    fn capabilities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.capabilities;
        let dict = PyDict::new(py);
        dict.set_item("copy_thread", c.copy_thread)?;
        dict.set_item("prune", c.prune)?;
        dict.set_item("delete_for_runs", c.delete_for_runs)?;
        dict.set_item("compare_and_set", c.compare_and_set)?;
        dict.set_item("leases", c.leases)?;
        dict.set_item("ledger", c.ledger)?;
        dict.set_item("ttl", c.ttl)?;
        Ok(dict)
    }

    /// Whether every put is a compare-and-set put.
    #[getter]
    fn compare_and_set(&self) -> bool {
        self.compare_and_set
    }

    /// The saver's description (backend and wrappers), never a connection string.
    fn __repr__(&self) -> String {
        if self.closed() {
            format!("{} (closed)", self.description)
        } else {
            self.description.clone()
        }
    }

    /// Stops the background sweeper and lets go of the saver: its connections close once
    /// the calls still running and the `list` iterators still open are done with them.
    /// Every later call raises `ClosedError`; closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let state = std::mem::replace(&mut *self.state(), State::Closed);
        match state {
            State::Open(opened) if opened.pid == process_id() => {
                // Dropping the saver may hand connections back to their pools, which runs
                // on the runtime; without the GIL, as any other call.
                let runtime = runtime()?;
                py.detach(|| {
                    let _runtime = runtime.enter();
                    drop(opened);
                });
            }
            // Opened by the process this one forked from: see `with_opened`.
            State::Open(inherited) => std::mem::forget(inherited),
            State::Closed | State::LeftByFork { .. } => {}
        }
        Ok(())
    }

    /// Whether [`NativeSaver::close`] ran (or, for SQLite, the process forked since it was
    /// opened).
    #[getter]
    fn closed(&self) -> bool {
        !matches!(&*self.state(), State::Open(_))
    }

    /// What the background sweeper did so far, `None` without one: whether its task still
    /// runs (`running`: false once closed, or had it ended), `sweeps`, `failures` and `swept`
    /// (threads deleted) counts, `last_sweep` and `last_failure` (seconds since the Unix
    /// epoch, or `None`) and `last_error` (the last failure's message, or `None`).
    #[getter]
    fn sweeper<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(status) = &self.sweeper else {
            return Ok(None);
        };
        let running = match &*self.state() {
            State::Open(o) if o.pid == process_id() => {
                o.sweeper.as_ref().is_some_and(|task| !task.is_finished())
            }
            _ => false,
        };
        let report = status.report();
        let seconds = |at: std::time::SystemTime| {
            at.duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        let dict = PyDict::new(py);
        dict.set_item("running", running)?;
        dict.set_item("sweeps", report.sweeps)?;
        dict.set_item("failures", report.failures)?;
        dict.set_item("swept", report.swept)?;
        dict.set_item("last_sweep", report.last_sweep.map(seconds))?;
        let (failed_at, error) = report.last_failure.unzip();
        dict.set_item("last_failure", failed_at.map(seconds))?;
        dict.set_item("last_error", error)?;
        Ok(Some(dict))
    }

    /// A tuple (see `convert::tuple_to_py`) or `None`.
    #[pyo3(signature = (thread_id, checkpoint_ns, checkpoint_id, blocking))]
    fn get_tuple(
        &self,
        py: Python<'_>,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: Option<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let config = config(thread_id, checkpoint_ns, checkpoint_id);
        self.run(
            py,
            blocking,
            move |saver| async move { saver.get_tuple(&config).await },
            |py, t| match t {
                Some(t) => convert::tuple_to_py(py, &t),
                None => Ok(py.None()),
            },
        )
    }

    /// Stores a checkpoint under parent `parent_id`; returns its id. `compare_and_set` is the
    /// run's choice for this put (`None`: the saver's).
    #[pyo3(signature = (thread_id, checkpoint_ns, parent_id, checkpoint, metadata, new_versions, compare_and_set, blocking))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        thread_id: String,
        checkpoint_ns: String,
        parent_id: Option<String>,
        checkpoint: &Bound<'_, PyAny>,
        metadata: &str,
        new_versions: &Bound<'_, PyAny>,
        compare_and_set: Option<bool>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let checkpoint = convert::checkpoint(checkpoint)?;
        let metadata = convert::metadata(metadata)?;
        let new_versions = convert::versions("new_versions", new_versions)?;
        let options = if compare_and_set.unwrap_or(self.compare_and_set) {
            if !self.capabilities.compare_and_set {
                return Err(to_py(Error::Unsupported {
                    op: "compare_and_set",
                }));
            }
            PutOptions::compare_and_set()
        } else {
            PutOptions::new()
        };
        let config = config(thread_id, checkpoint_ns, parent_id);
        self.run(
            py,
            blocking,
            move |saver| async move {
                saver
                    .put(&config, checkpoint, metadata, new_versions, options)
                    .await
            },
            |py, c| Ok(c.checkpoint_id.into_pyobject(py)?.into_any().unbind()),
        )
    }

    /// Records `writes` (`[(channel, (type, bytes)), ...]`) of task `task_id`.
    #[pyo3(signature = (thread_id, checkpoint_ns, checkpoint_id, writes, task_id, task_path, blocking))]
    #[allow(clippy::too_many_arguments)]
    fn put_writes(
        &self,
        py: Python<'_>,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: Option<String>,
        writes: &Bound<'_, PyList>,
        task_id: String,
        task_path: String,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut batch: Vec<(String, TypedValue)> = Vec::with_capacity(writes.len());
        for item in writes.iter() {
            let (channel, value): (String, Bound<'_, PyAny>) = item.extract()?;
            let value = convert::typed_value(&format!("write to {channel:?}"), &value)?;
            batch.push((channel, value));
        }
        let config = config(thread_id, checkpoint_ns, checkpoint_id);
        let options = PutWritesOptions::new().task_path(task_path);
        self.run(
            py,
            blocking,
            move |saver| async move { saver.put_writes(&config, batch, &task_id, options).await },
            none,
        )
    }

    /// A cursor over the matching tuples, newest first (nothing is read until it is pulled).
    #[pyo3(signature = (thread_id, checkpoint_ns, checkpoint_id, filter, before, limit))]
    #[allow(clippy::too_many_arguments)]
    fn list(
        &self,
        py: Python<'_>,
        thread_id: Option<String>,
        checkpoint_ns: Option<String>,
        checkpoint_id: Option<String>,
        filter: Option<&str>,
        before: Option<String>,
        limit: Option<usize>,
    ) -> PyResult<TupleStream> {
        let mut options = ListOptions::new().with_filter(convert::filter(filter)?);
        options.thread_id = thread_id;
        options.checkpoint_ns = checkpoint_ns;
        options.checkpoint_id = checkpoint_id;
        options.before = before;
        options.limit = limit;
        // `list` is lazy: building the stream does no I/O, but backends spawn on the runtime.
        let lister = self.with_opened(py, |o| Arc::clone(&o.lister))?;
        let _guard = runtime()?.enter();
        Ok(TupleStream::new(
            lister.list(options),
            self.recipe.calls.timeout,
        ))
    }

    /// A cursor over the ids of the threads holding a checkpoint, ascending as the backend
    /// orders them, after `after` if given, at most `limit` of them.
    #[pyo3(signature = (after, limit))]
    fn list_threads(
        &self,
        py: Python<'_>,
        after: Option<String>,
        limit: Option<usize>,
    ) -> PyResult<TupleStream> {
        let lister = self.with_opened(py, |o| Arc::clone(&o.lister))?;
        let _guard = runtime()?.enter();
        let threads = match &after {
            None => lister.list_threads(),
            Some(after) => lister.list_threads_after(after),
        };
        let threads = match limit {
            Some(n) => threads.take(n).boxed(),
            None => threads,
        };
        Ok(TupleStream::threads(threads, self.recipe.calls.timeout))
    }

    /// Creates the backend's tables or indexes where they are missing (idempotent).
    fn setup(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        let admin = self.with_opened(py, |o| o.admin.clone())?;
        call(py, blocking, admin.setup(), none)
    }

    /// Deletes everything the store holds (Redis: every key under the prefix; MongoDB:
    /// every collection of the configuration); the number of keys deleted or `None`.
    fn destroy(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        let admin = self.with_opened(py, |o| o.admin.clone())?;
        call(py, blocking, admin.destroy(), |py, n| {
            Ok(n.into_pyobject(py)?.into_any().unbind())
        })
    }

    /// Deletes a thread (every namespace).
    fn delete_thread(
        &self,
        py: Python<'_>,
        thread_id: String,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(
            py,
            blocking,
            move |saver| async move { saver.delete_thread(&thread_id).await },
            none,
        )
    }

    /// Deletes the checkpoints of the given runs.
    fn delete_for_runs(
        &self,
        py: Python<'_>,
        run_ids: Vec<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(
            py,
            blocking,
            move |saver| async move { saver.delete_for_runs(&run_ids).await },
            none,
        )
    }

    /// Copies a thread.
    fn copy_thread(
        &self,
        py: Python<'_>,
        source: String,
        target: String,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        self.run(
            py,
            blocking,
            move |saver| async move { saver.copy_thread(&source, &target).await },
            none,
        )
    }

    /// Prunes threads: `keep_latest`, `delete`, or a number of checkpoints to keep per
    /// namespace.
    fn prune(
        &self,
        py: Python<'_>,
        thread_ids: Vec<String>,
        strategy: &Bound<'_, PyAny>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let strategy = if let Ok(n) = strategy.extract::<usize>() {
            PruneStrategy::KeepLast(n)
        } else {
            match strategy.extract::<String>()?.as_str() {
                "keep_latest" => PruneStrategy::KeepLatest,
                "delete" => PruneStrategy::DeleteAll,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "unknown prune strategy {other:?} (keep_latest, delete, or a count)"
                    )));
                }
            }
        };
        self.run(
            py,
            blocking,
            move |saver| async move { saver.prune(&thread_ids, strategy).await },
            none,
        )
    }

    /// Sets a thread's TTL: `kind` `"default"` (the saver's), `"pinned"` (never expires) or
    /// `"expire"` (`seconds` after its last write).
    #[pyo3(signature = (thread_id, kind, seconds, blocking))]
    fn set_thread_ttl(
        &self,
        py: Python<'_>,
        thread_id: String,
        kind: &str,
        seconds: Option<f64>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let ttl = match (kind, seconds) {
            ("default", None) => ThreadTtl::Default,
            ("pinned", None) => ThreadTtl::Pinned,
            // Zero and sub-millisecond TTLs are the backend's to judge (`thread_ttl_ms`).
            ("expire", Some(s)) => {
                ThreadTtl::Expire(Duration::try_from_secs_f64(s).map_err(|_| {
                    to_py(Error::InvalidInput {
                        reason: format!(
                            "a thread TTL is a finite, non-negative duration, got {s}s"
                        ),
                    })
                })?)
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                    "thread TTL {kind:?}: expected \"default\", \"pinned\" or a duration"
                )));
            }
        };
        self.run(
            py,
            blocking,
            move |saver| async move { saver.set_thread_ttl(&thread_id, ttl).await },
            none,
        )
    }

    /// Seconds left before a thread's data expires, or `None` (no TTL, no data, expired).
    fn thread_ttl(&self, py: Python<'_>, thread_id: String, blocking: bool) -> PyResult<Py<PyAny>> {
        self.run(
            py,
            blocking,
            move |saver| async move { saver.thread_ttl(&thread_id).await },
            |py, left| {
                Ok(left
                    .map(|d| d.as_secs_f64())
                    .into_pyobject(py)?
                    .into_any()
                    .unbind())
            },
        )
    }

    /// Deletes the data of at most `limit` expired threads; how many it deleted.
    fn sweep_expired(&self, py: Python<'_>, limit: usize, blocking: bool) -> PyResult<Py<PyAny>> {
        self.run(
            py,
            blocking,
            move |saver| async move { saver.sweep_expired(limit).await },
            |py, n| Ok(n.into_pyobject(py)?.into_any().unbind()),
        )
    }

    /// Claims the idempotency-ledger `key` (`Idempotent::begin`): `("run", ledger_key,
    /// token)`, or `("replay", type, bytes)` with the recorded outcome.
    fn once_begin(&self, py: Python<'_>, key: String, blocking: bool) -> PyResult<Py<PyAny>> {
        effects::begin(
            py,
            self.effects(py, "once (open the saver with idempotent=True)")?,
            key,
            blocking,
        )
    }

    /// Records the outcome of the effect run under `(ledger_key, token)`: `"ran"`, or
    /// `"ran_unrecorded"` when the claim was lost or the ledger kept failing.
    #[pyo3(signature = (ledger_key, token, type_tag, data, blocking))]
    fn once_finish(
        &self,
        py: Python<'_>,
        ledger_key: String,
        token: u64,
        type_tag: String,
        data: Vec<u8>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let effects = self.effects(py, "once (open the saver with idempotent=True)")?;
        effects::finish(py, effects, (ledger_key, token), (type_tag, data), blocking)
    }

    /// Gives up the claim `(ledger_key, token)` of an effect that failed.
    fn once_abandon(
        &self,
        py: Python<'_>,
        ledger_key: String,
        token: u64,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let effects = self.effects(py, "once (open the saver with idempotent=True)")?;
        effects::abandon(py, effects, (ledger_key, token), blocking)
    }

    /// Waits for exclusive access to `thread_id`: a `NativeThreadGuard` (or an awaitable of
    /// one).
    fn lock_thread(
        &self,
        py: Python<'_>,
        thread_id: String,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let effects = self.effects(py, "lock_thread (open the saver with idempotent=True)")?;
        effects::lock_thread(py, effects, thread_id, blocking)
    }

    /// The delta history of `channels` at a checkpoint:
    /// `{channel: (seed (type, bytes) or None, [(task_id, channel, (type, bytes)), ...])}`.
    #[pyo3(signature = (thread_id, checkpoint_ns, checkpoint_id, channels, blocking))]
    fn delta_channel_history(
        &self,
        py: Python<'_>,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: Option<String>,
        channels: Vec<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let config = config(thread_id, checkpoint_ns, checkpoint_id);
        self.run(
            py,
            blocking,
            move |saver| async move { saver.delta_channel_history(&config, &channels).await },
            |py, h| convert::delta_to_py(py, &h),
        )
    }
}

/// The `statement_timeout` a PostgreSQL saver's connections get for the `timeout` option:
/// a little longer, so that the call's own deadline passes first (its error says the call
/// got no answer in time) and the server cancels what the call left behind shortly after.
fn server_bound(timeout: Duration) -> Duration {
    timeout
        .saturating_add(timeout / 10)
        .saturating_add(Duration::from_millis(100))
}

/// The `timeout` option, in seconds: positive and finite.
fn call_timeout(seconds: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(to_py(Error::InvalidInput {
            reason: format!("timeout must be a positive, finite number of seconds, got {seconds}"),
        })),
    }
}

/// A TTL given in seconds as a duration: finite, and at least 1 ms.
fn ttl_duration(what: &str, seconds: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d >= Duration::from_millis(1) => Ok(d),
        _ => Err(to_py(Error::InvalidInput {
            reason: format!("{what} must be a finite duration of at least 1 ms, got {seconds}s"),
        })),
    }
}
