//! Clauses of `delete_thread` and the optional `copy_thread`, `prune`, `delete_for_runs`.

use checkpoint_core::{ListOptions, PruneStrategy, Saver};

use super::require_capability;
use crate::fixtures::{Put, addresses, cfg, ids, list, put_chain, put_two_writes};
use crate::{SaverFactory, build};

/// Two threads, each with a root and a child namespace, writes on every checkpoint.
async fn populate(s: &dyn Saver, threads: &[&str], n: usize) -> Vec<Put> {
    let mut all = Vec::new();
    for t in threads {
        for ns in ["", "child:1"] {
            let chain = put_chain(s, t, ns, n, &format!("run-{t}")).await.unwrap();
            for p in &chain {
                put_two_writes(s, &p.config, "task").await.unwrap();
            }
            all.extend(chain);
        }
    }
    all
}

fn thread_ids(s: &[Put], thread: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .iter()
        .filter(|p| p.config.thread_id == thread)
        .map(|p| p.checkpoint.id.clone())
        .collect();
    v.sort();
    v.reverse();
    v
}

/// `delete_thread` removes every namespace of the thread, with its writes.
pub async fn delete_thread_removes_all_namespaces_and_writes(f: &dyn SaverFactory) {
    let s = build(f).await;
    let puts = populate(&*s, &["t1"], 2).await;
    s.delete_thread("t1").await.unwrap();
    assert!(list(&*s, ListOptions::thread("t1")).await.is_empty());
    for ns in ["", "child:1"] {
        assert!(s.get_tuple(&cfg("t1", ns)).await.unwrap().is_none());
    }
    // Re-using the thread afterwards starts clean: no writes resurface on an old id.
    let p = &puts[0];
    s.put(
        &cfg("t1", ""),
        p.checkpoint.clone(),
        p.metadata.clone(),
        p.checkpoint.channel_versions.clone(),
        Default::default(),
    )
    .await
    .unwrap();
    let t = s.get_tuple(&p.config).await.unwrap().unwrap();
    assert!(
        t.pending_writes.is_empty(),
        "writes must be deleted with the thread"
    );
}

/// `delete_thread` leaves other threads untouched, including threads whose id shares a prefix.
pub async fn delete_thread_leaves_other_threads(f: &dyn SaverFactory) {
    let s = build(f).await;
    populate(&*s, &["t1", "t10", "t"], 2).await;
    let before_t10 = list(&*s, ListOptions::thread("t10")).await;
    let before_t = list(&*s, ListOptions::thread("t")).await;
    s.delete_thread("t1").await.unwrap();
    assert_eq!(list(&*s, ListOptions::thread("t10")).await, before_t10);
    assert_eq!(list(&*s, ListOptions::thread("t")).await, before_t);
}

/// Deleting an unknown thread is a no-op.
pub async fn delete_thread_unknown_is_noop(f: &dyn SaverFactory) {
    let s = build(f).await;
    populate(&*s, &["t1"], 1).await;
    let before = list(&*s, ListOptions::new()).await;
    s.delete_thread("unknown").await.unwrap();
    s.delete_thread("").await.unwrap();
    assert_eq!(list(&*s, ListOptions::new()).await, before);
}

/// `copy_thread` copies every namespace with the same ids, order, parents, metadata,
/// values and pending writes.
pub async fn copy_thread_copies_everything(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, copy_thread, s.copy_thread("a", "b"));
    populate(&*s, &["src"], 3).await;
    s.copy_thread("src", "dst").await.unwrap();
    let src = list(&*s, ListOptions::thread("src")).await;
    let dst = list(&*s, ListOptions::thread("dst")).await;
    assert_eq!(ids(&dst), ids(&src));
    for (a, b) in src.iter().zip(&dst) {
        assert_eq!(b.config.thread_id, "dst");
        assert_eq!(a.config.checkpoint_ns, b.config.checkpoint_ns);
        assert_eq!(a.checkpoint, b.checkpoint);
        assert_eq!(a.metadata, b.metadata);
        assert_eq!(a.pending_writes, b.pending_writes);
        assert_eq!(
            a.parent_config.as_ref().map(|p| p.checkpoint_id.clone()),
            b.parent_config.as_ref().map(|p| p.checkpoint_id.clone())
        );
        if let Some(p) = &b.parent_config {
            assert_eq!(p.thread_id, "dst");
        }
    }
    assert_eq!(
        s.get_tuple(&cfg("dst", "child:1"))
            .await
            .unwrap()
            .unwrap()
            .checkpoint,
        s.get_tuple(&cfg("src", "child:1"))
            .await
            .unwrap()
            .unwrap()
            .checkpoint
    );
}

