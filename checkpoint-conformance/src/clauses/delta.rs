//! Clauses of `Saver::delta_channel_history` (LangGraph's `get_delta_channel_history`): the
//! scenarios of LangGraph's own validation suites (snapshot seed, plain seed, same-step
//! writes in task order, no seed, each in the root and a child namespace), the target's own
//! writes, several channels, forks, removed versions, and random trees checked against
//! [`delta::walk`] over the reference saver.

use std::collections::BTreeMap;

use checkpoint_core::delta::{self, DeltaChannelHistory};
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, InMemorySaver, PutOptions,
    PutWritesOptions, Saver, TypedValue,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::json;

use crate::clauses::require_capability;
use crate::fixtures::{cfg, step, val};
use crate::{SaverFactory, build};

const NAMESPACES: [&str; 2] = ["", "child"];

/// LangGraph's `_DeltaSnapshot(value)` as its serializer writes it: MessagePack extension 7
/// around the value's MessagePack.
pub fn snapshot(value: serde_json::Value) -> TypedValue {
    checkpoint_core::delta::snapshot(&val(value)).expect("a msgpack value")
}

/// A checkpoint put after `parent` (or first in its namespace): each channel of `stored` gets
/// a new version with that value, each of `bumped` a new version without one (how a delta
/// channel's ordinary step is stored).
async fn put(
    s: &dyn Saver,
    at: &CheckpointConfig,
    parent: Option<&Checkpoint>,
    stored: &[(&str, TypedValue)],
    bumped: &[&str],
) -> (CheckpointConfig, Checkpoint) {
    let metadata = CheckpointMetadata::new().with("source", "loop");
    put_with(s, at, parent, stored, bumped, metadata).await
}

/// [`put`] with the given metadata.
async fn put_with(
    s: &dyn Saver,
    at: &CheckpointConfig,
    parent: Option<&Checkpoint>,
    stored: &[(&str, TypedValue)],
    bumped: &[&str],
    metadata: CheckpointMetadata,
) -> (CheckpointConfig, Checkpoint) {
    let changes: Vec<(&str, Option<TypedValue>)> = stored
        .iter()
        .map(|(c, v)| (*c, Some(v.clone())))
        .chain(bumped.iter().map(|c| (*c, None)))
        .collect();
    let (checkpoint, versions) = step(parent, &changes);
    let config = s
        .put(
            at,
            checkpoint.clone(),
            metadata,
            versions,
            PutOptions::new(),
        )
        .await
        .expect("put");
    (config, checkpoint)
}

async fn write(
    s: &dyn Saver,
    at: &CheckpointConfig,
    task: &str,
    path: &str,
    channel: &str,
    v: TypedValue,
) {
    s.put_writes(
        at,
        vec![(channel.to_owned(), v)],
        task,
        PutWritesOptions::new().task_path(path),
    )
    .await
    .expect("put_writes");
}

async fn history(
    s: &dyn Saver,
    at: &CheckpointConfig,
    channels: &[&str],
) -> BTreeMap<String, DeltaChannelHistory> {
    let channels: Vec<String> = channels.iter().map(|c| (*c).to_owned()).collect();
    s.delta_channel_history(at, &channels)
        .await
        .expect("delta_channel_history")
}

/// The values of a history's writes.
fn values(h: &DeltaChannelHistory) -> Vec<TypedValue> {
    h.writes.iter().map(|w| w.value.clone()).collect()
}

/// A snapshot seed at the nearest stored ancestor, its own writes and every later
/// ancestor's, oldest first; the snapshot is returned byte for byte.
pub async fn delta_snapshot_seed_and_writes_oldest_first(f: &dyn SaverFactory) {
    let s = build(f).await;
    for ns in NAMESPACES {
        let (c0, p0) = put(
            &*s,
            &cfg("t", ns),
            None,
            &[("messages", snapshot(json!([0])))],
            &[],
        )
        .await;
        write(&*s, &c0, "task0", "", "messages", val(json!([1]))).await;
        let (c1, p1) = put(&*s, &c0, Some(&p0), &[], &["messages"]).await;
        write(&*s, &c1, "task1", "", "messages", val(json!([2]))).await;
        let (c2, _) = put(&*s, &c1, Some(&p1), &[], &["messages"]).await;
        let h = &history(&*s, &c2, &["messages"]).await["messages"];
        assert_eq!(h.seed, Some(snapshot(json!([0]))), "ns {ns:?}");
        assert_eq!(values(h), [val(json!([1])), val(json!([2]))], "ns {ns:?}");
        assert_eq!(h.writes[0].task_id, "task0");
    }
}

