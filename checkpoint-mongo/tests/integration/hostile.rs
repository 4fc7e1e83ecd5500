//! Hostile input, beyond the conformance clauses: metadata keys and values, identifiers,
//! lease holders and ledger keys that look like MongoDB operators, field paths, aggregation
//! variables or regular expressions are stored and matched as data, and the stored
//! documents never take a field name, operator or path from caller data.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Claim, Error, ListOptions, PutOptions,
    PutWritesOptions, Saver, SaverExt, TypedValue,
};
use checkpoint_mongo::mongodb::bson::{Document, doc};
use checkpoint_mongo::{MongoSaver, TransactionMode};
use common::{MongoFactory, skip};
use futures::TryStreamExt;
use serde_json::{Value, json};

async fn saver(tag: &'static str) -> (MongoFactory, MongoSaver) {
    let f = MongoFactory::new(tag, TransactionMode::Auto);
    let s = f.saver().await.unwrap();
    (f, s)
}

async fn teardown(f: MongoFactory) {
    checkpoint_conformance::SaverFactory::teardown(&f).await;
}

async fn put_meta(s: &MongoSaver, thread: &str, meta: Value) -> String {
    let mut c = Checkpoint::new();
    let v = c.set("a", &1).unwrap();
    s.put(
        &CheckpointConfig::new(thread),
        c.clone(),
        CheckpointMetadata::from(meta.as_object().unwrap().clone()),
        [("a".to_owned(), v)].into(),
        PutOptions::new(),
    )
    .await
    .unwrap();
    c.id
}

fn ids(tuples: &[checkpoint_core::CheckpointTuple]) -> Vec<String> {
    tuples.iter().map(|t| t.checkpoint.id.clone()).collect()
}