/// The source and other threads are unchanged by a copy.
pub async fn copy_thread_leaves_source_and_other_threads(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, copy_thread, s.copy_thread("a", "b"));
    populate(&*s, &["src", "other"], 2).await;
    let src = list(&*s, ListOptions::thread("src")).await;
    let other = list(&*s, ListOptions::thread("other")).await;
    s.copy_thread("src", "dst").await.unwrap();
    assert_eq!(list(&*s, ListOptions::thread("src")).await, src);
    assert_eq!(list(&*s, ListOptions::thread("other")).await, other);
    // Deleting the copy leaves the source intact.
    s.delete_thread("dst").await.unwrap();
    assert_eq!(list(&*s, ListOptions::thread("src")).await, src);
}

/// Unknown or empty source, or source equal to target, is a no-op; an empty target is rejected.
pub async fn copy_thread_noops(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, copy_thread, s.copy_thread("a", "b"));
    populate(&*s, &["t1"], 2).await;
    let before = list(&*s, ListOptions::new()).await;
    s.copy_thread("unknown", "t2").await.unwrap();
    s.copy_thread("t1", "t1").await.unwrap();
    s.copy_thread("", "t2").await.unwrap();
    let r = s.copy_thread("t1", "").await;
    assert!(
        matches!(r, Err(checkpoint_core::Error::InvalidInput { .. })),
        "empty target: {r:?}"
    );
    assert_eq!(list(&*s, ListOptions::new()).await, before);
}

/// Repeating a copy changes nothing; existing target entries are kept.
pub async fn copy_thread_is_repeatable(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, copy_thread, s.copy_thread("a", "b"));
    populate(&*s, &["src"], 2).await;
    let own = put_chain(&*s, "dst", "", 1, "own").await.unwrap();
    s.copy_thread("src", "dst").await.unwrap();
    let once = list(&*s, ListOptions::thread("dst")).await;
    s.copy_thread("src", "dst").await.unwrap();
    assert_eq!(list(&*s, ListOptions::thread("dst")).await, once);
    assert_eq!(once.len(), 5);
    assert!(ids(&once).contains(&own[0].checkpoint.id));
}

/// `KeepLatest` keeps the latest checkpoint of each namespace, loading exactly as before
/// (values stored by pruned checkpoints included), with its writes.
pub async fn prune_keep_latest(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, prune, s.prune(&["t".into()], PruneStrategy::KeepLatest));
    populate(&*s, &["t1"], 4).await;
    let latest_root = s.get_tuple(&cfg("t1", "")).await.unwrap().unwrap();
    let latest_child = s.get_tuple(&cfg("t1", "child:1")).await.unwrap().unwrap();
    s.prune(&["t1".into()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    let left = list(&*s, ListOptions::thread("t1")).await;
    assert_eq!(left.len(), 2);
    assert_eq!(
        s.get_tuple(&cfg("t1", "")).await.unwrap().unwrap(),
        latest_root
    );
    assert_eq!(
        s.get_tuple(&cfg("t1", "child:1")).await.unwrap().unwrap(),
        latest_child
    );
    assert!(
        latest_root.checkpoint.channel_values.contains_key("static"),
        "value stored at step 0 must survive"
    );
}

/// `KeepLast(n)` keeps the latest `n` of each namespace.
pub async fn prune_keep_last_n(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, prune, s.prune(&["t".into()], PruneStrategy::KeepLast(2)));
    populate(&*s, &["t1"], 5).await;
    let all = list(&*s, ListOptions::thread("t1")).await;
    let keep: Vec<_> = ["", "child:1"]
        .iter()
        .flat_map(|ns| {
            all.iter()
                .filter(move |t| t.config.checkpoint_ns == *ns)
                .take(2)
                .cloned()
        })
        .collect();
    s.prune(&["t1".into()], PruneStrategy::KeepLast(2))
        .await
        .unwrap();
    let left = list(&*s, ListOptions::thread("t1")).await;
    assert_eq!(left.len(), 4);
    for t in keep {
        assert_eq!(s.get_tuple(&t.config).await.unwrap(), Some(t));
    }
    s.prune(&["t1".into()], PruneStrategy::KeepLast(0))
        .await
        .unwrap();
    assert!(list(&*s, ListOptions::thread("t1")).await.is_empty());
}

/// `DeleteAll` removes every checkpoint of the listed threads.
pub async fn prune_delete_all(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, prune, s.prune(&["t".into()], PruneStrategy::DeleteAll));
    populate(&*s, &["t1", "t2", "t3"], 2).await;
    s.prune(&["t1".into(), "t2".into()], PruneStrategy::DeleteAll)
        .await
        .unwrap();
    assert!(list(&*s, ListOptions::thread("t1")).await.is_empty());
    assert!(list(&*s, ListOptions::thread("t2")).await.is_empty());
    assert_eq!(list(&*s, ListOptions::thread("t3")).await.len(), 4);
}

