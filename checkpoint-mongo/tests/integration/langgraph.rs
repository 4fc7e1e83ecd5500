//! Databases written by Python's `langgraph-checkpoint-mongodb`
//! (`interop/langgraph_mongodb.py`, real graphs: tool calls, an interrupt left pending, a
//! resumed interrupt, a subgraph, `Send`), read with [`LangGraphMongoSource`]: every
//! checkpoint reads exactly as LangGraph reads it (ids, parents, metadata, versions, value
//! bytes, pending writes), LangGraph's serializer loads every value we read as the very
//! object its own saver loads, lookups, filters and paging work, writes through
//! [`ReadOnly`] are refused, and the integrity scan finds planted orphan writes.

use std::path::Path;

use checkpoint_conformance::langgraph::{self, as_langgraph_json, comparable};
use checkpoint_core::backend::ReadOnly;
use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    CheckpointConfig, CheckpointTuple, Error, IntegrityScan, ListOptions, Saver, SaverExt,
    StorageIssue,
};
use checkpoint_mongo::langgraph::LangGraphMongoSource;
use checkpoint_mongo::mongodb::bson::doc;
use checkpoint_mongo::{MongoConfig, MongoSaver};
use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::common;

fn run_python(py: &str, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/langgraph_mongodb.py");
    langgraph::run_python(py, &script, args)
}

