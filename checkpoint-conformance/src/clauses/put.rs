//! Clauses of `Saver::put`.

use std::collections::BTreeMap;

use checkpoint_core::{
    Bytes, ChannelVersion, Checkpoint, CheckpointConfig, CheckpointMetadata, Error, ListOptions,
    PutOptions, Source, TypedValue, ValueType,
};
use serde_json::json;

use crate::fixtures::{cfg, ids, list, put_chain, step, val};
use crate::{SaverFactory, build};

/// `put` returns `(thread_id, checkpoint_ns, checkpoint.id)` without extra keys.
pub async fn put_returns_config_of_new_checkpoint(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
    let mut config = cfg("t1", "");
    config.extra.insert("user".into(), json!("u1"));
    let got = s
        .put(
            &config,
            c.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(got, CheckpointConfig::new("t1").with_checkpoint_id(&c.id));
    assert!(got.extra.is_empty());
}

/// Values of every kind read back byte for byte with their tags; checkpoint and metadata
/// are deep-equal to what was put.
pub async fn put_then_get_roundtrips_values_of_every_kind(f: &dyn SaverFactory) {
    let s = build(f).await;
    let values: Vec<(&str, TypedValue)> = vec![
        ("string", val(json!("hello"))),
        ("empty_string", val(json!(""))),
        ("unicode", val(json!("héllo wörld ✓ 🙂 日本語 \u{0}"))),
        ("int", val(json!(-42))),
        ("big_int", val(json!(u64::MAX))),
        ("float", val(json!(3.25))),
        ("bool", val(json!(true))),
        ("list", val(json!([1, "two", null, [3.5], {"k": "v"}]))),
        (
            "map",
            val(json!({"nested": {"deep": [1, 2, {"x": null}]}, "": "empty key"})),
        ),
        (
            "json_tagged",
            TypedValue::json(&json!({"a": [1, 2]})).unwrap(),
        ),
        (
            "bytes",
            TypedValue::from_bytes(Bytes::from_static(&[0, 159, 146, 150, 255, 0])),
        ),
        ("empty_bytes", TypedValue::from_bytes(Bytes::new())),
        ("null", TypedValue::null()),
        (
            "foreign",
            TypedValue::new(ValueType::from("pickle"), Bytes::from_static(b"\x80\x04N.")),
        ),
        (
            "ext",
            TypedValue::new(ValueType::Msgpack, Bytes::from_static(&[0xd4, 0x05, 0x01])),
        ),
    ];
    let changes: Vec<(&str, Option<TypedValue>)> =
        values.iter().map(|(k, v)| (*k, Some(v.clone()))).collect();
    let (c, v) = step(None, &changes);
    let meta = CheckpointMetadata::for_step(Source::Input, -1)
        .with("custom", json!({"list": [1, 2.5, "x"], "unicode": "✓"}));
    let config = s
        .put(
            &cfg("t1", ""),
            c.clone(),
            meta.clone(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t = s
        .get_tuple(&config)
        .await
        .unwrap()
        .expect("stored checkpoint");
    assert_eq!(t.checkpoint, c, "checkpoint must read back exactly");
    assert_eq!(t.metadata, meta);
    for (k, value) in &values {
        assert_eq!(&t.checkpoint.channel_values[*k], value, "channel {k}");
    }
}

/// A 16 MB value round-trips.
pub async fn put_roundtrips_16mb_value(f: &dyn SaverFactory) {
    let s = build(f).await;
    let big: Vec<u8> = (0..16 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let value = TypedValue::from_bytes(big);
    let (c, v) = step(None, &[("big", Some(value.clone()))]);
    let config = s
        .put(
            &cfg("t1", ""),
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t = s.get_tuple(&config).await.unwrap().unwrap();
    assert!(
        t.checkpoint.channel_values["big"] == value,
        "16 MB value differs after round trip"
    );
}

/// Channel versions (integer and string forms), versions seen, run id and custom metadata
/// keys are preserved exactly.
pub async fn put_preserves_versions_seen_run_id_and_custom_metadata(f: &dyn SaverFactory) {
    let s = build(f).await;
    let mut c = Checkpoint::new();
    c.channel_values.insert("a".into(), val(json!(1)));
    c.channel_values.insert("b".into(), val(json!(2)));
    let sv = ChannelVersion::Str(format!("{:032}.{:016}", 7, 1234567890123456u64));
    c.channel_versions
        .insert("a".into(), ChannelVersion::Int(3));
    c.channel_versions.insert("b".into(), sv.clone());
    c.versions_seen.insert(
        "node".into(),
        BTreeMap::from([
            ("a".to_owned(), ChannelVersion::Int(2)),
            ("b".to_owned(), sv.clone()),
        ]),
    );
    c.versions_seen.insert("__input__".into(), BTreeMap::new());
    c.updated_channels = Some(vec!["a".into(), "b".into()]);
    let new_versions = c.channel_versions.clone();
    let meta = CheckpointMetadata::for_step(Source::Update, 7)
        .with_run_id("run-123")
        .with("zeta", 1)
        .with("alpha", json!({"b": 1, "a": [true, null]}))
        .with("float", 0.1)
        .with("neg", -5)
        .with("str", "ünï");
    let config = s
        .put(
            &cfg("t1", ""),
            c.clone(),
            meta.clone(),
            new_versions,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t = s.get_tuple(&config).await.unwrap().unwrap();
    assert_eq!(t.checkpoint.channel_versions, c.channel_versions);
    assert_eq!(t.checkpoint.versions_seen, c.versions_seen);
    assert_eq!(t.checkpoint.updated_channels, c.updated_channels);
    assert_eq!(t.checkpoint.v, c.v);
    assert_eq!(t.checkpoint.ts, c.ts);
    assert_eq!(t.metadata, meta);
    assert_eq!(t.metadata.run_id(), Some("run-123"));
    assert_eq!(t.metadata.source(), Some(Source::Update));
    assert_eq!(t.metadata.step(), Some(7));
    assert_eq!(t.metadata.get("float"), Some(&json!(0.1)));
}

/// Root (`""`), child and default namespaces are separate and each reads back.
pub async fn put_in_root_child_and_default_namespaces(f: &dyn SaverFactory) {
    let s = build(f).await;
    let root = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let child = put_chain(&*s, "t1", "child:1", 2, "r").await.unwrap();
    let nested = put_chain(&*s, "t1", "child:1|inner:2", 1, "r")
        .await
        .unwrap();
    // The default namespace is the root.
    let latest_default = s
        .get_tuple(&CheckpointConfig::new("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest_default.checkpoint.id, root[1].checkpoint.id);
    assert_eq!(latest_default.config.checkpoint_ns, "");
    let latest_child = s.get_tuple(&cfg("t1", "child:1")).await.unwrap().unwrap();
    assert_eq!(latest_child.checkpoint, child[1].checkpoint);
    assert_eq!(latest_child.config.checkpoint_ns, "child:1");
    let n = s
        .get_tuple(&cfg("t1", "child:1|inner:2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n.checkpoint, nested[0].checkpoint);
    // A child id is not visible from the root namespace.
    let wrong = cfg("t1", "").with_checkpoint_id(&child[0].checkpoint.id);
    assert!(s.get_tuple(&wrong).await.unwrap().is_none());
}

/// Many checkpoints per thread: each loads by id, latest is the last put.
pub async fn put_many_checkpoints_per_thread(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 60, "r").await.unwrap();
    for p in &chain {
        let t = s.get_tuple(&p.config).await.unwrap().unwrap();
        assert_eq!(t.checkpoint, p.checkpoint);
        assert_eq!(t.metadata, p.metadata);
    }
    let latest = s.get_tuple(&cfg("t1", "")).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint.id, chain[59].checkpoint.id);
    let all = list(&*s, ListOptions::thread("t1")).await;
    let mut want: Vec<String> = chain.iter().map(|p| p.checkpoint.id.clone()).collect();
    want.reverse();
    assert_eq!(ids(&all), want);
}

/// Threads never see each other's checkpoints.
pub async fn put_threads_are_isolated(f: &dyn SaverFactory) {
    let s = build(f).await;
    let a = put_chain(&*s, "thread-a", "", 3, "r").await.unwrap();
    let b = put_chain(&*s, "thread-b", "", 2, "r").await.unwrap();
    assert_eq!(
        s.get_tuple(&cfg("thread-a", ""))
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .id,
        a[2].checkpoint.id
    );
    assert_eq!(
        s.get_tuple(&cfg("thread-b", ""))
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .id,
        b[1].checkpoint.id
    );
    let cross = cfg("thread-b", "").with_checkpoint_id(&a[0].checkpoint.id);
    assert!(s.get_tuple(&cross).await.unwrap().is_none());
    assert_eq!(list(&*s, ListOptions::thread("thread-a")).await.len(), 3);
    assert_eq!(list(&*s, ListOptions::thread("thread-b")).await.len(), 2);
    assert!(list(&*s, ListOptions::thread("thread-")).await.is_empty());
}

/// The incoming config's checkpoint id becomes the parent.
pub async fn put_records_parent_config(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "ns:1", 3, "r").await.unwrap();
    let first = s.get_tuple(&chain[0].config).await.unwrap().unwrap();
    assert_eq!(first.parent_config, None);
    for w in chain.windows(2) {
        let t = s.get_tuple(&w[1].config).await.unwrap().unwrap();
        assert_eq!(t.parent_config.as_ref(), Some(&w[0].config));
    }
}

/// Only the channels in `new_versions` are stored; unchanged channels load from the put
/// that stored their version; older checkpoints are unchanged.
pub async fn put_incremental_update_stores_only_new_versions(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c1, v1) = step(
        None,
        &[("a", Some(val(json!("a1")))), ("b", Some(val(json!("b1"))))],
    );
    let cfg1 = s
        .put(
            &cfg("t1", ""),
            c1.clone(),
            CheckpointMetadata::new(),
            v1,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let (mut c2, v2) = step(Some(&c1), &[("a", Some(val(json!("a2"))))]);
    assert!(!v2.contains_key("b"));
    // A different value under b's unchanged version is not stored: b keeps "b1".
    c2.channel_values.insert("b".into(), val(json!("IGNORED")));
    let cfg2 = s
        .put(
            &cfg1,
            c2.clone(),
            CheckpointMetadata::new(),
            v2,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t2 = s.get_tuple(&cfg2).await.unwrap().unwrap();
    assert_eq!(t2.checkpoint.channel_values["a"], val(json!("a2")));
    assert_eq!(t2.checkpoint.channel_values["b"], val(json!("b1")));
    assert_eq!(t2.checkpoint.channel_versions, c2.channel_versions);
    let t1 = s.get_tuple(&cfg1).await.unwrap().unwrap();
    assert_eq!(t1.checkpoint, c1, "the older checkpoint must be unchanged");
    // A put that names no new versions stores no values at all.
    let (mut c3, _) = step(Some(&c2), &[]);
    c3.channel_values
        .insert("a".into(), val(json!("IGNORED TOO")));
    let cfg3 = s
        .put(
            &cfg2,
            c3,
            CheckpointMetadata::new(),
            BTreeMap::new(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t3 = s.get_tuple(&cfg3).await.unwrap().unwrap();
    assert_eq!(t3.checkpoint.channel_values["a"], val(json!("a2")));
    assert_eq!(t3.checkpoint.channel_values["b"], val(json!("b1")));
}

/// A channel added in a later step appears there and not in earlier checkpoints.
pub async fn put_channel_added_appears(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c1, v1) = step(None, &[("a", Some(val(json!(1))))]);
    let cfg1 = s
        .put(
            &cfg("t1", ""),
            c1.clone(),
            CheckpointMetadata::new(),
            v1,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let (c2, v2) = step(Some(&c1), &[("added", Some(val(json!({"new": true}))))]);
    let cfg2 = s
        .put(
            &cfg1,
            c2.clone(),
            CheckpointMetadata::new(),
            v2,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t2 = s.get_tuple(&cfg2).await.unwrap().unwrap();
    assert_eq!(t2.checkpoint, c2);
    assert_eq!(t2.checkpoint.channel_values.len(), 2);
    let t1 = s.get_tuple(&cfg1).await.unwrap().unwrap();
    assert!(!t1.checkpoint.channel_values.contains_key("added"));
}

/// A channel in `new_versions` without a value is removed: absent from the loaded values,
/// while earlier checkpoints still load it.
pub async fn put_channel_removed_is_absent(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c1, v1) = step(
        None,
        &[
            ("keep", Some(val(json!(1)))),
            ("gone", Some(val(json!("bye")))),
        ],
    );
    let cfg1 = s
        .put(
            &cfg("t1", ""),
            c1.clone(),
            CheckpointMetadata::new(),
            v1,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let (c2, v2) = step(Some(&c1), &[("gone", None)]);
    assert!(v2.contains_key("gone"));
    let cfg2 = s
        .put(
            &cfg1,
            c2.clone(),
            CheckpointMetadata::new(),
            v2,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t2 = s.get_tuple(&cfg2).await.unwrap().unwrap();
    assert!(!t2.checkpoint.channel_values.contains_key("gone"));
    assert_eq!(t2.checkpoint.channel_values["keep"], val(json!(1)));
    assert_eq!(t2.checkpoint, c2);
    let t1 = s.get_tuple(&cfg1).await.unwrap().unwrap();
    assert_eq!(t1.checkpoint.channel_values["gone"], val(json!("bye")));
}

/// Keys outside the addressing fields are not persisted nor returned.
pub async fn put_does_not_persist_extra_config_keys(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
    let mut config = cfg("t1", "");
    config.extra.insert("api_key".into(), json!("secret"));
    config.extra.insert("user_id".into(), json!(7));
    let meta = CheckpointMetadata::for_step(Source::Input, 0);
    let got = s
        .put(&config, c, meta.clone(), v, PutOptions::new())
        .await
        .unwrap();
    let t = s.get_tuple(&got).await.unwrap().unwrap();
    assert!(t.config.extra.is_empty());
    assert_eq!(t.metadata, meta, "config keys must not leak into metadata");
    for t in list(&*s, ListOptions::new()).await {
        assert!(t.config.extra.is_empty());
        assert!(t.metadata.get("api_key").is_none());
    }
}

/// A put without a thread id is rejected and stores nothing.
pub async fn put_without_thread_id_is_rejected(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
    let r = s
        .put(
            &CheckpointConfig::default(),
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    assert!(list(&*s, ListOptions::new()).await.is_empty());
}

/// Empty checkpoint id, a parent id not below the checkpoint id and `new_versions` that
/// disagree with `channel_versions` are rejected; nothing is written.
pub async fn put_rejects_inconsistent_input_and_writes_nothing(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let before = list(&*s, ListOptions::new()).await;

    let (mut c, v) = step(Some(&chain[1].checkpoint), &[("a", Some(val(json!(1))))]);
    c.id = String::new();
    let r = s
        .put(
            &chain[1].config,
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await;
    assert!(
        matches!(r, Err(Error::InvalidInput { .. })),
        "empty id: {r:?}"
    );

    // Parent id greater than or equal to the checkpoint id.
    let (c, v) = step(Some(&chain[1].checkpoint), &[("a", Some(val(json!(2))))]);
    let bad_parent = cfg("t1", "").with_checkpoint_id(format!("{}~", c.id));
    let r = s
        .put(
            &bad_parent,
            c.clone(),
            CheckpointMetadata::new(),
            v.clone(),
            PutOptions::new(),
        )
        .await;
    assert!(
        matches!(r, Err(Error::InvalidInput { .. })),
        "parent > id: {r:?}"
    );
    let self_parent = cfg("t1", "").with_checkpoint_id(&c.id);
    let r = s
        .put(
            &self_parent,
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await;
    assert!(
        matches!(r, Err(Error::InvalidInput { .. })),
        "own parent: {r:?}"
    );

    // new_versions disagreeing with channel_versions.
    let (c, mut v) = step(Some(&chain[1].checkpoint), &[("a", Some(val(json!(3))))]);
    v.insert("a".into(), ChannelVersion::Int(999));
    let r = s
        .put(
            &chain[1].config,
            c.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await;
    assert!(
        matches!(r, Err(Error::InvalidInput { .. })),
        "version mismatch: {r:?}"
    );
    let mut v = BTreeMap::new();
    v.insert("not_in_checkpoint".to_owned(), ChannelVersion::Int(1));
    let r = s
        .put(
            &chain[1].config,
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await;
    assert!(
        matches!(r, Err(Error::InvalidInput { .. })),
        "unknown channel: {r:?}"
    );

    assert_eq!(
        list(&*s, ListOptions::new()).await,
        before,
        "a rejected put must not write"
    );
}

/// Putting the same checkpoint (same id, same parent) twice leaves one checkpoint, equal to
/// it, with its pending writes kept.
pub async fn put_same_checkpoint_twice_is_idempotent(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let (c, v) = step(
        Some(&chain[1].checkpoint),
        &[("counter", Some(val(json!(99))))],
    );
    let meta = CheckpointMetadata::for_step(Source::Loop, 2);
    let a = s
        .put(
            &chain[1].config,
            c.clone(),
            meta.clone(),
            v.clone(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    crate::fixtures::put_two_writes(&*s, &a, "task")
        .await
        .unwrap();
    let before = list(&*s, ListOptions::new()).await;
    let b = s
        .put(&chain[1].config, c.clone(), meta, v, PutOptions::new())
        .await
        .unwrap();
    assert_eq!(a, b);
    let after = list(&*s, ListOptions::new()).await;
    assert_eq!(before, after);
    assert_eq!(after.len(), 3);
    assert_eq!(after[0].checkpoint, c);
    assert_eq!(after[0].pending_writes.len(), 2);
}
