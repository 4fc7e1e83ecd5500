//! `threads`, `history` and `show`: what a store holds, as JSON documents the commands print
//! as they are (`--json`) or as text for people.

use std::collections::{BTreeMap, HashMap};

use crate::select::{Selection, ThreadSummary};

use checkpoint_core::{CheckpointConfig, CheckpointTuple, ListOptions, Saver};
use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::CliError;
use crate::render::{message_lines, shorten, value_json};

/// The selected threads with their number of checkpoints (all namespaces) and their latest
/// checkpoint, most recent first; at most `limit` (see [`select`](crate::select::select)).
pub async fn threads(
    saver: &dyn Saver,
    selection: &Selection,
    limit: Option<usize>,
) -> Result<Value, CliError> {
    let mut rows = crate::select::select(saver, selection).await?;
    let total = rows.len();
    rows.truncate(limit.unwrap_or(usize::MAX));
    Ok(threads_doc(total, &rows))
}

fn threads_doc(total: usize, rows: &[ThreadSummary]) -> Value {
    json!({
        "threads": total,
        "shown": rows.iter().map(|s| json!({
            "thread_id": s.thread_id,
            "checkpoints": s.checkpoints,
            "latest_checkpoint_id": s.latest_id,
            "latest_ts": s.latest_ts,
        })).collect::<Vec<_>>(),
    })
}

/// The parent chain of a thread's checkpoint (`id`, or the latest of the namespace), newest
/// first: one entry per checkpoint with its time, step, source, the channels it changed, its
/// stored size and its pending writes. `broken_at` names a parent the chain points to that
/// is not stored.
pub async fn history(
    saver: &dyn Saver,
    thread: &str,
    ns: &str,
    id: Option<&str>,
) -> Result<Value, CliError> {
    let mut by_id: HashMap<String, (Option<String>, Value)> = HashMap::new();
    let mut newest: Option<String> = None;
    let mut stream = saver.list(ListOptions::thread(thread).namespace(ns));
    while let Some(t) = stream.try_next().await? {
        if newest.is_none() {
            newest = Some(t.checkpoint.id.clone());
        }
        let parent = t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone());
        by_id.insert(t.checkpoint.id.clone(), (parent, summary(&t)));
    }
    let start = match id {
        Some(id) => id.to_owned(),
        None => newest.ok_or_else(|| no_checkpoint(thread, ns, None))?,
    };
    if !by_id.contains_key(&start) {
        return Err(no_checkpoint(thread, ns, Some(&start)));
    }
    let mut chain = Vec::new();
    let mut cursor = Some(start);
    let mut broken_at = None;
    while let Some(id) = cursor {
        match by_id.remove(&id) {
            Some((parent, line)) => {
                chain.push(line);
                cursor = parent;
            }
            None => {
                // Not stored, or seen already (a loop in damaged data).
                broken_at = Some(id);
                cursor = None;
            }
        }
    }
    Ok(json!({
        "thread_id": thread,
        "checkpoint_ns": ns,
        "chain": chain,
        "broken_at": broken_at,
    }))
}

fn summary(t: &CheckpointTuple) -> Value {
    let size: usize = t
        .checkpoint
        .channel_values
        .values()
        .map(|v| v.bytes.len())
        .chain(t.pending_writes.iter().map(|w| w.value.bytes.len()))
        .sum();
    json!({
        "checkpoint_id": t.checkpoint.id,
        "ts": t.checkpoint.ts,
        "step": t.metadata.get("step"),
        "source": t.metadata.get("source"),
        "updated_channels": t.checkpoint.updated_channels,
        "bytes": size,
        "pending_writes": t.pending_writes.len(),
    })
}

fn no_checkpoint(thread: &str, ns: &str, id: Option<&str>) -> CliError {
    CliError::NotFound(match id {
        Some(id) => format!("no checkpoint {id:?} in thread {thread:?} namespace {ns:?}"),
        None => format!("no checkpoint in thread {thread:?} namespace {ns:?}"),
    })
}

