//! Clauses of `Saver::put_writes`.

use checkpoint_core::writes::{ERROR, INTERRUPT, RESUME, SCHEDULED};
use checkpoint_core::{CheckpointConfig, Error, PendingWrite, PutWritesOptions, TypedValue};
use serde_json::json;

use crate::fixtures::{cfg, put_chain, val};
use crate::{SaverFactory, build};

fn w(channel: &str, v: serde_json::Value) -> (String, TypedValue) {
    (channel.to_owned(), val(v))
}

fn pw(task: &str, channel: &str, v: serde_json::Value, idx: i64, path: &str) -> PendingWrite {
    PendingWrite {
        task_id: task.into(),
        channel: channel.into(),
        value: val(v),
        idx,
        task_path: path.into(),
    }
}

async fn writes_of(s: &dyn checkpoint_core::Saver, config: &CheckpointConfig) -> Vec<PendingWrite> {
    s.get_tuple(config)
        .await
        .unwrap()
        .expect("checkpoint")
        .pending_writes
}

/// One write, then a call with several writes, read back with their indexes.
pub async fn put_writes_one_and_many(f: &dyn SaverFactory) {
    let s = build(f).await;
    let c = put_chain(&*s, "t1", "", 1, "r")
        .await
        .unwrap()
        .remove(0)
        .config;
    s.put_writes(&c, vec![w("a", json!(1))], "t-one", PutWritesOptions::new())
        .await
        .unwrap();
    s.put_writes(
        &c,
        vec![w("x", json!("x0")), w("y", json!([1])), w("x", json!("x2"))],
        "t-many",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        writes_of(&*s, &c).await,
        vec![
            pw("t-many", "x", json!("x0"), 0, ""),
            pw("t-many", "y", json!([1]), 1, ""),
            pw("t-many", "x", json!("x2"), 2, ""),
            pw("t-one", "a", json!(1), 0, ""),
        ]
    );
}

/// Writes of many tasks come back ordered by `(task_path, task_id, idx)`.
pub async fn put_writes_many_tasks_ordered(f: &dyn SaverFactory) {
    let s = build(f).await;
    let c = put_chain(&*s, "t1", "", 1, "r")
        .await
        .unwrap()
        .remove(0)
        .config;
    for (task, path) in [
        ("task-c", "~0"),
        ("task-a", "~1"),
        ("task-b", "~0"),
        ("task-d", ""),
    ] {
        s.put_writes(
            &c,
            vec![w("ch", json!(task)), w("ch2", json!(path))],
            task,
            PutWritesOptions::new().task_path(path),
        )
        .await
        .unwrap();
    }
    let got: Vec<(String, i64, String)> = writes_of(&*s, &c)
        .await
        .into_iter()
        .map(|p| (p.task_id, p.idx, p.task_path))
        .collect();
    let want: Vec<(String, i64, String)> = [
        ("task-d", 0, ""),
        ("task-d", 1, ""),
        ("task-b", 0, "~0"),
        ("task-b", 1, "~0"),
        ("task-c", 0, "~0"),
        ("task-c", 1, "~0"),
        ("task-a", 0, "~1"),
        ("task-a", 1, "~1"),
    ]
    .into_iter()
    .map(|(t, i, p)| (t.to_owned(), i, p.to_owned()))
    .collect();
    assert_eq!(got, want);
}

/// Task id, channel, value (any kind) and task path are preserved exactly.
pub async fn put_writes_preserves_fields(f: &dyn SaverFactory) {
    let s = build(f).await;
    let c = put_chain(&*s, "t1", "", 1, "r")
        .await
        .unwrap()
        .remove(0)
        .config;
    let values = vec![
        (
            "bytes".to_owned(),
            TypedValue::from_bytes(vec![0u8, 1, 2, 255]),
        ),
        ("null".to_owned(), TypedValue::null()),
        ("unicode ✓".to_owned(), val(json!("ünïcødé 🙂"))),
        (
            "json".to_owned(),
            TypedValue::json(&json!({"k": [1, 2]})).unwrap(),
        ),
    ];
    let task = "00000000-0000-4000-8000-000000000000";
    let path = "~__pregel_pull, agent|~__pregel_push, 0";
    s.put_writes(
        &c,
        values.clone(),
        task,
        PutWritesOptions::new().task_path(path),
    )
    .await
    .unwrap();
    let got = writes_of(&*s, &c).await;
    assert_eq!(got.len(), values.len());
    for (i, (channel, value)) in values.into_iter().enumerate() {
        assert_eq!(
            got[i],
            PendingWrite {
                task_id: task.into(),
                channel,
                value,
                idx: i as i64,
                task_path: path.into()
            }
        );
    }
}