/// A plain value (a thread that used an ordinary channel before) is a seed too, and the
/// writes recorded at its checkpoint follow it.
pub async fn delta_plain_seed_and_boundary_writes(f: &dyn SaverFactory) {
    let s = build(f).await;
    for ns in NAMESPACES {
        let (c0, p0) = put(
            &*s,
            &cfg("t", ns),
            None,
            &[("messages", val(json!([0, 1])))],
            &[],
        )
        .await;
        write(&*s, &c0, "task0", "", "messages", val(json!([2]))).await;
        let (c1, _) = put(&*s, &c0, Some(&p0), &[], &["messages"]).await;
        let h = &history(&*s, &c1, &["messages"]).await["messages"];
        assert_eq!(h.seed, Some(val(json!([0, 1]))));
        assert_eq!(values(h), [val(json!([2]))]);
    }
}

/// Writes of one step come in `(task_path, task_id, idx)` order, whatever order they were
/// recorded in; the target's own writes (the next step's) are left out.
pub async fn delta_same_step_writes_in_task_order(f: &dyn SaverFactory) {
    let s = build(f).await;
    for ns in NAMESPACES {
        let (c0, p0) = put(
            &*s,
            &cfg("t", ns),
            None,
            &[("messages", snapshot(json!([])))],
            &[],
        )
        .await;
        write(&*s, &c0, "task-b", "", "messages", val(json!(["b"]))).await;
        write(&*s, &c0, "task-a", "", "messages", val(json!(["a"]))).await;
        write(
            &*s,
            &c0,
            "task-0",
            "~1",
            "messages",
            val(json!(["path ~1"])),
        )
        .await;
        write(
            &*s,
            &c0,
            "task-z",
            "~0",
            "messages",
            val(json!(["path ~0"])),
        )
        .await;
        s.put_writes(
            &c0,
            vec![
                ("messages".to_owned(), val(json!(["c0"]))),
                ("other".to_owned(), val(json!("x"))),
                ("messages".to_owned(), val(json!(["c2"]))),
            ],
            "task-c",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
        let (c1, _) = put(&*s, &c0, Some(&p0), &[], &["messages"]).await;
        write(
            &*s,
            &c1,
            "task-next",
            "",
            "messages",
            val(json!(["next step"])),
        )
        .await;
        let h = &history(&*s, &c1, &["messages"]).await["messages"];
        let order: Vec<(&str, &str, i64)> = h
            .writes
            .iter()
            .map(|w| (w.task_path.as_str(), w.task_id.as_str(), w.idx))
            .collect();
        assert_eq!(
            order,
            [
                ("", "task-a", 0),
                ("", "task-b", 0),
                ("", "task-c", 0),
                ("", "task-c", 2),
                ("~0", "task-z", 0),
                ("~1", "task-0", 0)
            ],
            "ns {ns:?}"
        );
        assert!(h.writes.iter().all(|w| w.channel == "messages"));
    }
}

/// Without a stored value up to the root there is no seed, and every write of the way counts.
pub async fn delta_no_seed_at_the_root(f: &dyn SaverFactory) {
    let s = build(f).await;
    for ns in NAMESPACES {
        let (c0, p0) = put(&*s, &cfg("t", ns), None, &[], &["messages"]).await;
        write(&*s, &c0, "task0", "", "messages", val(json!([1]))).await;
        let (c1, p1) = put(&*s, &c0, Some(&p0), &[], &["messages"]).await;
        write(&*s, &c1, "task1", "", "messages", val(json!([2]))).await;
        let (c2, _) = put(&*s, &c1, Some(&p1), &[], &["messages"]).await;
        let h = &history(&*s, &c2, &["messages"]).await["messages"];
        assert_eq!(h.seed, None);
        assert_eq!(values(h), [val(json!([1])), val(json!([2]))]);
        // Also for a channel that was never written at all.
        let h = &history(&*s, &c2, &["never"]).await["never"];
        assert_eq!(h, &DeltaChannelHistory::default());
    }
}

/// Several channels in one call: each ends at its own nearest stored ancestor; a version
/// stored as removed is not a value and does not end the walk.
pub async fn delta_channels_end_independently(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c0, p0) = put(
        &*s,
        &cfg("t", ""),
        None,
        &[("a", val(json!("a0"))), ("b", val(json!("b0")))],
        &[],
    )
    .await;
    write(&*s, &c0, "t0a", "", "a", val(json!(1))).await;
    write(&*s, &c0, "t0b", "", "b", val(json!(1))).await;
    let (c1, p1) = put(&*s, &c0, Some(&p0), &[], &["a", "b"]).await;
    write(&*s, &c1, "t1", "", "a", val(json!(2))).await;
    let (c2, p2) = put(&*s, &c1, Some(&p1), &[("b", val(json!("b2")))], &["a"]).await;
    write(&*s, &c2, "t2a", "", "a", val(json!(3))).await;
    write(&*s, &c2, "t2b", "", "b", val(json!(3))).await;
    let (c3, _) = put(&*s, &c2, Some(&p2), &[], &["a", "b"]).await;
    let h = history(&*s, &c3, &["a", "b", "a"]).await;
    assert_eq!(h.len(), 2);
    assert_eq!(h["a"].seed, Some(val(json!("a0"))));
    assert_eq!(
        values(&h["a"]),
        [val(json!(1)), val(json!(2)), val(json!(3))]
    );
    assert_eq!(h["b"].seed, Some(val(json!("b2"))));
    assert_eq!(values(&h["b"]), [val(json!(3))]);
    // The latest checkpoint is the target when the config names none.
    assert_eq!(history(&*s, &cfg("t", ""), &["a", "b"]).await, h);
}