#[tokio::test]
async fn live_langgraph_database() {
    if common::skip("live_langgraph_database") {
        return;
    }
    let Some(py) = langgraph::python() else {
        return;
    };
    let url = common::url().unwrap();
    let db = common::unique_db("lg");
    let expected = run_python(&py, &["write", &url, &db]);
    let expected = expected.as_array().unwrap();
    assert!(
        expected.len() >= 10,
        "the graphs wrote {} checkpoints",
        expected.len()
    );

    let source = LangGraphMongoSource::connect(&url, &db).await.unwrap();
    // Pages smaller than the history: the listing pages through the collection.
    let ours: Vec<CheckpointTuple> = source
        .list(ListOptions::default())
        .try_collect()
        .await
        .unwrap();
    langgraph::assert_reads_like_langgraph(&ours, expected);

    // LangGraph's serializer loads every value we read as its own saver loads it.
    let read = std::env::temp_dir().join(format!("{db}.json"));
    let rendered: Vec<Value> = ours.iter().map(as_langgraph_json).collect();
    std::fs::write(&read, serde_json::to_vec(&rendered).unwrap()).unwrap();
    let report = run_python(&py, &["check", &url, &db, read.to_str().unwrap()]);
    let _ = std::fs::remove_file(&read);
    assert_eq!(report["problems"], json!([]), "{report}");
    assert_eq!(report["checkpoints"], json!(expected.len()));
    assert!(report["values"].as_u64().unwrap() > 50, "{report}");
    assert!(report["writes"].as_u64().unwrap() > 20, "{report}");

    // The paused thread's latest checkpoint holds LangGraph's interrupt.
    let paused = source
        .get_tuple(&CheckpointConfig::new("paused"))
        .await
        .unwrap()
        .unwrap();
    assert!(paused.pending_writes.iter().any(|w| w.channel == INTERRUPT));
    assert_eq!(
        paused.config.checkpoint_id.as_deref(),
        expected[0]["checkpoint_id"].as_str()
    );
    // By id, in a subgraph's namespace.
    let sub = expected
        .iter()
        .find(|e| {
            e["checkpoint_ns"]
                .as_str()
                .is_some_and(|ns| ns.starts_with("sub:"))
        })
        .unwrap();
    let config = CheckpointConfig::new(sub["thread_id"].as_str().unwrap())
        .with_ns(sub["checkpoint_ns"].as_str().unwrap())
        .with_checkpoint_id(sub["checkpoint_id"].as_str().unwrap());
    let t = source.get_tuple(&config).await.unwrap().unwrap();
    assert_eq!(as_langgraph_json(&t), comparable(sub));
    assert!(
        source
            .get_tuple(&CheckpointConfig::new("paused").with_checkpoint_id("no-such-id"))
            .await
            .unwrap()
            .is_none()
    );
    // Filters, `before` and limits, in list order.
    let alice: Vec<CheckpointTuple> = source
        .list(ListOptions::default().filter("user", json!("alice")))
        .try_collect()
        .await
        .unwrap();
    let expected_alice = expected
        .iter()
        .filter(|e| e["metadata"]["user"] == json!("alice"))
        .count();
    assert!(!alice.is_empty());
    assert_eq!(alice.len(), expected_alice);
    let root = ListOptions::thread("resumed").namespace("");
    let all: Vec<CheckpointTuple> = source.list(root.clone()).try_collect().await.unwrap();
    let before: Vec<CheckpointTuple> = source
        .list(root.before(all[2].checkpoint.id.clone()).limit(2))
        .try_collect()
        .await
        .unwrap();
    let ids = |ts: &[CheckpointTuple]| {
        ts.iter()
            .map(|t| t.checkpoint.id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&before), ids(&all[3..5]));

    // As a saver: reads as the source, writes refused and nothing written.
    let saver = ReadOnly::new(source.clone());
    let threads: Vec<String> = saver.list_threads().try_collect().await.unwrap();
    assert_eq!(threads, ["paused", "resumed"]);
    let rest: Vec<String> = saver
        .list_threads_after("paused")
        .try_collect()
        .await
        .unwrap();
    assert_eq!(rest, ["resumed"]);
    let err = saver
        .put(
            &CheckpointConfig::new("paused"),
            paused.checkpoint.clone(),
            paused.metadata.clone(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Rejected { .. }), "{err:?}");
    assert!(saver.delete_thread("paused").await.is_err());
    assert_eq!(
        saver.list_all(ListOptions::default()).await.unwrap().len(),
        expected.len()
    );

    // The scan: nothing on LangGraph's own writing; an orphan write is found.
    assert_eq!(saver.scan_thread("resumed").await.unwrap(), []);
    assert_eq!(saver.scan_thread("paused").await.unwrap(), []);
    let client = common::client().await;
    let writes = client
        .database(&db)
        .collection::<checkpoint_mongo::mongodb::bson::Document>("checkpoint_writes");
    writes
        .insert_one(doc! {
            "thread_id": "paused", "checkpoint_ns": "", "checkpoint_id": "gone",
            "task_id": "t", "task_path": "", "idx": 0, "channel": "x", "type": "msgpack",
            "value": checkpoint_mongo::mongodb::bson::Binary {
                subtype: checkpoint_mongo::mongodb::bson::spec::BinarySubtype::Generic,
                bytes: vec![1],
            },
        })
        .await
        .unwrap();
    assert_eq!(
        saver.scan_thread("paused").await.unwrap(),
        [StorageIssue::WritesWithoutCheckpoint {
            checkpoint_ns: String::new(),
            checkpoint_id: "gone".into(),
            writes: 1,
        }]
    );
    // A thread id LangGraph stored as given but that is not a string cannot be addressed:
    // listing threads says so instead of leaving it out.
    client
        .database(&db)
        .collection::<checkpoint_mongo::mongodb::bson::Document>("checkpoints")
        .insert_one(doc! {"thread_id": 7, "checkpoint_ns": "", "checkpoint_id": "x"})
        .await
        .unwrap();
    let err = saver
        .list_threads()
        .try_collect::<Vec<String>>()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    // Also when the listing starts after an id (a resumed or paged one).
    let err = saver
        .list_threads_after("paused")
        .try_collect::<Vec<String>>()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    client.database(&db).drop().await.unwrap();
}

#[tokio::test]
async fn databases_that_are_not_langgraphs_are_typed_errors() {
    if common::skip("databases_that_are_not_langgraphs_are_typed_errors") {
        return;
    }
    let url = common::url().unwrap();
    // No collections at all.
    let empty = common::unique_db("lg_empty");
    let err = LangGraphMongoSource::connect(&url, &empty)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    // This crate's own layout uses the same collection names with other fields.
    let db = common::unique_db("lg_ours");
    let saver = MongoSaver::connect(&url, MongoConfig::new(db.clone()))
        .await
        .unwrap();
    saver.setup().await.unwrap();
    let cp = checkpoint_core::Checkpoint::new();
    saver
        .put(
            &CheckpointConfig::new("t"),
            cp,
            Default::default(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap();
    let err = LangGraphMongoSource::connect(&url, &db).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("LangGraph"), "{err}");
    saver.drop_collections().await.unwrap();
}
