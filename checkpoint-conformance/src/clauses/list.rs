//! Clauses of `Saver::list`.

use std::sync::Arc;

use checkpoint_core::{InMemorySaver, ListOptions, Saver};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::fixtures::{Put, addresses, filter, ids, list, put_chain, put_two_writes};
use crate::{SaverFactory, build};

fn rev_ids(chain: &[Put]) -> Vec<String> {
    chain
        .iter()
        .rev()
        .map(|p| p.checkpoint.id.clone())
        .collect()
}

/// By thread: every checkpoint of the thread, all namespaces, newest first.
pub async fn list_by_thread_newest_first(f: &dyn SaverFactory) {
    let s = build(f).await;
    let a = put_chain(&*s, "t1", "", 3, "r").await.unwrap();
    let b = put_chain(&*s, "t1", "child:1", 2, "r").await.unwrap();
    put_chain(&*s, "t2", "", 2, "r").await.unwrap();
    let got = list(&*s, ListOptions::thread("t1")).await;
    let mut want: Vec<String> = a
        .iter()
        .chain(&b)
        .map(|p| p.checkpoint.id.clone())
        .collect();
    want.sort();
    want.reverse();
    assert_eq!(ids(&got), want);
    for t in &got {
        assert_eq!(t.config.thread_id, "t1");
    }
}

/// By namespace: only that namespace, newest first, each tuple complete.
pub async fn list_by_namespace(f: &dyn SaverFactory) {
    let s = build(f).await;
    put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let child = put_chain(&*s, "t1", "child:1", 3, "r").await.unwrap();
    let got = list(&*s, ListOptions::thread("t1").namespace("child:1")).await;
    assert_eq!(ids(&got), rev_ids(&child));
    for (t, p) in got.iter().zip(child.iter().rev()) {
        assert_eq!(t.checkpoint, p.checkpoint);
        assert_eq!(t.metadata, p.metadata);
        assert_eq!(t.config, p.config);
    }
}

async fn filter_fixture(f: &dyn SaverFactory) -> (Arc<dyn Saver>, Vec<Put>) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 6, "run-1").await.unwrap();
    put_chain(&*s, "t2", "", 3, "run-2").await.unwrap();
    (s, chain)
}

/// A single-key filter (`source`).
pub async fn list_filter_single_key(f: &dyn SaverFactory) {
    let (s, chain) = filter_fixture(f).await;
    let got = list(&*s, ListOptions::thread("t1").filter("source", "input")).await;
    assert_eq!(ids(&got), vec![chain[0].checkpoint.id.clone()]);
    let got = list(&*s, ListOptions::thread("t1").filter("source", "loop")).await;
    assert_eq!(got.len(), 5);
}

/// A filter on `step`.
pub async fn list_filter_step(f: &dyn SaverFactory) {
    let (s, chain) = filter_fixture(f).await;
    let got = list(&*s, ListOptions::thread("t1").filter("step", 3)).await;
    assert_eq!(ids(&got), vec![chain[3].checkpoint.id.clone()]);
}

/// Several keys combine with AND.
pub async fn list_filter_several_keys(f: &dyn SaverFactory) {
    let (s, chain) = filter_fixture(f).await;
    let got = list(
        &*s,
        ListOptions::thread("t1").with_filter(filter(json!({"source": "loop", "parity": "even"}))),
    )
    .await;
    assert_eq!(
        ids(&got),
        vec![
            chain[4].checkpoint.id.clone(),
            chain[2].checkpoint.id.clone()
        ]
    );
    let got = list(
        &*s,
        ListOptions::thread("t1").with_filter(filter(json!({"source": "input", "parity": "odd"}))),
    )
    .await;
    assert!(got.is_empty());
}

/// A custom key, including a nested value compared as a whole.
pub async fn list_filter_custom_key(f: &dyn SaverFactory) {
    let (s, chain) = filter_fixture(f).await;
    let got = list(&*s, ListOptions::new().filter("run_id", "run-1")).await;
    assert_eq!(ids(&got), rev_ids(&chain));
    let got = list(&*s, ListOptions::new().filter("parents", json!({}))).await;
    assert_eq!(got.len(), 9);
}

/// A filter nothing matches (unknown key, other value, other type) yields nothing.
pub async fn list_filter_no_match(f: &dyn SaverFactory) {
    let (s, _) = filter_fixture(f).await;
    for flt in [
        json!({"nope": 1}),
        json!({"source": "fork"}),
        json!({"step": "3"}),
        json!({"step": null}),
        json!({"parents": {"x": "y"}}),
    ] {
        assert!(
            list(&*s, ListOptions::new().with_filter(filter(flt.clone())))
                .await
                .is_empty(),
            "{flt}"
        );
    }
}

