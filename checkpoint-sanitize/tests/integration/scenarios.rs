//! The field reports' scenarios (`checkpoint_sanitize::scenarios`) on the in-memory saver.

use std::sync::Arc;

use checkpoint_core::{InMemorySaver, Saver};
use checkpoint_sanitize::scenarios;

fn saver() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_interrupt_presented_exactly_once() {
    scenarios::seed_000_interrupt_presented_exactly_once(saver())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_approval_resume_sends_email_once() {
    scenarios::seed_002_approval_resume_sends_email_once(saver())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_crash_between_tool_calls_and_results() {
    scenarios::seed_004_crash_between_tool_calls_and_results(saver())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_concurrent_messages_do_not_interleave() {
    scenarios::seed_004_concurrent_messages_do_not_interleave(saver())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_guard_never_persists_unsafe_state() {
    scenarios::seed_004_guard_never_persists_unsafe_state(saver())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_markers_replay_or_resolve() {
    scenarios::seed_004_markers_replay_or_resolve(saver())
        .await
        .unwrap();
}

/// `run_all` runs them all, each on a fresh saver from a factory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_runs_every_scenario_on_fresh_savers() {
    let built = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&built);
    let factory = checkpoint_conformance::factory_fn(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok(saver()))
    });
    scenarios::run_all(&factory).await;
    assert_eq!(
        built.load(std::sync::atomic::Ordering::SeqCst),
        scenarios::ALL.len()
    );
}

/// The scenarios that do not build wrappers of their own, run with the whole canonical stack
/// as their saver: the stack's layers do not get in the way of effects, locks, leases and
/// normal turns. (The other seed 004 scenarios store unsafe states on purpose, which the
/// stack's guard refuses to store; they build the wrappers they test themselves.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_pass_over_the_canonical_stack() {
    let stack = || -> Arc<dyn Saver> {
        Arc::new(checkpoint_sanitize::canonical_stack(
            InMemorySaver::new(),
            checkpoint_sanitize::StackConfig::default(),
        ))
    };
    scenarios::seed_000_interrupt_presented_exactly_once(stack())
        .await
        .unwrap();
    scenarios::seed_002_approval_resume_sends_email_once(stack())
        .await
        .unwrap();
    scenarios::seed_004_concurrent_messages_do_not_interleave(stack())
        .await
        .unwrap();
}
