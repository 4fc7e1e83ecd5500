//! `migrate`: copy threads from one store to another, exactly, streaming, resumable.
//!
//! A thread is copied namespace by namespace, oldest checkpoint first, so a parent is always
//! in the target before its children. A thread of up to 64 checkpoints is read with one
//! `list` call; of a longer one only the addresses (namespace and id) are held, and each
//! checkpoint is read, written and dropped in turn. A checkpoint's put and its pending
//! writes go out together (writes are keyed by address). Every write is one
//! the contract makes idempotent (a put of an existing id replaces it with the same content,
//! a value version is stored once, a pending write exists once per task and index), so a
//! migration killed at any point and run again ends in the same state as one that never
//! stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use checkpoint_core::{
    ChannelVersions, CheckpointConfig, CheckpointTuple, ListOptions, PendingWrite, PutOptions,
    PutWritesOptions, Saver, TypedValue,
};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::CliError;
use crate::select::{self, Selection};

/// What `migrate` copies and how.
#[derive(Clone, Debug, Default)]
pub struct MigrateOptions {
    /// The threads to copy.
    pub selection: Selection,
    /// Threads copied at once.
    pub jobs: usize,
    /// Re-read both sides of every copied thread and compare them.
    pub verify: bool,
    /// Count what would be copied; write nothing.
    pub dry_run: bool,
}

/// Progress counters, shared with whoever reports progress while a migration or a scan runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Threads finished.
    pub threads: AtomicU64,
    /// Checkpoints copied (in a dry run counted, in a scan checked).
    pub checkpoints: AtomicU64,
    /// Pending writes copied (by a migration).
    pub writes: AtomicU64,
    /// Threads in all, once known.
    pub total_threads: AtomicU64,
}

/// One thread's difference between source and target, found by `--verify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The thread.
    pub thread_id: String,
    /// The namespace and checkpoint id, when the difference is one checkpoint's.
    pub at: Option<(String, String)>,
    /// What differs.
    pub what: String,
}

/// The addresses `(namespace, checkpoint id)` of a thread, oldest first within each
/// namespace, namespaces in order (so a subgraph's checkpoints follow the root's).
async fn addresses(source: &dyn Saver, thread: &str) -> Result<Vec<(String, String)>, CliError> {
    let mut ids: Vec<(String, String)> = source
        .list(ListOptions::thread(thread))
        .map_ok(|t| (t.config.checkpoint_ns, t.checkpoint.id))
        .try_collect()
        .await?;
    ids.sort();
    Ok(ids)
}

/// Writes one checkpoint read from the source into the target, with its pending writes.
/// `parent_versions`: the channel versions of its parent when the parent was the previous
/// checkpoint written, so only the channels that changed are sent (the others are stored).
/// The put and the `put_writes` calls go out at once: writes are keyed by the checkpoint's
/// address, so they belong to it whichever is stored first.
async fn write_tuple(
    target: &dyn Saver,
    tuple: CheckpointTuple,
    parent_versions: Option<&ChannelVersions>,
) -> Result<(ChannelVersions, u64), CliError> {
    let CheckpointTuple {
        config,
        checkpoint,
        metadata,
        parent_config,
        pending_writes,
    } = tuple;
    let new_versions: ChannelVersions = checkpoint
        .channel_versions
        .iter()
        .filter(|(channel, version)| {
            parent_versions.is_none_or(|p| p.get(*channel) != Some(*version))
        })
        .map(|(c, v)| (c.clone(), v.clone()))
        .collect();
    let versions = checkpoint.channel_versions.clone();
    let put_at = CheckpointConfig {
        thread_id: config.thread_id.clone(),
        checkpoint_ns: config.checkpoint_ns.clone(),
        checkpoint_id: parent_config.and_then(|p| p.checkpoint_id),
        ..CheckpointConfig::default()
    };
    let stored = CheckpointConfig::new(config.thread_id.clone())
        .with_ns(config.checkpoint_ns.clone())
        .with_checkpoint_id(checkpoint.id.clone());
    let writes = pending_writes.len() as u64;
    let put = target.put(
        &put_at,
        checkpoint,
        metadata,
        new_versions,
        PutOptions::new(),
    );
    let batches = write_batches(pending_writes);
    let put_writes =
        futures::future::try_join_all(batches.into_iter().map(|(options, (task_id, batch))| {
            let stored = &stored;
            async move { target.put_writes(stored, batch, &task_id, options).await }
        }));
    futures::future::try_join(put, put_writes).await?;
    Ok((versions, writes))
}