/// A channel stored at many steps before it became a delta channel (a thread migrated from
/// an ordinary channel): the seed is its value at the nearest of them, however many older
/// ones there are, next to a channel stored only at the first step. Targets are chosen so
/// that the stretch walked names 7, 8 and 13 stored values.
pub async fn delta_seed_after_a_long_stored_run(f: &dyn SaverFactory) {
    let s = build(f).await;
    for ns in NAMESPACES {
        let mut at = cfg("t", ns);
        let mut parent: Option<Checkpoint> = None;
        let mut configs = Vec::new();
        for n in 0..16 {
            let mut stored = Vec::new();
            let mut bumped = vec!["snap"];
            if n == 0 {
                stored.push(("snap", snapshot(json!(["s0"]))));
                bumped.clear();
            }
            if n < 12 {
                stored.push(("plain", val(json!(format!("plain{n}")))));
            } else {
                bumped.push("plain");
            }
            let (c, p) = put(&*s, &at, parent.as_ref(), &stored, &bumped).await;
            write(&*s, &c, &format!("p{n}"), "", "plain", val(json!(n))).await;
            write(&*s, &c, &format!("s{n}"), "", "snap", val(json!(n))).await;
            configs.push(c.clone());
            (at, parent) = (c, Some(p));
        }
        let h = history(&*s, &configs[15], &["plain", "snap"]).await;
        assert_eq!(h["plain"].seed, Some(val(json!("plain11"))), "ns {ns:?}");
        assert_eq!(
            values(&h["plain"]),
            (11..15).map(|n| val(json!(n))).collect::<Vec<_>>()
        );
        assert_eq!(h["snap"].seed, Some(snapshot(json!(["s0"]))));
        assert_eq!(
            values(&h["snap"]),
            (0..15).map(|n| val(json!(n))).collect::<Vec<_>>()
        );
        let h = history(&*s, &configs[6], &["plain"]).await;
        assert_eq!(h["plain"].seed, Some(val(json!("plain5"))), "ns {ns:?}");
        assert_eq!(values(&h["plain"]), [val(json!(5))]);
        let h = history(&*s, &configs[8], &["plain", "snap"]).await;
        assert_eq!(h["plain"].seed, Some(val(json!("plain7"))), "ns {ns:?}");
        assert_eq!(h["snap"].seed, Some(snapshot(json!(["s0"]))));
        for c in [
            &configs[15],
            &configs[12],
            &configs[8],
            &configs[7],
            &configs[6],
        ] {
            let channels = ["plain".to_owned(), "snap".to_owned()];
            assert_eq!(
                s.delta_channel_history(c, &channels)
                    .await
                    .expect("history"),
                delta::walk(&*s, c, &channels)
                    .await
                    .expect("reference walk"),
                "ns {ns:?}"
            );
        }
    }
}

