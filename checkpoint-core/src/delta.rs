//! Delta channels: what a runtime needs to rebuild a channel that checkpoints do not store
//! whole ([`Saver::delta_channel_history`]).
//!
//! LangGraph's `DeltaChannel` (1.2, Python and JS) keeps an append-only value such as a
//! message list out of most checkpoints: a checkpoint stores the channel only now and then
//! (a *snapshot*, LangGraph's `_DeltaSnapshot`, or a plain value for a thread that used an
//! ordinary channel before), and every step's increment lives only in the pending writes the
//! step recorded against its checkpoint. To rebuild the value at a checkpoint, the runtime
//! takes the nearest stored value above it (the *seed*) and replays the writes recorded on
//! the way down, oldest first. [`walk`] computes that from [`Saver::get_tuple`] alone; savers
//! with direct access to their store answer the same in a bounded number of round trips.

use std::collections::{BTreeMap, HashSet};

use crate::{CheckpointConfig, Error, PendingWrite, Result, Saver, TypedValue};

/// What [`Saver::delta_channel_history`] returns for one channel (LangGraph's
/// `DeltaChannelHistory`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeltaChannelHistory {
    /// The value stored for the channel at the nearest ancestor that stores one, as stored
    /// (a snapshot or a plain value); `None` when no ancestor stores one (start empty).
    pub seed: Option<TypedValue>,
    /// The channel's pending writes recorded against the ancestors from the seed's
    /// checkpoint (included) down to the target's parent, oldest checkpoint first, each
    /// checkpoint's writes in `(task_path, task_id, idx)` order.
    pub writes: Vec<PendingWrite>,
}

/// One empty history (no seed, no writes) per channel of `channels`: the answer for a target
/// that does not exist, and what an implementation fills in.
pub fn empty(channels: &[String]) -> BTreeMap<String, DeltaChannelHistory> {
    channels
        .iter()
        .map(|c| (c.clone(), DeltaChannelHistory::default()))
        .collect()
}

/// Adds `writes` to the histories of their channels in the contract's order: each write
/// comes with the depth of its checkpoint below the target (the parent is 0), deepest first,
/// and a checkpoint's writes in `(task_path, task_id, idx)` order. Writes of channels `out`
/// has no entry for are dropped.
pub fn push_writes<D: Ord>(
    out: &mut BTreeMap<String, DeltaChannelHistory>,
    mut writes: Vec<(D, PendingWrite)>,
) {
    writes.sort_by(|(da, a), (db, b)| {
        db.cmp(da)
            .then_with(|| (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx)))
    });
    for (_, w) in writes {
        if let Some(h) = out.get_mut(&w.channel) {
            h.writes.push(w);
        }
    }
}

/// [`Saver::delta_channel_history`] computed with [`Saver::get_tuple`] alone: one call for the
/// target and one per ancestor visited, each ancestor visited once for all channels. This is
/// the definition the native implementations are tested against.
///
/// ```
/// use checkpoint_core::{Checkpoint, CheckpointConfig, CheckpointMetadata, InMemorySaver,
///     PutOptions, PutWritesOptions, Saver, TypedValue, delta};
///
/// # futures::executor::block_on(async {
/// let saver = InMemorySaver::new();
/// let mut first = Checkpoint::new();
/// let version = first.set("messages", &vec!["hi"])?; // stored: the seed
/// let a = saver
///     .put(&CheckpointConfig::new("t"), first.clone(), CheckpointMetadata::new(),
///          [("messages".to_owned(), version)].into(), PutOptions::new())
///     .await?;
/// // The step's increment is a pending write, not a stored value.
/// let more = vec![("messages".to_owned(), TypedValue::msgpack(&vec!["there"])?)];
/// saver.put_writes(&a, more, "task-1", PutWritesOptions::new()).await?;
/// let b = saver
///     .put(&a, first.successor(), CheckpointMetadata::new(), Default::default(), PutOptions::new())
///     .await?;
///
/// let history = delta::walk(&saver, &b, &["messages".to_owned()]).await?;
/// assert!(history["messages"].seed.is_some());
/// assert_eq!(history["messages"].writes.len(), 1);
/// # Ok::<(), checkpoint_core::Error>(()) })?;
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
pub async fn walk<S: Saver + ?Sized>(
    saver: &S,
    config: &CheckpointConfig,
    channels: &[String],
) -> Result<BTreeMap<String, DeltaChannelHistory>> {
    config.require_thread()?;
    let mut out: BTreeMap<String, DeltaChannelHistory> = empty(channels);
    if out.is_empty() {
        return Ok(out);
    }
    let mut remaining: HashSet<String> = out.keys().cloned().collect();
    // Collected newest checkpoint first, reversed at the end.
    let mut collected: BTreeMap<String, Vec<Vec<PendingWrite>>> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut cursor = saver.get_tuple(config).await?.and_then(|t| t.parent_config);
    while let Some(at) = cursor {
        if remaining.is_empty() {
            break;
        }
        let Some(tuple) = saver.get_tuple(&at).await? else {
            break;
        };
        if !seen.insert(tuple.checkpoint.id.clone()) {
            return Err(Error::Serialization {
                reason: format!(
                    "the parent chain of thread {:?} loops at checkpoint {:?}",
                    at.thread_id, tuple.checkpoint.id
                ),
                source: None,
            });
        }
        let mut writes_here: BTreeMap<&str, Vec<PendingWrite>> = BTreeMap::new();
        for w in &tuple.pending_writes {
            if remaining.contains(&w.channel) {
                writes_here
                    .entry(w.channel.as_str())
                    .or_default()
                    .push(w.clone());
            }
        }
        for (channel, writes) in writes_here {
            collected
                .entry(channel.to_owned())
                .or_default()
                .push(writes);
        }
        // A channel stored here ends its walk; this checkpoint's own writes were collected
        // above: they produced its child.
        remaining.retain(
            |channel| match tuple.checkpoint.channel_values.get(channel) {
                Some(value) => {
                    if let Some(h) = out.get_mut(channel) {
                        h.seed = Some(value.clone());
                    }
                    false
                }
                None => true,
            },
        );
        cursor = tuple.parent_config;
    }
    for (channel, per_checkpoint) in collected {
        if let Some(h) = out.get_mut(&channel) {
            h.writes = per_checkpoint.into_iter().rev().flatten().collect();
        }
    }
    Ok(out)
}