/// Numbers compare by value: `3` matches `3.0`.
pub async fn list_filter_numbers_compare_by_value(f: &dyn SaverFactory) {
    let (s, chain) = filter_fixture(f).await;
    let got = list(&*s, ListOptions::thread("t1").filter("step", 3.0)).await;
    assert_eq!(ids(&got), vec![chain[3].checkpoint.id.clone()]);
}

/// Numbers at the edges of `f64` and `i64` match as
/// [`json_equal`](checkpoint_core::json_equal) says, in a global list and in a thread's:
/// 2^53 as a float and as an integer, the integers around it, `i64` and `u64` extremes,
/// `-0.0`, the smallest subnormal, `0.1` and `1e300`.
pub async fn list_filter_numbers_at_the_edges(f: &dyn SaverFactory) {
    use checkpoint_core::{Checkpoint, CheckpointConfig, CheckpointMetadata, PutOptions};
    let s = build(f).await;
    let edges: Vec<Value> = vec![
        json!(9_007_199_254_740_992.0_f64),
        json!(9_007_199_254_740_992_i64),
        json!(9_007_199_254_740_993_i64),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(-0.0_f64),
        json!(0),
        json!(5e-324_f64),
        json!(0.1_f64),
        json!(1e300_f64),
    ];
    let mut stored = Vec::new();
    for (i, v) in edges.iter().enumerate() {
        let thread = format!("edge-{i}");
        let mut metadata = CheckpointMetadata::new().with("source", "loop");
        metadata = metadata.with("n", v.clone());
        let checkpoint = Checkpoint::new();
        s.put(
            &CheckpointConfig::new(&thread),
            checkpoint.clone(),
            metadata,
            Default::default(),
            PutOptions::new(),
        )
        .await
        .unwrap();
        stored.push((thread, checkpoint.id, v.clone()));
    }
    for wanted in &edges {
        let mut want: Vec<&String> = stored
            .iter()
            .filter(|(_, _, v)| checkpoint_core::json_equal(v, wanted))
            .map(|(_, id, _)| id)
            .collect();
        want.sort();
        want.reverse();
        let got = list(&*s, ListOptions::new().filter("n", wanted.clone())).await;
        assert_eq!(
            ids(&got).iter().collect::<Vec<_>>(),
            want,
            "global filter n = {wanted}"
        );
        for (thread, id, v) in &stored {
            let got = list(&*s, ListOptions::thread(thread).filter("n", wanted.clone())).await;
            let expected = checkpoint_core::json_equal(v, wanted);
            assert_eq!(
                ids(&got),
                if expected { vec![id.clone()] } else { vec![] },
                "thread {thread} (n = {v}) filtered on n = {wanted}"
            );
        }
    }
}

/// `before` is a strict upper bound on the id.
pub async fn list_before_is_strict(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 5, "r").await.unwrap();
    let got = list(
        &*s,
        ListOptions::thread("t1").before(&chain[3].checkpoint.id),
    )
    .await;
    assert_eq!(ids(&got), rev_ids(&chain[..3]));
    let got = list(
        &*s,
        ListOptions::thread("t1").before(&chain[0].checkpoint.id),
    )
    .await;
    assert!(got.is_empty());
}

/// `limit` caps the count, newest first; `limit(0)` yields nothing.
pub async fn list_limit(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 5, "r").await.unwrap();
    let got = list(&*s, ListOptions::thread("t1").limit(2)).await;
    assert_eq!(ids(&got), rev_ids(&chain[3..]));
    assert!(
        list(&*s, ListOptions::thread("t1").limit(0))
            .await
            .is_empty()
    );
    assert_eq!(
        list(&*s, ListOptions::thread("t1").limit(100)).await.len(),
        5
    );
}

/// `limit` applies after `before`.
pub async fn list_limit_with_before(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 6, "r").await.unwrap();
    let got = list(
        &*s,
        ListOptions::thread("t1")
            .before(&chain[4].checkpoint.id)
            .limit(2),
    )
    .await;
    assert_eq!(
        ids(&got),
        vec![
            chain[3].checkpoint.id.clone(),
            chain[2].checkpoint.id.clone()
        ]
    );
}

/// A filter combined with a thread only returns that thread's matches.
pub async fn list_filter_with_thread(f: &dyn SaverFactory) {
    let (s, _) = filter_fixture(f).await;
    let got = list(&*s, ListOptions::thread("t2").filter("source", "loop")).await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|t| t.config.thread_id == "t2"));
    let got = list(&*s, ListOptions::thread("t2").filter("run_id", "run-1")).await;
    assert!(got.is_empty());
}

