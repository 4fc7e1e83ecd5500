//! [`Saver::delta_channel_history`](crate::Saver::delta_channel_history) read straight from
//! the store, under one lock: each ancestor's versions, values and writes, without building
//! its tuple.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::delta::DeltaChannelHistory;
use crate::{Error, Result};

use super::store::{NsData, StoredWrite, Versions};

/// The history of `channels` for checkpoint `target` (or the latest) of a namespace.
pub(super) fn history(
    data: Option<&NsData>,
    target: Option<&str>,
    channels: &[String],
) -> Result<BTreeMap<String, DeltaChannelHistory>> {
    let mut out: BTreeMap<String, DeltaChannelHistory> = crate::delta::empty(channels);
    let Some(data) = data else { return Ok(out) };
    let target = match target {
        Some(id) => id,
        None => match data.checkpoints.keys().next_back() {
            Some(id) => id.as_str(),
            None => return Ok(out),
        },
    };
    // A few channels at most: a vector beats a hash set. Each carries its stored versions,
    // looked up once rather than at every checkpoint walked, and the depth of the ancestor
    // its seed came from (the parent is 0; `None` while it has none).
    let mut wanted: Vec<Wanted<'_>> = channels
        .iter()
        .map(|c| Wanted {
            channel: c.as_str(),
            versions: data.blobs.get(c),
            seed_depth: None,
        })
        .collect();
    wanted.sort_unstable_by_key(|w| w.channel);
    wanted.dedup_by_key(|w| w.channel);
    // First the walk, parent first, up to the ancestor where the last open channel finds
    // its seed; then the writes, oldest checkpoint first, straight into the answer.
    let mut path: Vec<&str> = Vec::with_capacity(32);
    let mut open = wanted.len();
    // A parent chain has at most as many links as the namespace has checkpoints. `put`
    // refuses a parent not older than its child, so no stored chain loops; the count keeps
    // the walk finite should that ever change.
    let mut budget = data.checkpoints.len();
    let mut cursor = data
        .checkpoints
        .get(target)
        .and_then(|s| s.parent.as_deref());
    // Ids order the map, and a parent is older than its child: in a history without forks
    // each parent is the entry just before its child, so the walk steps back through the
    // map (one comparison per ancestor) and searches it only after a fork.
    let mut older = data
        .checkpoints
        .range::<str, _>((Unbounded, Excluded(target)))
        .rev();
    while let Some(id) = cursor {
        if open == 0 {
            break;
        }
        let stored = match older.next() {
            Some((key, stored)) if key == id => stored,
            _ => {
                older = data
                    .checkpoints
                    .range::<str, _>((Unbounded, Included(id)))
                    .rev();
                match older.next() {
                    Some((key, stored)) if key == id => stored,
                    _ => break,
                }
            }
        };
        if budget == 0 {
            return Err(Error::Serialization {
                reason: format!("the parent chain loops at checkpoint {id:?}"),
                source: None,
            });
        }
        budget -= 1;
        let depth = path.len();
        path.push(id);
        for w in wanted.iter_mut().filter(|w| w.seed_depth.is_none()) {
            let Some(versions) = w.versions else { continue };
            let stored_value = stored
                .checkpoint
                .channel_versions
                .get(w.channel)
                .and_then(|v| versions.get(v))
                .and_then(Option::as_ref);
            if let Some(value) = stored_value {
                if let Some(h) = out.get_mut(w.channel) {
                    h.seed = Some(value.clone());
                }
                w.seed_depth = Some(depth);
                open -= 1;
            }
        }
        cursor = stored.parent.as_deref();
    }
    // A channel takes the writes of the ancestors from its seed's (included) to the parent.
    // Each checkpoint's writes are stored by (task_id, idx); a stable sort by task_path gives
    // the contract's (task_path, task_id, idx). `out` holds one history per wanted channel,
    // in the same (byte) order, so a write goes to its channel's by position.
    let mut histories: Vec<&mut DeltaChannelHistory> = out.values_mut().collect();
    debug_assert_eq!(histories.len(), wanted.len());
    // About one write per walked checkpoint for each channel, as a chat's steps append.
    for h in &mut histories {
        h.writes.reserve(path.len());
    }
    let mut run: Vec<(usize, &str, i64, &StoredWrite)> = Vec::new();
    for (depth, id) in path.iter().enumerate().rev() {
        let Some(writes) = data.writes.get(*id) else {
            continue;
        };
        run.clear();
        run.extend(writes.iter().filter_map(|((task_id, idx), w)| {
            let at = wanted.iter().position(|c| {
                c.channel == w.channel && c.seed_depth.is_none_or(|seed| depth <= seed)
            })?;
            Some((at, task_id.as_str(), *idx, w))
        }));
        run.sort_by(|a, b| a.3.task_path.cmp(&b.3.task_path));
        for (at, task_id, idx, w) in &run {
            histories[*at].writes.push(w.pending(task_id, *idx));
        }
    }
    Ok(out)
}

/// A channel asked for, while [`history`] walks.
struct Wanted<'a> {
    channel: &'a str,
    versions: Option<&'a Versions>,
    seed_depth: Option<usize>,
}