/// Largest index of a regular write [`write_batches`] recreates with fillers.
const MAX_FILLED_INDEX: i64 = 4096;

/// Pending writes as the `put_writes` calls that recreate them with their indexes, per task
/// and path: the special-channel writes in one call (their indexes are fixed), and the others
/// in one call in index order (a write's index is its position in the call). When the
/// regular indexes have gaps (LangGraph gives a task's writes their position in its own
/// call, special channels included: `[__resume__, messages, counter]` stores `messages` at
/// 1), the gaps are filled with one of the task's special writes: a special write takes its
/// fixed index, not its position, and in a call with regular writes an existing write is
/// kept, so a filler stores nothing the special-channel call does not store as well.
#[allow(clippy::type_complexity)]
fn write_batches(
    writes: Vec<PendingWrite>,
) -> Vec<(PutWritesOptions, (String, Vec<(String, TypedValue)>))> {
    let mut groups: BTreeMap<(String, String), (Vec<PendingWrite>, Vec<PendingWrite>)> =
        BTreeMap::new();
    for w in writes {
        let group = groups
            .entry((w.task_path.clone(), w.task_id.clone()))
            .or_default();
        if w.idx < 0 {
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
                // Without a special write to fill with, the writes keep their order.
                _ => regular.into_iter().map(|w| (w.channel, w.value)).collect(),
            };
            calls.push((options(), (task_id.clone(), batch)));
        }
        if !special.is_empty() {
            let batch = special.into_iter().map(|w| (w.channel, w.value)).collect();
            calls.push((options(), (task_id, batch)));
        }
    }
    calls
}

/// Checkpoints a thread may have to be copied from one read of its listing.
const ONE_READ: usize = 64;

/// Copies one thread; returns its number of checkpoints. A thread of at most [`ONE_READ`]
/// checkpoints (all namespaces) is read with one `list` call and written oldest first; a
/// longer one is copied address by address (its addresses are listed, then each checkpoint
/// is read with `get_tuple`), so memory stays bounded by [`ONE_READ`] checkpoints per job
/// whatever the thread's length.
async fn copy_thread(
    source: &dyn Saver,
    target: &dyn Saver,
    thread: &str,
    progress: &Progress,
) -> Result<u64, CliError> {
    let mut first: Vec<CheckpointTuple> = source
        .list(ListOptions::thread(thread).limit(ONE_READ + 1))
        .try_collect()
        .await?;
    if first.len() <= ONE_READ {
        first.sort_by(|a, b| {
            (&a.config.checkpoint_ns, &a.checkpoint.id)
                .cmp(&(&b.config.checkpoint_ns, &b.checkpoint.id))
        });
        let n = first.len() as u64;
        let mut last: Option<(String, String, ChannelVersions)> = None;
        for tuple in first {
            write_in_order(target, tuple, &mut last, progress).await?;
        }
        return Ok(n);
    }
    drop(first);
    let mut last: Option<(String, String, ChannelVersions)> = None;
    let ids = addresses(source, thread).await?;
    for (ns, id) in &ids {
        let at = CheckpointConfig::new(thread)
            .with_ns(ns.clone())
            .with_checkpoint_id(id.clone());
        // Gone since it was listed (deleted or pruned meanwhile): nothing to copy.
        let Some(tuple) = source.get_tuple(&at).await? else {
            continue;
        };
        write_in_order(target, tuple, &mut last, progress).await?;
    }
    Ok(ids.len() as u64)
}