/// On a forked thread only the target's own ancestors count, never a sibling branch.
pub async fn delta_forks_follow_only_the_target_branch(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c0, p0) = put(
        &*s,
        &cfg("t", ""),
        None,
        &[("m", snapshot(json!(["root"])))],
        &[],
    )
    .await;
    write(&*s, &c0, "t0", "", "m", val(json!(["shared"]))).await;
    let (c1, p1) = put(&*s, &c0, Some(&p0), &[], &["m"]).await;
    let (left, pl) = put(&*s, &c1, Some(&p1), &[], &["m"]).await;
    write(&*s, &left, "tl", "", "m", val(json!(["left"]))).await;
    let (right, pr) = put(&*s, &c1, Some(&p1), &[], &["m"]).await;
    write(&*s, &right, "tr", "", "m", val(json!(["right"]))).await;
    let (left2, _) = put(&*s, &left, Some(&pl), &[], &["m"]).await;
    let (right2, _) = put(&*s, &right, Some(&pr), &[], &["m"]).await;
    let l = &history(&*s, &left2, &["m"]).await["m"];
    assert_eq!(values(l), [val(json!(["shared"])), val(json!(["left"]))]);
    let r = &history(&*s, &right2, &["m"]).await["m"];
    assert_eq!(values(r), [val(json!(["shared"])), val(json!(["right"]))]);
    assert_eq!(l.seed, Some(snapshot(json!(["root"]))));
}

/// No channel: an empty map. An unknown thread, namespace or checkpoint: every channel
/// without seed and writes. An empty thread id: `InvalidInput`.
pub async fn delta_edges(f: &dyn SaverFactory) {
    let s = build(f).await;
    let (c0, _) = put(&*s, &cfg("t", ""), None, &[("m", val(json!(1)))], &[]).await;
    assert!(history(&*s, &c0, &[]).await.is_empty());
    let empty = BTreeMap::from([("m".to_owned(), DeltaChannelHistory::default())]);
    for unknown in [
        cfg("nope", ""),
        cfg("t", "nope"),
        cfg("t", "").with_checkpoint_id(checkpoint_core::new_checkpoint_id()),
    ] {
        assert_eq!(history(&*s, &unknown, &["m"]).await, empty, "{unknown:?}");
    }
    // The first checkpoint has no ancestor.
    assert_eq!(history(&*s, &c0, &["m"]).await, empty);
    let err = s
        .delta_channel_history(&cfg("", ""), &["m".to_owned()])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
}

/// One generated checkpoint: its parent (an index into the earlier ones, `None`: a root),
/// what it does to each channel and the writes recorded against it.
#[derive(Clone, Debug)]
struct Node {
    parent: Option<usize>,
    /// Per channel of [`CHANNELS`]: 0 untouched, 1 stored, 2 bumped without a value.
    actions: [u8; 3],
    writes: Vec<(usize, usize, usize)>,
}

const CHANNELS: [&str; 3] = ["a", "b", "c"];
const TASKS: [&str; 3] = ["t1", "t2", "t3"];
const PATHS: [&str; 3] = ["", "~0", "~1"];

fn nodes() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::bool::weighted(0.85),
            [0u8..3, 0u8..3, 0u8..3],
            prop::collection::vec((0usize..4, 0usize..3, 0usize..3), 0..4),
        ),
        1..12,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (pick, linked, actions, writes))| Node {
                parent: (i > 0 && linked).then(|| pick.index(i)),
                actions,
                writes,
            })
            .collect()
    })
}

/// Builds the generated tree in `thread` on `saver`.
async fn build_tree(saver: &dyn Saver, thread: &str, nodes: &[Node]) -> Vec<CheckpointConfig> {
    let mut configs: Vec<CheckpointConfig> = Vec::new();
    let mut checkpoints: Vec<Checkpoint> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let parent = node.parent.map(|p| (&configs[p], &checkpoints[p]));
        let stored: Vec<(&str, TypedValue)> = CHANNELS
            .iter()
            .zip(node.actions)
            .filter(|(_, a)| *a == 1)
            .map(|(c, _)| (*c, val(json!(format!("{c} at {i}")))))
            .collect();
        let bumped: Vec<&str> = CHANNELS
            .iter()
            .zip(node.actions)
            .filter(|(_, a)| *a == 2)
            .map(|(c, _)| *c)
            .collect();
        let at = parent.map_or_else(|| cfg(thread, ""), |(c, _)| c.clone());
        let (config, checkpoint) = put(saver, &at, parent.map(|(_, p)| p), &stored, &bumped).await;
        for (k, (channel, task, path)) in node.writes.iter().enumerate() {
            let channel = CHANNELS.get(*channel).copied().unwrap_or("other");
            write(
                saver,
                &config,
                TASKS[*task],
                PATHS[*path],
                channel,
                val(json!(format!("w{i}.{k}"))),
            )
            .await;
        }
        configs.push(config);
        checkpoints.push(checkpoint);
    }
    configs
}