/// Listed tuples carry their pending writes and parents.
pub async fn list_includes_pending_writes(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 3, "r").await.unwrap();
    put_two_writes(&*s, &chain[1].config, "task-a")
        .await
        .unwrap();
    let got = list(&*s, ListOptions::thread("t1")).await;
    assert_eq!(got[1].pending_writes.len(), 2);
    assert!(got[0].pending_writes.is_empty());
    assert!(got[2].pending_writes.is_empty());
    for t in &got {
        assert_eq!(
            Some(t.clone()),
            s.get_tuple(&t.config).await.unwrap(),
            "list and get_tuple agree"
        );
    }
}

/// Listing the root namespace excludes child namespaces.
pub async fn list_root_namespace_excludes_children(f: &dyn SaverFactory) {
    let s = build(f).await;
    let root = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    put_chain(&*s, "t1", "child:1", 2, "r").await.unwrap();
    put_chain(&*s, "t1", "child:1|inner:1", 1, "r")
        .await
        .unwrap();
    let got = list(&*s, ListOptions::thread("t1").namespace("")).await;
    assert_eq!(ids(&got), rev_ids(&root));
}

/// Without a thread: every thread, ordered by id descending.
pub async fn list_global_across_threads(f: &dyn SaverFactory) {
    let s = build(f).await;
    let mut all = Vec::new();
    for t in ["t1", "t2", "t3"] {
        all.extend(put_chain(&*s, t, "", 2, "r").await.unwrap());
    }
    all.extend(put_chain(&*s, "t1", "ns:1", 1, "r").await.unwrap());
    let got = list(&*s, ListOptions::new()).await;
    let mut want: Vec<String> = all.iter().map(|p| p.checkpoint.id.clone()).collect();
    want.sort();
    want.reverse();
    assert_eq!(ids(&got), want);
    let got = list(&*s, ListOptions::new().filter("step", 1)).await;
    assert_eq!(got.len(), 3);
    let got = list(&*s, ListOptions::new().namespace("ns:1")).await;
    assert_eq!(got.len(), 1);
}

/// A config with a checkpoint id lists just that checkpoint.
pub async fn list_by_checkpoint_id(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 3, "r").await.unwrap();
    let got = list(&*s, ListOptions::from_config(&chain[1].config)).await;
    assert_eq!(ids(&got), vec![chain[1].checkpoint.id.clone()]);
    let got = list(
        &*s,
        ListOptions::from_config(&chain[1].config.clone().with_ns("other")),
    )
    .await;
    assert!(got.is_empty());
}

/// A history longer than any page streams completely, once each, in order; a selective
/// filter over it still finds its match; the stream can be dropped early.
pub async fn list_pages_through_long_history(f: &dyn SaverFactory) {
    let s = build(f).await;
    let chain = put_chain(&*s, "t1", "", 300, "r").await.unwrap();
    put_chain(&*s, "t2", "", 3, "r").await.unwrap();
    let got = list(&*s, ListOptions::thread("t1")).await;
    assert_eq!(ids(&got), rev_ids(&chain));
    let got = list(&*s, ListOptions::thread("t1").filter("step", 7)).await;
    assert_eq!(ids(&got), vec![chain[7].checkpoint.id.clone()]);
    let got = list(&*s, ListOptions::new().filter("step", 0)).await;
    assert_eq!(got.len(), 2);
    let mut stream = s.list(ListOptions::thread("t1"));
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.checkpoint.id, chain[299].checkpoint.id);
    drop(stream);
}

