//! Network chaos: the saver reaches Redis through a proxy that closes, resets, stalls and
//! refuses its connections while the crash test's writers run (see
//! `checkpoint_conformance::chaos`).

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::chaos::{self, ChaosProxy};
use checkpoint_redis::RedisSaver;

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
    let upstream = url
        .trim_start_matches("redis://")
        .split(['/', '?'])
        .next()
        .unwrap_or("127.0.0.1:6379")
        .to_owned();
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    let saver = RedisSaver::builder(format!("redis://127.0.0.1:{}", proxy.port()))
        .key_prefix(unique_prefix("chaos"))
        .build()
        .await
        .unwrap();
    let report = chaos::run(&proxy, Arc::new(saver.clone()), Duration::from_secs(8), 17)
        .await
        .unwrap();
    eprintln!("redis chaos: {report}");
    saver.purge().await.unwrap();
}
