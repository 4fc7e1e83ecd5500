//! `verify`: an integrity scan of stored threads, through the `Saver` API.
//!
//! For every checkpoint of every selected thread (all namespaces), it checks:
//! - **parent chains**: the parent a checkpoint names is stored in its namespace, unless it
//!   is older than every stored checkpoint of the namespace (history pruned away, counted
//!   as `pruned_histories`; checkpoint ids grow with time);
//! - **values**: every stored channel value (once, however many checkpoints name it) and
//!   pending write tagged `msgpack` or `json` decodes
//!   within [`DecodeLimits::default`] (values of foreign tags such as `pickle` are counted,
//!   not decoded);
//! - **tool calls**: the message list of each namespace's latest checkpoint (the state the
//!   next model call starts from; history is what it was) is one both OpenAI and Anthropic
//!   accept (checkpoint-sanitize's validator), except calls still in flight: unanswered
//!   calls of the last model message, with only their results after it, and calls answered
//!   by the checkpoint's pending writes are a run between its model and tool steps, not
//!   damage. `checkpoint repair` fixes what is found by writing a new latest checkpoint;
//! - **stored records** (the store's [`IntegrityScan`]): values a checkpoint names that are
//!   not stored (reads return such a checkpoint without the channel, as if it had been
//!   emptied), and pending writes of checkpoints that are not stored;
//! - **readability**: a thread whose listing fails with a non-transient error is reported
//!   (and the scan goes on with the next thread).
//!
//! A transient error (a connection lost) stops the scan: it says nothing about the data.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use checkpoint_core::{
    CheckpointTuple, DecodeLimits, IntegrityScan, ListOptions, Saver, StorageIssue, TypedValue,
    ValueType,
};
use checkpoint_sanitize::messages::{MessageList, Role, ViolationKind, pending_results};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::CliError;
use crate::migrate::Progress;
use crate::render::count;

/// How `verify` scans.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The channel holding the conversation (`messages`).
    pub channel: String,
    /// Threads scanned at once.
    pub jobs: usize,
    /// Issues listed at most (all are counted).
    pub max_listed: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            channel: "messages".to_owned(),
            jobs: 2,
            max_listed: 1000,
        }
    }
}

/// What is wrong with a stored thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum IssueKind {
    /// A checkpoint names a parent its namespace does not hold.
    BrokenParent,
    /// A value tagged `msgpack` or `json` does not decode.
    UndecodableValue,
    /// The message list breaks the providers' tool-call rules.
    OrphanToolCall,
    /// A value a checkpoint names is not stored.
    MissingValue,
    /// Pending writes name a checkpoint that is not stored.
    WritesWithoutCheckpoint,
    /// The thread could not be read.
    Unreadable,
}

impl IssueKind {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            IssueKind::BrokenParent => "broken_parent",
            IssueKind::UndecodableValue => "undecodable_value",
            IssueKind::OrphanToolCall => "orphan_tool_call",
            IssueKind::MissingValue => "missing_value",
            IssueKind::WritesWithoutCheckpoint => "writes_without_checkpoint",
            IssueKind::Unreadable => "unreadable",
        }
    }
}

/// One problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// Which kind.
    pub kind: IssueKind,
    /// The thread.
    pub thread_id: String,
    /// The namespace and checkpoint id, when the problem is one checkpoint's.
    pub at: Option<(String, String)>,
    /// What exactly.
    pub detail: String,
}

#[derive(Default)]
struct ThreadScan {
    checkpoints: u64,
    values: u64,
    foreign: u64,
    truncated: u64,
    issues: Vec<Issue>,
}

