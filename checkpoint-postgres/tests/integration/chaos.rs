//! Network chaos: the saver reaches PostgreSQL through a proxy that closes, resets, stalls
//! and refuses its connections while the crash test's writers run (see
//! `checkpoint_conformance::chaos`).

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::chaos::{self, ChaosProxy};
use checkpoint_postgres::{PostgresSaver, PostgresSaverBuilder, sqlx};

use crate::common::{drop_schemas, unique_schema, url};

/// The server's URL, its options and a proxy in front of it; `None` (skipped) without a
/// server where none is required.
async fn proxied() -> Option<(String, sqlx::postgres::PgConnectOptions, ChaosProxy)> {
    let Some(url) = url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return None;
    };
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    Some((url, options, proxy))
}

/// A new schema, set up directly, and a saver of it (4 connections, the default pool
/// policy) that reaches the server only through `proxy`.
async fn set_up_through(
    url: &str,
    options: sqlx::postgres::PgConnectOptions,
    proxy: &ChaosProxy,
) -> (String, PostgresSaver) {
    let schema = unique_schema();
    PostgresSaver::builder(url)
        .unwrap()
        .schema(&schema)
        .connect()
        .await
        .unwrap()
        .setup()
        .await
        .unwrap();
    let saver = PostgresSaverBuilder::new(options.port(proxy.port()))
        .schema(&schema)
        .max_connections(4)
        .connect_lazy()
        .unwrap();
    (schema, saver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_flaky_network_and_the_pool_heals() {
    let Some((url, options, proxy)) = proxied().await else {
        return;
    };
    let (schema, saver) = set_up_through(&url, options, &proxy).await;
    let report = chaos::run(&proxy, Arc::new(saver), Duration::from_secs(8), 17)
        .await
        .unwrap();
    eprintln!("postgres chaos: {report}");
    assert!(
        report.connections > 1,
        "the saver must reach its server through the proxy, and reconnect: {report}"
    );
    drop_schemas(&url, &[schema]).await;
}

/// Outages fail calls of a plain saver; through `RetryLayer::new()` none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_layer_rides_out_outages() {
    let Some((url, options, proxy)) = proxied().await else {
        return;
    };
    let (schema, saver) = set_up_through(&url, options, &proxy).await;
    let (plain, retried) = chaos::outages_are_ridden_out(&proxy, Arc::new(saver), 23)
        .await
        .unwrap();
    eprintln!("postgres outages, plain: {plain}\npostgres outages, retried: {retried}");
    drop_schemas(&url, &[schema]).await;
}

/// A thread listing longer than a page (1,000 ids), cut by an outage: a plain saver's
/// fails; through `RetryLayer::new()` it resumes after the last id, in the column's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_layer_resumes_a_thread_listing() {
    let Some((url, options, proxy)) = proxied().await else {
        return;
    };
    let (schema, saver) = set_up_through(&url, options, &proxy).await;
    chaos::thread_listings_resume(&proxy, Arc::new(saver), 1_200)
        .await
        .unwrap();
    drop_schemas(&url, &[schema]).await;
}

/// A call whose `BEGIN` is cut short (here a `set_thread_ttl` whose caller gave up while
/// the network stalled) must not leave its connection in a transaction: sqlx counts a
/// transaction only once the server answered the `BEGIN`, so a connection handed back
/// after the server ran it would stay in a transaction that the next single-statement
/// calls on it join, acknowledged but never committed. The saver closes such a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_cut_short_leaves_no_transaction_open() {
    use checkpoint_conformance::fixtures;
    use checkpoint_core::{Saver, ThreadTtl};
    use checkpoint_postgres::sqlx::Connection;

    let Some((url, options, proxy)) = proxied().await else {
        return;
    };
    let schema = unique_schema();
    // One connection, so every call below meets the one the cut call used.
    let saver = PostgresSaverBuilder::new(options.port(proxy.port()))
        .schema(&schema)
        .max_connections(1)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    fixtures::put_chain(&saver, "before", "", 1, "run")
        .await
        .unwrap();

    proxy.stall(true);
    let ttl = ThreadTtl::Expire(Duration::from_secs(3600));
    let cut = tokio::time::timeout(
        Duration::from_millis(200),
        saver.set_thread_ttl("before", ttl),
    )
    .await;
    assert!(cut.is_err(), "the stalled call answered: {cut:?}");
    proxy.stall(false);

    let after = fixtures::put_chain(&saver, "after", "", 1, "run")
        .await
        .unwrap()
        .remove(0);
    // Another session sees the acknowledged put: it was committed.
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    let query = format!("SELECT count(*) FROM \"{schema}\".checkpoints WHERE thread_id = 'after'");
    let seen: i64 = sqlx::query_scalar(&query)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert_eq!(seen, 1, "an acknowledged put is not committed");
    assert!(saver.get_tuple(&after.config).await.unwrap().is_some());
    other.close().await.unwrap();
    drop_schemas(&url, &[schema]).await;
}