/// Every field name of every stored document, recursively (array items included).
fn field_names(d: &Document, out: &mut BTreeSet<String>) {
    for (k, v) in d {
        out.insert(k.clone());
        match v {
            checkpoint_mongo::mongodb::bson::Bson::Document(inner) => field_names(inner, out),
            checkpoint_mongo::mongodb::bson::Bson::Array(items) => {
                for i in items {
                    if let checkpoint_mongo::mongodb::bson::Bson::Document(inner) = i {
                        field_names(inner, out);
                    }
                }
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn operator_shaped_metadata_is_matched_literally() {
    if skip("operator_shaped_metadata_is_matched_literally") {
        return;
    }
    let (f, s) = saver("hostmeta").await;
    let literal = json!({
        "$where": "function() { sleep(1000); return true; }",
        "$expr": {"$eq": [1, 1]},
        "$function": {"body": "return true", "args": [], "lang": "js"},
        "a.b.c": {"$gt": ""},
        "$": "$$NOW",
        "": "$field.path",
        "regex": {"$regex": ".*", "$options": "i"},
        "in": {"$in": [1, 2, 3]},
        "nested": {"deep": {"$ne": null}},
        "nul\u{0}key": "nul\u{0}value",
        "ops": [{"$exists": true}, {"$type": "string"}],
    });
    let target = put_meta(&s, "victim", literal.clone()).await;
    let other = put_meta(
        &s,
        "bystander",
        json!({"a": {"b": {"c": 5}}, "nested": {"deep": 1}, "regex": "anything", "in": 2}),
    )
    .await;

    // Each literal key and value finds exactly the checkpoint that stores it.
    for (k, v) in literal.as_object().unwrap() {
        let got = s
            .list_all(ListOptions::new().filter(k.clone(), v.clone()))
            .await
            .unwrap();
        assert_eq!(ids(&got), vec![target.clone()], "filter {k:?} = {v}");
    }
    // Operator-shaped filters are values, not operators: they match nothing here.
    for (k, v) in [
        ("regex", json!({"$regex": "any"})),
        ("in", json!({"$in": [2]})),
        ("nested", json!({"deep": {"$gte": 0}})),
        ("a.b.c", json!(5)),
        ("$where", json!("true")),
        ("$or", json!([{"in": 2}])),
        ("$and", json!([])),
        ("$nor", json!([{"x": 1}])),
        ("$expr", json!({"$eq": ["$in", 2]})),
        ("nested", json!({"$exists": true})),
    ] {
        let got = s
            .list_all(ListOptions::new().filter(k, v.clone()))
            .await
            .unwrap();
        assert!(got.is_empty(), "filter {k:?} = {v} matched {:?}", ids(&got));
    }
    // The bystander's own literal values still match it.
    let got = s
        .list_all(
            ListOptions::new()
                .filter("in", 2)
                .filter("regex", "anything"),
        )
        .await
        .unwrap();
    assert_eq!(ids(&got), vec![other]);

    // No stored document took a field name from caller data.
    let db = s.database();
    let mut names = BTreeSet::new();
    for coll in s.config().collection_names().all() {
        let docs: Vec<Document> = db
            .collection::<Document>(coll)
            .find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        for d in &docs {
            field_names(d, &mut names);
        }
    }
    let fixed: BTreeSet<String> = [
        "_id", "t", "n", "c", "s", "p", "cp", "md", "mk", "ch", "v", "ty", "d", "k", "a", "r", "w",
        "i", "len", "b", "nc", "x",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let unexpected: Vec<&String> = names.difference(&fixed).collect();
    assert!(
        unexpected.is_empty(),
        "caller data became field names: {unexpected:?}"
    );
    teardown(f).await;
}

#[tokio::test]
async fn large_metadata_long_values_and_big_integers_filter_exactly() {
    if skip("large_metadata_long_values_and_big_integers_filter_exactly") {
        return;
    }
    let (f, s) = saver("hostbig").await;
    // More keys than get pair entries, with one key in common with the small metadata.
    let mut wide = serde_json::Map::new();
    for i in 0..20 {
        wide.insert(format!("k{i:02}"), json!(i));
    }
    wide.insert("source".into(), json!("loop"));
    let wide_id = put_meta(&s, "wide", Value::Object(wide)).await;
    let small_id = put_meta(&s, "small", json!({"source": "loop", "k03": 3})).await;
    let long = "ü".repeat(5000);
    let long_id = put_meta(&s, "long", json!({"text": long, "k03": 3})).await;
    // 2^53 + 1 is neither the integer nor the float 2^53 (numbers compare exactly).
    let big_id = put_meta(&s, "big", json!({"n": 9_007_199_254_740_993_u64})).await;

    let q = |f: Value| ListOptions::new().with_filter(f.as_object().unwrap().clone());
    let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    assert_eq!(
        set(ids(&s.list_all(q(json!({"k03": 3}))).await.unwrap())),
        set(vec![wide_id.clone(), small_id.clone(), long_id.clone()])
    );
    assert_eq!(
        set(ids(&s
            .list_all(q(json!({"k03": 3.0, "source": "loop"})))
            .await
            .unwrap())),
        set(vec![wide_id.clone(), small_id.clone()])
    );
    assert_eq!(
        ids(&s.list_all(q(json!({"k03": 3, "k19": 19}))).await.unwrap()),
        vec![wide_id.clone()]
    );
    assert!(
        s.list_all(q(json!({"k03": 3, "k19": 18})))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&s
            .list_all(q(json!({"text": long, "k03": 3})))
            .await
            .unwrap()),
        vec![long_id.clone()]
    );
    assert!(
        s.list_all(q(json!({"text": "ü".repeat(4999)})))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.list_all(q(json!({"n": 9_007_199_254_740_992_u64})))
            .await
            .unwrap()
            .is_empty(),
        "integers compare exactly"
    );
    assert!(
        s.list_all(q(json!({"n": 9_007_199_254_740_992.0_f64})))
            .await
            .unwrap()
            .is_empty(),
        "no float equals 2^53 + 1"
    );
    assert_eq!(
        ids(&s
            .list_all(q(json!({"n": 9_007_199_254_740_993_u64})))
            .await
            .unwrap()),
        vec![big_id]
    );
    teardown(f).await;
}

#[tokio::test]
async fn identifiers_shaped_like_syntax_are_exact_and_oversized_ones_rejected() {
    if skip("identifiers_shaped_like_syntax_are_exact_and_oversized_ones_rejected") {
        return;
    }
    let (f, s) = saver("hostid").await;
    let shapes = [
        ".*",
        "^t",
        "t$",
        "$where",
        "$$NOW",
        "$ne",
        "{\"$gt\": \"\"}",
        "a.b",
        "$.x",
        "\u{0}",
        "t\u{0}",
        "t\u{1}",
        "t",
    ];
    for thread in shapes {
        for ns in ["", "$ns", "a.b|c:d"] {
            let mut c = Checkpoint::new();
            let channel = format!("$ch.{thread}");
            let v = c.set(&channel, &thread).unwrap();
            let config = s
                .put(
                    &CheckpointConfig::new(thread).with_ns(ns),
                    c.clone(),
                    CheckpointMetadata::new(),
                    [(channel.clone(), v)].into(),
                    PutOptions::new(),
                )
                .await
                .unwrap();
            s.put_writes(
                &config,
                vec![(format!("$w.{thread}"), TypedValue::msgpack(&ns).unwrap())],
                "$task",
                PutWritesOptions::new().task_path("$path.x"),
            )
            .await
            .unwrap();
        }
    }
    for thread in shapes {
        let got = s.list_all(ListOptions::thread(thread)).await.unwrap();
        assert_eq!(got.len(), 3, "thread {thread:?}");
        for t in &got {
            assert_eq!(t.config.thread_id, thread);
            assert_eq!(t.pending_writes.len(), 1);
            assert_eq!(t.pending_writes[0].task_id, "$task");
            assert_eq!(t.pending_writes[0].task_path, "$path.x");
            let ch = format!("$ch.{thread}");
            assert_eq!(t.checkpoint.require::<String>(&ch).unwrap(), thread);
        }
        let got = s
            .list_all(ListOptions::thread(thread).namespace("$ns"))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
    }
    assert_eq!(
        s.list_all(ListOptions::new()).await.unwrap().len(),
        shapes.len() * 3
    );
    s.delete_thread(".*").await.unwrap();
    assert_eq!(
        s.list_all(ListOptions::new()).await.unwrap().len(),
        (shapes.len() - 1) * 3,
        "deleting \".*\" deleted nothing else"
    );

    // Identifiers beyond the saver's limit are rejected before anything is written.
    let huge = "x".repeat(300 * 1024);
    let before = s.list_all(ListOptions::new()).await.unwrap();
    let mut c = Checkpoint::new();
    let v = c.set("a", &1).unwrap();
    for config in [
        CheckpointConfig::new(huge.clone()),
        CheckpointConfig::new("t").with_ns(huge.clone()),
    ] {
        let r = s
            .put(
                &config,
                c.clone(),
                CheckpointMetadata::new(),
                [("a".to_owned(), v.clone())].into(),
                PutOptions::new(),
            )
            .await;
        assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    }
    let r = s
        .put_writes(
            &before[0].config,
            vec![("a".into(), TypedValue::null())],
            &huge,
            PutWritesOptions::new(),
        )
        .await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    assert_eq!(s.list_all(ListOptions::new()).await.unwrap(), before);
    teardown(f).await;
}

#[tokio::test]
async fn lease_holders_and_ledger_keys_are_data() {
    if skip("lease_holders_and_ledger_keys_are_data") {
        return;
    }
    let (f, s) = saver("hostcoord").await;
    let long = Duration::from_secs(60);
    // A holder spelled like a field path must not read the document's own fields.
    let a = s.acquire_lease("$h", "$h", long).await.unwrap().unwrap();
    assert_eq!(a.holder, "$h");
    assert_eq!(s.acquire_lease("$h", "$$NOW", long).await.unwrap(), None);
    let again = s.acquire_lease("$h", "$h", long).await.unwrap().unwrap();
    assert_eq!(again.token, a.token);
    let b = s
        .acquire_lease("{\"$ne\": 1}", "$tok", long)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.token, 1);
    // Ledger keys shaped like operators are separate keys.
    for key in ["$where", "$ne", "a.b", ".*", "$$ROOT"] {
        let Claim::Acquired { token } = s.claim(key, long).await.unwrap() else {
            panic!("{key:?} must be a new key");
        };
        s.complete_claim(key, token, TypedValue::msgpack(&key).unwrap())
            .await
            .unwrap();
    }
    for key in ["$where", "$ne", "a.b", ".*", "$$ROOT"] {
        assert_eq!(
            s.claim(key, long).await.unwrap(),
            Claim::Completed {
                outcome: TypedValue::msgpack(&key).unwrap()
            }
        );
    }
    assert!(matches!(
        s.claim("a", long).await.unwrap(),
        Claim::Acquired { token: 1 }
    ));
    teardown(f).await;
}

/// Regression: plain (not compare-and-set) puts racing on new namespaces failed now and then
/// with a duplicate key error on the namespace's head document (two upserts creating it at
/// once). Every racing put must succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_plain_puts_on_new_namespaces_all_succeed() {
    if skip("racing_plain_puts_on_new_namespaces_all_succeed") {
        return;
    }
    let (f, s) = saver("hostrace").await;
    let s = std::sync::Arc::new(s);
    let mut failures = Vec::new();
    for round in 0..150 {
        let thread = format!("race-{round}");
        let puts = (0..8).map(|_| {
            let s = std::sync::Arc::clone(&s);
            let thread = thread.clone();
            tokio::spawn(async move {
                let mut c = Checkpoint::new();
                let v = c.set("a", &1).unwrap();
                s.put(
                    &CheckpointConfig::new(thread),
                    c,
                    CheckpointMetadata::new(),
                    [("a".to_owned(), v)].into(),
                    PutOptions::new(),
                )
                .await
            })
        });
        for r in futures::future::join_all(puts).await {
            if let Err(e) = r.unwrap() {
                failures.push(format!("{thread}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 1200 racing puts failed: {failures:?}",
        failures.len()
    );
    assert_eq!(
        s.list_all(ListOptions::thread("race-0"))
            .await
            .unwrap()
            .len(),
        8
    );
    teardown(f).await;
}

/// Regression: metadata of thousands of keys made a put or a filter take seconds to minutes
/// (a filter stage per key, each scanning the candidate's entry array). A filter now costs
/// the server a bounded number of stages; the rest is checked exactly by the client.
#[tokio::test]
async fn metadata_of_thousands_of_keys_puts_and_filters() {
    if skip("metadata_of_thousands_of_keys_puts_and_filters") {
        return;
    }
    let (f, s) = saver("hostwide").await;
    let wide = |n: usize, shift: usize| {
        let map: serde_json::Map<String, Value> = (0..n)
            .map(|i| (format!("key{i:05}"), json!(i + shift)))
            .collect();
        Value::Object(map)
    };
    let t0 = std::time::Instant::now();
    let big = put_meta(&s, "wide-5000", wide(5000, 0)).await;
    let put_5000 = t0.elapsed();
    let near = put_meta(&s, "wide-1000", wide(1000, 0)).await;
    // Equal on every key but the last: must not match a filter naming the last key.
    let mut off = wide(1000, 0);
    off["key00999"] = json!(-1);
    let off_id = put_meta(&s, "wide-1000-off", off).await;

    let q = |f: Value| ListOptions::new().with_filter(f.as_object().unwrap().clone());
    let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    let t0 = std::time::Instant::now();
    let got = ids(&s.list_all(q(wide(1000, 0))).await.unwrap());
    let filter_1000 = t0.elapsed();
    assert_eq!(set(got), set(vec![big.clone(), near]));
    let got = ids(&s.list_all(q(wide(5000, 0))).await.unwrap());
    assert_eq!(got, vec![big]);
    let mut last_only = serde_json::Map::new();
    last_only.insert("key00999".into(), json!(-1));
    assert_eq!(
        ids(&s
            .list_all(ListOptions::new().with_filter(last_only))
            .await
            .unwrap()),
        vec![off_id]
    );
    eprintln!("5,000-key put {put_5000:?}, 1,000-key global filter {filter_1000:?}");
    teardown(f).await;
}