/// Prune leaves unlisted threads alone; an empty list and unknown (or empty) thread ids are
/// no-ops.
pub async fn prune_isolation_and_noops(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, prune, s.prune(&[], PruneStrategy::KeepLatest));
    populate(&*s, &["t1", "t2"], 3).await;
    let t2 = list(&*s, ListOptions::thread("t2")).await;
    let before = list(&*s, ListOptions::new()).await;
    s.prune(&[], PruneStrategy::DeleteAll).await.unwrap();
    s.prune(&["unknown".into()], PruneStrategy::DeleteAll)
        .await
        .unwrap();
    assert_eq!(list(&*s, ListOptions::new()).await, before);
    s.prune(&["t1".into()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(list(&*s, ListOptions::thread("t2")).await, t2);
}

/// `delete_for_runs` removes the checkpoints of the listed runs, across threads and
/// namespaces, with their writes; others stay.
pub async fn delete_for_runs_removes_matching(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, delete_for_runs, s.delete_for_runs(&["r".into()]));
    let puts = populate(&*s, &["t1", "t2", "t3"], 2).await;
    s.delete_for_runs(&["run-t1".into(), "run-t3".into()])
        .await
        .unwrap();
    let left = list(&*s, ListOptions::new()).await;
    assert_eq!(ids(&left), thread_ids(&puts, "t2"));
    assert!(left.iter().all(|t| t.pending_writes.len() == 2));
    assert!(s.get_tuple(&cfg("t1", "child:1")).await.unwrap().is_none());
}

/// An empty run list, or unknown runs, delete nothing.
pub async fn delete_for_runs_noops(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, delete_for_runs, s.delete_for_runs(&[]));
    populate(&*s, &["t1"], 2).await;
    let before = list(&*s, ListOptions::new()).await;
    s.delete_for_runs(&[]).await.unwrap();
    s.delete_for_runs(&["unknown".into(), "run-t".into(), String::new()])
        .await
        .unwrap();
    assert_eq!(
        addresses(&list(&*s, ListOptions::new()).await),
        addresses(&before)
    );
}

/// The source of the `import` clauses: two threads (a root and a child namespace each)
/// written to an [`InMemorySaver`](checkpoint_core::InMemorySaver) with a removed channel,
/// `null` and bytes values, and pending writes of several tasks and paths whose indexes have
/// gaps (LangGraph's mixed calls) and include special channels; returned as read back,
/// oldest first per namespace.
async fn import_source() -> Vec<checkpoint_core::CheckpointTuple> {
    use checkpoint_core::writes::{INTERRUPT, RESUME};
    use checkpoint_core::{
        CheckpointMetadata, InMemorySaver, PutOptions, PutWritesOptions, Source, TypedValue,
    };
    use serde_json::json;

    use crate::fixtures::{step, val};

    let source = InMemorySaver::new();
    for thread in ["imp-1", "imp-ü"] {
        for ns in ["", "child:1"] {
            let mut last: Option<(
                checkpoint_core::CheckpointConfig,
                checkpoint_core::Checkpoint,
            )> = None;
            for i in 0..4i64 {
                let changes: Vec<(&str, Option<TypedValue>)> = match i {
                    0 => vec![
                        ("messages", Some(val(json!(["hi"])))),
                        ("blob", Some(TypedValue::from_bytes(vec![0u8, 255, 7]))),
                        ("nothing", Some(TypedValue::null())),
                    ],
                    1 => vec![
                        ("messages", Some(val(json!(["hi", "there"])))),
                        ("blob", None),
                    ],
                    _ => vec![("counter", Some(val(json!(i))))],
                };
                let (checkpoint, versions) = step(last.as_ref().map(|l| &l.1), &changes);
                let at = match &last {
                    Some((c, _)) => c.clone(),
                    None => cfg(thread, ns),
                };
                let metadata = CheckpointMetadata::for_step(Source::Loop, i)
                    .with("thread", thread)
                    .with("nested", json!({"a": [1, 2.5, null]}));
                let stored = source
                    .put(
                        &at,
                        checkpoint.clone(),
                        metadata,
                        versions,
                        PutOptions::new(),
                    )
                    .await
                    .unwrap();
                // A mixed call (regular indexes 1 and 2, RESUME at its fixed index), a
                // second task under a path, and an interrupt.
                source
                    .put_writes(
                        &stored,
                        vec![
                            (RESUME.into(), val(json!("yes"))),
                            ("messages".into(), val(json!(["w"]))),
                            ("counter".into(), val(json!(i))),
                        ],
                        "task-a",
                        PutWritesOptions::new().task_path("~a"),
                    )
                    .await
                    .unwrap();
                source
                    .put_writes(
                        &stored,
                        vec![("other".into(), TypedValue::from_bytes(vec![1u8]))],
                        "task-b",
                        PutWritesOptions::new(),
                    )
                    .await
                    .unwrap();
                if i == 3 {
                    source
                        .put_writes(
                            &stored,
                            vec![(INTERRUPT.into(), val(json!({"question": "ok?"})))],
                            "task-b",
                            PutWritesOptions::new(),
                        )
                        .await
                        .unwrap();
                }
                last = Some((stored, checkpoint));
            }
        }
    }
    let mut tuples = list(&source, ListOptions::new()).await;
    tuples.sort_by(|a, b| {
        (
            &a.config.thread_id,
            &a.config.checkpoint_ns,
            &a.checkpoint.id,
        )
            .cmp(&(
                &b.config.thread_id,
                &b.config.checkpoint_ns,
                &b.checkpoint.id,
            ))
    });
    tuples
}

