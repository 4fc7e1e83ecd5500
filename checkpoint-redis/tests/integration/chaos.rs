//! Network chaos: the saver reaches Redis through a proxy that closes, resets, stalls and
//! refuses its connections while the crash test's writers run (see
//! `checkpoint_conformance::chaos`).

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::chaos::{self, ChaosProxy, Cut};
use checkpoint_core::{CheckpointConfig, Saver};
use checkpoint_redis::RedisSaver;
use checkpoint_redis::redis::{ConnectionAddr, IntoConnectionInfo};

use crate::common::unique_prefix;

/// A proxy in front of the server and a saver (its own key prefix, calls waiting at most
/// `pool_timeout` for a connection) reaching it through the proxy; `None` (skipped) without
/// a server where none is required.
async fn proxied(prefix: &str, pool_timeout: Duration) -> Option<(ChaosProxy, RedisSaver)> {
    let Some(url) = checkpoint_conformance::server_url("redis") else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_REDIS_URL is required"
        );
        return None;
    };
    // The server's address, and the same URL (credentials, database) through the proxy.
    let info = url.as_str().into_connection_info().unwrap();
    let ConnectionAddr::Tcp(host, port) = info.addr() else {
        panic!("the chaos test needs a plain TCP Redis URL, got {url}");
    };
    let upstream = format!("{host}:{port}");
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    let through = url.replacen(&upstream, &format!("127.0.0.1:{}", proxy.port()), 1);
    assert_ne!(through, url, "the URL names {upstream}");
    let saver = RedisSaver::builder(through)
        .key_prefix(unique_prefix(prefix))
        .pool_timeout(pool_timeout)
        .build()
        .await
        .unwrap();
    Some((proxy, saver))
}

/// Outages fail calls of a plain saver; through `RetryLayer::new()` none fails. A call
/// waits for a connection up to the pool timeout (5 s by default), through outages shorter
/// than that: with 500 ms, shorter than the outages, calls fail without the layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_layer_rides_out_outages() {
    let Some((proxy, saver)) = proxied("outages", Duration::from_millis(500)).await else {
        return;
    };
    let (plain, retried) = chaos::outages_are_ridden_out(&proxy, Arc::new(saver.clone()), 23)
        .await
        .unwrap();
    eprintln!("redis outages, plain: {plain}\nredis outages, retried: {retried}");
    saver.purge().await.unwrap();
}

/// A call that meets a dead connection while the server is unreachable, and waits for a new
/// one, gets it once the server is back: a 300 ms outage must not fail the call with the
/// pool's timeout (5 s) because the one connection attempt made for it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_during_a_short_outage_gets_a_connection_once_the_server_is_back() {
    let Some((proxy, saver)) = proxied("blip", Duration::from_secs(5)).await else {
        return;
    };
    let thread = CheckpointConfig::new("blip");
    checkpoint_conformance::fixtures::put_child(&saver, &thread)
        .await
        .unwrap();
    for round in 0..3 {
        proxy.refuse(true);
        proxy.cut(Cut::Reset);
        let read = tokio::spawn({
            let saver = saver.clone();
            let thread = thread.clone();
            async move { saver.get_tuple(&thread).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.refuse(false);
        let read = read.await.unwrap();
        assert!(
            matches!(read, Ok(Some(_))),
            "round {round}: the read failed although the server was back after 300 ms: {read:?}"
        );
    }
    saver.purge().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_flaky_network_and_connections_heal() {
    let Some((proxy, saver)) = proxied("chaos", Duration::from_secs(5)).await else {
        return;
    };
    let report = chaos::run(&proxy, Arc::new(saver.clone()), Duration::from_secs(8), 17)
        .await
        .unwrap();
    eprintln!("redis chaos: {report}");
    assert!(
        report.connections > 1,
        "the saver must reach its server through the proxy, and reconnect: {report}"
    );
    saver.purge().await.unwrap();
}
