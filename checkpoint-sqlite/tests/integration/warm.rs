//! Warm connections: the writer's one connection, and the readers', stay checked out of
//! their pools between operations that succeed (without sqlx's ping on release), and go
//! back when they sit idle, when a transaction or another user needs the pool, and when the
//! saver is dropped.

use std::time::{Duration, Instant};

use checkpoint_conformance::fixtures::{eventually, put_child};
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, Lease, PruneStrategy, PutOptions,
    Saver,
};
use checkpoint_sqlite::SqliteSaver;

use crate::common::{remove_db, scratch_dir};

/// A saver on a new file, and the file.
async fn saver(tag: &str) -> (SqliteSaver, std::path::PathBuf) {
    let path = scratch_dir(tag).join("db.sqlite");
    (SqliteSaver::open(&path).await.unwrap(), path)
}

fn cleanup(path: &std::path::Path) {
    remove_db(path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Puts one checkpoint, a child of `parent`'s.
async fn put(saver: &SqliteSaver, parent: &CheckpointConfig) -> CheckpointConfig {
    put_child(saver, parent).await.unwrap()
}

/// Waits up to `within` for the writer's pool to hold its connection idle.
async fn writer_idle_within(saver: &SqliteSaver, within: Duration) -> bool {
    let pool = saver.pool();
    eventually(within, || {
        pool.size() > 0 && pool.num_idle() == pool.size() as usize
    })
    .await
}

#[tokio::test]
async fn the_writer_stays_warm_between_writes_then_goes_back() {
    let (saver, path) = saver("warm-idle").await;
    let mut config = CheckpointConfig::new("t");
    for _ in 0..10 {
        config = put(&saver, &config).await;
    }
    assert_eq!(saver.pool().size(), 1);
    assert_eq!(
        saver.pool().num_idle(),
        0,
        "the last write's connection should be warm, out of the pool"
    );
    assert!(
        writer_idle_within(&saver, Duration::from_secs(3)).await,
        "the warm writer never went back to its pool"
    );
    // The saver goes on reading and writing.
    assert!(saver.get_tuple(&config).await.unwrap().is_some());
    put(&saver, &config).await;
    drop(saver);
    cleanup(&path);
}

#[tokio::test]
async fn transactions_do_not_wait_for_the_warm_writer() {
    let (saver, path) = saver("warm-tx").await;
    let threads: Vec<String> = vec!["t".into()];
    let mut config = CheckpointConfig::new("t");
    // Each maintenance call takes the writer through its pool, right after a write left it
    // warm. Were it to wait for the warm connection's idle time (250 ms) or its time out of
    // the pool (1 s), 20 rounds would take 5 s or more.
    let started = Instant::now();
    for _ in 0..20 {
        config = put(&saver, &config).await;
        saver
            .prune(&threads, PruneStrategy::KeepLast(5))
            .await
            .unwrap();
        assert_eq!(saver.sweep_expired(10).await.unwrap(), 0);
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "20 writes with maintenance took {:?}",
        started.elapsed()
    );
    let kept: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(
        saver.list(checkpoint_core::ListOptions::thread("t")),
    )
    .await
    .unwrap();
    assert_eq!(kept.len(), 5);
    drop(saver);
    cleanup(&path);
}

#[tokio::test]
async fn another_user_of_the_pool_gets_the_writer() {
    let (saver, path) = saver("warm-user").await;
    let config = put(&saver, &CheckpointConfig::new("t")).await;
    put(&saver, &config).await;
    let started = Instant::now();
    let n: i64 = tokio::time::timeout(
        Duration::from_secs(5),
        sqlx::query_scalar("SELECT count(*) FROM checkpoints").fetch_one(saver.pool()),
    )
    .await
    .expect("the pool's other user waited more than 5 s")
    .unwrap();
    assert_eq!(n, 2);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        started.elapsed()
    );
    drop(saver);
    cleanup(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_and_the_pools_user_all_get_turns() {
    let (saver, path) = saver("warm-busy").await;
    let config = put(&saver, &CheckpointConfig::new("t")).await;
    let until = Instant::now() + Duration::from_secs(3);
    let mut workers = Vec::new();
    for w in 0..6 {
        let saver = saver.clone();
        let config = config.clone();
        workers.push(tokio::spawn(async move {
            let mut calls = 0_u32;
            let mut head = CheckpointConfig::new(format!("w{w}"));
            while Instant::now() < until {
                head = put(&saver, &head).await;
                saver.get_tuple(&config).await.unwrap().unwrap();
                calls += 1;
            }
            calls
        }));
    }
    let pool = saver.pool().clone();
    let outsider = tokio::spawn(async move {
        let mut turns = 0_u32;
        while Instant::now() < until {
            let conn = tokio::time::timeout(Duration::from_secs(5), pool.acquire())
                .await
                .expect("the pool's user waited more than 5 s")
                .unwrap();
            drop(conn);
            turns += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        turns
    });
    for worker in workers {
        assert!(worker.await.unwrap() > 0, "a caller never got a turn");
    }
    assert!(outsider.await.unwrap() > 0);
    drop(saver);
    cleanup(&path);
}

#[tokio::test]
async fn an_in_memory_saver_shares_one_warm_connection_for_reads_and_writes() {
    let saver = SqliteSaver::open_in_memory().await.unwrap();
    let mut config = CheckpointConfig::new("t");
    let lease = saver
        .acquire_lease("t", "me", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let stale = Lease {
        token: lease.token + 1,
        ..lease.clone()
    };
    // One connection serves everything, and every call below ends with it warm. Were any
    // of them to take it from the pool directly (a transaction, the read that reports a
    // refusal), it would wait for the warm connection's idle time (250 ms) each round.
    let started = Instant::now();
    for _ in 0..10 {
        let parent = config.clone();
        config = put(&saver, &config).await;
        assert!(saver.get_tuple(&config).await.unwrap().is_some());
        saver
            .prune(&["t".to_owned()], PruneStrategy::KeepLatest)
            .await
            .unwrap();
        // A compare-and-set put on a parent that is no longer the head.
        let mut c = Checkpoint::new();
        c.set("a", &2).unwrap();
        let versions = c.channel_versions.clone();
        let lost = saver
            .put(
                &parent,
                c,
                CheckpointMetadata::new(),
                versions,
                PutOptions::compare_and_set(),
            )
            .await
            .unwrap_err();
        assert!(matches!(lost, Error::Conflict { .. }), "{lost:?}");
        // A renewal with a token that is not the current one.
        let refused = saver
            .renew_lease(&stale, Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::StaleFence { .. }), "{refused:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "10 rounds took {:?}",
        started.elapsed()
    );
    // Idle, the one connection goes back to the pool, which keeps the database alive.
    assert!(writer_idle_within(&saver, Duration::from_secs(3)).await);
    assert!(saver.get_tuple(&config).await.unwrap().is_some());
}

#[test]
fn a_saver_dropped_outside_its_runtime_hands_its_connections_back() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (saver, path) = runtime.block_on(saver("warm-drop"));
    let pool = saver.pool().clone();
    runtime.block_on(async {
        let config = put(&saver, &CheckpointConfig::new("t")).await;
        assert!(saver.get_tuple(&config).await.unwrap().is_some());
    });
    assert_eq!(pool.num_idle(), 0, "no warm writer");
    // Dropped on a thread without a runtime (as a Python binding's saver is): no panic,
    // and the connection goes back to the pool in the runtime it was used in.
    drop(saver);
    runtime.block_on(async {
        assert!(
            eventually(Duration::from_secs(3), || pool.num_idle()
                == pool.size() as usize)
            .await,
            "the warm writer never went back: size {}, idle {}",
            pool.size(),
            pool.num_idle()
        );
        pool.close().await;
    });
    cleanup(&path);
}