/// `import` stores tuples read from another store exactly: ids, parents, checkpoints
/// (removed channels, `null` and bytes values), metadata, and pending writes with their
/// tasks, paths, indexes (gaps included) and special channels; importing again changes
/// nothing; an empty import is a no-op.
pub async fn import_stores_tuples_exactly(f: &dyn SaverFactory) {
    let s = build(f).await;
    let source = import_source().await;
    assert_eq!(source.len(), 16);
    s.import(Vec::new()).await.unwrap();
    assert!(list(&*s, ListOptions::new()).await.is_empty());
    s.import(source.clone()).await.unwrap();
    let read_back = |tuples: Vec<checkpoint_core::CheckpointTuple>| {
        let mut tuples = tuples;
        tuples.sort_by(|a, b| {
            (
                &a.config.thread_id,
                &a.config.checkpoint_ns,
                &a.checkpoint.id,
            )
                .cmp(&(
                    &b.config.thread_id,
                    &b.config.checkpoint_ns,
                    &b.checkpoint.id,
                ))
        });
        tuples
    };
    let got = read_back(list(&*s, ListOptions::new()).await);
    assert_eq!(got.len(), source.len());
    for (ours, theirs) in got.iter().zip(&source) {
        assert_eq!(ours.config, theirs.config);
        assert_eq!(
            ours.parent_config, theirs.parent_config,
            "{:?}",
            ours.config
        );
        assert_eq!(ours.checkpoint, theirs.checkpoint, "{:?}", ours.config);
        assert_eq!(ours.metadata, theirs.metadata, "{:?}", ours.config);
        assert_eq!(
            ours.pending_writes, theirs.pending_writes,
            "{:?}",
            ours.config
        );
    }
    s.import(source.clone()).await.unwrap();
    assert_eq!(read_back(list(&*s, ListOptions::new()).await), got);
}

/// `import` over what is stored keeps what `put` and `put_writes` keep: a checkpoint at an
/// existing address is replaced (metadata), a value at an existing version is kept, a
/// regular write at an existing `(task, idx)` is kept, a special-channel write is replaced.
pub async fn import_over_stored_data_keeps_what_put_keeps(f: &dyn SaverFactory) {
    use checkpoint_core::writes::RESUME;
    use serde_json::json;

    use crate::fixtures::val;

    let s = build(f).await;
    let source = import_source().await;
    s.import(source.clone()).await.unwrap();
    let mut changed = source[0].clone();
    changed.metadata = changed.metadata.with("changed", true);
    let first_value = changed.checkpoint.channel_values["messages"].clone();
    changed
        .checkpoint
        .channel_values
        .insert("messages".into(), val(json!(["not", "stored"])));
    for w in &mut changed.pending_writes {
        w.value = val(json!(format!("new {}", w.channel)));
    }
    s.import(vec![changed.clone()]).await.unwrap();
    let got = s.get_tuple(&changed.config).await.unwrap().unwrap();
    assert_eq!(got.metadata, changed.metadata);
    assert_eq!(got.checkpoint.channel_values["messages"], first_value);
    for (ours, before) in got.pending_writes.iter().zip(&source[0].pending_writes) {
        assert_eq!((&ours.task_id, ours.idx), (&before.task_id, before.idx));
        if ours.channel == RESUME {
            assert_eq!(ours.value, val(json!("new __resume__")));
        } else {
            assert_eq!(ours.value, before.value, "{}", ours.channel);
        }
    }
    assert_eq!(got.pending_writes.len(), source[0].pending_writes.len());
}
