//! The integration tests of `checkpoint-sanitize`, in one binary: the conformance suite
//! through every wrapper, each wrapper's behaviors, the message formats against fixtures
//! the real Python libraries wrote, and the field reports' scenarios.

mod conformance;
mod idempotent;
mod messages_fixtures;
mod pending_markers;
mod repair_properties;
mod sanitize_on_load;
mod sanitize_on_load_tracing;
mod scenarios;
mod skip_unsafe_put;
