//! Our [`Error`] as Python exceptions: each kind raises its class from
//! `checkpoint_rs.errors` (defined in Python, so a class can also derive from the built-in
//! exception a caller expects: `InvalidInputError` is a `ValueError`, `ConflictError` a
//! `RuntimeError`, `UnsupportedError` a `NotImplementedError`, ...).

use checkpoint_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The Python exception for `err`, its message the error and its whole source chain.
pub(crate) fn to_py(err: Error) -> PyErr {
    let class = match &err {
        Error::NotFound { .. } => "NotFoundError",
        Error::Conflict { .. } => "ConflictError",
        Error::StaleFence { .. } => "StaleFenceError",
        Error::InvalidInput { .. } => "InvalidInputError",
        Error::LimitExceeded { .. } => "LimitExceededError",
        Error::Rejected { .. } => "RejectedError",
        Error::Unsupported { .. } => "UnsupportedError",
        Error::Serialization { .. } => "SerializationError",
        Error::Unavailable { .. } => "UnavailableError",
        _ => "BackendError",
    };
    let message = err.chain();
    Python::attach(|py| {
        let raised = (|| -> PyResult<PyErr> {
            let class = py.import("checkpoint_rs.errors")?.getattr(class)?;
            let exc = class.call1((message.clone(),))?;
            if let Error::Conflict {
                thread_id,
                checkpoint_ns,
                expected,
                found,
            } = &err
            {
                exc.setattr("thread_id", thread_id)?;
                exc.setattr("checkpoint_ns", checkpoint_ns)?;
                exc.setattr("expected", expected)?;
                exc.setattr("found", found)?;
            }
            Ok(PyErr::from_value(exc))
        })();
        // The errors module is part of the package; failing to import it means a broken
        // installation, reported with the original message.
        raised.unwrap_or_else(|import| {
            PyRuntimeError::new_err(format!("{message} (and raising it failed: {import})"))
        })
    })
}

/// `checkpoint_rs.errors.ClosedError`: a call on a saver after its `close()`.
pub(crate) fn closed() -> PyErr {
    closed_error("the saver is closed")
}

/// `checkpoint_rs.errors.ClosedError`: a call, in a forked child, on a SQLite saver opened
/// by process `parent` before the fork.
pub(crate) fn left_by_fork(parent: u32) -> PyErr {
    closed_error(&format!(
        "this SqliteSaver was opened by process {parent}, which forked this one: SQLite \
         connections and the locks they hold cannot be shared with a forked child. Open the \
         saver in the child, after the fork (for gunicorn: not at import with --preload; for \
         multiprocessing: the 'spawn' or 'forkserver' start method), or close it before \
         forking"
    ))
}

/// `checkpoint_rs.errors.ClosedError` with `message`.
pub(crate) fn closed_error(message: &str) -> PyErr {
    Python::attach(|py| {
        py.import("checkpoint_rs.errors")
            .and_then(|m| m.getattr("ClosedError"))
            .and_then(|class| class.call1((message,)))
            .map(PyErr::from_value)
            .unwrap_or_else(|import| {
                PyRuntimeError::new_err(format!("{message} (and raising it failed: {import})"))
            })
    })
}

/// `Result<T, Error>` → `PyResult<T>`.
pub(crate) trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for checkpoint_core::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
