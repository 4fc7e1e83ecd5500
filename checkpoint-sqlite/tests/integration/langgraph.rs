//! Files written by Python's `langgraph-checkpoint-sqlite` (`interop/langgraph_sqlite.py`),
//! read with [`LangGraphSqliteSource`]:
//!
//! * `langgraph_fixture_reads_exactly`: the committed fixture (a dump of a file the pinned
//!   library wrote, with what LangGraph itself reads from it) reads back with the same ids,
//!   parents, metadata, versions, value bytes and pending writes; lookups, filters and
//!   paging work on it; and imported into a [`SqliteSaver`] it reads back the same.
//! * `live_langgraph_file`: against the real Python library (`CHECKPOINT_TEST_LANGGRAPH_PYTHON`,
//!   installed by `scripts/services/langgraph.sh`; required under CI): LangGraph writes a
//!   fresh file, we read it exactly, and LangGraph's serializer loads every value we read as
//!   the very object its own saver loads.

use std::collections::BTreeMap;
use std::path::Path;

use checkpoint_conformance::langgraph::{self, as_langgraph_json, comparable};
use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    CheckpointConfig, CheckpointTuple, Error, ListOptions, PutOptions, PutWritesOptions, Saver,
    SaverExt, TypedValue,
};
use checkpoint_sqlite::SqliteSaver;
use checkpoint_sqlite::langgraph::LangGraphSqliteSource;
use futures::TryStreamExt;
use serde_json::{Value, json};
use sqlx::Executor;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use crate::common::{remove_db, scratch_dir};

/// Everything in the source, newest first, matches LangGraph's own reading checkpoint by
/// checkpoint.
async fn assert_reads_like_langgraph(source: &LangGraphSqliteSource, expected: &[Value]) {
    let ours: Vec<CheckpointTuple> = source
        .list(ListOptions::default())
        .try_collect()
        .await
        .unwrap();
    langgraph::assert_reads_like_langgraph(&ours, expected);
}

