//! `prune`: keep the latest checkpoints of each thread's namespaces, delete the rest.

use checkpoint_core::{ListOptions, PruneStrategy, Saver};
use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::CliError;
use crate::render::count;
use crate::select::ThreadSummary;

/// Threads pruned per call to the saver.
const BATCH: usize = 100;

async fn count_checkpoints(saver: &dyn Saver, thread: &str) -> Result<u64, CliError> {
    let mut n = 0;
    let mut stream = saver.list(ListOptions::thread(thread));
    while stream.try_next().await?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Prunes `threads` to their latest `keep` checkpoints per namespace (with what delta
/// channels of kept checkpoints need, see [`Saver::prune`]), a batch of threads per call;
/// reports the checkpoints before and after. With `dry_run`, nothing is deleted and the
/// report counts the checkpoints beyond the latest `keep` of each namespace (an upper
/// bound of what would go).
pub async fn prune(
    saver: &dyn Saver,
    threads: &[ThreadSummary],
    keep: usize,
    dry_run: bool,
) -> Result<Value, CliError> {
    let before: u64 = threads.iter().map(|t| t.checkpoints).sum();
    let after = if dry_run {
        let mut kept = 0;
        for t in threads {
            let mut per_ns: std::collections::HashMap<String, u64> = Default::default();
            let mut stream = saver.list(ListOptions::thread(&t.thread_id));
            while let Some(c) = stream.try_next().await? {
                let n = per_ns.entry(c.config.checkpoint_ns).or_default();
                if (*n as usize) < keep {
                    *n += 1;
                    kept += 1;
                }
            }
        }
        kept
    } else {
        let ids: Vec<String> = threads.iter().map(|t| t.thread_id.clone()).collect();
        for batch in ids.chunks(BATCH) {
            saver.prune(batch, PruneStrategy::KeepLast(keep)).await?;
        }
        let mut n = 0;
        for id in &ids {
            n += count_checkpoints(saver, id).await?;
        }
        n
    };
    Ok(json!({
        "dry_run": dry_run,
        "keep_last": keep,
        "threads": threads.len(),
        "checkpoints_before": before,
        "checkpoints_after": after,
        "deleted": before.saturating_sub(after),
    }))
}

/// The report as text.
pub fn report_text(doc: &Value) -> String {
    let n = |key: &str| doc[key].as_u64().unwrap_or_default();
    if doc["dry_run"] == true {
        format!(
            "would delete up to {} of {} in {} (keeping the latest {} of each namespace; dry run: nothing deleted)\n",
            n("deleted"),
            count(n("checkpoints_before"), "checkpoint"),
            count(n("threads"), "thread"),
            n("keep_last"),
        )
    } else {
        format!(
            "deleted {} of {} in {}; {} remain (the latest {} of each namespace, with the ancestors their delta channels need)\n",
            n("deleted"),
            count(n("checkpoints_before"), "checkpoint"),
            count(n("threads"), "thread"),
            n("checkpoints_after"),
            n("keep_last"),
        )
    }
}
