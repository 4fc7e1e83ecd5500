//! Thread retention on PostgreSQL beyond the conformance clauses: the saver's default TTL,
//! refresh on read, what sweeping deletes, and that a sweep skips a thread being written.

use std::time::Duration;

use checkpoint_conformance::fixtures::{put_chain, put_two_writes};
use checkpoint_core::{CheckpointConfig, ListOptions, Saver, SaverExt, ThreadTtl};
use checkpoint_postgres::PostgresSaver;
use checkpoint_postgres::sqlx;

use crate::common::{drop_schemas, unique_schema, url};

/// The test server; its absence fails the test where servers are required.
fn server() -> Option<String> {
    let url = url();
    assert!(
        url.is_some() || !checkpoint_conformance::servers_required(),
        "CHECKPOINT_TEST_POSTGRES_URL is required"
    );
    url
}

/// A saver in a new schema with these retention settings.
async fn saver(
    url: &str,
    default_ttl: Option<Duration>,
    refresh_on_read: bool,
) -> (PostgresSaver, String) {
    let schema = unique_schema();
    let saver = PostgresSaver::builder(url)
        .unwrap()
        .schema(&schema)
        .max_connections(4)
        .default_ttl(default_ttl)
        .refresh_on_read(refresh_on_read)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    (saver, schema)
}