/// The full matrix thread {none, each, unknown} × namespace {none, "", child} × limit
/// {none, 1, 2} × before {none, a root id, a child id} × filter {none, empty, two keys},
/// checked against the in-memory reference loaded with the same data.
pub async fn list_matrix_matches_reference(f: &dyn SaverFactory) {
    let s = build(f).await;
    let reference = InMemorySaver::new();
    let mut root_ids = Vec::new();
    let mut child_ids = Vec::new();
    for thread in ["m1", "m2"] {
        for ns in ["", "child:1"] {
            let chain = put_chain(&reference, thread, ns, 4, &format!("run-{thread}"))
                .await
                .unwrap();
            for (i, p) in chain.iter().enumerate() {
                let parent = match i {
                    0 => crate::fixtures::cfg(thread, ns),
                    _ => chain[i - 1].config.clone(),
                };
                s.put(
                    &parent,
                    p.checkpoint.clone(),
                    p.metadata.clone(),
                    p.checkpoint.channel_versions.clone(),
                    Default::default(),
                )
                .await
                .unwrap();
                if i % 2 == 1 {
                    put_two_writes(&*s, &p.config, "task").await.unwrap();
                    put_two_writes(&reference, &p.config, "task").await.unwrap();
                }
                if ns.is_empty() {
                    root_ids.push(p.checkpoint.id.clone());
                } else {
                    child_ids.push(p.checkpoint.id.clone());
                }
            }
        }
    }
    let threads = [None, Some("m1"), Some("m2"), Some("unknown")];
    let namespaces = [None, Some(""), Some("child:1")];
    let limits = [None, Some(1), Some(2)];
    let befores = [None, Some(root_ids[2].clone()), Some(child_ids[5].clone())];
    let filters: [Option<Map<String, Value>>; 3] = [
        None,
        Some(Map::new()),
        Some(filter(json!({"source": "loop", "parity": "odd"}))),
    ];
    let mut combos = 0;
    for thread in threads {
        for ns in namespaces {
            for limit in limits {
                for before in &befores {
                    for flt in &filters {
                        let mut o = match thread {
                            Some(t) => ListOptions::thread(t),
                            None => ListOptions::new(),
                        };
                        if let Some(n) = ns {
                            o = o.namespace(n);
                        }
                        if let Some(l) = limit {
                            o = o.limit(l);
                        }
                        if let Some(b) = before {
                            o = o.before(b);
                        }
                        if let Some(fl) = flt {
                            o = o.with_filter(fl.clone());
                        }
                        let want = list(&reference, o.clone()).await;
                        let got = list(&*s, o.clone()).await;
                        assert_eq!(addresses(&got), addresses(&want), "list({o:?})");
                        assert_eq!(got, want, "list({o:?}) tuples differ");
                        combos += 1;
                    }
                }
            }
        }
    }
    assert_eq!(combos, 4 * 3 * 3 * 3 * 3);
}

/// `list_threads`: every thread holding a checkpoint once (one holding only a subgraph's
/// checkpoints, and a unicode id, included), ascending; a deleted thread and a thread with
/// only pending writes are not listed.
pub async fn list_threads_each_thread_once(f: &dyn SaverFactory) {
    use futures::TryStreamExt;
    let s = build(f).await;
    put_chain(&*s, "t-b", "", 3, "r").await.unwrap();
    put_chain(&*s, "t-a", "child:1", 2, "r").await.unwrap();
    put_chain(&*s, "t-ü", "", 1, "r").await.unwrap();
    put_chain(&*s, "t-gone", "", 2, "r").await.unwrap();
    s.delete_thread("t-gone").await.unwrap();
    put_two_writes(
        &*s,
        &crate::fixtures::cfg("t-writes-only", "")
            .with_checkpoint_id(checkpoint_core::new_checkpoint_id()),
        "task",
    )
    .await
    .unwrap();
    let got: Vec<String> = s.list_threads().try_collect().await.unwrap();
    assert_eq!(got, ["t-a", "t-b", "t-ü"]);
    let empty = build(f).await;
    let none: Vec<String> = empty.list_threads().try_collect().await.unwrap();
    assert!(none.is_empty(), "{none:?}");
}

/// `list_threads_after`: the ids `list_threads` yields after the one given, in the same
/// order, whether it names a thread, a deleted one, or none (any string: `""` starts
/// before every id, one with a NUL or of 1 MB is compared as it is).
pub async fn list_threads_after_continues_the_order(f: &dyn SaverFactory) {
    use futures::TryStreamExt;
    let s = build(f).await;
    put_chain(&*s, "t-b", "", 2, "r").await.unwrap();
    put_chain(&*s, "t-a", "child:1", 1, "r").await.unwrap();
    put_chain(&*s, "t-ü", "", 1, "r").await.unwrap();
    put_chain(&*s, "t-gone", "", 1, "r").await.unwrap();
    s.delete_thread("t-gone").await.unwrap();
    let all: Vec<String> = s.list_threads().try_collect().await.unwrap();
    assert_eq!(all, ["t-a", "t-b", "t-ü"]);
    let after = |id: String| {
        let s = std::sync::Arc::clone(&s);
        async move {
            let ids: Vec<String> = s.list_threads_after(&id).try_collect().await.unwrap();
            ids
        }
    };
    for (i, id) in all.iter().enumerate() {
        assert_eq!(after(id.clone()).await, all[i + 1..], "after {id:?}");
    }
    assert_eq!(after(String::new()).await, all);
    assert_eq!(after("t-c".into()).await, ["t-ü"], "between two threads");
    assert_eq!(after("t-gone".into()).await, ["t-ü"], "a deleted thread");
    assert_eq!(after("t-a\0z".into()).await, ["t-b", "t-ü"], "with a NUL");
    assert_eq!(
        after(format!("t-b{}", "x".repeat(1 << 20))).await,
        ["t-ü"],
        "1 MB"
    );
    assert!(after("t-üü".into()).await.is_empty());
}
