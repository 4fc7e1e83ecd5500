//! Guarantees beyond LangGraph's contract: compare-and-set, concurrency, nested subgraphs,
//! interrupts, and model-based checking.

use std::sync::Arc;

use checkpoint_core::{
    Checkpoint, CheckpointMetadata, Error, ListOptions, PutOptions, PutWritesOptions, Saver,
};
use serde_json::json;

use crate::fixtures::{cfg, ids, list, put_chain, step, val};
use crate::{SaverFactory, build};

fn cas() -> PutOptions {
    PutOptions::compare_and_set()
}

/// When compare-and-set is not advertised, a compare-and-set put must say so.
async fn cas_unsupported(s: &dyn Saver) -> bool {
    if s.capabilities().compare_and_set {
        return false;
    }
    let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
    let r = s
        .put(&cfg("t", ""), c, CheckpointMetadata::new(), v, cas())
        .await;
    assert!(
        matches!(r, Err(Error::Unsupported { .. })),
        "compare-and-set not advertised: {r:?}"
    );
    true
}

/// A compare-and-set put without parent succeeds only on an empty namespace.
pub async fn cas_first_put_requires_empty_namespace(f: &dyn SaverFactory) {
    let s = build(f).await;
    if cas_unsupported(&*s).await {
        return;
    }
    let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
    let first = s
        .put(
            &cfg("t1", ""),
            c.clone(),
            CheckpointMetadata::new(),
            v.clone(),
            cas(),
        )
        .await
        .unwrap();
    let (c2, v2) = step(None, &[("a", Some(val(json!(2))))]);
    let r = s
        .put(
            &cfg("t1", ""),
            c2.clone(),
            CheckpointMetadata::new(),
            v2.clone(),
            cas(),
        )
        .await;
    match r {
        Err(Error::Conflict {
            thread_id,
            checkpoint_ns,
            expected,
            found,
        }) => {
            assert_eq!((thread_id.as_str(), checkpoint_ns.as_str()), ("t1", ""));
            assert_eq!(expected, None);
            assert_eq!(found.as_deref(), Some(c.id.as_str()));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Another namespace of the same thread is a separate head.
    s.put(
        &cfg("t1", "child:1"),
        c2,
        CheckpointMetadata::new(),
        v2,
        cas(),
    )
    .await
    .unwrap();
    // Continuing from the head succeeds.
    let (c3, v3) = step(Some(&c), &[("a", Some(val(json!(3))))]);
    s.put(&first, c3, CheckpointMetadata::new(), v3, cas())
        .await
        .unwrap();
}

/// N concurrent compare-and-set puts on the same parent: exactly one wins, the others get
/// `Conflict`, and the history stays linear.
pub async fn cas_concurrent_puts_exactly_one_wins(f: &dyn SaverFactory) {
    let s = build(f).await;
    if cas_unsupported(&*s).await {
        return;
    }
    let base = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    for round in 0..5 {
        let head = s.get_tuple(&cfg("t1", "")).await.unwrap().unwrap();
        let racers: Vec<(Checkpoint, _)> = (0..16)
            .map(|i| {
                step(
                    Some(&head.checkpoint),
                    &[("counter", Some(val(json!(format!("r{round}-{i}")))))],
                )
            })
            .collect();
        let tasks: Vec<_> = racers
            .into_iter()
            .map(|(c, v)| {
                let s = Arc::clone(&s);
                let parent = head.config.clone();
                tokio::spawn(
                    async move { s.put(&parent, c, CheckpointMetadata::new(), v, cas()).await },
                )
            })
            .collect();
        let mut wins = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => wins += 1,
                Err(Error::Conflict { expected, .. }) => {
                    assert_eq!(expected.as_deref(), Some(head.checkpoint.id.as_str()));
                }
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(
            wins, 1,
            "round {round}: exactly one compare-and-set put must win"
        );
    }
    // Linear history: every checkpoint's parent is the previous one.
    let all = list(&*s, ListOptions::thread("t1")).await;
    assert_eq!(all.len(), base.len() + 5);
    for w in all.windows(2) {
        assert_eq!(
            w[0].parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.clone()),
            Some(w[1].checkpoint.id.clone()),
            "history forked"
        );
    }
}

/// Repeating a successful compare-and-set put (same id, same parent), as a client does after
/// a lost acknowledgement, succeeds again and changes nothing.
pub async fn cas_retry_of_winner_succeeds(f: &dyn SaverFactory) {
    let s = build(f).await;
    if cas_unsupported(&*s).await {
        return;
    }
    let base = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    let (c, v) = step(
        Some(&base[0].checkpoint),
        &[("counter", Some(val(json!(1))))],
    );
    let a = s
        .put(
            &base[0].config,
            c.clone(),
            CheckpointMetadata::new(),
            v.clone(),
            cas(),
        )
        .await
        .unwrap();
    let snapshot = list(&*s, ListOptions::new()).await;
    let b = s
        .put(
            &base[0].config,
            c.clone(),
            CheckpointMetadata::new(),
            v.clone(),
            cas(),
        )
        .await
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(list(&*s, ListOptions::new()).await, snapshot);
    // The same id under a different parent is not a retry.
    let r = s
        .put(&cfg("t1", ""), c, CheckpointMetadata::new(), v, cas())
        .await;
    assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
}

/// A losing compare-and-set put writes nothing: no checkpoint, no values.
pub async fn cas_conflict_writes_nothing(f: &dyn SaverFactory) {
    let s = build(f).await;
    if cas_unsupported(&*s).await {
        return;
    }
    let chain = put_chain(&*s, "t1", "", 3, "r").await.unwrap();
    let before = list(&*s, ListOptions::new()).await;
    let (c, v) = step(
        Some(&chain[0].checkpoint),
        &[("static", Some(val(json!("SHOULD NOT EXIST"))))],
    );
    let r = s
        .put(
            &chain[0].config,
            c.clone(),
            CheckpointMetadata::new(),
            v,
            cas(),
        )
        .await;
    assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
    assert_eq!(list(&*s, ListOptions::new()).await, before);
    assert!(
        s.get_tuple(&cfg("t1", "").with_checkpoint_id(&c.id))
            .await
            .unwrap()
            .is_none()
    );
}

/// Concurrent writers on different threads never see each other's data.
pub async fn concurrent_writers_on_different_threads_are_isolated(f: &dyn SaverFactory) {
    let s = build(f).await;
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let thread = format!("writer-{w}");
                let chain = put_chain(&*s, &thread, "", 15, &thread).await.unwrap();
                for p in &chain {
                    s.put_writes(
                        &p.config,
                        vec![("w".into(), val(json!(w)))],
                        "task",
                        PutWritesOptions::new(),
                    )
                    .await
                    .unwrap();
                }
                chain
            })
        })
        .collect();
    let mut chains = Vec::new();
    for t in tasks {
        chains.push(t.await.unwrap());
    }
    for (w, chain) in chains.iter().enumerate() {
        let thread = format!("writer-{w}");
        let got = list(&*s, ListOptions::thread(&thread)).await;
        let want: Vec<String> = chain
            .iter()
            .rev()
            .map(|p| p.checkpoint.id.clone())
            .collect();
        assert_eq!(ids(&got), want);
        for t in &got {
            assert_eq!(t.metadata.run_id(), Some(thread.as_str()));
            assert_eq!(t.pending_writes.len(), 1);
            assert_eq!(t.pending_writes[0].value, val(json!(w)));
        }
    }
    assert_eq!(list(&*s, ListOptions::new()).await.len(), 8 * 15);
}

