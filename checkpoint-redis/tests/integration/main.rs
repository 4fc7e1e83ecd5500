//! The integration tests of `checkpoint-redis`, in one binary: one module per concern,
//! against the server of `CHECKPOINT_TEST_REDIS_URL` (started by `scripts/test.sh`) and the
//! servers and Cluster the tests start themselves.

mod chaos;
#[cfg(feature = "cluster")]
mod cluster;
mod common;
mod conformance;
mod durability;
mod features;
mod stack;
#[cfg(feature = "tls-rustls")]
mod tls;