/// Writes `tuple`, sending only the channels that changed when its parent was the
/// checkpoint written just before (`last`, updated).
async fn write_in_order(
    target: &dyn Saver,
    tuple: CheckpointTuple,
    last: &mut Option<(String, String, ChannelVersions)>,
    progress: &Progress,
) -> Result<(), CliError> {
    let (ns, id) = (
        tuple.config.checkpoint_ns.clone(),
        tuple.checkpoint.id.clone(),
    );
    let parent = tuple
        .parent_config
        .as_ref()
        .and_then(|p| p.checkpoint_id.clone());
    let parent_versions = match (&*last, &parent) {
        (Some((last_ns, last_id, versions)), Some(p)) if *last_ns == ns && last_id == p => {
            Some(versions)
        }
        _ => None,
    };
    let (versions, writes) = write_tuple(target, tuple, parent_versions).await?;
    *last = Some((ns, id, versions));
    progress.checkpoints.fetch_add(1, Ordering::Relaxed);
    progress.writes.fetch_add(writes, Ordering::Relaxed);
    Ok(())
}

/// Compares a thread on both sides, checkpoint by checkpoint (newest first, all namespaces):
/// addresses, parents, checkpoints (values byte for byte with their tags), metadata and
/// pending writes.
pub async fn compare_thread(
    source: &dyn Saver,
    target: &dyn Saver,
    thread: &str,
) -> Result<Vec<Difference>, CliError> {
    let mut diffs = Vec::new();
    let mut a = source.list(ListOptions::thread(thread));
    let mut b = target.list(ListOptions::thread(thread));
    let differ = |at: Option<&CheckpointTuple>, what: String| Difference {
        thread_id: thread.to_owned(),
        at: at.map(|t| (t.config.checkpoint_ns.clone(), t.checkpoint.id.clone())),
        what,
    };
    loop {
        match (a.try_next().await?, b.try_next().await?) {
            (None, None) => break,
            (Some(x), None) => diffs.push(differ(Some(&x), "missing in the target".into())),
            (None, Some(y)) => diffs.push(differ(Some(&y), "only in the target".into())),
            (Some(x), Some(y)) => {
                let fields = [
                    ("address", x.config != y.config),
                    ("parent", x.parent_config != y.parent_config),
                    ("checkpoint", x.checkpoint != y.checkpoint),
                    ("metadata", x.metadata != y.metadata),
                    ("pending writes", x.pending_writes != y.pending_writes),
                ];
                let bad: Vec<&str> = fields.iter().filter(|f| f.1).map(|f| f.0).collect();
                if !bad.is_empty() {
                    diffs.push(differ(Some(&x), format!("differs in {}", bad.join(", "))));
                }
            }
        }
        if diffs.len() >= 100 {
            diffs.push(differ(None, "more differences not listed".into()));
            break;
        }
    }
    Ok(diffs)
}

