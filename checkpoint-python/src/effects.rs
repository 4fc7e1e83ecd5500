//! Side effects run once and one run per thread at a time, for Python: the `Idempotent`
//! wrapper of checkpoint-sanitize, whose `once` is split at the effect (`begin`, then
//! `finish` or `abandon`) so the effect runs as Python code in the caller's own thread or
//! event loop, and whose `lock_thread` guard becomes [`NativeThreadGuard`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use checkpoint_core::{Error, Saver, TypedValue};
use checkpoint_sanitize::{
    Begun, EffectContext, EffectKey, Idempotent, IdempotentConfig, OnceError, Origin, ThreadGuard,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::to_py;
use crate::saver::{call, none};

/// The wrapper as the binding holds it: around the backend (behind the `timeout` and
/// `retries` options).
pub(crate) type Effects = Arc<Idempotent<Arc<dyn Saver>>>;

/// The `idempotent` option's settings (seconds) as the wrapper's configuration: keys
/// `lease_ttl`, `lease_wait`, `claim_ttl`, `pending_wait`.
pub(crate) fn config(settings: Option<HashMap<String, f64>>) -> PyResult<IdempotentConfig> {
    let mut config = IdempotentConfig::default();
    for (name, seconds) in settings.unwrap_or_default() {
        let duration = match Duration::try_from_secs_f64(seconds) {
            Ok(d) if !d.is_zero() => d,
            _ => {
                return Err(to_py(Error::invalid(format!(
                    "idempotent[{name:?}] must be a positive, finite number of seconds, got \
                     {seconds}"
                ))));
            }
        };
        config = match name.as_str() {
            "lease_ttl" => config.lease_ttl(duration),
            "lease_wait" => config.lease_wait(duration),
            "claim_ttl" => config.claim_ttl(duration),
            "pending_wait" => config.pending_wait(duration),
            other => {
                return Err(to_py(Error::invalid(format!(
                    "idempotent: unknown setting {other:?} (expected lease_ttl, lease_wait, \
                     claim_ttl or pending_wait)"
                ))));
            }
        };
    }
    Ok(config)
}

/// The error of a call that needs the wrapper on a saver opened without it.
pub(crate) fn not_enabled(op: &'static str) -> PyErr {
    to_py(Error::Unsupported { op })
}

/// `OnceError` of `begin` as our error: the ledger's own, or, when another holder's claim
/// stayed live past `pending_wait`, `Unavailable` (transient).
fn begin_error(err: OnceError<std::convert::Infallible>) -> Error {
    match err {
        OnceError::Saver(e) => e,
        busy => Error::Unavailable {
            backend: "idempotency ledger",
            source: busy.to_string().into(),
        },
    }
}

/// The ledger key of effect `effect` of task `task_id` at checkpoint `checkpoint_id` of
/// `(thread_id, checkpoint_ns)` (`EffectKey::derive`: the same task of the same step gets the
/// same key on every retry, replay and resume, in Rust and in Python).
#[pyfunction]
pub(crate) fn effect_key(
    thread_id: &str,
    checkpoint_ns: &str,
    checkpoint_id: &str,
    task_id: &str,
    effect: &str,
) -> String {
    EffectKey::derive(thread_id, checkpoint_ns, checkpoint_id, task_id, effect)
        .as_str()
        .to_owned()
}

/// `("run", ledger_key, token)` or `("replay", type, bytes)`.
fn begun_to_py(py: Python<'_>, begun: Begun) -> PyResult<Py<PyAny>> {
    let tuple = match begun {
        Begun::Run(EffectContext { key, token }) => {
            ("run", key, token).into_pyobject(py)?.into_any()
        }
        Begun::Replay(outcome) => (
            "replay",
            outcome.type_tag.as_str().to_owned(),
            PyBytes::new(py, &outcome.bytes),
        )
            .into_pyobject(py)?
            .into_any(),
        other => {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "unknown ledger answer {other:?}"
            )));
        }
    };
    Ok(tuple.unbind())
}

/// What `finish` reports: `"ran"`, or `"ran_unrecorded"` (the only other origin it gives).
fn origin_name(origin: Origin) -> &'static str {
    if origin == Origin::Ran {
        "ran"
    } else {
        "ran_unrecorded"
    }
}

/// Claims `key` (see `Idempotent::begin`), blocking or as an awaitable.
pub(crate) fn begin(
    py: Python<'_>,
    effects: Effects,
    key: String,
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    let key = EffectKey::new(key).map_err(to_py)?;
    let fut = async move { effects.begin(&key).await.map_err(begin_error) };
    call(py, blocking, fut, begun_to_py)
}

/// Records the outcome `(type_tag, data)` of the effect run under `(key, token)`; the origin
/// (`"ran"` or `"ran_unrecorded"`).
pub(crate) fn finish(
    py: Python<'_>,
    effects: Effects,
    context: (String, u64),
    outcome: (String, Vec<u8>),
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    let (key, token) = context;
    let outcome = TypedValue::new(outcome.0.as_str().into(), outcome.1);
    let fut = async move {
        let origin = effects.finish(&EffectContext { key, token }, outcome).await;
        Ok(origin_name(origin))
    };
    call(py, blocking, fut, |py, origin| {
        Ok(origin.into_pyobject(py)?.into_any().unbind())
    })
}

/// Gives up the claim `(key, token)` of an effect that failed.
pub(crate) fn abandon(
    py: Python<'_>,
    effects: Effects,
    context: (String, u64),
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    let (key, token) = context;
    let fut = async move {
        effects.abandon(&EffectContext { key, token }).await;
        Ok(())
    };
    call(py, blocking, fut, none)
}

/// Waits for exclusive access to `thread_id` (see `Idempotent::lock_thread`).
pub(crate) fn lock_thread(
    py: Python<'_>,
    effects: Effects,
    thread_id: String,
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    let fut = async move { effects.lock_thread(&thread_id).await };
    call(py, blocking, fut, |py, guard| {
        Ok(Py::new(py, NativeThreadGuard::new(guard))?.into_any())
    })
}

/// A held thread lock (`Idempotent::lock_thread`): the in-process lock and, on backends with
/// leases, the thread's lease, renewed in the background until released; while held, every
/// put and put_writes of the thread through the saver carries its fencing token. Built by
/// `NativeSaver.lock_thread`; not meant to be used directly.
#[pyclass(frozen, module = "checkpoint_rs._native")]
pub(crate) struct NativeThreadGuard {
    thread_id: String,
    fence: Option<u64>,
    guard: Mutex<Option<ThreadGuard>>,
}

impl NativeThreadGuard {
    fn new(guard: ThreadGuard) -> Self {
        Self {
            thread_id: guard.thread_id().to_owned(),
            fence: guard.fence(),
            guard: Mutex::new(Some(guard)),
        }
    }

    fn take(&self) -> Option<ThreadGuard> {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[pymethods]
impl NativeThreadGuard {
    /// The locked thread.
    #[getter]
    fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The lease's fencing token (`None` on a backend without leases).
    #[getter]
    fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Whether another holder took the lease over (the thread's writes are then refused).
    #[getter]
    fn lost(&self) -> bool {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(ThreadGuard::is_lost)
    }

    /// Whether `release` ran.
    #[getter]
    fn released(&self) -> bool {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Releases the lease and the lock, waiting for the lease's release; again: nothing.
    fn release(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        let guard = self.take();
        let fut = async move {
            if let Some(guard) = guard {
                guard.release().await;
            }
            Ok(())
        };
        call(py, blocking, fut, none)
    }
}