/// Reads racing with writes only ever see complete checkpoints and whole `put_writes` calls.
pub async fn concurrent_put_writes_and_reads_are_consistent(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    let config = chain[0].config.clone();
    let first = chain[0].clone();
    let writer = {
        let s = Arc::clone(&s);
        let config = config.clone();
        tokio::spawn(async move {
            let mut prev = first;
            for i in 0..40 {
                let writes = (0..5).map(|k| (format!("c{k}"), val(json!(i)))).collect();
                s.put_writes(
                    &config,
                    writes,
                    &format!("task-{i:03}"),
                    PutWritesOptions::new(),
                )
                .await
                .unwrap();
                let (c, v) = step(
                    Some(&prev.checkpoint),
                    &[
                        ("counter", Some(val(json!(i)))),
                        ("extra", Some(val(json!(i)))),
                    ],
                );
                let cfg2 = s
                    .put(
                        &prev.config,
                        c.clone(),
                        CheckpointMetadata::new(),
                        v,
                        PutOptions::new(),
                    )
                    .await
                    .unwrap();
                prev = crate::fixtures::Put {
                    config: cfg2,
                    checkpoint: c,
                    metadata: CheckpointMetadata::new(),
                };
            }
        })
    };
    let reader = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            for _ in 0..200 {
                let t = s.get_tuple(&config).await.unwrap().unwrap();
                assert_eq!(
                    t.pending_writes.len() % 5,
                    0,
                    "a put_writes call was seen half-applied"
                );
                if let Some(latest) = s.get_tuple(&cfg("t1", "")).await.unwrap() {
                    let values = &latest.checkpoint.channel_values;
                    assert_eq!(
                        values.len(),
                        latest.checkpoint.channel_versions.len(),
                        "a checkpoint was seen without all its values"
                    );
                }
                tokio::task::yield_now().await;
            }
        })
    };
    writer.await.unwrap();
    reader.await.unwrap();
    assert_eq!(
        s.get_tuple(&chain[0].config)
            .await
            .unwrap()
            .unwrap()
            .pending_writes
            .len(),
        200
    );
}

