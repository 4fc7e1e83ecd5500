//! The suite run on the in-memory reference saver, on a minimal saver that advertises no
//! optional operation, and on the reference behind the `Timeout` wrapper.

mod conformance;
mod minimal_saver;
mod timeout;