/// The MessagePack extension type LangGraph's serializer gives `_DeltaSnapshot`.
pub const SNAPSHOT_EXT: i8 = 7;

/// `value` as LangGraph stores a delta channel's snapshot (`_DeltaSnapshot(value)`): the
/// value's MessagePack wrapped in extension type [`SNAPSHOT_EXT`]. Savers store and return
/// snapshots verbatim; this is for writers that take snapshots themselves.
///
/// # Errors
/// [`Error::InvalidInput`] when `value` is not MessagePack-encoded: LangGraph has no other
/// stored form of a snapshot.
///
/// ```
/// use checkpoint_core::{TypedValue, delta};
///
/// let list = TypedValue::msgpack(&vec!["hi", "there"])?;
/// let snapshot = delta::snapshot(&list)?;
/// assert_eq!(delta::snapshot_inner(&snapshot), Some(list));
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
pub fn snapshot(value: &TypedValue) -> Result<TypedValue> {
    if value.type_tag != crate::ValueType::Msgpack {
        return Err(Error::InvalidInput {
            reason: format!(
                "a delta snapshot wraps a msgpack value, not {:?}",
                value.type_tag
            ),
        });
    }
    let len = u32::try_from(value.bytes.len()).map_err(|_| Error::InvalidInput {
        reason: format!(
            "a {}-byte value is too large for a msgpack extension",
            value.bytes.len()
        ),
    })?;
    let mut out = Vec::with_capacity(value.bytes.len() + 6);
    rmp::encode::write_ext_meta(&mut out, len, SNAPSHOT_EXT).map_err(|e| Error::InvalidInput {
        reason: format!("cannot encode a delta snapshot: {e}"),
    })?;
    out.extend_from_slice(&value.bytes);
    Ok(TypedValue::new(crate::ValueType::Msgpack, out))
}

/// The value inside a snapshot made by [`snapshot`] (or by LangGraph); `None` when `value`
/// is not a snapshot (a plain seed, say).
pub fn snapshot_inner(value: &TypedValue) -> Option<TypedValue> {
    if value.type_tag != crate::ValueType::Msgpack {
        return None;
    }
    let mut rd = &value.bytes[..];
    let meta = rmp::decode::read_ext_meta(&mut rd).ok()?;
    let header = value.bytes.len() - rd.len();
    (meta.typeid == SNAPSHOT_EXT && rd.len() == meta.size as usize)
        .then(|| TypedValue::new(crate::ValueType::Msgpack, value.bytes.slice(header..)))
}

/// The metadata key in which LangGraph records, per delta channel, the updates and steps
/// since the channel's last snapshot (`{channel: [updates, steps]}`): a channel listed there
/// is rebuilt from the checkpoint's ancestors. A snapshot resets the channel's entry.
pub const DELTA_COUNTERS: &str = "counters_since_delta_snapshot";

/// The metadata flag LangGraph's JavaScript runtime sets on checkpoints whose delta
/// channels record their writes under versions.
pub const DELTA_WRITES_VERSIONED: &str = "delta_writes_versioned";