async fn count(saver: &PostgresSaver, table: &str, thread: &str) -> i64 {
    let q = format!("SELECT count(*) FROM {table} WHERE thread_id = $1");
    sqlx::query_scalar(&q)
        .bind(thread)
        .fetch_one(saver.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_ttl_expires_sweeps_and_keeps_pinned_threads_and_leases() {
    let Some(url) = server() else { return };
    let (saver, schema) = saver(&url, Some(Duration::from_secs(3600)), false).await;
    for thread in ["short", "pinned", "default"] {
        let chain = put_chain(&saver, thread, "", 2, "r").await.unwrap();
        put_two_writes(&saver, &chain[1].config, "task")
            .await
            .unwrap();
    }
    let lease = saver
        .acquire_lease("short", "worker", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    saver
        .set_thread_ttl("pinned", ThreadTtl::Pinned)
        .await
        .unwrap();
    saver
        .set_thread_ttl("short", ThreadTtl::Expire(Duration::from_millis(1)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    assert_eq!(saver.thread_ttl("pinned").await.unwrap(), None);
    let left = saver.thread_ttl("default").await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(3000) && left <= Duration::from_secs(3600),
        "{left:?}"
    );
    assert!(
        saver
            .get_tuple(&CheckpointConfig::new("short"))
            .await
            .unwrap()
            .is_none()
    );
    let mut threads: Vec<String> = saver
        .list_all(ListOptions::new())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.config.thread_id)
        .collect();
    threads.dedup();
    threads.sort_unstable();
    assert_eq!(threads, ["default", "pinned"]);
    assert_eq!(
        count(&saver, "checkpoints", "short").await,
        2,
        "invisible, not yet deleted"
    );

    assert_eq!(saver.sweep_expired(10).await.unwrap(), 1);
    assert_eq!(saver.sweep_expired(10).await.unwrap(), 0);
    for table in [
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "checkpoint_threads",
    ] {
        assert_eq!(count(&saver, table, "short").await, 0, "{table}");
        assert!(count(&saver, table, "pinned").await > 0, "{table}");
        assert!(count(&saver, table, "default").await > 0, "{table}");
    }
    // The lease outlives the thread's data: its token still fences.
    let renewed = saver
        .renew_lease(&lease, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(renewed.token, lease.token);
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_restart_the_default_ttl_and_reads_only_when_asked_to() {
    let Some(url) = server() else { return };
    for refresh in [false, true] {
        let (saver, schema) = saver(&url, Some(Duration::from_secs(60)), refresh).await;
        let chain = put_chain(&saver, "t", "", 1, "r").await.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = saver.thread_ttl("t").await.unwrap().unwrap();
        assert!(before <= Duration::from_millis(58_500), "{before:?}");
        saver.get_tuple(&chain[0].config).await.unwrap().unwrap();
        let after_read = saver.thread_ttl("t").await.unwrap().unwrap();
        assert_eq!(
            after_read > before,
            refresh,
            "refresh_on_read({refresh}): {before:?} -> {after_read:?}"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = saver.thread_ttl("t").await.unwrap().unwrap();
        put_two_writes(&saver, &chain[0].config, "task")
            .await
            .unwrap();
        let after_write = saver.thread_ttl("t").await.unwrap().unwrap();
        assert!(after_write > before, "{before:?} -> {after_write:?}");
        drop_schemas(&url, &[schema]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_skips_a_thread_being_written() {
    let Some(url) = server() else { return };
    let (saver, schema) = saver(&url, None, false).await;
    put_chain(&saver, "busy", "", 2, "r").await.unwrap();
    saver
        .set_thread_ttl("busy", ThreadTtl::Expire(Duration::from_millis(1)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A write holds the thread's TTL row (as the gate of put and put_writes does).
    let mut writer = saver.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM checkpoint_threads WHERE thread_id = 'busy' FOR KEY SHARE")
        .execute(&mut *writer)
        .await
        .unwrap();
    let swept = tokio::time::timeout(Duration::from_secs(10), saver.sweep_expired(10))
        .await
        .expect("the sweep must not wait for the write")
        .unwrap();
    assert_eq!(swept, 0);
    writer.rollback().await.unwrap();
    assert_eq!(saver.sweep_expired(10).await.unwrap(), 1);
    assert_eq!(count(&saver, "checkpoints", "busy").await, 0);
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn a_zero_default_ttl_is_refused() {
    let Some(url) = server() else { return };
    let built = PostgresSaver::builder(&url)
        .unwrap()
        .default_ttl(Some(Duration::ZERO))
        .connect_lazy();
    assert!(matches!(
        built,
        Err(checkpoint_core::Error::InvalidInput { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_to_a_thread_with_a_ttl_do_not_deadlock() {
    let Some(url) = server() else { return };
    let (saver, schema) = saver(&url, Some(Duration::from_secs(3600)), false).await;
    let chain = put_chain(&saver, "t", "", 1, "r").await.unwrap();
    let head = chain[0].config.clone();
    // LangGraph's fan-out: parallel tasks record writes on one checkpoint while other
    // namespaces of the thread are written; every write restarts the thread's TTL.
    let tasks = (0..8).map(|i| {
        let saver = saver.clone();
        let head = head.clone();
        tokio::spawn(async move {
            for j in 0..15 {
                if i % 2 == 0 {
                    put_two_writes(&saver, &head, &format!("task-{i}-{j}")).await?;
                } else {
                    put_chain(&saver, "t", &format!("child:{i}-{j}"), 1, "r").await?;
                }
            }
            Ok::<(), checkpoint_core::Error>(())
        })
    });
    for outcome in futures::future::join_all(tasks).await {
        outcome.unwrap().unwrap();
    }
    let tuple = saver.get_tuple(&head).await.unwrap().unwrap();
    assert_eq!(tuple.pending_writes.len(), 4 * 15 * 2);
    assert!(saver.thread_ttl("t").await.unwrap().is_some());
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_behind_a_sweep_starts_the_thread_afresh() {
    let Some(url) = server() else { return };
    let (saver, schema) = saver(&url, None, false).await;
    let chain = put_chain(&saver, "t", "", 2, "r").await.unwrap();
    saver
        .set_thread_ttl("t", ThreadTtl::Expire(Duration::from_millis(1)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A sweep in progress: it holds the expired thread's TTL row...
    let mut sweep = saver.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM checkpoint_threads WHERE thread_id = 't' FOR UPDATE")
        .execute(&mut *sweep)
        .await
        .unwrap();
    // ...while a compare-and-set put continues the thread from its old head.
    let writer = {
        let saver = saver.clone();
        let parent = chain[1].clone();
        tokio::spawn(async move {
            let (next, versions) = checkpoint_conformance::fixtures::step(
                Some(&parent.checkpoint),
                &[(
                    "counter",
                    Some(checkpoint_conformance::fixtures::val(serde_json::json!(9))),
                )],
            );
            saver
                .put(
                    &parent.config,
                    next,
                    checkpoint_core::CheckpointMetadata::new(),
                    versions,
                    checkpoint_core::PutOptions::compare_and_set(),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "the put waits for the sweep's row lock"
    );
    for statement in [
        "DELETE FROM checkpoints WHERE thread_id = 't'",
        "DELETE FROM checkpoint_blobs WHERE thread_id = 't'",
        "DELETE FROM checkpoint_threads WHERE thread_id = 't'",
    ] {
        sqlx::query(statement).execute(&mut *sweep).await.unwrap();
    }
    sweep.commit().await.unwrap();
    // The swept head is not the head any more: the put must not pass on its old snapshot.
    let outcome = writer.await.unwrap();
    assert!(
        matches!(outcome, Err(checkpoint_core::Error::Conflict { .. })),
        "{outcome:?}"
    );
    assert!(
        saver
            .list_all(ListOptions::thread("t"))
            .await
            .unwrap()
            .is_empty()
    );
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_ttls_are_stored() {
    let Some(url) = server() else { return };
    let (saver, schema) = saver(&url, Some(Duration::MAX), false).await;
    put_chain(&saver, "t", "", 1, "r").await.unwrap();
    let left = saver.thread_ttl("t").await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(3600 * 24 * 365 * 90_000),
        "{left:?}"
    );
    saver
        .set_thread_ttl("t", ThreadTtl::Expire(Duration::MAX))
        .await
        .unwrap();
    put_chain(&saver, "t", "child:1", 1, "r").await.unwrap();
    assert!(saver.thread_ttl("t").await.unwrap().unwrap() > left / 2);
    drop_schemas(&url, &[schema]).await;
}
