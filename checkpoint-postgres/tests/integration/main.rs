//! The integration tests of `checkpoint-postgres`, in one binary (one link on a 2-core
//! machine is most of a test run): one module per concern, each against the server of
//! `CHECKPOINT_TEST_POSTGRES_URL` (started by `scripts/test.sh`).

mod chaos;
mod common;
mod conformance;
mod crash;
mod hostile;
mod interop;
mod pooler;
mod recovery;
mod restart;
mod stack;
mod timeouts;
mod ttl;
mod warm;