/// Random trees of checkpoints (forks, roots, stored and bumped channels, writes from
/// several tasks and paths): for every checkpoint, the history equals [`delta::walk`] over
/// the reference saver holding the same tree.
pub async fn delta_history_matches_reference_walk(f: &dyn SaverFactory) {
    let s = build(f).await;
    let mut config = Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(0x64_656c_7461);
    }
    let seed = config.rng_seed;
    let mut runner = TestRunner::new(config);
    let channels: Vec<String> = CHANNELS.iter().map(|c| (*c).to_owned()).collect();
    for case in 0..24 {
        let tree = nodes().new_tree(&mut runner).expect("generate").current();
        let reference = InMemorySaver::new();
        let thread = format!("delta-case-{case}");
        let ours = build_tree(&*s, &thread, &tree).await;
        let theirs = build_tree(&reference, &thread, &tree).await;
        for (at, reference_at) in ours
            .iter()
            .zip(&theirs)
            .chain([(&cfg(&thread, ""), &cfg(&thread, ""))])
        {
            let got = s
                .delta_channel_history(at, &channels)
                .await
                .expect("history");
            let want = delta::walk(&reference, reference_at, &channels)
                .await
                .expect("reference");
            // Checkpoint ids differ between the two stores; compare what the runtime uses.
            let strip = |m: BTreeMap<String, DeltaChannelHistory>| {
                m.into_iter()
                    .map(|(c, h)| {
                        let writes: Vec<_> = h
                            .writes
                            .into_iter()
                            .map(|w| (w.task_path, w.task_id, w.idx, w.channel, w.value))
                            .collect();
                        (c, h.seed, writes)
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                strip(got),
                strip(want),
                "case {case} (seed {seed}), target {at:?}, tree {tree:#?}"
            );
        }
    }
}

/// A checkpoint put with LangGraph's delta bookkeeping: `counters` names the delta
/// channels whose history it needs (`counters_since_delta_snapshot`), `run` its run.
async fn put_delta(
    s: &dyn Saver,
    at: &CheckpointConfig,
    parent: Option<&Checkpoint>,
    stored: &[(&str, TypedValue)],
    bumped: &[&str],
    counters: &[&str],
    run: &str,
) -> (CheckpointConfig, Checkpoint) {
    let mut metadata = CheckpointMetadata::new()
        .with("source", "loop")
        .with_run_id(run);
    if !counters.is_empty() {
        let map: serde_json::Map<String, serde_json::Value> = counters
            .iter()
            .map(|c| ((*c).to_owned(), json!([1, 1])))
            .collect();
        metadata = metadata.with(delta::DELTA_COUNTERS, serde_json::Value::Object(map));
    }
    put_with(s, at, parent, stored, bumped, metadata).await
}

/// The ids of a namespace's checkpoints, newest first.
async fn ids(s: &dyn Saver, thread: &str, ns: &str) -> Vec<String> {
    use checkpoint_core::{ListOptions, SaverExt};
    s.list_all(ListOptions::thread(thread).namespace(ns))
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.checkpoint.id)
        .collect()
}

