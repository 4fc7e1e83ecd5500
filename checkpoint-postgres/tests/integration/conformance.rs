//! The conformance suite against PostgreSQL, each clause in its own schema.

use crate::common;

checkpoint_conformance::conformance_suite!(common::PgFactory::default());