/// Runs a migration and returns its report: threads, checkpoints and pending writes copied,
/// time, rate, and (with `verify`) every difference found.
pub async fn migrate(
    source: Arc<dyn Saver>,
    target: Option<Arc<dyn Saver>>,
    options: &MigrateOptions,
    progress: Arc<Progress>,
) -> Result<(Value, Vec<Difference>), CliError> {
    let started = Instant::now();
    let threads = select::select_ids(&*source, &options.selection).await?;
    progress
        .total_threads
        .store(threads.len() as u64, Ordering::Relaxed);
    let jobs = options.jobs.max(1);
    let verify = options.verify;
    let results: Vec<Vec<Difference>> = futures::stream::iter(threads.iter().cloned())
        .map(|thread| {
            let (source, target, progress) = (source.clone(), target.clone(), progress.clone());
            async move {
                let mut diffs = Vec::new();
                match &target {
                    None => {
                        let n = addresses(&*source, &thread).await?.len() as u64;
                        progress.checkpoints.fetch_add(n, Ordering::Relaxed);
                    }
                    Some(target) => {
                        copy_thread(&*source, &**target, &thread, &progress).await?;
                        if verify {
                            diffs = compare_thread(&*source, &**target, &thread).await?;
                        }
                    }
                }
                progress.threads.fetch_add(1, Ordering::Relaxed);
                Ok::<_, CliError>(diffs)
            }
        })
        .buffer_unordered(jobs)
        .try_collect()
        .await?;
    let diffs: Vec<Difference> = results.into_iter().flatten().collect();
    let seconds = started.elapsed().as_secs_f64();
    let checkpoints = progress.checkpoints.load(Ordering::Relaxed);
    let report = json!({
        "dry_run": options.dry_run,
        "threads": threads.len(),
        "checkpoints": checkpoints,
        "pending_writes": progress.writes.load(Ordering::Relaxed),
        "seconds": seconds,
        "checkpoints_per_second": if seconds > 0.0 { checkpoints as f64 / seconds } else { 0.0 },
        "verified": verify && !options.dry_run,
        "differences": diffs.iter().map(|d| json!({
            "thread_id": d.thread_id,
            "checkpoint_ns": d.at.as_ref().map(|a| &a.0),
            "checkpoint_id": d.at.as_ref().map(|a| &a.1),
            "what": d.what,
        })).collect::<Vec<_>>(),
    });
    Ok((report, diffs))
}

/// The report as text.
pub fn report_text(doc: &Value) -> String {
    let mut out = String::new();
    let count =
        |key: &str, noun: &str| crate::render::count(doc[key].as_u64().unwrap_or_default(), noun);
    let rate = format!(
        "in {:.1} s ({:.0} checkpoints/s)",
        doc["seconds"].as_f64().unwrap_or_default(),
        doc["checkpoints_per_second"].as_f64().unwrap_or_default(),
    );
    out.push_str(&if doc["dry_run"] == true {
        format!(
            "would copy {}, {} (dry run: nothing written)\n",
            count("threads", "thread"),
            count("checkpoints", "checkpoint"),
        )
    } else {
        format!(
            "copied {}, {}, {} {rate}\n",
            count("threads", "thread"),
            count("checkpoints", "checkpoint"),
            count("pending_writes", "pending write"),
        )
    });
    if doc["verified"] == true {
        let diffs = doc["differences"].as_array().map_or(&[][..], |d| d);
        if diffs.is_empty() {
            out.push_str("verified: source and target hold the same checkpoints\n");
        } else {
            out.push_str(&format!("verify: {} differences\n", diffs.len()));
            for d in diffs {
                out.push_str(&format!(
                    "  {} {} {}: {}\n",
                    d["thread_id"].as_str().unwrap_or_default(),
                    d["checkpoint_ns"].as_str().unwrap_or("-"),
                    d["checkpoint_id"].as_str().unwrap_or("-"),
                    d["what"].as_str().unwrap_or_default(),
                ));
            }
        }
    }
    out
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
        use checkpoint_core::writes::RESUME;
        let calls = write_batches(vec![
            write("t", 2, "counter"),
            write("t", -4, RESUME),
            write("t", 1, "messages"),
            write("u", 0, "a"),
            write("u", 1, "b"),
            write("v", 3, "late"),
        ]);
        let by_task: Vec<(&str, Vec<&str>)> = calls
            .iter()
            .map(|(_, (task, batch))| (task.as_str(), channels(batch)))
            .collect();
        assert_eq!(
            by_task,
            [
                ("t", vec![RESUME, "messages", "counter"]),
                ("t", vec![RESUME]),
                ("u", vec!["a", "b"]),
                // No special write to fill with: the order is kept, the index is not.
                ("v", vec!["late"]),
            ]
        );
    }
}