/// `prune` keeps, with each kept checkpoint, the ancestors its delta channels need (back to
/// the nearest one storing the channel), so their history reads the same afterwards; once a
/// newer snapshot stores the channel, the older ones go.
pub async fn delta_prune_keeps_what_delta_channels_need(f: &dyn SaverFactory) {
    use checkpoint_core::PruneStrategy;
    let s = build(f).await;
    require_capability!(
        s,
        prune,
        s.prune(&["t".to_owned()], PruneStrategy::KeepLatest)
    );
    for ns in NAMESPACES {
        let m = &["messages"][..];
        let (c0, p0) = put_delta(
            &*s,
            &cfg("t", ns),
            None,
            &[("messages", snapshot(json!(["a"])))],
            &[],
            &[],
            "r",
        )
        .await;
        write(&*s, &c0, "t0", "", "messages", val(json!(["b"]))).await;
        let (c1, p1) = put_delta(&*s, &c0, Some(&p0), &[], m, m, "r").await;
        write(&*s, &c1, "t1", "", "messages", val(json!(["c"]))).await;
        let (c2, p2) = put_delta(&*s, &c1, Some(&p1), &[], m, m, "r").await;
        let before = history(&*s, &c2, m).await;
        s.prune(&["t".to_owned()], PruneStrategy::KeepLatest)
            .await
            .unwrap();
        assert_eq!(history(&*s, &c2, m).await, before, "ns {ns:?}");
        assert_eq!(
            ids(&*s, "t", ns).await.len(),
            3,
            "ns {ns:?}: every ancestor is needed"
        );

        // A newer snapshot: what lies above it is no longer needed.
        write(&*s, &c2, "t2", "", "messages", val(json!(["d"]))).await;
        let (c3, p3) = put_delta(
            &*s,
            &c2,
            Some(&p2),
            &[("messages", snapshot(json!(["a", "b", "c", "d"])))],
            &[],
            &[],
            "r",
        )
        .await;
        write(&*s, &c3, "t3", "", "messages", val(json!(["e"]))).await;
        let (c4, _) = put_delta(&*s, &c3, Some(&p3), &[], m, m, "r").await;
        let before = history(&*s, &c4, m).await;
        s.prune(&["t".to_owned()], PruneStrategy::KeepLatest)
            .await
            .unwrap();
        assert_eq!(history(&*s, &c4, m).await, before, "ns {ns:?}");
        let left = ids(&*s, "t", ns).await;
        assert_eq!(
            left,
            [
                c4.checkpoint_id.clone().unwrap(),
                c3.checkpoint_id.clone().unwrap()
            ],
            "ns {ns:?}"
        );
        let t = s.get_tuple(&c3).await.unwrap().unwrap();
        assert_eq!(t.pending_writes.len(), 1, "the seed keeps its writes");
    }
}

/// `delete_for_runs` keeps the checkpoints of the runs that a remaining checkpoint needs
/// for its delta channels, and deletes the others.
pub async fn delta_delete_for_runs_keeps_what_delta_channels_need(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, delete_for_runs, s.delete_for_runs(&["run-a".to_owned()]));
    let m = &["messages"][..];
    // Thread "needed": run b continues run a's messages without a snapshot of its own.
    let (a0, pa0) = put_delta(
        &*s,
        &cfg("needed", ""),
        None,
        &[("messages", snapshot(json!(["a"])))],
        &[],
        &[],
        "run-a",
    )
    .await;
    write(&*s, &a0, "t0", "", "messages", val(json!(["b"]))).await;
    let (a1, pa1) = put_delta(&*s, &a0, Some(&pa0), &[], m, m, "run-a").await;
    write(&*s, &a1, "t1", "", "messages", val(json!(["c"]))).await;
    let (b0, _) = put_delta(&*s, &a1, Some(&pa1), &[], m, m, "run-b").await;
    // Thread "free": run b starts from a snapshot, so run a's checkpoints are not needed.
    let (f0, pf0) = put_delta(
        &*s,
        &cfg("free", ""),
        None,
        &[("messages", snapshot(json!(["a"])))],
        &[],
        &[],
        "run-a",
    )
    .await;
    let (f1, pf1) = put_delta(&*s, &f0, Some(&pf0), &[], m, m, "run-a").await;
    let (f2, pf2) = put_delta(
        &*s,
        &f1,
        Some(&pf1),
        &[("messages", snapshot(json!(["x"])))],
        &[],
        &[],
        "run-b",
    )
    .await;
    write(&*s, &f2, "t2", "", "messages", val(json!(["y"]))).await;
    let (f3, _) = put_delta(&*s, &f2, Some(&pf2), &[], m, m, "run-b").await;

    let before_needed = history(&*s, &b0, m).await;
    let before_free = history(&*s, &f3, m).await;
    s.delete_for_runs(&["run-a".to_owned()]).await.unwrap();
    assert_eq!(history(&*s, &b0, m).await, before_needed);
    assert_eq!(ids(&*s, "needed", "").await.len(), 3);
    assert_eq!(history(&*s, &f3, m).await, before_free);
    assert_eq!(
        ids(&*s, "free", "").await,
        [
            f3.checkpoint_id.clone().unwrap(),
            f2.checkpoint_id.clone().unwrap()
        ]
    );
}
