//! [`Saver::delta_channel_history`](crate::Saver::delta_channel_history) read straight from
//! the store, under one lock: each ancestor's versions, values and writes, without building
//! its tuple.

use std::collections::{BTreeMap, HashSet};

use crate::delta::DeltaChannelHistory;
use crate::{Error, PendingWrite, Result};

use super::store::NsData;

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
    // A few channels at most: a vector beats a hash set.
    let mut remaining: Vec<&str> = channels.iter().map(String::as_str).collect();
    remaining.sort_unstable();
    remaining.dedup();
    // Per checkpoint walked, newest first: its writes of the channels still open there.
    let mut levels: Vec<Vec<PendingWrite>> = Vec::new();
    let mut seen = HashSet::new();
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
        if !seen.insert(id) {
            return Err(Error::Serialization {
                reason: format!("the parent chain loops at checkpoint {id:?}"),
                source: None,
            });
        }
        // Writes in (task_path, task_id, idx) order: stored by (task_id, idx), then a stable
        // sort by task_path.
        let mut writes: Vec<PendingWrite> = data
            .writes
            .get(id)
            .into_iter()
            .flatten()
            .filter(|(_, w)| remaining.contains(&w.channel.as_str()))
            .map(|((task_id, idx), w)| PendingWrite {
                task_id: task_id.clone(),
                channel: w.channel.clone(),
                value: w.value.clone(),
                idx: *idx,
                task_path: w.task_path.clone(),
            })
            .collect();
        if !writes.is_empty() {
            writes.sort_by(|a, b| a.task_path.cmp(&b.task_path));
            levels.push(writes);
        }
        remaining.retain(|channel| {
            let stored_value = stored
                .checkpoint
                .channel_versions
                .get(*channel)
                .and_then(|v| data.blobs.get(*channel).and_then(|b| b.get(v)))
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
    for w in levels.into_iter().rev().flatten() {
        if let Some(h) = out.get_mut(&w.channel) {
            h.writes.push(w);
        }
    }
    Ok(out)
}
