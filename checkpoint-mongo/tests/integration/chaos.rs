//! Network chaos: the saver reaches the MongoDB server through a proxy that closes, resets,
//! stalls and refuses its connections while the crash test's writers run (see
//! `checkpoint_conformance::chaos`).

use std::sync::Arc;
use std::time::Duration;

use checkpoint_conformance::chaos::{self, ChaosProxy};
use checkpoint_mongo::mongodb::Client;
use checkpoint_mongo::mongodb::options::ClientOptions;
use checkpoint_mongo::{MongoConfig, MongoSaver};

use crate::common::{skip, unique_db, url};

/// A proxy in front of the server, a set-up saver of a new database reaching it through the
/// proxy (the driver waiting at most `selection_ms` for a server), the server's own options
/// and the database's name; `None` when skipped.
async fn proxied(
    test: &str,
    selection_ms: u32,
) -> Option<(ChaosProxy, MongoSaver, ClientOptions, String)> {
    if skip(test) {
        return None;
    }
    let url = url().expect("checked by skip");
    let parsed = ClientOptions::parse(&url).await.unwrap();
    let upstream = parsed
        .hosts
        .first()
        .map(ToString::to_string)
        .expect("a host");
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    // A direct connection: the driver must not discover the server's own address and
    // bypass the proxy. Short timeouts so a call through a reset connection fails fast.
    let through = format!(
        "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS={selection_ms}&connectTimeoutMS=2000",
        proxy.port()
    );
    let client = Client::with_options(ClientOptions::parse(&through).await.unwrap()).unwrap();
    let db = unique_db(test);
    let saver = MongoSaver::from_client(client, MongoConfig::new(db.clone()))
        .await
        .unwrap();
    saver.setup().await.unwrap();
    Some((proxy, saver, parsed, db))
}

/// Outages fail calls of a plain saver; through `RetryLayer::new()` none fails. The driver
/// itself retries a failed operation once, after waiting for the server for up to its
/// server selection timeout (30 s by default): with 200 ms, far shorter than the outages, calls
/// fail without the layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_layer_rides_out_outages() {
    let Some((proxy, saver, parsed, db)) = proxied("outages", 200).await else {
        return;
    };
    let (plain, retried) = chaos::outages_are_ridden_out(&proxy, Arc::new(saver), 23)
        .await
        .unwrap();
    eprintln!("mongo outages, plain: {plain}\nmongo outages, retried: {retried}");
    drop(proxy);
    let direct = Client::with_options(parsed).unwrap();
    direct.database(&db).drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_flaky_network_and_connections_heal() {
    let Some((proxy, saver, parsed, db)) = proxied("chaos", 5_000).await else {
        return;
    };
    let report = chaos::run(&proxy, Arc::new(saver), Duration::from_secs(8), 17)
        .await
        .unwrap();
    eprintln!("mongo chaos: {report}");
    assert!(
        report.connections > 1,
        "the saver must reach its server through the proxy, and reconnect: {report}"
    );
    drop(proxy);
    let direct = Client::with_options(parsed).unwrap();
    direct.database(&db).drop().await.unwrap();
}
