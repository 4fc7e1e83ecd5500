//! [`Saver::import`] through `put` and `put_writes` ([`import_by_put`]), and the pieces a
//! backend's own import needs.

use std::collections::BTreeMap;

use crate::writes::special_index;
use crate::{
    ChannelVersions, CheckpointConfig, CheckpointTuple, PendingWrite, PutOptions, PutWritesOptions,
    Result, Saver, TypedValue,
};

/// Largest index of a regular write [`write_calls`] recreates with fillers.
const MAX_FILLED_INDEX: i64 = 4096;

/// Where `put` stores `tuple`: its thread and namespace, and its parent's id as the
/// config's `checkpoint_id`.
pub fn put_address(tuple: &CheckpointTuple) -> CheckpointConfig {
    CheckpointConfig {
        thread_id: tuple.config.thread_id.clone(),
        checkpoint_ns: tuple.config.checkpoint_ns.clone(),
        checkpoint_id: tuple
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone()),
        ..CheckpointConfig::default()
    }
}

/// The default [`Saver::import`]: each tuple with one `put` and its pending writes with the
/// `put_writes` calls of [`write_calls`], sent at once (writes are keyed by address). A
/// tuple whose parent is the tuple before it sends only the channels whose version changed
/// (the others are stored already); any other sends every channel.
pub async fn import_by_put<S: Saver + ?Sized>(
    saver: &S,
    tuples: Vec<CheckpointTuple>,
) -> Result<()> {
    let mut last: Option<(CheckpointConfig, ChannelVersions)> = None;
    for tuple in tuples {
        let at = put_address(&tuple);
        let follows_last = last.as_ref().filter(|(previous, _)| {
            previous.thread_id == at.thread_id
                && previous.checkpoint_ns == at.checkpoint_ns
                && at.checkpoint_id.is_some()
                && previous.checkpoint_id == at.checkpoint_id
        });
        let new_versions: ChannelVersions = tuple
            .checkpoint
            .channel_versions
            .iter()
            .filter(|(channel, version)| {
                follows_last.is_none_or(|(_, parent)| parent.get(*channel) != Some(*version))
            })
            .map(|(c, v)| (c.clone(), v.clone()))
            .collect();
        let stored = CheckpointConfig::new(tuple.config.thread_id.clone())
            .with_ns(tuple.config.checkpoint_ns.clone())
            .with_checkpoint_id(tuple.checkpoint.id.clone());
        let versions = tuple.checkpoint.channel_versions.clone();
        let put = saver.put(
            &at,
            tuple.checkpoint,
            tuple.metadata,
            new_versions,
            PutOptions::new(),
        );
        let calls = write_calls(tuple.pending_writes);
        let put_writes =
            futures::future::try_join_all(calls.into_iter().map(|(options, task_id, batch)| {
                let stored = &stored;
                async move { saver.put_writes(stored, batch, &task_id, options).await }
            }));
        futures::future::try_join(put, put_writes).await?;
        last = Some((stored, versions));
    }
    Ok(())
}

/// One `put_writes` call: its options, task id and writes.
pub type WriteCall = (PutWritesOptions, String, Vec<(String, TypedValue)>);

/// Pending writes as the `put_writes` calls `(options, task id, writes)` that recreate them
/// with their indexes, per task and path: the special-channel writes in one call (their
/// indexes are fixed), and the others in one call in index order (a write's index is its
/// position in the call). When the regular indexes have gaps (LangGraph gives a task's
/// writes their position in its own call, special channels included: `[__resume__,
/// messages, counter]` stores `messages` at 1), the gaps are filled with one of the task's
/// special writes: a special write takes its fixed index, not its position, and in a call
/// with regular writes an existing write is kept, so a filler stores nothing the
/// special-channel call does not store as well. Without a special write to fill with (or
/// beyond index 4096) the regular writes keep their order but not their gaps; a write to a
/// special channel always gets that channel's fixed index (writes of LangGraph releases
/// that stored them at their position move there), and a call made only of special writes
/// replaces existing ones, as `put_writes` does.
pub fn write_calls(writes: Vec<PendingWrite>) -> Vec<WriteCall> {
    let mut groups: BTreeMap<(String, String), (Vec<PendingWrite>, Vec<PendingWrite>)> =
        BTreeMap::new();
    for w in writes {
        let group = groups
            .entry((w.task_path.clone(), w.task_id.clone()))
            .or_default();
        if special_index(&w.channel).is_some() {
            group.0.push(w);
        } else {
            group.1.push(w);
        }
    }
    let mut calls = Vec::new();
    for ((task_path, task_id), (mut special, mut regular)) in groups {
        special.sort_by_key(|w| w.idx);
        regular.sort_by_key(|w| w.idx);
        let options = || PutWritesOptions::new().task_path(task_path.clone());
        let gaps = regular
            .iter()
            .enumerate()
            .any(|(i, w)| usize::try_from(w.idx).ok() != Some(i));
        let filler = special
            .first()
            .map(|w| (w.channel.clone(), w.value.clone()));
        if !regular.is_empty() {
            let batch: Vec<(String, TypedValue)> = match filler {
                Some(filler)
                    if gaps && regular.last().is_some_and(|w| w.idx <= MAX_FILLED_INDEX) =>
                {
                    let mut batch = Vec::new();
                    for w in regular {
                        while i64::try_from(batch.len()).unwrap_or(i64::MAX) < w.idx {
                            batch.push(filler.clone());
                        }
                        batch.push((w.channel, w.value));
                    }
                    batch
                }
                _ => regular.into_iter().map(|w| (w.channel, w.value)).collect(),
            };
            calls.push((options(), task_id.clone(), batch));
        }
        if !special.is_empty() {
            let batch = special.into_iter().map(|w| (w.channel, w.value)).collect();
            calls.push((options(), task_id, batch));
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(task: &str, idx: i64, channel: &str) -> PendingWrite {
        PendingWrite {
            task_id: task.into(),
            channel: channel.into(),
            value: TypedValue::msgpack(&channel).unwrap(),
            idx,
            task_path: "~p".into(),
        }
    }

    fn channels(batch: &[(String, TypedValue)]) -> Vec<&str> {
        batch.iter().map(|(c, _)| c.as_str()).collect()
    }

    #[test]
    fn gaps_in_indexes_are_filled_with_a_special_write_of_the_task() {
        use crate::writes::RESUME;
        let calls = write_calls(vec![
            write("t", 2, "counter"),
            write("t", -4, RESUME),
            write("t", 1, "messages"),
            write("u", 0, "a"),
            write("u", 1, "b"),
            write("v", 3, "late"),
            // An older LangGraph's interrupt at its position: it takes its fixed index.
            write("w", 0, crate::writes::INTERRUPT),
        ]);
        let by_task: Vec<(&str, Vec<&str>)> = calls
            .iter()
            .map(|(_, task, batch)| (task.as_str(), channels(batch)))
            .collect();
        assert_eq!(
            by_task,
            [
                ("t", vec![RESUME, "messages", "counter"]),
                ("t", vec![RESUME]),
                ("u", vec!["a", "b"]),
                // No special write to fill with: the order is kept, the index is not.
                ("v", vec!["late"]),
                ("w", vec![crate::writes::INTERRUPT]),
            ]
        );
    }
}
