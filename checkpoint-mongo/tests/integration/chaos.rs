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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_a_flaky_network_and_connections_heal() {
    if skip("chaos") {
        return;
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
        "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=5000&connectTimeoutMS=2000",
        proxy.port()
    );
    let client = Client::with_options(ClientOptions::parse(&through).await.unwrap()).unwrap();
    let db = unique_db("chaos");
    let saver = MongoSaver::from_client(client.clone(), MongoConfig::new(db.clone()))
        .await
        .unwrap();
    saver.setup().await.unwrap();
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
