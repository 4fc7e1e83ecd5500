//! [`Saver::delta_channel_history`](crate::Saver::delta_channel_history) read straight from
//! the store, under one lock: each ancestor's versions, values and writes, without building
//! its tuple.

use std::collections::BTreeMap;

use crate::delta::DeltaChannelHistory;
use crate::{Error, PendingWrite, Result};

use super::store::{NsData, Versions};

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
    // A few channels at most: a vector beats a hash set. Each open channel carries its
    // stored versions, looked up once rather than at every checkpoint walked.
    let mut remaining: Vec<(&str, Option<&Versions>)> = channels
        .iter()
        .map(|c| (c.as_str(), data.blobs.get(c)))
        .collect();
    remaining.sort_unstable_by_key(|(c, _)| *c);
    remaining.dedup_by_key(|(c, _)| *c);
    // Every write on the path, newest checkpoint first, each checkpoint's in order; `levels`
    // marks where each checkpoint's run ends, so the runs can be replayed oldest first.
    let mut found: Vec<PendingWrite> = Vec::new();
    let mut levels: Vec<usize> = Vec::new();
    // A parent chain has at most as many links as the namespace has checkpoints. `put`
    // refuses a parent not older than its child, so no stored chain loops; the count keeps
    // the walk finite should that ever change.
    let mut budget = data.checkpoints.len();
    let mut cursor = data
        .checkpoints
        .get(target)
        .and_then(|s| s.parent.as_deref());
    while let Some(id) = cursor {
        if remaining.is_empty() {
            break;
        }
        let Some(stored) = data.checkpoints.get(id) else {
            break;
        };
        if budget == 0 {
            return Err(Error::Serialization {
                reason: format!("the parent chain loops at checkpoint {id:?}"),
                source: None,
            });
        }
        budget -= 1;
        // Writes in (task_path, task_id, idx) order: stored by (task_id, idx), then a stable
        // sort by task_path.
        let start = found.len();
        found.extend(
            data.writes
                .get(id)
                .into_iter()
                .flatten()
                .filter(|(_, w)| remaining.iter().any(|(c, _)| *c == w.channel))
                .map(|((task_id, idx), w)| w.pending(task_id, *idx)),
        );
        if found.len() > start {
            found[start..].sort_by(|a, b| a.task_path.cmp(&b.task_path));
            levels.push(found.len());
        }
        remaining.retain(|(channel, versions)| {
            let stored_value = stored
                .checkpoint
                .channel_versions
                .get(*channel)
                .and_then(|v| versions.and_then(|b| b.get(v)))
                .and_then(Option::as_ref);
            match stored_value {
                Some(value) => {
                    if let Some(h) = out.get_mut(*channel) {
                        h.seed = Some(value.clone());
                    }
                    false
                }
                None => true,
            }
        });
        cursor = stored.parent.as_deref();
    }
    // Oldest checkpoint first, each checkpoint's writes still in order: reversing the whole
    // vector reverses the order of the runs and each run, so each run is turned back.
    let total = found.len();
    found.reverse();
    let mut start = 0;
    for end in levels {
        found[total - end..total - start].reverse();
        start = end;
    }
    for w in found {
        if let Some(h) = out.get_mut(&w.channel) {
            h.writes.push(w);
        }
    }
    Ok(out)
}
