//! `list` and `list_threads` as cursors Python pulls batches from, synchronously or
//! awaiting.

use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{BoxStream, CheckpointTuple, Error, Result, TimedOut};
use futures::{FutureExt, StreamExt, TryStreamExt};
use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::convert::tuple_to_py;
use crate::errors::{closed_error, to_py};
use crate::runtime::{block_on, future_into_py, process_id, runtime};

/// An item of a listing: a tuple of `list`, an id of `list_threads`.
pub(crate) enum Listed {
    Tuple(Box<CheckpointTuple>),
    Thread(String),
}

impl Listed {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Self::Tuple(t) => tuple_to_py(py, t),
            Self::Thread(id) => Ok(id.into_pyobject(py)?.into_any().unbind()),
        }
    }
}

struct Cursor {
    stream: BoxStream<'static, Result<Listed>>,
    /// The listing, for the error of a batch that timed out.
    operation: &'static str,
    /// How long a batch may wait for its first item (the saver's `timeout` option). Only
    /// that wait counts: the items a batch takes without waiting may start the next
    /// page's fetch, which then goes on only while a batch waits for it.
    limit: Option<Duration>,
    /// An error met after some items of a batch: those are returned, this is raised next.
    failed: Option<Error>,
    done: bool,
}

impl Drop for Cursor {
    fn drop(&mut self) {
        // A page fetch cut short (an awaited batch cancelled) may hold a pooled connection,
        // which goes back to its pool through a task on the runtime; Python drops the last
        // cursor outside it.
        let stream = std::mem::replace(&mut self.stream, Box::pin(futures::stream::empty()));
        match runtime() {
            Ok(runtime) => {
                let _runtime = runtime.enter();
                drop(stream);
            }
            Err(_) => std::mem::forget(stream),
        }
    }
}

/// The tuples of one `list` call (newest first) or the ids of one `list_threads` call,
/// fetched page by page as they are pulled.
#[pyclass(frozen, module = "checkpoint_rs._native")]
pub(crate) struct TupleStream {
    /// The process that started the `list`: its page fetches run on that process's
    /// connections, which a forked child cannot use.
    started_by: u32,
    /// `list` or `list_threads`.
    operation: &'static str,
    cursor: Arc<Mutex<Cursor>>,
}

impl TupleStream {
    /// The tuples of `stream`, each batch waiting at most `limit` for its first one.
    pub(crate) fn new(
        stream: BoxStream<'static, Result<CheckpointTuple>>,
        limit: Option<Duration>,
    ) -> Self {
        let tuples = stream.map_ok(|t| Listed::Tuple(Box::new(t)));
        Self::of("list", tuples.boxed(), limit)
    }

    /// The thread ids of `stream`, as [`new`](Self::new).
    pub(crate) fn threads(
        stream: BoxStream<'static, Result<String>>,
        limit: Option<Duration>,
    ) -> Self {
        Self::of("list_threads", stream.map_ok(Listed::Thread).boxed(), limit)
    }

    fn of(
        operation: &'static str,
        stream: BoxStream<'static, Result<Listed>>,
        limit: Option<Duration>,
    ) -> Self {
        Self {
            started_by: process_id(),
            operation,
            cursor: Arc::new(Mutex::new(Cursor {
                stream,
                operation,
                limit,
                failed: None,
                done: false,
            })),
        }
    }
}

/// Waits for the next item, then takes up to `max - 1` more that are ready without waiting
/// (the rest of a fetched page). Empty: the stream is over.
async fn next_batch(cursor: Arc<Mutex<Cursor>>, max: usize) -> Result<Vec<Listed>> {
    let mut cursor = cursor.lock().await;
    if let Some(err) = cursor.failed.take() {
        return Err(err);
    }
    let mut batch = Vec::new();
    if cursor.done {
        return Ok(batch);
    }
    let first = match cursor.limit {
        None => cursor.stream.next().await,
        Some(limit) => match tokio::time::timeout(limit, cursor.stream.next()).await {
            Ok(first) => first,
            Err(_) => {
                // As `checkpoint_core::Timeout` ends a stream: the fetch is dropped.
                cursor.done = true;
                cursor.stream = Box::pin(futures::stream::empty());
                return Err(Error::Unavailable {
                    backend: "saver",
                    source: Box::new(TimedOut {
                        operation: cursor.operation,
                        limit,
                    }),
                });
            }
        },
    };
    match first {
        None => {
            cursor.done = true;
            return Ok(batch);
        }
        Some(Err(e)) => return Err(e),
        Some(Ok(t)) => batch.push(t),
    }
    while batch.len() < max.max(1) {
        match cursor.stream.next().now_or_never() {
            None => break,
            Some(None) => {
                cursor.done = true;
                break;
            }
            Some(Some(Ok(t))) => batch.push(t),
            Some(Some(Err(e))) => {
                cursor.failed = Some(e);
                break;
            }
        }
    }
    Ok(batch)
}

fn batch_to_py(py: Python<'_>, batch: &[Listed]) -> PyResult<Vec<Py<PyAny>>> {
    batch.iter().map(|item| item.to_py(py)).collect()
}

impl TupleStream {
    /// The cursor, unless this process forked from the one that started the `list`.
    fn cursor(&self) -> PyResult<Arc<Mutex<Cursor>>> {
        let started_by = self.started_by;
        if started_by == process_id() {
            return Ok(Arc::clone(&self.cursor));
        }
        let operation = self.operation;
        Err(closed_error(&format!(
            "this {operation} iterator was started by process {started_by}, which forked this \
             one; call {operation}() again in this process"
        )))
    }
}

impl Drop for TupleStream {
    fn drop(&mut self) {
        if self.started_by != process_id() {
            // The cursor is the parent's (see `NativeSaver::with_opened`): never dropped here.
            std::mem::forget(Arc::clone(&self.cursor));
        }
    }
}

#[pymethods]
impl TupleStream {
    /// The next tuples (at most `max`), blocking without the GIL; `[]` at the end.
    #[pyo3(signature = (max = 64))]
    fn next_batch(&self, py: Python<'_>, max: usize) -> PyResult<Vec<Py<PyAny>>> {
        let cursor = self.cursor()?;
        let batch = block_on(py, next_batch(cursor, max))?.map_err(to_py)?;
        batch_to_py(py, &batch)
    }

    /// An awaitable of the next tuples (at most `max`); `[]` at the end.
    #[pyo3(signature = (max = 64))]
    fn anext_batch<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyAny>> {
        let cursor = self.cursor()?;
        future_into_py(py, async move {
            let batch = next_batch(cursor, max).await.map_err(to_py)?;
            Python::attach(|py| batch_to_py(py, &batch))
        })
    }
}
