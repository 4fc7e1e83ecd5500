//! The integration tests of `checkpoint-mongo`, in one binary: one module per concern,
//! against the server of `CHECKPOINT_TEST_MONGO_URL` (started by `scripts/test.sh`).

mod chaos;
mod common;
mod conformance;
mod errors;
mod hostile;
mod langgraph;
mod layout;
mod ordered_writes;
mod restart;
mod round_trips;
mod stack;