/// Scans the threads (with `scan`, the store's own records too); returns the report and
/// every issue found.
pub async fn verify(
    saver: Arc<dyn Saver>,
    scan: Option<Arc<dyn IntegrityScan>>,
    threads: Vec<String>,
    options: &VerifyOptions,
    progress: Arc<Progress>,
) -> Result<(Value, Vec<Issue>), CliError> {
    let started = Instant::now();
    progress
        .total_threads
        .store(threads.len() as u64, Ordering::Relaxed);
    let listing = futures::stream::iter(threads.iter().cloned())
        .map(|thread| {
            let (saver, progress) = (saver.clone(), progress.clone());
            async move {
                let found = scan_thread(&*saver, &thread, options, &progress).await?;
                progress.threads.fetch_add(1, Ordering::Relaxed);
                Ok::<_, CliError>(found)
            }
        })
        .buffer_unordered(options.jobs.max(1))
        .try_collect::<Vec<ThreadScan>>();
    // The store's records, [`RECORD_BATCH`] threads per call, alongside the listing.
    let records = async {
        let Some(scan) = &scan else {
            return Ok(Vec::new());
        };
        let batches: Vec<Vec<String>> = threads
            .chunks(RECORD_BATCH)
            .map(<[String]>::to_vec)
            .collect();
        futures::stream::iter(batches)
            .map(|batch| async move {
                let found = scan.scan_threads(&batch).await?;
                Ok::<_, CliError>(
                    found
                        .into_iter()
                        .flat_map(|(thread, issues)| record_issues(&thread, issues))
                        .collect::<Vec<Issue>>(),
                )
            })
            .buffer_unordered(2)
            .try_collect::<Vec<Vec<Issue>>>()
            .await
    };
    let (scans, records) = futures::try_join!(listing, records)?;
    let mut total = ThreadScan::default();
    for s in scans {
        total.checkpoints += s.checkpoints;
        total.values += s.values;
        total.foreign += s.foreign;
        total.truncated += s.truncated;
        total.issues.extend(s.issues);
    }
    total.issues.extend(records.into_iter().flatten());
    let mut issues = total.issues;
    // Threads finish in any order: the report lists by thread, kind and checkpoint.
    issues.sort_by(|a, b| (&a.thread_id, a.kind, &a.at).cmp(&(&b.thread_id, b.kind, &b.at)));
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for i in &issues {
        *by_kind.entry(i.kind.as_str()).or_default() += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let report = json!({
        "threads": threads.len(),
        "checkpoints": total.checkpoints,
        "values_checked": total.values,
        "foreign_values": total.foreign,
        "pruned_histories": total.truncated,
        "seconds": seconds,
        "checkpoints_per_second": if seconds > 0.0 { total.checkpoints as f64 / seconds } else { 0.0 },
        "records_scanned": scan.is_some(),
        "intact": issues.is_empty(),
        "issue_counts": by_kind,
        "issues": issues.iter().take(options.max_listed).map(|i| json!({
            "kind": i.kind.as_str(),
            "thread_id": i.thread_id,
            "checkpoint_ns": i.at.as_ref().map(|a| &a.0),
            "checkpoint_id": i.at.as_ref().map(|a| &a.1),
            "detail": i.detail,
        })).collect::<Vec<_>>(),
    });
    Ok((report, issues))
}

async fn scan_thread(
    saver: &dyn Saver,
    thread: &str,
    options: &VerifyOptions,
    progress: &Progress,
) -> Result<ThreadScan, CliError> {
    let mut scan = ThreadScan::default();
    // (namespace, id) of every checkpoint, and the parent each names.
    let mut stored: HashSet<(String, String)> = HashSet::new();
    let mut parents: Vec<((String, String), String)> = Vec::new();
    // The latest checkpoint of each namespace so far.
    let mut heads: HashMap<String, CheckpointTuple> = HashMap::new();
    let mut checked = HashSet::new();
    let mut stream = saver.list(ListOptions::thread(thread));
    loop {
        let tuple = match stream.try_next().await {
            Ok(Some(t)) => t,
            Ok(None) => break,
            Err(e) if e.is_transient() => return Err(e.into()),
            Err(e) => {
                scan.issues.push(Issue {
                    kind: IssueKind::Unreadable,
                    thread_id: thread.to_owned(),
                    at: None,
                    detail: format!("listing the thread failed: {e}"),
                });
                break;
            }
        };
        scan.checkpoints += 1;
        progress.checkpoints.fetch_add(1, Ordering::Relaxed);
        let at = (
            tuple.config.checkpoint_ns.clone(),
            tuple.checkpoint.id.clone(),
        );
        if let Some(parent) = tuple
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone())
        {
            parents.push((at.clone(), parent));
        }
        check_values(&tuple, &at, &mut checked, &mut scan);
        stored.insert(at);
        match heads.get(&tuple.config.checkpoint_ns) {
            Some(head) if head.checkpoint.id >= tuple.checkpoint.id => {}
            _ => {
                heads.insert(tuple.config.checkpoint_ns.clone(), tuple);
            }
        }
    }
    for head in heads.values() {
        let at = (
            head.config.checkpoint_ns.clone(),
            head.checkpoint.id.clone(),
        );
        check_messages(head, &at, &options.channel, &mut scan);
    }
    // The oldest stored checkpoint of each namespace: a missing parent older than that is
    // history pruned away (prune keeps the latest checkpoints), not a gap in the chain.
    let mut oldest: HashMap<&str, &str> = HashMap::new();
    for (ns, id) in &stored {
        let entry = oldest.entry(ns.as_str()).or_insert(id.as_str());
        if id.as_str() < *entry {
            *entry = id.as_str();
        }
    }
    for ((ns, id), parent) in parents {
        if stored.contains(&(ns.clone(), parent.clone())) {
            continue;
        }
        if oldest
            .get(ns.as_str())
            .is_some_and(|o| parent.as_str() < *o)
        {
            scan.truncated += 1;
        } else {
            scan.issues.push(Issue {
                kind: IssueKind::BrokenParent,
                thread_id: thread.to_owned(),
                at: Some((ns, id)),
                detail: format!("its parent {parent} is not stored"),
            });
        }
    }
    Ok(scan)
}

