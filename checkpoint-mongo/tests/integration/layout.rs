//! The stored layout: the indexes `setup` creates, per-version value dedup, chunking of
//! large values, TTL fields, what deletions leave behind, and that an interrupted ordered
//! put never exposes a checkpoint whose values are missing.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use checkpoint_core::{
    Bytes, Checkpoint, CheckpointConfig, CheckpointMetadata, Error, ListOptions, PruneStrategy,
    PutOptions, PutWritesOptions, Saver, SaverExt, TypedValue,
};
use checkpoint_mongo::mongodb::bson::{DateTime, Document, doc};
use checkpoint_mongo::{MongoSaver, TransactionMode};
use common::{client, drop_saver, saver_with, skip};
use futures::TryStreamExt;

async fn count(s: &MongoSaver, coll: &str, filter: Document) -> u64 {
    s.database()
        .collection::<Document>(coll)
        .count_documents(filter)
        .await
        .unwrap()
}

async fn docs(s: &MongoSaver, coll: &str, filter: Document) -> Vec<Document> {
    s.database()
        .collection::<Document>(coll)
        .find(filter)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// `(name, key, unique, expireAfterSeconds)` of a collection's indexes, `_id` excluded.
async fn indexes(s: &MongoSaver, coll: &str) -> BTreeMap<String, (Document, bool, Option<i64>)> {
    let specs: Vec<Document> = s
        .database()
        .run_command(doc! { "listIndexes": coll })
        .await
        .unwrap()
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .filter_map(|b| b.as_document().cloned())
        .collect();
    specs
        .into_iter()
        .filter(|d| d.get_str("name").unwrap() != "_id_")
        .map(|d| {
            let ttl = match d.get("expireAfterSeconds") {
                Some(checkpoint_mongo::mongodb::bson::Bson::Int32(n)) => Some(i64::from(*n)),
                Some(checkpoint_mongo::mongodb::bson::Bson::Int64(n)) => Some(*n),
                Some(checkpoint_mongo::mongodb::bson::Bson::Double(f)) => Some(*f as i64),
                _ => None,
            };
            (
                d.get_str("name").unwrap().to_owned(),
                (
                    d.get_document("key").unwrap().clone(),
                    d.get_bool("unique").unwrap_or(false),
                    ttl,
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn setup_creates_unique_compound_and_ttl_indexes_idempotently() {
    if skip("setup_creates_unique_compound_and_ttl_indexes_idempotently") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c.ttl(Some(Duration::from_secs(3600)))).await;
    s.setup().await.unwrap(); // a second time changes nothing
    let names = s.config().collection_names();
    let cp = indexes(&s, &names.checkpoints).await;
    assert_eq!(
        cp["thread_ns_id"],
        (doc! {"t": 1, "n": 1, "c": -1}, true, None)
    );
    assert_eq!(cp["thread_order"].0, doc! {"t": 1, "s": -1});
    assert_eq!(cp["global_order"].0, doc! {"s": -1});
    assert_eq!(cp["metadata_filter"].0, doc! {"mk": 1});
    assert_eq!(cp["ttl"], (doc! {"x": 1}, false, Some(0)));
    let v = indexes(&s, &names.values).await;
    assert_eq!(
        v["thread_ns_channel_version"],
        (doc! {"t": 1, "n": 1, "ch": 1, "v": 1}, true, None)
    );
    let w = indexes(&s, &names.writes).await;
    assert_eq!(
        w["thread_ns_id_task"],
        (doc! {"t": 1, "n": 1, "c": 1, "k": 1}, true, None)
    );
    assert_eq!(w["address"].0, doc! {"a": 1});
    assert_eq!(
        indexes(&s, &names.chunks).await["thread_blob_seq"],
        (doc! {"t": 1, "b": 1, "i": 1}, true, None)
    );
    assert_eq!(
        indexes(&s, &names.chunks).await["thread_owner"],
        (doc! {"t": 1, "o": 1}, false, None)
    );
    assert_eq!(
        indexes(&s, &names.heads).await["thread_ns"],
        (doc! {"t": 1, "n": 1}, true, None)
    );
    for coll in [&names.values, &names.writes, &names.chunks, &names.heads] {
        assert_eq!(indexes(&s, coll).await["ttl"].2, Some(0), "{coll}");
    }
    // Every collection exists after setup, leases and ledger included.
    let existing = s.database().list_collection_names().await.unwrap();
    for coll in names.all() {
        assert!(existing.iter().any(|e| e == coll), "{coll} missing");
    }
    drop_saver(&s).await;
}

#[tokio::test]
async fn collections_in_a_newer_layout_are_refused_at_setup_and_first_use() {
    if skip("collections_in_a_newer_layout_are_refused_at_setup_and_first_use") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c).await;
    let layout = s
        .database()
        .collection::<Document>(&s.config().collection_names().layout);
    let marker = || async { layout.find_one(doc! {}).await.unwrap().unwrap() };
    assert_eq!(marker().await, doc! {"_id": "layout", "v": 2_i64});
    s.setup().await.unwrap();

    // A newer version set the collections up (or something else wrote the document).
    for v in [doc! {"v": 3_i64}, doc! {"v": "three"}, doc! {}] {
        layout
            .replace_one(doc! {"_id": "layout"}, v.clone())
            .await
            .unwrap();
        let again = MongoSaver::from_client(c.clone(), s.config().clone())
            .await
            .unwrap();
        let e = again.setup().await.unwrap_err();
        assert!(matches!(e, Error::Backend { .. }), "{e:?}");
        assert!(!e.is_transient());
        let message = e.chain();
        assert!(
            message.contains("stored layout") && message.contains("upgrade"),
            "{message}"
        );
        // A saver opened without setup refuses them too, before its first operation
        // (reads, writes, lists, leases) touches anything.
        let unset = MongoSaver::from_client(c.clone(), s.config().clone())
            .await
            .unwrap();
        let config = CheckpointConfig::new("t");
        let refused = [
            unset.get_tuple(&config).await.map(|_| ()).unwrap_err(),
            unset
                .put(
                    &config,
                    Checkpoint::new(),
                    CheckpointMetadata::new(),
                    Default::default(),
                    PutOptions::new(),
                )
                .await
                .map(|_| ())
                .unwrap_err(),
            unset
                .list(ListOptions::thread("t"))
                .try_collect::<Vec<_>>()
                .await
                .map(|_| ())
                .unwrap_err(),
            unset
                .claim("k", Duration::from_secs(1))
                .await
                .map(|_| ())
                .unwrap_err(),
        ];
        for e in refused {
            assert!(e.chain().contains("stored layout"), "{e:?}");
        }
        assert_eq!(
            count(&unset, &s.config().collection_names().checkpoints, doc! {}).await,
            0
        );
        // Refused before changing anything: the document is as it was.
        let mut expected = doc! {"_id": "layout"};
        expected.extend(v);
        assert_eq!(marker().await, expected);
    }
    drop_saver(&s).await;
}

#[tokio::test]
async fn ttl_fields_expire_checkpoints_and_keep_values_longer() {
    if skip("ttl_fields_expire_checkpoints_and_keep_values_longer") {
        return;
    }
    let c = client().await;
    let ttl = Duration::from_secs(3600);
    let s = saver_with(&c, |c| c.ttl(Some(ttl))).await;
    let mut cp = Checkpoint::new();
    let v = cp.set("a", &"value").unwrap();
    let config = s
        .put(
            &CheckpointConfig::new("t"),
            cp.clone(),
            CheckpointMetadata::new(),
            [("a".to_owned(), v)].into(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    s.put_writes(
        &config,
        vec![("w".into(), TypedValue::null())],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    let names = s.config().collection_names();
    let now = SystemTime::now();
    let expiry = |d: &Document| d.get_datetime("x").unwrap().to_system_time();
    let checkpoint_x = expiry(&docs(&s, &names.checkpoints, doc! {}).await[0]);
    let writes_x = expiry(&docs(&s, &names.writes, doc! {}).await[0]);
    let value_x = expiry(&docs(&s, &names.values, doc! {}).await[0]);
    let near = |t: SystemTime, d: Duration| {
        let want = now + d;
        let diff = t.duration_since(want).unwrap_or_else(|e| e.duration());
        diff < Duration::from_secs(60)
    };
    assert!(near(checkpoint_x, ttl), "checkpoint expiry");
    assert!(near(writes_x, ttl), "writes expiry");
    assert!(
        value_x > checkpoint_x + Duration::from_secs(60),
        "values must outlive the checkpoints that name them"
    );
    // A later put naming the value pushes its expiry out again.
    let before = value_x;
    let next = cp.successor();
    s.put(
        &config,
        next,
        CheckpointMetadata::new(),
        BTreeMap::new(),
        PutOptions::new(),
    )
    .await
    .unwrap();
    assert!(expiry(&docs(&s, &names.values, doc! {}).await[0]) >= before);
    drop_saver(&s).await;
}

/// Moves every expiry of the saver's documents `by` into the past, as if they had been
/// written that much earlier.
async fn age_documents(s: &MongoSaver, by: Duration) {
    let ms = i64::try_from(by.as_millis()).unwrap();
    for coll in s.config().collection_names().all() {
        s.database()
            .collection::<Document>(coll)
            .update_many(
                doc! { "x": { "$exists": true } },
                vec![doc! { "$set": { "x": { "$subtract": ["$x", ms] } } }],
            )
            .await
            .unwrap();
    }
}

/// Deletes what the TTL monitor would have deleted by `at`: every document whose expiry is
/// before it.
async fn expire_documents_before(s: &MongoSaver, at: DateTime) {
    for coll in s.config().collection_names().all() {
        s.database()
            .collection::<Document>(coll)
            .delete_many(doc! { "x": { "$lt": at } })
            .await
            .unwrap();
    }
}

/// How the first checkpoint of [`chunked_value_outlives`]'s thread came to be.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Written {
    /// Put by this build.
    Here,
    /// Put by a build whose chunks did not name their value, then `setup` by this one.
    ByAnOlderBuild,
    /// Put on another thread, then copied with `copy_thread`.
    Copied,
}

/// Puts a checkpoint with a chunked value, ages every document by the TTL, puts a second
/// checkpoint naming the value unchanged, expires what the TTL monitor would by just before
/// the second checkpoint expires, and checks that the second still loads whole.
async fn chunked_value_outlives(s: &MongoSaver, ttl: Duration, written: Written, mode: &str) {
    let names = s.config().collection_names();
    let document = "a long document ".repeat(2_000); // 32 KB: 8 chunks
    let mut first = Checkpoint::new();
    let versions: BTreeMap<_, _> = [
        (
            "document".to_owned(),
            first.set("document", &document).unwrap(),
        ),
        ("turn".to_owned(), first.set("turn", &1).unwrap()),
    ]
    .into();
    let thread = if written == Written::Copied {
        "original"
    } else {
        "long-lived"
    };
    let mut config = s
        .put(
            &CheckpointConfig::new(thread),
            first.clone(),
            CheckpointMetadata::new(),
            versions,
            PutOptions::new(),
        )
        .await
        .unwrap();
    assert!(
        count(s, &names.chunks, doc! {}).await >= 8,
        "{mode}: not chunked"
    );
    match written {
        Written::Here => {}
        Written::ByAnOlderBuild => {
            s.database()
                .collection::<Document>(&names.chunks)
                .update_many(doc! {}, doc! { "$unset": { "o": "" } })
                .await
                .unwrap();
            s.database()
                .collection::<Document>(&names.layout)
                .update_many(doc! {}, doc! { "$unset": { "chunks_owned": "" } })
                .await
                .unwrap();
            s.setup().await.unwrap();
        }
        Written::Copied => {
            s.copy_thread("original", "long-lived").await.unwrap();
            s.delete_thread("original").await.unwrap();
            config.thread_id = "long-lived".into();
        }
    }

    // An hour later the thread is still in use: the next checkpoint names the same
    // document, and only `turn` changes.
    age_documents(s, ttl).await;
    let mut second = first.successor();
    let turn = second.set("turn", &2).unwrap();
    let latest = s
        .put(
            &config,
            second,
            CheckpointMetadata::new(),
            [("turn".to_owned(), turn)].into(),
            PutOptions::new(),
        )
        .await
        .unwrap();

    // Until the latest checkpoint itself expires, it loads whole.
    let id = latest.checkpoint_id.as_deref().unwrap();
    let latest_x = docs(s, &names.checkpoints, doc! { "c": id }).await[0]
        .get_datetime("x")
        .unwrap()
        .timestamp_millis();
    expire_documents_before(s, DateTime::from_millis(latest_x - 1_000)).await;
    let tuple = s
        .get_tuple(&latest)
        .await
        .unwrap_or_else(|e| panic!("{mode}: {}", e.chain()))
        .unwrap_or_else(|| panic!("{mode}: the latest checkpoint expired"));
    let loaded: String = tuple.checkpoint.get("document").unwrap().unwrap();
    assert_eq!(loaded, document, "{mode}");
}

/// A value stored in chunks (larger than `chunk_size`) that later checkpoints keep naming
/// lives as long as they do: a put refreshes the expiry of the value's chunks with the
/// value's document. (The chunks kept the expiry of their first write, so a thread used
/// longer than the TTL lost them while its checkpoints still named the value, and its
/// latest checkpoint no longer loaded.) In every write path (a transaction or ordered
/// writes, in one `bulkWrite` or collection by collection), for chunks `setup` adopts from
/// an older build, and on a copied thread.
#[tokio::test]
async fn chunked_values_expire_with_the_checkpoints_that_name_them() {
    if skip("chunked_values_expire_with_the_checkpoints_that_name_them") {
        return;
    }
    let c = client().await;
    let ttl = Duration::from_secs(3600);
    for (transactions, bulk_write, written) in [
        (TransactionMode::Auto, true, Written::Here),
        (TransactionMode::Auto, false, Written::Here),
        (TransactionMode::Disabled, true, Written::Here),
        (TransactionMode::Disabled, false, Written::Here),
        (TransactionMode::Auto, true, Written::ByAnOlderBuild),
        (TransactionMode::Auto, true, Written::Copied),
    ] {
        let mode = format!("{transactions:?}, bulk_write {bulk_write}, written {written:?}");
        let s = saver_with(&c, |c| {
            c.ttl(Some(ttl))
                .chunk_size(4096)
                .transactions(transactions)
                .bulk_write(bulk_write)
        })
        .await;
        chunked_value_outlives(&s, ttl, written, &mode).await;
        drop_saver(&s).await;
    }
}

/// A delta channel (LangGraph's `DeltaChannel`) under a TTL: its value is rebuilt from the
/// nearest ancestor storing it and the writes since, so a put keeps those ancestors, their
/// writes (large ones in chunks too) and the stored value alive as long as itself. Six
/// steps, every document aged by half the TTL after each, then expired as the TTL
/// monitor would just before the latest checkpoint expires: its history is unchanged. Put
/// through one saver (which remembers what each checkpoint keeps) and through two taking
/// turns (each put finds it by a walk), in a transaction and with ordered writes.
#[tokio::test]
async fn delta_channels_keep_their_history_under_a_ttl() {
    if skip("delta_channels_keep_their_history_under_a_ttl") {
        return;
    }
    let c = client().await;
    let ttl = Duration::from_secs(3600);
    let channels = ["messages".to_owned()];
    // `js`: the checkpoints say which channels are rebuilt as LangGraph's JavaScript runtime
    // does (`delta_writes_versioned`: every channel named without a stored value), not
    // with Python's counters.
    for (transactions, bulk_write, two_savers, js) in [
        (TransactionMode::Auto, true, false, false),
        (TransactionMode::Auto, true, true, false),
        (TransactionMode::Disabled, false, false, true),
        (TransactionMode::Disabled, false, true, true),
    ] {
        let mode =
            format!("{transactions:?}, bulk_write {bulk_write}, two savers {two_savers}, js {js}");
        let configure = |c: checkpoint_mongo::MongoConfig| {
            c.ttl(Some(ttl))
                .chunk_size(4096)
                .transactions(transactions)
                .bulk_write(bulk_write)
        };
        let first = saver_with(&c, configure).await;
        let second = MongoSaver::from_client(c.clone(), configure(first.config().clone()))
            .await
            .unwrap();
        let savers: [&MongoSaver; 2] = [&first, if two_savers { &second } else { &first }];

        // The snapshot: a checkpoint storing the whole list, and a document no later step
        // changes.
        let mut checkpoint = Checkpoint::new();
        let snapshot = checkpoint.set("messages", &vec!["hello"]).unwrap();
        let document = checkpoint.set("document", &"unchanged").unwrap();
        let mut config = first
            .put(
                &CheckpointConfig::new("chat"),
                checkpoint.clone(),
                CheckpointMetadata::new(),
                [
                    ("messages".to_owned(), snapshot),
                    ("document".to_owned(), document),
                ]
                .into(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        for step in 1..=6_i64 {
            let saver = savers[step as usize % 2];
            // The step's message is a pending write of the checkpoint it ran from; every
            // third one is large enough for chunks.
            let text = if step % 3 == 0 {
                format!("message {step} {}", "x".repeat(10_000))
            } else {
                format!("message {step}")
            };
            saver
                .put_writes(
                    &config,
                    vec![("messages".into(), TypedValue::msgpack(&text).unwrap())],
                    &format!("task-{step}"),
                    PutWritesOptions::new(),
                )
                .await
                .unwrap();
            // The next checkpoint names a new version of the channel without storing it.
            let mut next = checkpoint.successor();
            next.channel_values.clear();
            let version = checkpoint_core::ChannelVersion::next_string(
                checkpoint.channel_versions.get("messages"),
            );
            next.channel_versions
                .insert("messages".to_owned(), version.clone());
            let metadata = if js {
                CheckpointMetadata::new().with(checkpoint_core::delta::DELTA_WRITES_VERSIONED, true)
            } else {
                CheckpointMetadata::new().with(
                    checkpoint_core::delta::DELTA_COUNTERS,
                    serde_json::json!({ "messages": [step, step] }),
                )
            };
            config = saver
                .put(
                    &config,
                    next.clone(),
                    metadata,
                    [("messages".to_owned(), version)].into(),
                    PutOptions::new(),
                )
                .await
                .unwrap();
            checkpoint = next;
            age_documents(saver, ttl / 2).await;
        }
        let before = first
            .delta_channel_history(&config, &channels)
            .await
            .unwrap();
        assert_eq!(before["messages"].writes.len(), 6, "{mode}");
        assert!(before["messages"].seed.is_some(), "{mode}");

        let names = first.config().collection_names();
        let id = config.checkpoint_id.as_deref().unwrap();
        let latest_x = docs(&first, &names.checkpoints, doc! { "c": id }).await[0]
            .get_datetime("x")
            .unwrap()
            .timestamp_millis();
        expire_documents_before(&first, DateTime::from_millis(latest_x - 1_000)).await;
        let after = first
            .delta_channel_history(&config, &channels)
            .await
            .unwrap_or_else(|e| panic!("{mode}: {}", e.chain()));
        assert_eq!(after, before, "{mode}");
        drop_saver(&first).await;
    }
}

#[tokio::test]
async fn each_channel_version_is_stored_once() {
    if skip("each_channel_version_is_stored_once") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c).await;
    let big = "big".repeat(30_000);
    let mut prev = Checkpoint::new();
    let mut config = CheckpointConfig::new("dedup");
    for step in 0..10 {
        let mut cp = prev.successor();
        let mut versions = BTreeMap::new();
        versions.insert("counter".to_owned(), cp.set("counter", &step).unwrap());
        if step == 0 {
            versions.insert("big".to_owned(), cp.set("big", &big).unwrap());
        }
        let parent = config.clone();
        config = s
            .put(
                &parent,
                cp.clone(),
                CheckpointMetadata::new(),
                versions.clone(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        // Repeating a put stores nothing new.
        let again = s
            .put(
                &parent,
                cp.clone(),
                CheckpointMetadata::new(),
                versions,
                PutOptions::new(),
            )
            .await
            .unwrap();
        assert_eq!(again, config);
        prev = cp;
    }
    let names = s.config().collection_names();
    assert_eq!(count(&s, &names.checkpoints, doc! {}).await, 10);
    assert_eq!(count(&s, &names.values, doc! {"ch": "big"}).await, 1);
    assert_eq!(count(&s, &names.values, doc! {"ch": "counter"}).await, 10);
    for t in s.list_all(ListOptions::thread("dedup")).await.unwrap() {
        assert_eq!(t.checkpoint.require::<String>("big").unwrap(), big);
    }
    drop_saver(&s).await;
}

fn bytes(n: usize, seed: u8) -> TypedValue {
    TypedValue::from_bytes(Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(seed) ^ (i >> 8) as u8)
            .collect::<Vec<u8>>(),
    ))
}

#[tokio::test]
async fn large_values_and_writes_are_chunked_and_cleaned_up() {
    if skip("large_values_and_writes_are_chunked_and_cleaned_up") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c.chunk_size(1024)).await;
    let names = s.config().collection_names();
    let mut cp = Checkpoint::new();
    let mut versions = BTreeMap::new();
    versions.insert(
        "big".to_owned(),
        cp.set_typed("big", bytes(10 * 1024 + 5, 7)),
    );
    versions.insert("edge".to_owned(), cp.set_typed("edge", bytes(1024, 3)));
    let config = s
        .put(
            &CheckpointConfig::new("chunky"),
            cp.clone(),
            CheckpointMetadata::new(),
            versions,
            PutOptions::new(),
        )
        .await
        .unwrap();
    // 10 KiB + 5 bytes: 11 chunks; exactly one chunk's size stays inline.
    assert_eq!(count(&s, &names.chunks, doc! {"t": "chunky"}).await, 11);
    s.put_writes(
        &config,
        vec![("w".into(), bytes(3000, 5)), ("small".into(), bytes(10, 9))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(count(&s, &names.chunks, doc! {"t": "chunky"}).await, 14);
    let t = s.get_tuple(&config).await.unwrap().unwrap();
    assert_eq!(t.checkpoint, cp);
    assert_eq!(t.pending_writes[0].value, bytes(3000, 5));
    assert_eq!(t.pending_writes[1].value, bytes(10, 9));

    // A replacing special write drops the chunks of the value it replaces.
    s.put_writes(
        &config,
        vec![("__error__".into(), bytes(2500, 1))],
        "task2",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(count(&s, &names.chunks, doc! {"t": "chunky"}).await, 17);
    s.put_writes(
        &config,
        vec![("__error__".into(), bytes(100, 2))],
        "task2",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(count(&s, &names.chunks, doc! {"t": "chunky"}).await, 14);
    // A write ignored because its index exists leaves no chunks behind.
    s.put_writes(
        &config,
        vec![("w".into(), bytes(5000, 8))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(count(&s, &names.chunks, doc! {"t": "chunky"}).await, 14);

    // A copy carries its own chunks; deleting the source keeps the copy whole.
    s.copy_thread("chunky", "copy").await.unwrap();
    assert_eq!(count(&s, &names.chunks, doc! {"t": "copy"}).await, 14);
    s.delete_thread("chunky").await.unwrap();
    let copied = s
        .get_tuple(&CheckpointConfig::new("copy"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(copied.checkpoint, cp);
    assert_eq!(copied.pending_writes.len(), 3);

    // Pruning to nothing removes every chunk, as delete_thread does for every collection.
    let mut next = copied.checkpoint.successor();
    let v = next.set("small", &1).unwrap();
    s.put(
        &copied.config,
        next,
        CheckpointMetadata::new(),
        [("small".to_owned(), v)].into(),
        PutOptions::new(),
    )
    .await
    .unwrap();
    s.prune(&["copy".into()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    // The kept checkpoint still names the big value (unchanged channel), so it stays.
    assert_eq!(count(&s, &names.chunks, doc! {"t": "copy"}).await, 11);
    s.prune(&["copy".into()], PruneStrategy::DeleteAll)
        .await
        .unwrap();
    for coll in names.all() {
        assert_eq!(count(&s, coll, doc! {"t": "copy"}).await, 0, "{coll}");
    }
    drop_saver(&s).await;
}

#[tokio::test]
async fn delete_thread_keeps_lease_tokens_and_other_threads() {
    if skip("delete_thread_keeps_lease_tokens_and_other_threads") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c).await;
    for thread in ["gone", "kept"] {
        let mut cp = Checkpoint::new();
        let v = cp.set("a", &thread).unwrap();
        let config = s
            .put(
                &CheckpointConfig::new(thread),
                cp,
                CheckpointMetadata::new(),
                [("a".to_owned(), v)].into(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        s.put_writes(
            &config,
            vec![("w".into(), TypedValue::null())],
            "task",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    }
    s.acquire_lease("gone", "me", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    s.delete_thread("gone").await.unwrap();
    let names = s.config().collection_names();
    for coll in [
        &names.checkpoints,
        &names.values,
        &names.writes,
        &names.chunks,
        &names.heads,
    ] {
        assert_eq!(count(&s, coll, doc! {"t": "gone"}).await, 0, "{coll}");
    }
    assert_eq!(count(&s, &names.checkpoints, doc! {"t": "kept"}).await, 1);
    assert_eq!(count(&s, &names.leases, doc! {"_id": "gone"}).await, 1);
    drop_saver(&s).await;
}

#[tokio::test]
async fn an_interrupted_ordered_put_is_invisible_and_completes_when_repeated() {
    if skip("an_interrupted_ordered_put_is_invisible_and_completes_when_repeated") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c.transactions(TransactionMode::Disabled)).await;
    let mut cp = Checkpoint::new();
    let v = cp.set("a", &"first").unwrap();
    let versions: BTreeMap<_, _> = [("a".to_owned(), v)].into();
    // Simulate a crash after the values step: run the put, then remove its checkpoint
    // document only, which is the state an interruption before the last write leaves.
    let config = s
        .put(
            &CheckpointConfig::new("crash"),
            cp.clone(),
            CheckpointMetadata::new(),
            versions.clone(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    let names = s.config().collection_names();
    s.database()
        .collection::<Document>(&names.checkpoints)
        .delete_many(doc! {})
        .await
        .unwrap();
    assert!(s.get_tuple(&config).await.unwrap().is_none());
    assert!(s.list_all(ListOptions::new()).await.unwrap().is_empty());
    // Repeating the put completes it; the value stored first stays.
    s.put(
        &CheckpointConfig::new("crash"),
        cp.clone(),
        CheckpointMetadata::new(),
        versions,
        PutOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(s.get_tuple(&config).await.unwrap().unwrap().checkpoint, cp);
    assert_eq!(count(&s, &names.values, doc! {}).await, 1);
    drop_saver(&s).await;
}

#[tokio::test]
async fn the_integrity_scan_finds_a_lost_value_a_lost_chunk_and_orphan_writes() {
    if skip("the_integrity_scan_finds_a_lost_value_a_lost_chunk_and_orphan_writes") {
        return;
    }
    let c = client().await;
    // Small chunks: the scenario's 256 KiB list is stored in parts, and must scan clean.
    let s = saver_with(&c, |c| c.chunk_size(checkpoint_mongo::MIN_CHUNK_SIZE)).await;
    let values = s
        .database()
        .collection::<Document>(&s.config().collection_names().values);
    checkpoint_conformance::integrity::integrity_scan_scenario(
        &s,
        "scanned",
        |thread, version| async move {
            let key = match version {
                checkpoint_core::ChannelVersion::Int(n) => format!("i{n}"),
                checkpoint_core::ChannelVersion::Str(s) => format!("s{s}"),
            };
            let gone = values
                .delete_one(doc! {
                    "t": thread,
                    "n": "",
                    "ch": checkpoint_conformance::integrity::LOST_CHANNEL,
                    "v": key,
                })
                .await
                .unwrap();
            assert_eq!(gone.deleted_count, 1);
        },
    )
    .await;

    // A value stored in chunks: losing one chunk loses the value.
    use checkpoint_core::IntegrityScan;
    let mut cp = Checkpoint::new();
    let v = cp.set_typed("doc", TypedValue::from_bytes(vec![7u8; 8 * 1024]));
    let stored = s
        .put(
            &CheckpointConfig::new("chunked"),
            cp,
            CheckpointMetadata::new(),
            BTreeMap::from([("doc".to_owned(), v)]),
            PutOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(s.scan_thread("chunked").await.unwrap(), vec![]);
    let chunks = s
        .database()
        .collection::<Document>(&s.config().collection_names().chunks);
    let gone = chunks.delete_one(doc! { "t": "chunked" }).await.unwrap();
    assert_eq!(gone.deleted_count, 1, "the value is stored in chunks");
    let scan = s.scan_thread("chunked").await.unwrap();
    assert!(
        matches!(scan.as_slice(), [checkpoint_core::StorageIssue::MissingValue { channel, checkpoint_id, .. }]
            if channel == "doc" && Some(checkpoint_id) == stored.checkpoint_id.as_ref()),
        "{scan:?}"
    );
    drop_saver(&s).await;
}

/// Puts one checkpoint (no values) on `thread` in namespace `ns`.
async fn put_empty(s: &MongoSaver, thread: &str, ns: &str) {
    s.put(
        &CheckpointConfig::new(thread).with_ns(ns),
        Checkpoint::new(),
        CheckpointMetadata::new(),
        Default::default(),
        PutOptions::new(),
    )
    .await
    .unwrap();
}

async fn threads(s: &MongoSaver) -> Vec<String> {
    s.list_threads().try_collect().await.unwrap()
}

/// `(t, n, x)` of every head document, in order.
async fn heads(s: &MongoSaver) -> Vec<(String, String, Option<DateTime>)> {
    let mut all: Vec<_> = docs(s, &s.config().collection_names().heads, doc! {})
        .await
        .into_iter()
        .map(|d| {
            (
                d.get_str("t").unwrap().to_owned(),
                d.get_str("n").unwrap().to_owned(),
                d.get_datetime("x").ok().copied(),
            )
        })
        .collect();
    all.sort();
    all
}

#[tokio::test]
async fn a_store_of_layout_1_gets_the_heads_that_list_its_threads_at_setup() {
    if skip("a_store_of_layout_1_gets_the_heads_that_list_its_threads_at_setup") {
        return;
    }
    let c = client().await;
    let s = saver_with(&c, |c| c).await;
    let names = s.config().collection_names();
    for (thread, ns) in [("a", ""), ("b", ""), ("b", "sub"), ("c", "sub")] {
        put_empty(&s, thread, ns).await;
    }
    // Layout 1 wrote no head for copied threads nor without transactions, and a head may
    // outlive its checkpoints.
    let db = s.database();
    db.collection::<Document>(&names.heads)
        .delete_many(doc! { "$or": [{ "t": "b", "n": "sub" }, { "t": "c" }] })
        .await
        .unwrap();
    db.collection::<Document>(&names.heads)
        .insert_one(doc! { "_id": r#"["gone",""]"#, "t": "gone", "n": "", "w": 1_i64 })
        .await
        .unwrap();
    // The latest expiry of c's checkpoints is what its head must keep.
    let later = DateTime::from_millis(DateTime::now().timestamp_millis() + 3_600_000);
    db.collection::<Document>(&names.checkpoints)
        .update_one(doc! { "t": "c" }, doc! { "$set": { "x": later } })
        .await
        .unwrap();
    let layout = db.collection::<Document>(&names.layout);
    layout
        .update_one(doc! { "_id": "layout" }, doc! { "$set": { "v": 1_i64 } })
        .await
        .unwrap();

    // Opened without setup, a saver reads such a store's threads from its checkpoints.
    let old = MongoSaver::from_client(c.clone(), s.config().clone())
        .await
        .unwrap();
    assert_eq!(threads(&old).await, ["a", "b", "c"]);
    assert_eq!(
        old.list_threads_after("a")
            .try_collect::<Vec<_>>()
            .await
            .unwrap(),
        ["b", "c"]
    );

    // Setup writes the missing heads, then marks layout 2; the heads list the threads.
    old.setup().await.unwrap();
    let v = layout.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(v.get_i64("v").unwrap(), 2, "{v}");
    let found = heads(&old).await;
    let keys: Vec<(&str, &str)> = found
        .iter()
        .map(|(t, n, _)| (t.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("a", ""),
            ("b", ""),
            ("b", "sub"),
            ("c", "sub"),
            ("gone", "")
        ]
    );
    assert_eq!(found[3].2, Some(later));
    assert_eq!(threads(&old).await, ["a", "b", "c"]);
    // Idempotent: a second setup writes nothing more.
    old.setup().await.unwrap();
    assert_eq!(heads(&old).await, found);
    // The listing reads the heads now, in this saver and a new one: a thread whose heads
    // are gone is not found.
    db.collection::<Document>(&names.heads)
        .delete_many(doc! { "t": "c" })
        .await
        .unwrap();
    assert_eq!(threads(&old).await, ["a", "b"]);
    let new = MongoSaver::from_client(c.clone(), s.config().clone())
        .await
        .unwrap();
    assert_eq!(threads(&new).await, ["a", "b"]);
    drop_saver(&s).await;
}

/// Checks that the four heads of `heads_expire_no_earlier_than_their_checkpoints` expire no
/// earlier than their checkpoints: never for the threads holding a checkpoint without an
/// expiry.
async fn check_head_expiry(s: &MongoSaver) {
    let found = heads(s).await;
    assert_eq!(found.len(), 4, "{found:?}");
    for (t, _, x) in found {
        let names = s.config().collection_names();
        let expiries: Vec<Option<DateTime>> = docs(s, &names.checkpoints, doc! { "t": &t })
            .await
            .iter()
            .map(|d| d.get_datetime("x").ok().copied())
            .collect();
        if t.starts_with("old") {
            assert!(expiries.contains(&None), "{t}");
            assert_eq!(x, None, "{t}");
        } else {
            let latest = expiries.iter().max().copied().flatten();
            assert!(
                latest.is_some() && x >= latest,
                "{t}: head {x:?}, checkpoints {latest:?}"
            );
        }
    }
}

#[tokio::test]
async fn heads_expire_no_earlier_than_their_checkpoints() {
    if skip("heads_expire_no_earlier_than_their_checkpoints") {
        return;
    }
    let c = client().await;
    let plain = saver_with(&c, |c| c).await;
    let names = plain.config().collection_names();
    put_empty(&plain, "old", "").await;
    // A TTL turned on later: the checkpoint written before it never expires, so neither
    // does its thread's head.
    let ttl = plain.config().clone().ttl(Some(Duration::from_secs(3600)));
    let s = MongoSaver::from_client(c.clone(), ttl).await.unwrap();
    s.setup().await.unwrap();
    put_empty(&s, "old", "").await;
    put_empty(&s, "new", "").await;
    s.copy_thread("old", "old-copy").await.unwrap();
    s.copy_thread("new", "new-copy").await.unwrap();
    check_head_expiry(&s).await;
    // The upgrade from layout 1 writes them so too.
    let db = s.database();
    db.collection::<Document>(&names.heads)
        .delete_many(doc! {})
        .await
        .unwrap();
    db.collection::<Document>(&names.layout)
        .update_one(doc! { "_id": "layout" }, doc! { "$set": { "v": 1_i64 } })
        .await
        .unwrap();
    s.setup().await.unwrap();
    check_head_expiry(&s).await;
    assert_eq!(threads(&s).await, ["new", "new-copy", "old", "old-copy"]);
    drop_saver(&s).await;
}

#[tokio::test]
async fn thread_pages_skip_heads_whose_checkpoints_are_gone() {
    if skip("thread_pages_skip_heads_whose_checkpoints_are_gone") {
        return;
    }
    let c = client().await;
    for mode in [TransactionMode::Auto, TransactionMode::Disabled] {
        let s = saver_with(&c, |c| c.transactions(mode)).await;
        let names = s.config().collection_names();
        // 300 heads with no checkpoint between live threads: more than a page of heads.
        let stale: Vec<Document> = (0..300)
            .map(|i| {
                let t = format!("m-{i:03}");
                doc! { "_id": format!(r#"["{t}",""]"#), "t": t, "n": "", "w": 1_i64 }
            })
            .collect();
        s.database()
            .collection::<Document>(&names.heads)
            .insert_many(stale)
            .await
            .unwrap();
        for thread in ["a", "n", "z"] {
            put_empty(&s, thread, "").await;
        }
        // A thread copied, and one whose every checkpoint `delete_for_runs` removed.
        s.copy_thread("n", "n-copy").await.unwrap();
        let run = CheckpointConfig::new("r");
        let metadata = CheckpointMetadata::new().with_run_id("run-1");
        s.put(
            &run,
            Checkpoint::new(),
            metadata,
            Default::default(),
            PutOptions::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            threads(&s).await,
            ["a", "n", "n-copy", "r", "z"],
            "{mode:?}"
        );
        s.delete_for_runs(&["run-1".to_owned()]).await.unwrap();
        // In a transaction the emptied namespace's head goes too; without, it stays.
        let left = u64::from(mode == TransactionMode::Disabled);
        assert_eq!(
            count(&s, &names.heads, doc! { "t": "r" }).await,
            left,
            "{mode:?}"
        );
        assert_eq!(threads(&s).await, ["a", "n", "n-copy", "z"], "{mode:?}");
        let after_a: Vec<String> = s.list_threads_after("a").try_collect().await.unwrap();
        assert_eq!(after_a, ["n", "n-copy", "z"], "{mode:?}");
        let after_m: Vec<String> = s.list_threads_after("m-150").try_collect().await.unwrap();
        assert_eq!(after_m, ["n", "n-copy", "z"], "{mode:?}");
        drop_saver(&s).await;
    }
}