/// The channels a checkpoint needs its ancestors for: the keys of its [`DELTA_COUNTERS`]
/// metadata; on a checkpoint flagged [`DELTA_WRITES_VERSIONED`] that has no counters, every
/// channel it names a version of without storing a value (`stores` tells which it stores).
pub fn channels_needing_history(
    metadata: &crate::CheckpointMetadata,
    channel_versions: &crate::ChannelVersions,
    stores: impl Fn(&str) -> bool,
) -> Vec<String> {
    match metadata.get(DELTA_COUNTERS) {
        Some(serde_json::Value::Object(counters)) if !counters.is_empty() => {
            counters.keys().cloned().collect()
        }
        _ if metadata.get(DELTA_WRITES_VERSIONED) == Some(&serde_json::Value::Bool(true)) => {
            channel_versions
                .keys()
                .filter(|c| !stores(c))
                .cloned()
                .collect()
        }
        _ => Vec::new(),
    }
}

/// The checkpoints of one namespace that the checkpoints `kept` need for their delta
/// channels, transitively: for each channel a kept checkpoint needs history for, its
/// ancestors up to and including the nearest one that stores the channel, and what those
/// ancestors need in turn. `parent` gives a checkpoint's parent (`None` also for an unknown
/// id), `needs` the channels it needs history for (see [`channels_needing_history`]) and
/// `stores` whether it stores a value for a channel. Checkpoints of `kept` are in the result
/// only when another one needs them.
pub fn needed_ancestors(
    kept: impl IntoIterator<Item = String>,
    parent: impl Fn(&str) -> Option<String>,
    needs: impl Fn(&str) -> Vec<String>,
    stores: impl Fn(&str, &str) -> bool,
) -> std::collections::BTreeSet<String> {
    let mut needed = std::collections::BTreeSet::new();
    let mut visited: HashSet<(String, String)> = HashSet::new();
    let mut work: Vec<(String, String)> = Vec::new();
    for id in kept {
        if let Some(p) = parent(&id) {
            for channel in needs(&id) {
                work.push((p.clone(), channel));
            }
        }
    }
    while let Some((id, channel)) = work.pop() {
        if !visited.insert((id.clone(), channel.clone())) {
            continue;
        }
        let up = parent(&id);
        if needed.insert(id.clone())
            && let Some(p) = &up
        {
            for c in needs(&id) {
                work.push((p.clone(), c));
            }
        }
        if !stores(&id, &channel)
            && let Some(p) = up
        {
            work.push((p, channel));
        }
    }
    needed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChannelVersion, ChannelVersions, CheckpointMetadata};
    use serde_json::json;

    #[test]
    fn channels_needing_history_follow_langgraphs_metadata() {
        let versions: ChannelVersions = [
            ("messages".to_owned(), ChannelVersion::Int(3)),
            ("stored".to_owned(), ChannelVersion::Int(1)),
        ]
        .into();
        let stores = |c: &str| c == "stored";
        let python = CheckpointMetadata::new().with(DELTA_COUNTERS, json!({"messages": [2, 2]}));
        assert_eq!(
            channels_needing_history(&python, &versions, stores),
            ["messages"]
        );
        let js = CheckpointMetadata::new().with(DELTA_WRITES_VERSIONED, true);
        assert_eq!(
            channels_needing_history(&js, &versions, stores),
            ["messages"]
        );
        let plain = CheckpointMetadata::new().with(DELTA_COUNTERS, json!({}));
        assert!(channels_needing_history(&plain, &versions, stores).is_empty());
        assert!(channels_needing_history(&CheckpointMetadata::new(), &versions, stores).is_empty());
    }

    #[test]
    fn needed_ancestors_close_over_what_ancestors_need() {
        // c0 stores a; c1 stores b, needs a; c2 needs b; c3 needs b. Keeping c3 needs c2
        // (walk for b) and c1 (stores b, the seed), then c0 for c1's own need of a.
        let parent = |id: &str| match id {
            "c1" => Some("c0".to_owned()),
            "c2" => Some("c1".to_owned()),
            "c3" => Some("c2".to_owned()),
            _ => None,
        };
        let needs = |id: &str| match id {
            "c1" => vec!["a".to_owned()],
            "c2" | "c3" => vec!["b".to_owned()],
            _ => vec![],
        };
        let stores = |id: &str, c: &str| matches!((id, c), ("c0", "a") | ("c1", "b"));
        let needed = needed_ancestors(["c3".to_owned()], parent, needs, stores);
        assert_eq!(needed.into_iter().collect::<Vec<_>>(), ["c0", "c1", "c2"]);
        assert!(needed_ancestors(["c0".to_owned()], parent, needs, stores).is_empty());
    }
}
