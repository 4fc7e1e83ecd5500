//! Error mapping: unreachable servers are `Unavailable` (transient) with the driver error
//! kept as source, unsupported operations of the ordered-writes mode are `Unsupported`,
//! malformed stored documents are `Backend` errors (never panics), bad configuration is
//! `InvalidInput`, and no error or `Debug` output prints a password.

use crate::common;

use std::error::Error as _;
use std::time::Duration;

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, ListOptions, PutOptions,
    PutWritesOptions, Saver, TypedValue,
};
use checkpoint_mongo::mongodb::Client;
use checkpoint_mongo::mongodb::bson::doc;
use checkpoint_mongo::mongodb::options::ClientOptions;
use checkpoint_mongo::{Atomicity, MongoConfig, MongoSaver, TransactionMode};
use common::{client, drop_saver, saver_with, skip};
use futures::StreamExt;

const SECRET: &str = "hunter2-very-secret";

fn chain(e: &Error) -> String {
    let mut s = format!("{e} | {e:?}");
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(&format!(" | {c} | {c:?}"));
        cause = c.source();
    }
    s
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_transient() {
    // Port 1 on the loopback: nothing listens there.
    let uri = format!(
        "mongodb://checkpoint:{SECRET}@127.0.0.1:1/?serverSelectionTimeoutMS=300&connectTimeoutMS=300"
    );
    let err = MongoSaver::connect(&uri, MongoConfig::new("db"))
        .await
        .expect_err("no server there");
    assert!(
        matches!(
            err,
            Error::Unavailable {
                backend: "mongo",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert!(err.source().is_some(), "the driver error is kept as source");
    assert!(!chain(&err).contains(SECRET), "{}", chain(&err));

    // Operations of a saver whose server went away are transient errors too.
    let mut options = ClientOptions::parse(&uri).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_millis(300));
    let saver = MongoSaver::from_client(
        Client::with_options(options).unwrap(),
        MongoConfig::new("db").transactions(TransactionMode::Required),
    )
    .await
    .expect("no I/O without auto-detection");
    let err = saver
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .expect_err("unreachable");
    assert!(err.is_transient(), "{err:?}");
    let mut c = Checkpoint::new();
    let v = c.set("a", &1).unwrap();
    let err = saver
        .put(
            &CheckpointConfig::new("t"),
            c,
            CheckpointMetadata::new(),
            [("a".to_owned(), v)].into(),
            PutOptions::new(),
        )
        .await
        .expect_err("unreachable");
    assert!(err.is_transient(), "{err:?}");
    let first = saver.list(ListOptions::new()).next().await.unwrap();
    assert!(matches!(first, Err(Error::Unavailable { .. })), "{first:?}");
    assert!(!chain(&err).contains(SECRET));
}

#[tokio::test]
async fn debug_never_prints_the_password() {
    let options = ClientOptions::parse(format!(
        "mongodb://checkpoint:{SECRET}@db.example.invalid:27017/?authSource=admin"
    ))
    .await
    .unwrap();
    let saver = MongoSaver::from_client(
        Client::with_options(options).unwrap(),
        MongoConfig::new("agents").transactions(TransactionMode::Required),
    )
    .await
    .unwrap();
    let shown = format!("{saver:?} {:?}", saver.config());
    assert!(shown.contains("agents"), "{shown}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert_eq!(saver.atomicity(), Atomicity::Transactions);
}

#[tokio::test]
async fn bad_configuration_is_invalid_input() {
    for config in [
        MongoConfig::new(""),
        MongoConfig::new("has.dot"),
        MongoConfig::new("db").chunk_size(1),
        MongoConfig::new("db").list_page_size(0),
        MongoConfig::new("db").collection_prefix("$bad"),
    ] {
        let r = MongoSaver::connect("mongodb://127.0.0.1:1", config.clone()).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{config:?}: {r:?}"
        );
    }
    let r = MongoSaver::connect("not a uri", MongoConfig::new("db")).await;
    assert!(matches!(r, Err(Error::Backend { .. })), "{r:?}");
}

#[tokio::test]
async fn the_deployment_decides_the_atomicity() {
    if skip("the_deployment_decides_the_atomicity") {
        return;
    }
    let url = common::url().unwrap();
    // The test server is a one-node replica set, so transactions are used.
    let saver = MongoSaver::connect(&url, MongoConfig::new(common::unique_db("atom")))
        .await
        .unwrap();
    assert_eq!(saver.atomicity(), Atomicity::Transactions);
    assert_eq!(saver.atomicity().to_string(), "transactions");
    assert!(saver.capabilities().compare_and_set && saver.capabilities().leases);
}

#[tokio::test]
async fn operations_without_transactions_are_unsupported_not_wrong() {
    if skip("operations_without_transactions_are_unsupported_not_wrong") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c.transactions(TransactionMode::Disabled)).await;
    let mut cp = Checkpoint::new();
    let v = cp.set("a", &1).unwrap();
    let thread = CheckpointConfig::new("t");
    let put = |options: PutOptions| {
        s.put(
            &thread,
            cp.clone(),
            CheckpointMetadata::new(),
            [("a".to_owned(), v.clone())].into(),
            options,
        )
    };
    assert!(matches!(
        put(PutOptions::compare_and_set()).await,
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        put(PutOptions::new().fence(1)).await,
        Err(Error::Unsupported { .. })
    ));
    let config = put(PutOptions::new()).await.unwrap();
    assert!(matches!(
        s.put_writes(
            &config,
            vec![("w".into(), TypedValue::null())],
            "task",
            PutWritesOptions::new().fence(1)
        )
        .await,
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        s.acquire_lease("t", "me", Duration::from_secs(1)).await,
        Err(Error::Unsupported { .. })
    ));
    drop_saver(&s).await;
}

#[tokio::test]
async fn malformed_stored_documents_are_backend_errors() {
    if skip("malformed_stored_documents_are_backend_errors") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c).await;
    let names = s.config().collection_names();
    // A document another program wrote into the collection, with a checkpoint that is not
    // JSON and a writes document of the wrong shape.
    s.database()
        .collection(&names.checkpoints)
        .insert_one(doc! {
            "_id": "[\"bad\",\"\",\"1\"]", "t": "bad", "n": "", "c": "1", "s": "1",
            "cp": "{not json", "md": "{}",
        })
        .await
        .unwrap();
    let err = s
        .get_tuple(&CheckpointConfig::new("bad"))
        .await
        .expect_err("malformed");
    assert!(
        matches!(
            err,
            Error::Backend {
                backend: "mongo",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert!(chain(&err).contains("checkpoint JSON"), "{}", chain(&err));
    let items: Vec<_> = s.list(ListOptions::new()).collect().await;
    assert_eq!(items.len(), 1, "the error ends the stream");
    assert!(matches!(items[0], Err(Error::Backend { .. })));
    drop_saver(&s).await;
}