/// Threads per [`IntegrityScan::scan_threads`] call.
const RECORD_BATCH: usize = 64;

/// What the store's own records show about a thread (see the module docs), as issues.
fn record_issues(thread: &str, found: Vec<StorageIssue>) -> Vec<Issue> {
    found
        .into_iter()
        .filter_map(|issue| {
            let kind = match issue {
                StorageIssue::MissingValue { .. } => IssueKind::MissingValue,
                StorageIssue::WritesWithoutCheckpoint { .. } => IssueKind::WritesWithoutCheckpoint,
                _ => return None,
            };
            let (ns, id) = issue.at();
            Some(Issue {
                kind,
                thread_id: thread.to_owned(),
                at: Some((ns.to_owned(), id.to_owned())),
                detail: issue.to_string(),
            })
        })
        .collect()
}

/// Checks the values of `tuple`: each stored channel value once per thread (`checked`
/// holds the `(namespace, channel, version)` already decoded: checkpoints share the values
/// of unchanged channels), and every pending write.
fn check_values(
    tuple: &CheckpointTuple,
    at: &(String, String),
    checked: &mut HashSet<(String, String, String)>,
    scan: &mut ThreadScan,
) {
    let mut check = |what: &dyn Fn() -> String, value: &TypedValue| {
        scan.values += 1;
        match decodes(value) {
            Ok(()) => {}
            Err(None) => scan.foreign += 1,
            Err(Some(reason)) => scan.issues.push(Issue {
                kind: IssueKind::UndecodableValue,
                thread_id: tuple.config.thread_id.clone(),
                at: Some(at.clone()),
                detail: format!(
                    "{} ({}, {} bytes): {reason}",
                    what(),
                    value.type_tag.as_str(),
                    value.len()
                ),
            }),
        }
    };
    for (channel, value) in &tuple.checkpoint.channel_values {
        if let Some(version) = tuple.checkpoint.channel_versions.get(channel) {
            let key = (at.0.clone(), channel.clone(), version.to_string());
            if !checked.insert(key) {
                continue;
            }
        }
        check(&|| format!("channel {channel:?}"), value);
    }
    for w in &tuple.pending_writes {
        check(
            &|| {
                format!(
                    "pending write {} [{}] of task {}",
                    w.channel, w.idx, w.task_id
                )
            },
            &w.value,
        );
    }
}