/// Repeating a call, or writing other values at the same `(task, idx)`, keeps the first write.
pub async fn put_writes_repeat_is_idempotent(f: &dyn SaverFactory) {
    let s = build(f).await;
    let c = put_chain(&*s, "t1", "", 1, "r")
        .await
        .unwrap()
        .remove(0)
        .config;
    let first = vec![w("a", json!(1)), w("b", json!(2))];
    s.put_writes(&c, first.clone(), "task", PutWritesOptions::new())
        .await
        .unwrap();
    s.put_writes(&c, first, "task", PutWritesOptions::new())
        .await
        .unwrap();
    s.put_writes(
        &c,
        vec![w("a", json!("changed"))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        writes_of(&*s, &c).await,
        vec![
            pw("task", "a", json!(1), 0, ""),
            pw("task", "b", json!(2), 1, "")
        ]
    );
}

/// Special channels have fixed indexes; a call made only of special writes replaces them.
pub async fn put_writes_special_channels_replace(f: &dyn SaverFactory) {
    let s = build(f).await;
    let c = put_chain(&*s, "t1", "", 1, "r")
        .await
        .unwrap()
        .remove(0)
        .config;
    s.put_writes(
        &c,
        vec![
            w(ERROR, json!("e1")),
            w(SCHEDULED, json!("s1")),
            w(INTERRUPT, json!("i1")),
            w(RESUME, json!("r1")),
        ],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        writes_of(&*s, &c).await,
        vec![
            pw("task", RESUME, json!("r1"), -4, ""),
            pw("task", INTERRUPT, json!("i1"), -3, ""),
            pw("task", SCHEDULED, json!("s1"), -2, ""),
            pw("task", ERROR, json!("e1"), -1, ""),
        ]
    );
    s.put_writes(
        &c,
        vec![w(ERROR, json!("e2")), w(RESUME, json!("r2"))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        writes_of(&*s, &c).await,
        vec![
            pw("task", RESUME, json!("r2"), -4, ""),
            pw("task", INTERRUPT, json!("i1"), -3, ""),
            pw("task", SCHEDULED, json!("s1"), -2, ""),
            pw("task", ERROR, json!("e2"), -1, ""),
        ]
    );
}

/// A call mixing special and ordinary writes keeps existing writes, special ones included.
pub async fn put_writes_mixed_call_keeps_first(f: &dyn SaverFactory) {
    let s = build(f).await;
    let c = put_chain(&*s, "t1", "", 1, "r")
        .await
        .unwrap()
        .remove(0)
        .config;
    s.put_writes(
        &c,
        vec![w(INTERRUPT, json!("i1"))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    s.put_writes(
        &c,
        vec![w("a", json!(1)), w(INTERRUPT, json!("i2"))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        writes_of(&*s, &c).await,
        vec![
            pw("task", INTERRUPT, json!("i1"), -3, ""),
            pw("task", "a", json!(1), 0, "")
        ]
    );
}

/// Writes recorded in one namespace (or thread) are invisible in others with the same id.
pub async fn put_writes_namespaces_isolated(f: &dyn SaverFactory) {
    let s = build(f).await;
    let root = put_chain(&*s, "t1", "", 1, "r").await.unwrap().remove(0);
    // The same checkpoint id in a child namespace and another thread.
    for (thread, ns) in [("t1", "child:1"), ("t2", "")] {
        s.put(
            &cfg(thread, ns),
            root.checkpoint.clone(),
            root.metadata.clone(),
            root.checkpoint.channel_versions.clone(),
            Default::default(),
        )
        .await
        .unwrap();
    }
    s.put_writes(
        &root.config,
        vec![w("a", json!("root"))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    let child = cfg("t1", "child:1").with_checkpoint_id(&root.checkpoint.id);
    s.put_writes(
        &child,
        vec![w("a", json!("child"))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    assert_eq!(
        writes_of(&*s, &root.config).await,
        vec![pw("task", "a", json!("root"), 0, "")]
    );
    assert_eq!(
        writes_of(&*s, &child).await,
        vec![pw("task", "a", json!("child"), 0, "")]
    );
    let other = cfg("t2", "").with_checkpoint_id(&root.checkpoint.id);
    assert!(writes_of(&*s, &other).await.is_empty());
}

/// A new checkpoint starts with no pending writes, even when its parent has some.
pub async fn new_checkpoint_starts_without_pending_writes(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    crate::fixtures::put_two_writes(&*s, &chain[0].config, "task")
        .await
        .unwrap();
    let (c, v) = crate::fixtures::step(
        Some(&chain[0].checkpoint),
        &[("counter", Some(val(json!(5))))],
    );
    let next = s
        .put(
            &chain[0].config,
            c,
            Default::default(),
            v,
            Default::default(),
        )
        .await
        .unwrap();
    assert!(writes_of(&*s, &next).await.is_empty());
    assert_eq!(writes_of(&*s, &chain[0].config).await.len(), 2);
}

/// `put_writes` without thread id or checkpoint id is rejected.
pub async fn put_writes_requires_thread_and_checkpoint_id(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    let no_thread = CheckpointConfig::default().with_checkpoint_id(&chain[0].checkpoint.id);
    let no_id = cfg("t1", "");
    for config in [no_thread, no_id] {
        let r = s
            .put_writes(
                &config,
                vec![w("a", json!(1))],
                "task",
                PutWritesOptions::new(),
            )
            .await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{config:?}: {r:?}"
        );
    }
    assert!(writes_of(&*s, &chain[0].config).await.is_empty());
}

/// An empty `writes` is a no-op.
pub async fn put_writes_empty_is_noop(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    s.put_writes(&chain[0].config, vec![], "task", PutWritesOptions::new())
        .await
        .unwrap();
    assert!(writes_of(&*s, &chain[0].config).await.is_empty());
}
