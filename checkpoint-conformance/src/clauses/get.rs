//! Clauses of `Saver::get_tuple`.

use checkpoint_core::{CheckpointConfig, Error, PendingWrite};
use serde_json::json;

use crate::fixtures::{cfg, put_chain, put_two_writes, val};
use crate::{SaverFactory, build};

/// An unknown thread reads as `None`.
pub async fn get_tuple_missing_thread_is_none(f: &dyn SaverFactory) {
    let s = build(f).await;
    put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    assert!(s.get_tuple(&cfg("nope", "")).await.unwrap().is_none());
    assert!(s.get_tuple(&cfg("t", "")).await.unwrap().is_none());
}

/// An unknown checkpoint id reads as `None`.
pub async fn get_tuple_missing_id_is_none(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    let missing = cfg("t1", "").with_checkpoint_id(checkpoint_core::new_checkpoint_id());
    assert!(s.get_tuple(&missing).await.unwrap().is_none());
    let prefix = cfg("t1", "").with_checkpoint_id(&chain[0].checkpoint.id[..10]);
    assert!(s.get_tuple(&prefix).await.unwrap().is_none());
}

/// Without id: the checkpoint with the greatest id.
pub async fn get_tuple_latest_without_id(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 5, "r").await.unwrap();
    let t = s.get_tuple(&cfg("t1", "")).await.unwrap().unwrap();
    assert_eq!(t.checkpoint, chain[4].checkpoint);
    assert_eq!(t.config, chain[4].config);
}

/// With id: exactly that checkpoint.
pub async fn get_tuple_by_id(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 5, "r").await.unwrap();
    for p in &chain {
        let t = s.get_tuple(&p.config).await.unwrap().unwrap();
        assert_eq!(t.checkpoint, p.checkpoint);
        assert_eq!(t.metadata, p.metadata);
        assert_eq!(t.config, p.config);
    }
}

/// Config, parent config and pending writes are exact.
pub async fn get_tuple_config_parent_and_writes_exact(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "thread-x", "sub:7", 2, "r").await.unwrap();
    put_two_writes(&*s, &chain[1].config, "task-1")
        .await
        .unwrap();
    let t = s
        .get_tuple(&cfg("thread-x", "sub:7"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        t.config,
        CheckpointConfig::new("thread-x")
            .with_ns("sub:7")
            .with_checkpoint_id(&chain[1].checkpoint.id)
    );
    assert_eq!(
        t.parent_config,
        Some(
            CheckpointConfig::new("thread-x")
                .with_ns("sub:7")
                .with_checkpoint_id(&chain[0].checkpoint.id)
        )
    );
    assert_eq!(
        t.pending_writes,
        vec![
            PendingWrite {
                task_id: "task-1".into(),
                channel: "a".into(),
                value: val(json!(1)),
                idx: 0,
                task_path: String::new()
            },
            PendingWrite {
                task_id: "task-1".into(),
                channel: "b".into(),
                value: val(json!({"x": "y"})),
                idx: 1,
                task_path: String::new()
            },
        ]
    );
    let first = s.get_tuple(&chain[0].config).await.unwrap().unwrap();
    assert!(first.pending_writes.is_empty());
    assert!(first.parent_config.is_none());
}

/// The namespace of the config is respected, for latest and by id.
pub async fn get_tuple_respects_namespace(f: &dyn SaverFactory) {
    let s = build(f).await;
    let root = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let child = put_chain(&*s, "t1", "child:1", 1, "r").await.unwrap();
    assert_eq!(
        s.get_tuple(&cfg("t1", ""))
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .id,
        root[1].checkpoint.id,
        "the root's latest must ignore the newer child checkpoint"
    );
    assert_eq!(
        s.get_tuple(&cfg("t1", "child:1"))
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .id,
        child[0].checkpoint.id
    );
    assert!(s.get_tuple(&cfg("t1", "child:2")).await.unwrap().is_none());
    assert!(s.get_tuple(&cfg("t1", "child")).await.unwrap().is_none());
    let wrong = cfg("t1", "child:1").with_checkpoint_id(&root[0].checkpoint.id);
    assert!(s.get_tuple(&wrong).await.unwrap().is_none());
}

