//! The conformance suite against PostgreSQL, each clause in its own schema.

mod common;

conformance_tests::conformance_suite!(common::PgFactory::default());
