//! The suite run on the in-memory reference saver, and on a minimal saver that advertises
//! no optional operation.

mod conformance;
mod minimal_saver;
