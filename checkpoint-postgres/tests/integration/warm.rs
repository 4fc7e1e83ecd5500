//! Warm connections: a connection stays checked out of the pool between operations that
//! succeed, without sqlx's ping on release, and goes back to the pool when it sits idle,
//! when the pool closes, and when the saver is dropped.

use crate::common;

use std::time::{Duration, Instant};

use checkpoint_conformance::fixtures::{eventually, put_child};
use checkpoint_core::{CheckpointConfig, Error, Saver};
use checkpoint_postgres::PostgresSaver;

/// A set-up saver with at most `connections` connections, and its schema.
async fn saver(url: &str, connections: u32) -> (PostgresSaver, String) {
    let schema = common::unique_schema();
    let saver = PostgresSaver::builder(url)
        .unwrap()
        .schema(&schema)
        .max_connections(connections)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    (saver, schema)
}

/// Puts one checkpoint on `thread`.
async fn put(saver: &PostgresSaver, thread: &str) -> CheckpointConfig {
    put_child(saver, &CheckpointConfig::new(thread))
        .await
        .unwrap()
}

/// Waits up to `within` for every open connection of the saver's pool to be idle in it.
async fn all_idle_within(saver: &PostgresSaver, within: Duration) -> bool {
    let pool = saver.pool();
    eventually(within, || {
        pool.size() > 0 && pool.num_idle() == pool.size() as usize
    })
    .await
}

#[tokio::test]
async fn a_connection_stays_warm_between_operations_then_goes_back() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let (saver, schema) = saver(&url, 4).await;
    let config = put(&saver, "t").await;
    for _ in 0..20 {
        assert!(saver.get_tuple(&config).await.unwrap().is_some());
    }
    // Sequential operations reuse one warm connection: none is idle in the pool.
    assert_eq!(
        saver.pool().num_idle(),
        saver.pool().size() as usize - 1,
        "the last operation's connection should be warm, out of the pool"
    );
    // Left alone, it goes back to the pool.
    assert!(
        all_idle_within(&saver, Duration::from_secs(3)).await,
        "a warm connection stayed out of the pool: size {}, idle {}",
        saver.pool().size(),
        saver.pool().num_idle()
    );
    // And the saver goes on working.
    assert!(saver.get_tuple(&config).await.unwrap().is_some());
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn warm_connections_do_not_starve_the_pools_other_users() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let (saver, schema) = saver(&url, 2).await;
    let config = put(&saver, "t").await;
    // Two operations at once: both connections of the pool end up warm.
    let (a, b) = tokio::join!(saver.get_tuple(&config), saver.get_tuple(&config));
    assert!(a.unwrap().is_some() && b.unwrap().is_some());
    // Another user of the pool gets a connection well before its acquire timeout (10 s).
    let started = Instant::now();
    let conn = tokio::time::timeout(Duration::from_secs(5), saver.pool().acquire())
        .await
        .expect("the pool's other user waited more than 5 s")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        started.elapsed()
    );
    drop(conn);
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_saver_lets_every_waiter_have_a_connection() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let schema = common::unique_schema();
    // Two connections, six callers that never pause, and another user of the pool; an
    // acquire that waits 3 s fails. Warm connections must not keep either kind waiting.
    let saver = PostgresSaver::builder(&url)
        .unwrap()
        .schema(&schema)
        .pool_options(
            checkpoint_postgres::sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(Duration::from_secs(3)),
        )
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    let config = put(&saver, "t").await;
    let until = Instant::now() + Duration::from_secs(4);
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (saver, config) = (saver.clone(), config.clone());
        workers.push(tokio::spawn(async move {
            let mut calls = 0_u32;
            while Instant::now() < until {
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
            let conn = pool.acquire().await.unwrap();
            drop(conn);
            turns += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        turns
    });
    for worker in workers {
        assert!(worker.await.unwrap() > 0, "a caller never got a connection");
    }
    assert!(outsider.await.unwrap() > 0);
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn closing_the_pool_returns_warm_connections() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let (saver, schema) = saver(&url, 4).await;
    let config = put(&saver, "t").await;
    let (a, b, c) = tokio::join!(
        saver.get_tuple(&config),
        saver.get_tuple(&config),
        saver.get_tuple(&config)
    );
    assert!(a.is_ok() && b.is_ok() && c.is_ok());
    // `close` waits for every checked-out connection: warm ones go back at once.
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), saver.pool().close())
        .await
        .expect("closing the pool waited for warm connections");
    // Without the hand-back on close they would come back only after their idle time
    // (250 ms).
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "closing took {:?}",
        started.elapsed()
    );
    // Connections handed back while it closed finish closing in tasks of their own.
    let started = Instant::now();
    while saver.pool().size() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{} connections stayed open after close",
            saver.pool().size()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A closed pool is a typed error, not a hang.
    let err = tokio::time::timeout(Duration::from_secs(5), saver.get_tuple(&config))
        .await
        .expect("an operation on a closed pool hung")
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    common::drop_schemas(&url, &[schema]).await;
}

#[test]
fn a_saver_dropped_outside_its_runtime_hands_its_connections_back() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (saver, schema) = runtime.block_on(saver(&url, 4));
    let pool = saver.pool().clone();
    runtime.block_on(async {
        let config = put(&saver, "t").await;
        assert!(saver.get_tuple(&config).await.unwrap().is_some());
    });
    assert!(pool.num_idle() < pool.size() as usize, "no warm connection");
    // Dropped on a thread without a runtime (as a Python binding's saver is): no panic,
    // and the connections go back to the pool in the runtime they were used in.
    drop(saver);
    runtime.block_on(async {
        assert!(
            eventually(Duration::from_secs(3), || pool.num_idle()
                == pool.size() as usize)
            .await,
            "a warm connection never went back: size {}, idle {}",
            pool.size(),
            pool.num_idle()
        );
        pool.close().await;
        common::drop_schemas(&url, &[schema]).await;
    });
}