/// `Ok` when the value decodes (or needs no decoding); `Err(None)` for a foreign tag this
/// library does not decode, `Err(Some(why))` when it is damaged.
fn decodes(value: &TypedValue) -> Result<(), Option<String>> {
    match value.type_tag {
        ValueType::Msgpack | ValueType::Json => value
            .to_dynamic_with(&DecodeLimits::default())
            .map(drop)
            .map_err(|e| Some(e.to_string())),
        ValueType::Other(_) => Err(None),
        _ => Ok(()),
    }
}

fn check_messages(
    tuple: &CheckpointTuple,
    at: &(String, String),
    channel: &str,
    scan: &mut ThreadScan,
) {
    let Some(value) = tuple.checkpoint.channel_values.get(channel) else {
        return;
    };
    // Undecodable lists are reported by `check_values`.
    let Ok(Some(list)) = MessageList::decode(value) else {
        return;
    };
    let messages = list.messages();
    let answered: BTreeSet<String> = pending_results(tuple, channel);
    // Unanswered calls of a model message followed only by tool results are in flight.
    let in_flight = |index: usize| messages[index + 1..].iter().all(|m| m.role() == Role::Tool);
    let mut seen = HashSet::new();
    for v in list.validate().violations {
        if v.kind == ViolationKind::UnansweredToolCall
            && (in_flight(v.message_index)
                || v.tool_call_id
                    .as_ref()
                    .is_some_and(|id| answered.contains(id)))
        {
            continue;
        }
        // Both providers usually report the same fault; list it once.
        if !seen.insert((v.kind, v.message_index, v.tool_call_id.clone())) {
            continue;
        }
        let message = &messages[v.message_index];
        let call = v.tool_call_id.as_deref().unwrap_or("(no id)");
        let what = match v.kind {
            ViolationKind::UnansweredToolCall => format!("tool call {call} has no result"),
            ViolationKind::UnexpectedToolResult => {
                format!("tool result for {call} answers no call of the message before it")
            }
            ViolationKind::DuplicateToolResult => format!("second result for tool call {call}"),
            ViolationKind::MissingId => "a tool call or result without an id".to_owned(),
            ViolationKind::ToolResultAfterContent => {
                format!("tool result for {call} after other content in its turn")
            }
            other => format!("{other:?} ({call})"),
        };
        scan.issues.push(Issue {
            kind: IssueKind::OrphanToolCall,
            thread_id: tuple.config.thread_id.clone(),
            at: Some(at.clone()),
            detail: format!(
                "{channel}[{}] ({}): {what}",
                v.message_index,
                message.id().unwrap_or("no id")
            ),
        });
    }
}

/// The report as text.
pub fn report_text(doc: &Value) -> String {
    let mut out = format!(
        "verified {}, {}, {} in {:.1} s ({:.0} checkpoints/s)\n",
        count(doc["threads"].as_u64().unwrap_or_default(), "thread"),
        count(
            doc["checkpoints"].as_u64().unwrap_or_default(),
            "checkpoint"
        ),
        count(doc["values_checked"].as_u64().unwrap_or_default(), "value"),
        doc["seconds"].as_f64().unwrap_or_default(),
        doc["checkpoints_per_second"].as_f64().unwrap_or_default(),
    );
    if doc["foreign_values"].as_u64().unwrap_or(0) > 0 {
        out.push_str(&format!(
            "{} values of foreign types (e.g. pickle) not decoded\n",
            doc["foreign_values"]
        ));
    }
    let issues = doc["issues"].as_array().map_or(&[][..], |a| a);
    if doc["intact"] == true {
        out.push_str("no issues found\n");
        return out;
    }
    let counts: Vec<String> = doc["issue_counts"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    out.push_str(&format!("issues: {}\n", counts.join(", ")));
    for i in issues {
        out.push_str(&format!(
            "  {:<18} {} {} {}: {}\n",
            i["kind"].as_str().unwrap_or_default(),
            i["thread_id"].as_str().unwrap_or_default(),
            i["checkpoint_ns"]
                .as_str()
                .map_or("-", |ns| if ns.is_empty() { "(root)" } else { ns }),
            i["checkpoint_id"].as_str().unwrap_or("-"),
            i["detail"].as_str().unwrap_or_default(),
        ));
    }
    out
}
