//! The conformance suite against the in-memory reference saver.

use std::sync::Arc;

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{BoxError, InMemorySaver, Saver, async_trait};

/// Each clause gets a new, empty in-memory saver.
struct InMemoryFactory;

#[async_trait]
impl SaverFactory for InMemoryFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(InMemorySaver::new()))
    }
}

checkpoint_conformance::conformance_suite!(InMemoryFactory);

#[test]
fn every_clause_is_registered_once() {
    let mut names: Vec<&str> = checkpoint_conformance::CLAUSES
        .iter()
        .map(|c| c.rsplit("::").next().unwrap())
        .collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "clause names must be unique");
    println!("conformance suite: {n} clauses");
}
