//! `statement_timeout`: a thread whose rows another session holds must not take the whole
//! pool when its calls time out, and the work that may rightly run longer than a call
//! (`setup`, `sweep_expired`) is not cut by it.

use std::time::{Duration, Instant};

use checkpoint_conformance::fixtures;
use checkpoint_core::{Error, Saver, ThreadTtl, Timeout};
use checkpoint_postgres::sqlx::postgres::PgConnectOptions;
use checkpoint_postgres::sqlx::{self, Connection};
use checkpoint_postgres::{PostgresSaver, PostgresSaverBuilder};

use crate::common::{drop_schemas, saver_in_schema, unique_schema, url_or_skip};

/// What a call may take, on the client (the `Timeout` wrapper) and on the server.
const LIMIT: Duration = Duration::from_millis(300);

/// Another session holds the rows of one thread in an open transaction (a stalled writer);
/// the saver's calls on that thread time out, more of them than it has connections: puts
/// (one statement each) and TTL changes (a transaction of two). Then calls on other threads
/// must succeed: the server cancelled the stalled statements and their connections returned
/// to the pool. (Without the server's bound each such statement waits for the lock, keeps
/// its connection, and every later call times out too.)
/// `connect` reaches the server through `options`; `direct` is the server itself, for the
/// stalling session.
pub(crate) async fn a_stalled_thread_leaves_the_pool_to_the_others(
    options: PgConnectOptions,
    direct: &str,
    transaction_pooling: bool,
) {
    let schema = unique_schema();
    let saver = PostgresSaverBuilder::new(options.application_name(&schema))
        .schema(&schema)
        .max_connections(2)
        .transaction_pooling(transaction_pooling)
        .statement_timeout(Some(LIMIT))
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    let saver = Timeout::new(saver, LIMIT);
    let stalled = fixtures::put_chain(&saver, "stalled", "", 1, "run")
        .await
        .unwrap()
        .remove(0);
    let ttl = ThreadTtl::Expire(Duration::from_secs(3600));
    saver.set_thread_ttl("stalled", ttl).await.unwrap();

    // The saver's connections are told apart by their application name (below).
    let mut watcher = sqlx::PgConnection::connect(direct).await.unwrap();
    let named: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(&schema)
            .fetch_one(&mut watcher)
            .await
            .unwrap();
    assert!(
        named > 0,
        "no connection of the saver carries its application name"
    );

    let mut holder = sqlx::PgConnection::connect(direct).await.unwrap();
    let mut held = holder.begin().await.unwrap();
    for table in ["checkpoints", "checkpoint_threads"] {
        let lock =
            format!("SELECT 1 FROM \"{schema}\".{table} WHERE thread_id = 'stalled' FOR UPDATE");
        sqlx::query(&lock).execute(&mut *held).await.unwrap();
    }

    // Putting the held checkpoint again waits for its row.
    let head = fixtures::cfg("stalled", "");
    let again = || {
        let (c, v) = (
            stalled.checkpoint.clone(),
            stalled.checkpoint.channel_versions.clone(),
        );
        saver.put(&head, c, stalled.metadata.clone(), v, Default::default())
    };
    // So does changing its TTL, in a transaction.
    for attempt in 0..8 {
        let err = if attempt % 2 == 0 {
            again().await.map(drop)
        } else {
            saver.set_thread_ttl("stalled", ttl).await
        }
        .expect_err("the rows are held: the call cannot finish");
        assert!(
            matches!(err, Error::Unavailable { .. }) && err.is_transient(),
            "attempt {attempt}: {}",
            err.chain()
        );
    }

    // Other threads go on: each put is retried while the pool recovers (the server cancels
    // a stalled statement at most `LIMIT` after its call gave up).
    let give_up = Instant::now() + Duration::from_secs(5);
    for n in 0..4 {
        let thread = format!("free-{n}");
        loop {
            match fixtures::put_chain(&saver, &thread, "", 1, "run").await {
                Ok(_) => break,
                Err(e) if e.is_transient() && Instant::now() < give_up => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{thread}: the stalled thread took the pool: {}", e.chain()),
            }
        }
    }
    // No statement of the saver still waits for the lock: the server cancelled them.
    let settled = Instant::now() + Duration::from_secs(3);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&schema)
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if n == 0 {
            break;
        }
        assert!(
            Instant::now() < settled,
            "{n} statements of the saver still wait for the lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.close().await.unwrap();
    // The held checkpoint is still read (reads take no row lock) ...
    let read = saver.get_tuple(&stalled.config).await.unwrap().unwrap();
    assert_eq!(read.checkpoint, stalled.checkpoint);
    // ... and once the holder lets go, written again.
    held.rollback().await.unwrap();
    again().await.unwrap();
    holder.close().await.unwrap();
    drop_schemas(direct, &[schema]).await;
}

#[tokio::test]
async fn a_stalled_thread_does_not_take_the_pool_from_the_others() {
    let Some(url) = url_or_skip() else { return };
    a_stalled_thread_leaves_the_pool_to_the_others(url.parse().unwrap(), &url, false).await;
}

#[tokio::test]
async fn setup_and_sweeps_run_without_the_statement_timeout() {
    let Some(url) = url_or_skip() else { return };
    let schema = unique_schema();
    // A limit no migration and no sweep of hundreds of threads meets.
    let bounded = PostgresSaver::builder(&url)
        .unwrap()
        .schema(&schema)
        .statement_timeout(Some(Duration::from_millis(1)))
        .connect_lazy()
        .unwrap();
    bounded.setup().await.unwrap();

    let writer = saver_in_schema(&url, &schema).await.unwrap();
    for n in 0..300 {
        let thread = format!("t{n}");
        fixtures::put_chain(&writer, &thread, "", 2, "run")
            .await
            .unwrap();
        writer
            .set_thread_ttl(&thread, ThreadTtl::Expire(Duration::from_millis(1)))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(bounded.sweep_expired(1000).await.unwrap(), 300);
    for n in [0, 299] {
        let gone = writer.get_tuple(&fixtures::cfg(&format!("t{n}"), "")).await;
        assert!(gone.unwrap().is_none(), "t{n} was not swept");
    }

    let zero = PostgresSaver::builder(&url)
        .unwrap()
        .statement_timeout(Some(Duration::ZERO))
        .connect_lazy()
        .unwrap_err();
    assert!(matches!(zero, Error::InvalidInput { .. }), "{zero:?}");
    drop_schemas(&url, &[schema]).await;
}
