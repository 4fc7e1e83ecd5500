//! Strategies: random identifiers, values, metadata, filters and operations, drawn from
//! small pools so that generated operations collide.

use std::collections::BTreeMap;

use checkpoint_core::{CheckpointMetadata, PruneStrategy, Source, TypedValue, ValueType};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

use super::*;

pub(super) fn owned(
    pool: &'static [&'static str],
) -> impl Strategy<Value = String, Tree: Send> + Clone {
    select(pool).prop_map(str::to_owned)
}

/// A thread id from [`THREADS`], the first ones more often (so histories grow).
pub fn thread_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![5 => Just(0usize), 2 => Just(1), 1 => Just(2)].prop_map(|i| THREADS[i].to_owned())
}

/// A thread id from [`THREADS`] or, now and then, [`UNKNOWN_THREAD`].
pub fn any_thread_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![6 => thread_id(), 1 => Just(UNKNOWN_THREAD.to_owned())]
}

/// A namespace from [`NAMESPACES`], the root more often.
pub fn namespace() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![5 => Just(0usize), 2 => Just(1), 1 => Just(2)]
        .prop_map(|i| NAMESPACES[i].to_owned())
}

/// A channel from [`CHANNELS`].
pub fn channel() -> impl Strategy<Value = String, Tree: Send> + Clone {
    owned(&CHANNELS)
}

/// A run id from [`RUN_IDS`].
pub fn run_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    owned(&RUN_IDS)
}

/// A run id from [`RUN_IDS`] or, now and then, [`UNKNOWN_RUN`].
pub fn any_run_id() -> impl Strategy<Value = String, Tree: Send> + Clone {
    prop_oneof![4 => run_id(), 1 => Just(UNKNOWN_RUN.to_owned())]
}

/// A metadata `source`.
pub fn source() -> impl Strategy<Value = Source, Tree: Send> + Clone {
    select(&[Source::Input, Source::Loop, Source::Update, Source::Fork][..])
}

pub(super) fn msgpack(value: impl Into<Value>) -> TypedValue {
    TypedValue::msgpack(&value.into()).expect("msgpack encodes JSON values")
}

pub(super) fn json_scalar() -> impl Strategy<Value = Value, Tree: Send> + Clone {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..1000).prop_map(Value::from),
        Just(json!(1.5)),
        select(&["", "x", "ü ✓ 🦀"][..]).prop_map(Value::from),
    ]
}