/// `get_tuple` without thread id is rejected.
pub async fn get_tuple_without_thread_is_rejected(f: &dyn SaverFactory) {
    let s = build(f).await;
    let r = s.get_tuple(&CheckpointConfig::default()).await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
}

/// A checkpoint of a LangGraph format before 4 reads with the `Send`s its parent's pending
/// writes to `__pregel_tasks` hold, moved into that channel as one list in
/// `(task_path, task_id, idx)` order, at the checkpoint's newest version, as LangGraph's
/// savers read it; nothing is written back, and checkpoints of format 4 are read as stored.
pub async fn get_tuple_moves_sends_of_format_3_into_the_tasks_channel(f: &dyn SaverFactory) {
    use checkpoint_core::writes::TASKS;
    use checkpoint_core::{
        CheckpointMetadata, ListOptions, PutOptions, PutWritesOptions, SaverExt,
    };

    let s = build(f).await;
    let send = |node: &str| val(json!({"node": node, "arg": {"n": 1}}));
    let put =
        |parent: Option<CheckpointConfig>, prev: Option<checkpoint_core::Checkpoint>, v: u32| {
            let s = s.clone();
            async move {
                let (mut c, versions) =
                    crate::fixtures::step(prev.as_ref(), &[("x", Some(val(json!(1))))]);
                c.v = v;
                let at = parent.unwrap_or_else(|| cfg("legacy", ""));
                let config = s
                    .put(
                        &at,
                        c.clone(),
                        CheckpointMetadata::new(),
                        versions,
                        PutOptions::new(),
                    )
                    .await
                    .unwrap();
                (config, c)
            }
        };
    let (c0, p0) = put(None, None, 3).await;
    for (task, path, nodes) in [
        ("task-b", "", &["b"][..]),
        ("task-a", "", &["a1", "a2"][..]),
        ("task-0", "~1", &["z"][..]),
    ] {
        let writes = nodes.iter().map(|n| (TASKS.to_owned(), send(n))).collect();
        s.put_writes(&c0, writes, task, PutWritesOptions::new().task_path(path))
            .await
            .unwrap();
    }
    let (c1, p1) = put(Some(c0.clone()), Some(p0.clone()), 3).await;
    let mut expected = Vec::new();
    expected.push(0x94); // a MessagePack array of 4
    for n in ["a1", "a2", "b", "z"] {
        expected.extend_from_slice(&send(n).bytes);
    }
    let t = s.get_tuple(&c1).await.unwrap().unwrap();
    assert_eq!(
        t.checkpoint.channel_values[TASKS].bytes.as_ref(),
        &expected[..]
    );
    assert_eq!(
        t.checkpoint.channel_versions[TASKS],
        p1.channel_versions.values().max().cloned().unwrap()
    );
    assert_eq!(t.checkpoint.channel_values["x"], val(json!(1)));
    // The same through list; the first checkpoint (no parent) is read as stored.
    let all = s.list_all(ListOptions::thread("legacy")).await.unwrap();
    assert_eq!(all[0].checkpoint, t.checkpoint);
    assert!(!all[1].checkpoint.channel_values.contains_key(TASKS));
    assert_eq!(all[1].checkpoint.channel_versions, p0.channel_versions);
    // Format 4: the sends are pending writes and stay so.
    let (c2, _) = put(Some(c0.clone()), Some(p0), 4).await;
    let t = s.get_tuple(&c2).await.unwrap().unwrap();
    assert!(!t.checkpoint.channel_values.contains_key(TASKS));
    assert!(!t.checkpoint.channel_versions.contains_key(TASKS));
    let _ = c1;
}
