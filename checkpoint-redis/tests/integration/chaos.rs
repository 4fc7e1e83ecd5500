//! Network chaos: the saver reaches Redis through a proxy that closes, resets, stalls and
//! refuses its connections while the crash test's writers run (see
//! `checkpoint_conformance::chaos`).

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::chaos::{self, ChaosProxy};
use checkpoint_redis::RedisSaver;
use checkpoint_redis::redis::{ConnectionAddr, IntoConnectionInfo};

use crate::common::unique_prefix;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_flaky_network_and_connections_heal() {
    let Some(url) = checkpoint_conformance::server_url("redis") else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_REDIS_URL is required"
        );
        return;
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
        .key_prefix(unique_prefix("chaos"))
        .build()
        .await
        .unwrap();
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
