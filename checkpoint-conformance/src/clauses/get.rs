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
