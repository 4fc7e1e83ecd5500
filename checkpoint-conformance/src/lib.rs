#![doc = include_str!("../README.md")]

pub mod chaos;
pub mod clauses;
pub mod crash;
pub mod fixtures;
pub mod integrity;
pub mod langgraph;
pub mod model;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use checkpoint_core::{BoxError, Saver, async_trait};
use tower_layer::Layer;

pub use checkpoint_core;

/// Hands each clause a fresh, isolated saver.
///
/// `build` is called once or more per clause (the model-based clause builds one saver per
/// generated case); every saver it returns must be empty and must not see any other saver's
/// data: a unique schema, database or key prefix, never "delete everything".
/// `teardown` runs once after the clause, passed or failed, to remove what `build` created:
/// a factory must therefore remember every saver (schema, prefix...) it built since the last
/// teardown, not only the latest.
#[async_trait]
pub trait SaverFactory: Send + Sync + 'static {
    /// A fresh, empty, isolated saver.
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError>;

    /// Removes everything the savers built by this factory created. Default: nothing.
    async fn teardown(&self) {}

    /// Why this factory cannot run here (for example: its server is not configured), or
    /// `None` when it can. A skipped clause passes with a printed reason, except when
    /// [`servers_required`] is true, where it fails.
    fn skip_reason(&self) -> Option<String> {
        None
    }

    /// This factory's savers wrapped in `layer` (a `tower_layer::Layer`, such as a wrapper
    /// of `checkpoint-sanitize` or a stack of them): run the suite through the wrappers.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use checkpoint_core::{InMemorySaver, Saver, TracingLayer};
    /// use checkpoint_conformance::SaverFactory;
    /// let traced = checkpoint_conformance::factory_fn(|| async {
    ///     Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>)
    /// })
    /// .layered(TracingLayer::new("memory"));
    /// # let _ = traced;
    /// ```
    fn layered<L>(self, layer: L) -> Layered<Self, L>
    where
        Self: Sized,
    {
        Layered {
            factory: self,
            layer,
        }
    }
}

/// A [`SaverFactory`] whose savers are another factory's, wrapped in a layer (see
/// [`SaverFactory::layered`]). Teardown and skipping are the inner factory's.
#[derive(Debug)]
pub struct Layered<F, L> {
    factory: F,
    layer: L,
}

#[async_trait]
impl<F, L> SaverFactory for Layered<F, L>
where
    F: SaverFactory,
    L: Layer<Arc<dyn Saver>> + Send + Sync + 'static,
    L::Service: Saver,
{
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(self.layer.layer(self.factory.build().await?)))
    }

    async fn teardown(&self) {
        self.factory.teardown().await;
    }

    fn skip_reason(&self) -> Option<String> {
        self.factory.skip_reason()
    }
}

/// A [`SaverFactory`] from a closure returning a future of a saver.
///
/// ```
/// use std::sync::Arc;
/// use checkpoint_core::{InMemorySaver, Saver};
/// let factory = checkpoint_conformance::factory_fn(|| async {
///     Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>)
/// });
/// # let _ = factory;
/// ```
pub fn factory_fn<F, Fut>(f: F) -> FnFactory<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Saver>, BoxError>> + Send + 'static,
{
    FnFactory(f)
}

/// See [`factory_fn`].
pub struct FnFactory<F>(F);

impl<F> std::fmt::Debug for FnFactory<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnFactory")
    }
}

#[async_trait]
impl<F, Fut> SaverFactory for FnFactory<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Saver>, BoxError>> + Send + 'static,
{
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        (self.0)().await
    }
}

/// Whether tests must fail rather than skip when a server is absent: `CI=true` or
/// `CHECKPOINT_TEST_REQUIRE=1`.
pub fn servers_required() -> bool {
    let set = |k: &str, v: &[&str]| {
        std::env::var(k).is_ok_and(|x| v.contains(&x.to_ascii_lowercase().as_str()))
    };
    set("CI", &["true", "1"]) || set("CHECKPOINT_TEST_REQUIRE", &["1", "true"])
}