/// One checkpoint (`id`, or the latest of the namespace): address, parent, metadata,
/// versions, every channel value decoded, and the pending writes.
pub async fn show(
    saver: &dyn Saver,
    thread: &str,
    ns: &str,
    id: Option<&str>,
) -> Result<(Value, CheckpointTuple), CliError> {
    let mut config = CheckpointConfig::new(thread).with_ns(ns);
    if let Some(id) = id {
        config = config.with_checkpoint_id(id);
    }
    let t = saver
        .get_tuple(&config)
        .await?
        .ok_or_else(|| no_checkpoint(thread, ns, id))?;
    let values: BTreeMap<&String, Value> = t
        .checkpoint
        .channel_values
        .iter()
        .map(|(c, v)| {
            (
                c,
                json!({"type": v.type_tag.as_str(), "value": value_json(v)}),
            )
        })
        .collect();
    let writes: Vec<Value> = t
        .pending_writes
        .iter()
        .map(|w| {
            json!({
                "task_id": w.task_id,
                "task_path": w.task_path,
                "channel": w.channel,
                "idx": w.idx,
                "type": w.value.type_tag.as_str(),
                "value": value_json(&w.value),
            })
        })
        .collect();
    let doc = json!({
        "thread_id": t.config.thread_id,
        "checkpoint_ns": t.config.checkpoint_ns,
        "checkpoint_id": t.checkpoint.id,
        "parent_checkpoint_id": t.parent_config.as_ref().and_then(|p| p.checkpoint_id.clone()),
        "ts": t.checkpoint.ts,
        "v": t.checkpoint.v,
        "metadata": t.metadata,
        "channel_versions": t.checkpoint.channel_versions,
        "values": values,
        "pending_writes": writes,
    });
    Ok((doc, t))
}

/// `threads` for people: a table.
pub fn threads_text(doc: &Value) -> String {
    let rows: Vec<[String; 3]> = doc["shown"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            [
                text(&r["thread_id"]),
                r["checkpoints"].to_string(),
                text(&r["latest_ts"]),
            ]
        })
        .collect();
    let mut out = table(["THREAD", "CHECKPOINTS", "LATEST"], &rows);
    let (total, shown) = (doc["threads"].as_u64().unwrap_or(0), rows.len());
    out.push_str(&format!("{shown} of {total} threads\n"));
    out
}

/// `history` for people: a table, newest first.
pub fn history_text(doc: &Value) -> String {
    let rows: Vec<[String; 6]> = doc["chain"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let changed = match c["updated_channels"].as_array() {
                Some(a) => a.iter().map(text).collect::<Vec<_>>().join(","),
                None => "-".to_owned(),
            };
            [
                text(&c["checkpoint_id"]),
                text(&c["ts"]),
                text(&c["step"]),
                text(&c["source"]),
                shorten(&changed, 40),
                format!("{} B, {} writes", c["bytes"], c["pending_writes"]),
            ]
        })
        .collect();
    let mut out = table(["ID", "TIME", "STEP", "SOURCE", "CHANGED", "SIZE"], &rows);
    if let Some(id) = doc["broken_at"].as_str() {
        out.push_str(&format!("chain broken: parent {id} is not stored\n"));
    }
    out
}

/// `show` for people: the address, metadata, each value (message lists one line per
/// message), and the pending writes.
pub fn show_text(doc: &Value, t: &CheckpointTuple) -> String {
    let mut out = format!(
        "checkpoint {} (thread {}, namespace {:?})\nparent     {}\ntime       {}\nmetadata   {}\n",
        text(&doc["checkpoint_id"]),
        text(&doc["thread_id"]),
        doc["checkpoint_ns"].as_str().unwrap_or_default(),
        text(&doc["parent_checkpoint_id"]),
        text(&doc["ts"]),
        doc["metadata"],
    );
    out.push_str("values\n");
    for (channel, value) in &t.checkpoint.channel_values {
        match message_lines(value, 100) {
            Some(lines) => {
                out.push_str(&format!("  {channel}: {} messages\n", lines.len()));
                for line in lines {
                    out.push_str(&format!("    {line}\n"));
                }
            }
            None => out.push_str(&format!(
                "  {channel}: {}\n",
                shorten(&value_json(value).to_string(), 100)
            )),
        }
    }
    out.push_str(&format!("pending writes: {}\n", t.pending_writes.len()));
    for w in &t.pending_writes {
        let path = if w.task_path.is_empty() {
            String::new()
        } else {
            format!(" ({})", w.task_path)
        };
        out.push_str(&format!(
            "  {}{path} [{}] -> {}: {}\n",
            w.task_id,
            w.idx,
            w.channel,
            shorten(&value_json(&w.value).to_string(), 80)
        ));
    }
    out
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