pub(super) fn json_value() -> impl Strategy<Value = Value, Tree: Send> + Clone {
    prop_oneof![
        3 => json_scalar(),
        1 => prop::collection::vec(json_scalar(), 0..3).prop_map(Value::from),
        1 => prop::collection::btree_map(select(&["a", "b", "ключ"][..]), json_scalar(), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
    ]
}

/// A stored value of any kind: null, raw bytes (also empty), a `bytearray`, msgpack strings
/// (empty, unicode, with NUL, arbitrary), msgpack integers, JSON documents and an opaque
/// foreign tag (`pickle`) that must round-trip untouched.
pub fn typed_value() -> impl Strategy<Value = TypedValue, Tree: Send> + Clone {
    prop_oneof![
        Just(TypedValue::null()),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(TypedValue::from_bytes),
        prop::collection::vec(any::<u8>(), 0..4)
            .prop_map(|b| TypedValue::new(ValueType::Bytearray, b)),
        select(&["", "héllo ✓ 🦀", "nul\0inside", "line\nbreak"][..]).prop_map(msgpack),
        prop::collection::vec(any::<char>(), 0..6)
            .prop_map(|chars| msgpack(chars.into_iter().collect::<String>())),
        any::<i64>().prop_map(msgpack),
        json_value().prop_map(|v| TypedValue::json(&v).expect("JSON encodes JSON values")),
        Just(TypedValue::new(
            ValueType::from("pickle"),
            vec![0x80, 0x04, 0x95, 0x00]
        )),
    ]
}

/// Channel changes of one step: up to three `(channel, new value or None for a removal)`.
/// A channel may appear twice (its version is bumped twice, the last change wins).
pub fn channel_changes()
-> impl Strategy<Value = Vec<(String, Option<TypedValue>)>, Tree: Send> + Clone {
    prop::collection::vec(
        (channel(), prop::option::weighted(0.8, typed_value())),
        0..4,
    )
}

/// A value of the custom metadata key [`CUSTOM_KEY`]: strings, numbers (`1` and `1.0`, equal
/// for filters, distinct when read back), booleans, null and a nested object.
pub fn custom_value() -> impl Strategy<Value = Value, Tree: Send> + Clone {
    select(vec![
        json!("x"),
        json!("ü ✓"),
        json!(1),
        json!(1.0),
        json!(true),
        Value::Null,
        json!({"k": [1, "two"]}),
    ])
}

/// Checkpoint metadata: any of `source`, `step`, `parents` (empty), `run_id` and the custom
/// key [`CUSTOM_KEY`], each present or not.
pub fn metadata() -> impl Strategy<Value = CheckpointMetadata, Tree: Send> + Clone {
    (
        prop::option::weighted(0.8, source()),
        prop::option::weighted(0.8, -1i64..4),
        any::<bool>(),
        prop::option::weighted(0.7, run_id()),
        prop::option::of(custom_value()),
    )
        .prop_map(|(source, step, parents, run, custom)| {
            let mut m = CheckpointMetadata::new();
            if let Some(s) = source {
                m = m.with_source(s);
            }
            if let Some(s) = step {
                m = m.with_step(s);
            }
            if parents {
                m = m.with_parents(BTreeMap::new());
            }
            if let Some(r) = run {
                m = m.with_run_id(r);
            }
            if let Some(c) = custom {
                m = m.with(CUSTOM_KEY, c);
            }
            m
        })
}

/// One condition of a metadata filter: `source`, `step` (as an integer or an equal float),
/// `run_id` (possibly unknown), `parents` (empty object) or the custom key.
pub fn filter_condition() -> impl Strategy<Value = (String, Value), Tree: Send> + Clone {
    prop_oneof![
        source().prop_map(|s| ("source".to_owned(), Value::from(s.as_str()))),
        (-1i64..4, any::<bool>()).prop_map(|(n, float)| {
            let v = if float {
                Value::from(n as f64)
            } else {
                Value::from(n)
            };
            ("step".to_owned(), v)
        }),
        any_run_id().prop_map(|r| ("run_id".to_owned(), Value::from(r))),
        Just(("parents".to_owned(), json!({}))),
        custom_value().prop_map(|v| (CUSTOM_KEY.to_owned(), v)),
    ]
}

/// A metadata filter: empty, one condition, or (less often) two or three.
pub fn metadata_filter() -> impl Strategy<Value = Map<String, Value>, Tree: Send> + Clone {
    prop_oneof![
        3 => Just(Map::new()),
        4 => filter_condition().prop_map(|(k, v)| [(k, v)].into_iter().collect()),
        1 => prop::collection::vec(filter_condition(), 2..4)
            .prop_map(|conditions| conditions.into_iter().collect()),
    ]
}

/// The writes of one `put_writes` call: either any mix of [`WRITE_CHANNELS`] (possibly
/// empty), or special channels only (a call that replaces existing writes).
pub fn pending_writes() -> impl Strategy<Value = Vec<(String, TypedValue)>, Tree: Send> + Clone {
    prop_oneof![
        2 => prop::collection::vec((owned(&WRITE_CHANNELS), typed_value()), 0..4),
        1 => prop::collection::vec((owned(&SPECIAL_WRITE_CHANNELS), typed_value()), 1..3),
    ]
}

/// A prune strategy: keep the latest, keep the last 0 to 2, or delete everything.
pub fn prune_strategy() -> impl Strategy<Value = PruneStrategy, Tree: Send> + Clone {
    prop_oneof![
        Just(PruneStrategy::KeepLatest),
        (0usize..3).prop_map(PruneStrategy::KeepLast),
        Just(PruneStrategy::DeleteAll),
    ]
}

/// The parent choice of a put: mostly the head, sometimes none or an older checkpoint.
pub fn parent() -> impl Strategy<Value = Parent, Tree: Send> + Clone {
    prop_oneof![
        1 => Just(Parent::None),
        6 => Just(Parent::Head),
        3 => (0usize..8).prop_map(Parent::Older),
    ]
}

/// What a `get_tuple` reads.
pub fn get_target() -> impl Strategy<Value = GetTarget, Tree: Send> + Clone {
    prop_oneof![
        3 => (any_thread_id(), namespace()).prop_map(|(thread, ns)| GetTarget::Latest { thread, ns }),
        4 => (0usize..16).prop_map(GetTarget::Existing),
        2 => (0usize..16, thread_id(), namespace())
            .prop_map(|(index, thread, ns)| GetTarget::Issued { index, thread, ns }),
        1 => (thread_id(), namespace()).prop_map(|(thread, ns)| GetTarget::Missing { thread, ns }),
        1 => Just(GetTarget::EmptyThread),
    ]
}

pub(super) fn put_op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    (
        thread_id(),
        namespace(),
        parent(),
        channel_changes(),
        prop::bool::weighted(0.2),
        metadata(),
        prop::bool::weighted(0.3),
        prop::option::weighted(
            0.06,
            select(
                &[
                    PutFault::EmptyThread,
                    PutFault::EmptyCheckpointId,
                    PutFault::IdNotAboveParent,
                    PutFault::VersionMismatch,
                ][..],
            ),
        ),
    )
        .prop_map(
            |(thread, ns, parent, changes, string_versions, metadata, compare_and_set, fault)| {
                Op::Put {
                    thread,
                    ns,
                    parent,
                    changes,
                    string_versions,
                    metadata,
                    compare_and_set,
                    fault,
                }
            },
        )
}

