#![doc = include_str!("../README.md")]

mod convert;
mod effects;
mod errors;
mod open;
mod runtime;
mod saver;
mod stream;

use pyo3::prelude::*;

/// The native half of the `checkpoint_rs` Python package; the Python half
/// (`python/checkpoint_rs`) wraps it in LangGraph's `BaseCheckpointSaver`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<saver::NativeSaver>()?;
    m.add_class::<stream::TupleStream>()?;
    m.add_class::<effects::NativeThreadGuard>()?;
    m.add_function(wrap_pyfunction!(effects::effect_key, m)?)?;
    m.add_function(wrap_pyfunction!(saver::new_checkpoint_id, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_signal_checks, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
