//! `migrate`: copy threads from one store to another, exactly, streaming, resumable.
//!
//! A thread is copied namespace by namespace, oldest checkpoint first, so a parent is always
//! in the target before its children. A thread of up to 64 checkpoints is read with one
//! `list` call and stored with one [`Saver::import`] call; of a longer one only the
//! addresses (namespace and id) are held, and its checkpoints are read and imported 64 at a
//! time. `import` is idempotent by contract (a checkpoint at an existing address is
//! replaced with the same content, a value version is stored once, a pending write exists
//! once per task and index), so a migration killed at any point and run again ends in the
//! same state as one that never stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use checkpoint_core::{CheckpointConfig, CheckpointTuple, ListOptions, Saver};
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

/// Checkpoints a thread may have to be copied from one read of its listing.
const ONE_READ: usize = 64;

/// Copies one thread; returns its number of checkpoints. A thread of at most [`ONE_READ`]
/// checkpoints (all namespaces) is read with one `list` call and imported oldest first with
/// one [`Saver::import`] call; a longer one is copied address by address (its addresses
/// are listed, then each checkpoint is read with `get_tuple` and imported [`ONE_READ`] at a
/// time), so memory stays bounded by [`ONE_READ`] checkpoints per job whatever the
/// thread's length.
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
        import(target, first, progress).await?;
        return Ok(n);
    }
    drop(first);
    let ids = addresses(source, thread).await?;
    let mut batch = Vec::with_capacity(ONE_READ);
    for (ns, id) in &ids {
        let at = CheckpointConfig::new(thread)
            .with_ns(ns.clone())
            .with_checkpoint_id(id.clone());
        // Gone since it was listed (deleted or pruned meanwhile): nothing to copy.
        let Some(tuple) = source.get_tuple(&at).await? else {
            continue;
        };
        batch.push(tuple);
        if batch.len() == ONE_READ {
            import(target, std::mem::take(&mut batch), progress).await?;
        }
    }
    import(target, batch, progress).await?;
    Ok(ids.len() as u64)
}

/// Imports `tuples` (oldest first) into the target and counts them.
async fn import(
    target: &dyn Saver,
    tuples: Vec<CheckpointTuple>,
    progress: &Progress,
) -> Result<(), CliError> {
    if tuples.is_empty() {
        return Ok(());
    }
    let (n, writes) = (
        tuples.len() as u64,
        tuples.iter().map(|t| t.pending_writes.len() as u64).sum(),
    );
    target.import(tuples).await?;
    progress.checkpoints.fetch_add(n, Ordering::Relaxed);
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