pub(super) fn put_writes_op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    (
        0usize..16,
        pending_writes(),
        owned(&TASK_IDS),
        owned(&TASK_PATHS),
        prop::option::weighted(
            0.05,
            select(&[WritesFault::EmptyThread, WritesFault::NoCheckpointId][..]),
        ),
    )
        .prop_map(
            |(target, writes, task_id, task_path, fault)| Op::PutWrites {
                target,
                writes,
                task_id,
                task_path,
                fault,
            },
        )
}

pub(super) fn list_op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    (
        prop::option::weighted(0.7, any_thread_id()),
        prop::option::weighted(0.5, namespace()),
        prop::option::weighted(0.1, 0usize..16),
        metadata_filter(),
        prop::option::weighted(0.25, 0usize..16),
        prop::option::weighted(0.3, 0usize..4),
    )
        .prop_map(
            |(thread, ns, checkpoint_id, filter, before, limit)| Op::List {
                thread,
                ns,
                checkpoint_id,
                filter,
                before,
                limit,
            },
        )
}

/// One operation, weighted towards puts and writes so histories grow, with every read and
/// every extended operation in the mix.
pub fn op() -> impl Strategy<Value = Op, Tree: Send> + Clone {
    prop_oneof![
        12 => put_op(),
        2 => (0usize..16, metadata(), any::<bool>()).prop_map(|(target, metadata, compare_and_set)| {
            Op::RepeatPut { target, metadata, compare_and_set }
        }),
        6 => put_writes_op(),
        4 => get_target().prop_map(|target| Op::GetTuple { target }),
        5 => list_op(),
        1 => any_thread_id().prop_map(|thread| Op::DeleteThread { thread }),
        2 => (any_thread_id(), thread_id())
            .prop_map(|(source, target)| Op::CopyThread { source, target }),
        2 => (prop::collection::vec(any_thread_id(), 0..3), prune_strategy())
            .prop_map(|(threads, strategy)| Op::Prune { threads, strategy }),
        1 => prop::collection::vec(any_run_id(), 0..3).prop_map(|runs| Op::DeleteForRuns { runs }),
    ]
}

/// A sequence of up to `max_len` operations. Shrinks by dropping operations and simplifying
/// the remaining ones; since indices are resolved at run time, every shrunk sequence runs.
pub fn ops(max_len: usize) -> impl Strategy<Value = Vec<Op>, Tree: Send> + Clone {
    prop::collection::vec(op(), 0..=max_len)
}