/// The URL of a test server from `CHECKPOINT_TEST_<BACKEND>_URL`, if set.
pub fn server_url(backend: &str) -> Option<String> {
    std::env::var(format!(
        "CHECKPOINT_TEST_{}_URL",
        backend.to_ascii_uppercase()
    ))
    .ok()
    .filter(|s| !s.is_empty())
}

/// A boxed clause future.
pub type ClauseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Runs one clause against `factory` on a fresh multi-threaded runtime (used by
/// [`conformance_suite!`]; callable directly).
///
/// The suite builds its own runtime instead of expanding to `#[tokio::test]`, so a backend's
/// test crate needs no tokio dev-dependency or runtime flavor of its own, and concurrency
/// clauses always run on several worker threads.
pub fn run_clause<F: SaverFactory>(
    factory: F,
    name: &str,
    clause: for<'a> fn(&'a dyn SaverFactory) -> ClauseFuture<'a>,
) {
    if let Some(reason) = factory.skip_reason() {
        if servers_required() {
            panic!(
                "conformance clause {name}: the backend is required (CI=true or CHECKPOINT_TEST_REQUIRE=1) but unavailable: {reason}"
            );
        }
        eprintln!("conformance clause {name}: SKIPPED: {reason}");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("build the test runtime");
    runtime.block_on(async {
        let outcome = tokio::spawn({
            let factory = Arc::new(factory);
            let f2 = Arc::clone(&factory);
            async move {
                let result =
                    futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(clause(&*f2)))
                        .await;
                factory.teardown().await;
                result
            }
        })
        .await
        .expect("clause task");
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Builds a saver from the factory or fails the clause with the factory's error.
pub async fn build(factory: &dyn SaverFactory) -> Arc<dyn Saver> {
    match factory.build().await {
        Ok(s) => s,
        Err(e) => panic!("the saver factory failed: {e}"),
    }
}

/// Calls `$callback!` with the path of every clause, in suite order. The single list of
/// clauses: [`conformance_suite!`] and [`CLAUSES`] are generated from it.
#[doc(hidden)]
#[macro_export]
macro_rules! __for_each_clause {
    ($callback:ident ! ( $($args:tt)* )) => {
        $crate::$callback! { ($($args)*)
            put::put_returns_config_of_new_checkpoint,
            put::put_then_get_roundtrips_values_of_every_kind,
            put::put_roundtrips_16mb_value,
            put::put_preserves_versions_seen_run_id_and_custom_metadata,
            put::put_in_root_child_and_default_namespaces,
            put::put_many_checkpoints_per_thread,
            put::put_threads_are_isolated,
            put::put_records_parent_config,
            put::put_incremental_update_stores_only_new_versions,
            put::put_channel_added_appears,
            put::put_channel_removed_is_absent,
            put::put_does_not_persist_extra_config_keys,
            put::put_without_thread_id_is_rejected,
            put::put_rejects_inconsistent_input_and_writes_nothing,
            put::put_same_checkpoint_twice_is_idempotent,
            writes::put_writes_one_and_many,
            writes::put_writes_many_tasks_ordered,
            writes::put_writes_preserves_fields,
            writes::put_writes_repeat_is_idempotent,
            writes::put_writes_special_channels_replace,
            writes::put_writes_mixed_call_keeps_first,
            writes::put_writes_namespaces_isolated,
            writes::new_checkpoint_starts_without_pending_writes,
            writes::put_writes_requires_thread_and_checkpoint_id,
            writes::put_writes_empty_is_noop,
            get::get_tuple_missing_thread_is_none,
            get::get_tuple_missing_id_is_none,
            get::get_tuple_latest_without_id,
            get::get_tuple_by_id,
            get::get_tuple_config_parent_and_writes_exact,
            get::get_tuple_respects_namespace,
            get::get_tuple_without_thread_is_rejected,
            get::get_tuple_moves_sends_of_format_3_into_the_tasks_channel,
            list::list_by_thread_newest_first,
            list::list_by_namespace,
            list::list_filter_single_key,
            list::list_filter_step,
            list::list_filter_several_keys,
            list::list_filter_custom_key,
            list::list_filter_no_match,
            list::list_filter_numbers_compare_by_value,
            list::list_filter_numbers_at_the_edges,
            list::list_before_is_strict,
            list::list_limit,
            list::list_limit_with_before,
            list::list_filter_with_thread,
            list::list_includes_pending_writes,
            list::list_root_namespace_excludes_children,
            list::list_global_across_threads,
            list::list_by_checkpoint_id,
            list::list_threads_each_thread_once,
            list::list_threads_after_continues_the_order,
            list::list_pages_through_long_history,
            list::list_matrix_matches_reference,
            extended::delete_thread_removes_all_namespaces_and_writes,
            extended::delete_thread_leaves_other_threads,
            extended::delete_thread_unknown_is_noop,
            extended::copy_thread_copies_everything,
            extended::copy_thread_leaves_source_and_other_threads,
            extended::copy_thread_noops,
            extended::copy_thread_is_repeatable,
            extended::import_stores_tuples_exactly,
            extended::import_over_stored_data_keeps_what_put_keeps,
            extended::prune_keep_latest,
            extended::prune_keep_last_n,
            extended::prune_delete_all,
            extended::prune_isolation_and_noops,
            extended::delete_for_runs_removes_matching,
            extended::delete_for_runs_noops,
            beyond::cas_first_put_requires_empty_namespace,
            beyond::cas_concurrent_puts_exactly_one_wins,
            beyond::cas_retry_of_winner_succeeds,
            beyond::cas_conflict_writes_nothing,
            beyond::concurrent_writers_on_different_threads_are_isolated,
            beyond::concurrent_put_writes_and_reads_are_consistent,
            hostile::hostile_identifiers_are_exact_or_rejected,
            hostile::hostile_filter_keys_and_values_are_data,
            beyond::subgraph_interrupt_resumes_in_its_namespace,
            beyond::interrupt_is_readable_as_soon_as_recorded,
            beyond::model_based_random_operations_match_reference,
            delta::delta_snapshot_seed_and_writes_oldest_first,
            delta::delta_plain_seed_and_boundary_writes,
            delta::delta_same_step_writes_in_task_order,
            delta::delta_no_seed_at_the_root,
            delta::delta_channels_end_independently,
            delta::delta_seed_after_a_long_stored_run,
            delta::delta_forks_follow_only_the_target_branch,
            delta::delta_edges,
            delta::delta_history_matches_reference_walk,
            delta::delta_prune_keeps_what_delta_channels_need,
            delta::delta_delete_for_runs_keeps_what_delta_channels_need,
            coordination::lease_excludes_other_holders_until_released,
            coordination::lease_expiry_takeover_fences_the_old_holder,
            coordination::lease_renewal_extends_and_tokens_survive_delete,
            coordination::lease_concurrent_acquire_has_one_winner,
            coordination::ledger_claim_complete_replay,
            coordination::ledger_expired_claim_is_retaken_and_fenced,
            coordination::ledger_abandon_allows_immediate_retake,
            coordination::ledger_concurrent_claims_have_one_winner,
            ttl::ttl_expired_thread_is_invisible,
            ttl::ttl_write_after_expiry_starts_afresh,
            ttl::ttl_writes_restart_the_clock,
            ttl::ttl_pinned_and_default,
            ttl::ttl_sweep_deletes_expired_threads_only,
            ttl::ttl_bad_input_and_leases,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __emit_clause_tests {
    (($factory:expr) $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::run_clause($factory, stringify!($name), |f| {
                    ::std::boxed::Box::pin($crate::clauses::$module::$name(f))
                });
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __clause_names {
    (() $($module:ident :: $name:ident),* $(,)?) => {
        &[$(concat!(stringify!($module), "::", stringify!($name))),*]
    };
}

/// Every clause of the suite, as `module::name`.
pub const CLAUSES: &[&str] = __for_each_clause!(__clause_names!());

/// Expands to one `#[test]` per clause, each running the clause against a saver from
/// `$factory` (an expression evaluated once per test, yielding a [`SaverFactory`]).
///
/// Invoke it exactly once, from the backend's `tests/conformance.rs`:
///
/// ```ignore
/// checkpoint_conformance::conformance_suite!(MyFactory::from_env());
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($factory:expr) => {
        $crate::__for_each_clause!(__emit_clause_tests!($factory));
    };
}
