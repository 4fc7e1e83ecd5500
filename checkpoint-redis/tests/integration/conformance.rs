//! The conformance suite against the single Redis server of `CHECKPOINT_TEST_REDIS_URL`
//! (started by `scripts/test.sh`). Every clause gets savers with their own key prefix;
//! teardown deletes exactly those keys.

use crate::common;

checkpoint_conformance::conformance_suite!(common::RedisFactory::from_env());
