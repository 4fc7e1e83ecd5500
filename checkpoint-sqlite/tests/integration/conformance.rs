//! The conformance suite against a database file per clause, and against a private
//! in-memory database per clause.

use crate::common::{MemoryFactory, SqliteFactory};

mod file {
    use super::*;
    checkpoint_conformance::conformance_suite!(SqliteFactory::default());
}

mod memory {
    use super::*;
    checkpoint_conformance::conformance_suite!(MemoryFactory);
}