/// A database file with the statements of a dump.
async fn file_from_dump(path: &Path, sql: &[Value]) {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
    let script: Vec<&str> = sql.iter().map(|s| s.as_str().unwrap()).collect();
    pool.execute(sqlx::raw_sql(&script.join("\n")))
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn langgraph_fixture_reads_exactly() {
    let fixture: Value = serde_json::from_str(include_str!("../../interop/fixture.json")).unwrap();
    let expected = fixture["expected"].as_array().unwrap();
    let dir = scratch_dir("langgraph");
    let path = dir.join("langgraph.sqlite");
    file_from_dump(&path, fixture["sql"].as_array().unwrap()).await;
    let source = LangGraphSqliteSource::open(&path).await.unwrap();

    assert_reads_like_langgraph(&source, expected).await;
    assert_eq!(source.threads().await.unwrap(), ["paused", "resumed"]);
    let saver = checkpoint_core::backend::ReadOnly::new(source.clone());
    let listed: Vec<String> = saver.list_threads().try_collect().await.unwrap();
    assert_eq!(listed, ["paused", "resumed"]);
    let rest: Vec<String> = saver
        .list_threads_after("paused")
        .try_collect()
        .await
        .unwrap();
    assert_eq!(rest, ["resumed"]);

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
    let expected_alice: Vec<&Value> = expected
        .iter()
        .filter(|e| e["metadata"]["user"] == json!("alice"))
        .collect();
    assert!(!alice.is_empty());
    assert_eq!(alice.len(), expected_alice.len());
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

    imported_reads_back_the_same(&source, &dir).await;
    remove_db(&path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every checkpoint of the source put into a [`SqliteSaver`] (oldest first, each with its
/// pending writes) reads back with the same values, bytes for bytes.
async fn imported_reads_back_the_same(source: &LangGraphSqliteSource, dir: &Path) {
    let saver = SqliteSaver::open(dir.join("imported.db")).await.unwrap();
    let mut all: Vec<CheckpointTuple> = source
        .list(ListOptions::default())
        .try_collect()
        .await
        .unwrap();
    all.reverse();
    for t in &all {
        let parent = CheckpointConfig::new(t.config.thread_id.as_str())
            .with_ns(t.config.checkpoint_ns.as_str());
        let parent = match t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone())
        {
            Some(id) => parent.with_checkpoint_id(id),
            None => parent,
        };
        let versions = t.checkpoint.channel_versions.clone();
        let config = saver
            .put(
                &parent,
                t.checkpoint.clone(),
                t.metadata.clone(),
                versions,
                PutOptions::default(),
            )
            .await
            .unwrap();
        let mut by_task: BTreeMap<(&str, &str), Vec<(String, TypedValue)>> = BTreeMap::new();
        for w in &t.pending_writes {
            by_task
                .entry((w.task_id.as_str(), w.task_path.as_str()))
                .or_default()
                .push((w.channel.clone(), w.value.clone()));
        }
        for ((task, path), writes) in by_task {
            saver
                .put_writes(
                    &config,
                    writes,
                    task,
                    PutWritesOptions::new().task_path(path),
                )
                .await
                .unwrap();
        }
    }
    let back = saver.list_all(ListOptions::default()).await.unwrap();
    assert_eq!(back.len(), all.len());
    for (ours, theirs) in back.iter().zip(all.iter().rev()) {
        assert_eq!(ours.checkpoint, theirs.checkpoint);
        assert_eq!(ours.metadata, theirs.metadata);
        assert_eq!(ours.parent_config, theirs.parent_config);
        let key = |t: &CheckpointTuple| {
            t.pending_writes
                .iter()
                .map(|w| (w.task_id.clone(), w.channel.clone(), w.value.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(key(ours), key(theirs), "writes of {}", ours.checkpoint.id);
    }
}

#[tokio::test]
async fn files_that_are_not_langgraphs_are_typed_errors() {
    let dir = scratch_dir("not-langgraph");
    let err = LangGraphSqliteSource::open(dir.join("missing.sqlite"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Backend { .. } | Error::Unavailable { .. }),
        "{err:?}"
    );
    // Our own layout is not LangGraph's.
    let ours = dir.join("ours.db");
    drop(SqliteSaver::open(&ours).await.unwrap());
    let err = LangGraphSqliteSource::open(&ours).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_python(py: &str, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/langgraph_sqlite.py");
    langgraph::run_python(py, &script, args)
}

#[tokio::test]
async fn live_langgraph_file() {
    let Some(py) = langgraph::python() else {
        return;
    };
    let dir = scratch_dir("langgraph-live");
    let path = dir.join("langgraph.sqlite");
    let db = path.to_str().unwrap();
    let expected = run_python(&py, &["write", db]);
    let expected = expected.as_array().unwrap();
    assert!(
        expected.len() >= 10,
        "the graphs wrote {} checkpoints",
        expected.len()
    );

    let source = LangGraphSqliteSource::open(&path).await.unwrap();
    assert_reads_like_langgraph(&source, expected).await;

    let ours: Vec<Value> = source
        .list(ListOptions::default())
        .map_ok(|t| as_langgraph_json(&t))
        .try_collect()
        .await
        .unwrap();
    let read = dir.join("read.json");
    std::fs::write(&read, serde_json::to_vec(&ours).unwrap()).unwrap();
    let report = run_python(&py, &["check", db, read.to_str().unwrap()]);
    assert_eq!(report["problems"], json!([]), "{report}");
    assert_eq!(report["checkpoints"], json!(expected.len()));
    assert!(report["values"].as_u64().unwrap() > 50, "{report}");
    assert!(report["writes"].as_u64().unwrap() > 20, "{report}");
    remove_db(&path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of `langgraph-checkpoint-sqlite` 2 (no `task_path` column) with checkpoints of
/// format 3, whose `Send`s are pending writes to `__pregel_tasks` on the parent checkpoint:
/// they read back in that channel, in LangGraph's write order, at the newest version the
/// checkpoint has, as LangGraph's loaders migrate them.
#[tokio::test]
async fn sends_of_format_3_checkpoints_read_back_in_the_tasks_channel() {
    use checkpoint_core::writes::TASKS;
    use rmpv::Value as Mp;
    let encode = |v: &Mp| {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    };
    let send = |node: &str| {
        encode(&Mp::Ext(
            2,
            encode(&Mp::Array(vec![
                Mp::from("langgraph.types"),
                Mp::from("Send"),
                Mp::Map(vec![(Mp::from("node"), Mp::from(node))]),
            ])),
        ))
    };
    let checkpoint = |id: &str, version: &str| {
        encode(&Mp::Map(vec![
            (Mp::from("v"), Mp::from(3)),
            (Mp::from("id"), Mp::from(id)),
            (Mp::from("ts"), Mp::from("2025-01-01T00:00:00+00:00")),
            (
                Mp::from("channel_values"),
                Mp::Map(vec![(Mp::from("x"), Mp::from(1))]),
            ),
            (
                Mp::from("channel_versions"),
                Mp::Map(vec![(Mp::from("x"), Mp::from(version))]),
            ),
            (Mp::from("versions_seen"), Mp::Map(vec![])),
            (Mp::from("pending_sends"), Mp::Array(vec![])),
        ]))
    };
    let dir = scratch_dir("langgraph-v3");
    let path = dir.join("v3.sqlite");
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
    pool.execute(sqlx::raw_sql(
        "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
             checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB,
             metadata BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
         CREATE TABLE writes (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
             checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL,
             channel TEXT NOT NULL, type TEXT, value BLOB,
             PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));",
    ))
    .await
    .unwrap();
    let v1 = "00000000000000000000000000000001.0.1";
    let v2 = "00000000000000000000000000000002.0.1";
    for (id, parent, version) in [("c1", None, v1), ("c2", Some("c1"), v2)] {
        sqlx::query("INSERT INTO checkpoints VALUES ('t', '', ?1, ?2, 'msgpack', ?3, '{}')")
            .bind(id)
            .bind(parent)
            .bind(checkpoint(id, version))
            .execute(&pool)
            .await
            .unwrap();
    }
    // The sends, written out of order by two tasks; LangGraph orders by task, then index.
    for (task, idx, node) in [
        ("task-b", 0, "third"),
        ("task-a", 1, "second"),
        ("task-a", 0, "first"),
    ] {
        sqlx::query("INSERT INTO writes VALUES ('t', '', 'c1', ?1, ?2, ?3, 'msgpack', ?4)")
            .bind(task)
            .bind(idx)
            .bind(TASKS)
            .bind(send(node))
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;

    let source = LangGraphSqliteSource::open(&path).await.unwrap();
    let c2 = source
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    let mut expected = vec![0x93];
    for node in ["first", "second", "third"] {
        expected.extend(send(node));
    }
    assert_eq!(
        c2.checkpoint.channel_values[TASKS].bytes.as_ref(),
        &expected[..]
    );
    assert_eq!(
        c2.checkpoint.channel_versions[TASKS],
        checkpoint_core::ChannelVersion::Str(v2.into())
    );
    // The first checkpoint has no parent and so no sends; its own writes stay writes.
    let c1 = source
        .get_tuple(&CheckpointConfig::new("t").with_checkpoint_id("c1"))
        .await
        .unwrap()
        .unwrap();
    assert!(!c1.checkpoint.channel_values.contains_key(TASKS));
    assert_eq!(c1.pending_writes.len(), 3);
    assert!(c1.pending_writes.iter().all(|w| w.task_path.is_empty()));
    let _ = std::fs::remove_dir_all(&dir);
}
