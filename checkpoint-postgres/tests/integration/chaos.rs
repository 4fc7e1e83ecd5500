//! Network chaos: the saver reaches PostgreSQL through a proxy that closes, resets, stalls
//! and refuses its connections while the crash test's writers run (see
//! `checkpoint_conformance::chaos`).

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::chaos::{self, ChaosProxy};
use checkpoint_postgres::{PostgresSaver, PostgresSaverBuilder, sqlx};

use crate::common::{drop_schemas, unique_schema, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_flaky_network_and_the_pool_heals() {
    let Some(url) = url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    let schema = unique_schema();
    // Set up directly, then write only through the proxy, with the default pool policy.
    PostgresSaver::builder(&url)
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
