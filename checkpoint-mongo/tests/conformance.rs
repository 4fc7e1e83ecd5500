//! The conformance suite against MongoDB (the server at `CHECKPOINT_TEST_MONGO_URL`), with
//! the atomicity the server supports (transactions on a replica set). Each clause runs in
//! its own database, dropped afterwards.

mod common;

use checkpoint_mongo::TransactionMode;
use common::MongoFactory;

conformance_tests::conformance_suite!(MongoFactory::new("conf", TransactionMode::Auto));