/// Random sequences of operations give the same results as the in-memory reference after
/// every step (see [`crate::model`]).
pub async fn model_based_random_operations_match_reference(f: &dyn SaverFactory) {
    crate::model::check_against_model(f, 48)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Seed 001: a worker subgraph nested in a parent graph asks a human. Its state lives in its
/// own namespace (`<node>:<task_id>`, nested levels joined by `|`), linked to the parent's
/// checkpoint through `metadata.parents`; resuming reads the worker's own latest checkpoint
/// with its pending interrupt, so the worker continues instead of restarting.
pub async fn subgraph_interrupt_resumes_in_its_namespace(f: &dyn SaverFactory) {
    use checkpoint_core::writes::{INTERRUPT, RESUME};
    use checkpoint_core::{Source, child_namespace, namespace_levels};
    let s = build(f).await;
    let parent = put_chain(&*s, "case-7", "", 2, "run-1").await.unwrap();
    let parent_head = parent[1].clone();
    let worker_ns = child_namespace("", "hr_worker", "task-9");
    let agent_ns = child_namespace(&worker_ns, "react_agent", "task-10");
    assert_eq!(
        namespace_levels(&agent_ns),
        vec![("hr_worker", "task-9"), ("react_agent", "task-10")]
    );

    // The worker's agent runs three steps, then interrupts.
    let mut prev: Option<(checkpoint_core::CheckpointConfig, Checkpoint)> = None;
    for i in 0..3 {
        let (c, v) = step(
            prev.as_ref().map(|p| &p.1),
            &[("messages", Some(val(json!(format!("worker step {i}")))))],
        );
        let meta = CheckpointMetadata::for_step(Source::Loop, i).with_parents(
            [
                (String::new(), parent_head.checkpoint.id.clone()),
                (worker_ns.clone(), format!("w{i}")),
            ]
            .into(),
        );
        let parent_cfg = prev
            .as_ref()
            .map_or_else(|| cfg("case-7", &agent_ns), |p| p.0.clone());
        let config = s
            .put(&parent_cfg, c.clone(), meta, v, PutOptions::new())
            .await
            .unwrap();
        prev = Some((config, c));
    }
    let (paused_cfg, paused) = prev.unwrap();
    s.put_writes(
        &paused_cfg,
        vec![(INTERRUPT.into(), val(json!("confirm employee details?")))],
        "ask-human",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();

    // Resume: the parent's head is unchanged; the worker's namespace has the paused step.
    assert_eq!(
        s.get_tuple(&cfg("case-7", ""))
            .await
            .unwrap()
            .unwrap()
            .checkpoint
            .id,
        parent_head.checkpoint.id
    );
    let resumed = s
        .get_tuple(&cfg("case-7", &agent_ns))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        resumed.checkpoint.id, paused.id,
        "the worker must resume at its interrupt, not restart"
    );
    assert_eq!(
        resumed.metadata.parents().unwrap()[""],
        parent_head.checkpoint.id
    );
    let interrupt = resumed
        .pending_writes
        .iter()
        .find(|w| w.channel == INTERRUPT)
        .expect("pending interrupt");
    assert_eq!(interrupt.value, val(json!("confirm employee details?")));
    // Listing the thread shows both levels; the parent namespace alone shows only its own.
    let namespaces: std::collections::BTreeSet<String> = list(&*s, ListOptions::thread("case-7"))
        .await
        .into_iter()
        .map(|t| t.config.checkpoint_ns)
        .collect();
    assert_eq!(namespaces, [String::new(), agent_ns.clone()].into());
    assert_eq!(
        list(&*s, ListOptions::thread("case-7").namespace(""))
            .await
            .len(),
        2
    );

    // The human answers: the resume value is recorded, the worker continues from its state.
    s.put_writes(
        &resumed.config,
        vec![(RESUME.into(), val(json!("yes")))],
        "ask-human",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    let (c, v) = step(
        Some(&resumed.checkpoint),
        &[("messages", Some(val(json!("worker continues"))))],
    );
    let next = s
        .put(
            &resumed.config,
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let after = s
        .get_tuple(&cfg("case-7", &agent_ns))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.config, next);
    assert_eq!(after.parent_config.as_ref(), Some(&resumed.config));
    let answered = s.get_tuple(&resumed.config).await.unwrap().unwrap();
    assert_eq!(
        answered.pending_writes.len(),
        2,
        "interrupt and resume both recorded"
    );
}

/// Seed 003: a checkpoint and the interrupt recorded against it are readable as soon as the
/// calls return, before the runtime reports the interrupt to anyone, by every read path.
pub async fn interrupt_is_readable_as_soon_as_recorded(f: &dyn SaverFactory) {
    use checkpoint_core::writes::INTERRUPT;
    let s = build(f).await;
    let chain = put_chain(&*s, "order-1", "", 2, "run-1").await.unwrap();
    let (c, v) = step(
        Some(&chain[1].checkpoint),
        &[("state", Some(val(json!({"is_interrupt": true}))))],
    );
    let paused = s
        .put(
            &chain[1].config,
            c.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    s.put_writes(
        &paused,
        vec![(INTERRUPT.into(), val(json!({"node": "approve"})))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    // Every read path sees the paused state with its interrupt right away.
    let latest = s.get_tuple(&cfg("order-1", "")).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint, c);
    assert_eq!(latest.pending_writes.len(), 1);
    assert_eq!(latest.pending_writes[0].channel, INTERRUPT);
    let listed = list(&*s, ListOptions::thread("order-1").limit(1)).await;
    assert_eq!(listed, vec![latest.clone()]);
    assert_eq!(s.get_tuple(&paused).await.unwrap(), Some(latest));
}
