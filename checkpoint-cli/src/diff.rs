//! `diff` (what changed between two checkpoints of a thread) and `repair` (what
//! `SanitizeOnLoad` changes in a thread's latest message list, and writing it as a new
//! checkpoint).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use checkpoint_core::{CheckpointConfig, CheckpointTuple, Saver, TypedValue};
use checkpoint_sanitize::messages::MessageList;
use checkpoint_sanitize::{ChannelState, SanitizeConfig, SanitizeOnLoad, WriteBack};
use serde_json::{Value, json};

use crate::CliError;
use crate::render::{count, message_line, shorten, value_json};

const LINE_WIDTH: usize = 100;

async fn load(
    saver: &dyn Saver,
    thread: &str,
    ns: &str,
    id: Option<&str>,
) -> Result<CheckpointTuple, CliError> {
    let mut config = CheckpointConfig::new(thread).with_ns(ns);
    if let Some(id) = id {
        config = config.with_checkpoint_id(id);
    }
    saver.get_tuple(&config).await?.ok_or_else(|| {
        CliError::NotFound(match id {
            Some(id) => format!("no checkpoint {id:?} in thread {thread:?} namespace {ns:?}"),
            None => format!("no checkpoint in thread {thread:?} namespace {ns:?}"),
        })
    })
}

/// The messages added, removed and changed from list `a` to list `b`, matched by message id
/// (by content for messages without one); `None` unless each side is absent or a message
/// list.
pub fn message_diff(a: Option<&TypedValue>, b: Option<&TypedValue>) -> Option<Value> {
    let decode = |v: Option<&TypedValue>| match v {
        None => Some(None),
        Some(v) => MessageList::decode(v).ok().flatten().map(Some),
    };
    let (a, b) = (decode(a)?, decode(b)?);
    if a.is_none() && b.is_none() {
        return None;
    }
    // Key: the id, or the encoded element; value: (index, encoded element).
    let index = |list: &Option<MessageList>| -> HashMap<Vec<u8>, (usize, Vec<u8>)> {
        let Some(list) = list else {
            return HashMap::new();
        };
        list.messages()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let bytes = list.element_bytes(i).unwrap_or_default().to_vec();
                let key = match m.id() {
                    Some(id) => [b"id:".as_slice(), id.as_bytes()].concat(),
                    None => [b"el:".as_slice(), &bytes].concat(),
                };
                (key, (i, bytes))
            })
            .collect()
    };
    let (in_a, in_b) = (index(&a), index(&b));
    let line = |list: &Option<MessageList>, i: usize| {
        let list = list.as_ref().expect("indexed from this list");
        json!({"index": i, "id": list.messages()[i].id(), "line": message_line(i, &list.messages()[i], LINE_WIDTH)})
    };
    let mut added: Vec<(usize, Value)> = Vec::new();
    let mut changed: Vec<(usize, Value)> = Vec::new();
    for (key, (i, bytes)) in &in_b {
        match in_a.get(key) {
            None => added.push((*i, line(&b, *i))),
            Some((j, old)) if old != bytes => {
                changed.push((*i, json!({"from": line(&a, *j), "to": line(&b, *i)})))
            }
            Some(_) => {}
        }
    }
    let mut removed: Vec<(usize, Value)> = in_a
        .iter()
        .filter(|(key, _)| !in_b.contains_key(*key))
        .map(|(_, (i, _))| (*i, line(&a, *i)))
        .collect();
    for v in [&mut added, &mut changed, &mut removed] {
        v.sort_by_key(|(i, _)| *i);
    }
    let strip = |v: Vec<(usize, Value)>| v.into_iter().map(|(_, x)| x).collect::<Vec<_>>();
    Some(json!({
        "from_count": a.as_ref().map_or(0, MessageList::len),
        "to_count": b.as_ref().map_or(0, MessageList::len),
        "added": strip(added),
        "removed": strip(removed),
        "changed": strip(changed),
    }))
}

/// Channel by channel, what differs between two checkpoint tuples.
fn tuple_diff(a: &CheckpointTuple, b: &CheckpointTuple) -> (Vec<Value>, Vec<String>) {
    let channels: BTreeSet<&String> = a
        .checkpoint
        .channel_versions
        .keys()
        .chain(a.checkpoint.channel_values.keys())
        .chain(b.checkpoint.channel_versions.keys())
        .chain(b.checkpoint.channel_values.keys())
        .collect();
    let mut changes = Vec::new();
    let mut unchanged = Vec::new();
    for channel in channels {
        let (va, vb) = (
            a.checkpoint.channel_values.get(channel),
            b.checkpoint.channel_values.get(channel),
        );
        let (ra, rb) = (
            a.checkpoint.channel_versions.get(channel),
            b.checkpoint.channel_versions.get(channel),
        );
        if va == vb && ra == rb {
            unchanged.push(channel.clone());
            continue;
        }
        let change = match (va, vb) {
            (None, Some(_)) => "added",
            (Some(_), None) => "removed",
            (None, None) => "version",
            (Some(x), Some(y)) if x == y => "version",
            _ => "changed",
        };
        let mut entry = json!({
            "channel": channel,
            "change": change,
            "from_version": ra,
            "to_version": rb,
            "from_bytes": va.map(TypedValue::len),
            "to_bytes": vb.map(TypedValue::len),
        });
        if change != "version" {
            match message_diff(va, vb) {
                Some(messages) => entry["messages"] = messages,
                None => {
                    entry["from_value"] = va.map_or(Value::Null, value_json);
                    entry["to_value"] = vb.map_or(Value::Null, value_json);
                }
            }
        }
        changes.push(entry);
    }
    (changes, unchanged)
}

/// What changed from checkpoint `from` to checkpoint `to` of a thread: per channel, its
/// versions and value (for message lists, the messages added, removed and changed), and the
/// metadata of both.
pub async fn diff(
    saver: &dyn Saver,
    thread: &str,
    ns: &str,
    from: &str,
    to: &str,
) -> Result<Value, CliError> {
    let a = load(saver, thread, ns, Some(from)).await?;
    let b = load(saver, thread, ns, Some(to)).await?;
    let (changes, unchanged) = tuple_diff(&a, &b);
    Ok(json!({
        "thread_id": thread,
        "checkpoint_ns": ns,
        "from": {"checkpoint_id": from, "ts": a.checkpoint.ts, "metadata": a.metadata},
        "to": {"checkpoint_id": to, "ts": b.checkpoint.ts, "metadata": b.metadata},
        "changed": changes,
        "unchanged": unchanged,
    }))
}

fn messages_text(out: &mut String, messages: &Value) {
    for (sign, key) in [("+", "added"), ("-", "removed")] {
        for m in messages[key].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "    {sign} {}\n",
                m["line"].as_str().unwrap_or_default()
            ));
        }
    }
    for m in messages["changed"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "    ~ {}\n      now {}\n",
            m["from"]["line"].as_str().unwrap_or_default(),
            m["to"]["line"].as_str().unwrap_or_default()
        ));
    }
}

fn changes_text(out: &mut String, changes: &Value) {
    for c in changes.as_array().into_iter().flatten() {
        let channel = c["channel"].as_str().unwrap_or_default();
        let version = |v: &Value| match v {
            Value::Null => "-".to_owned(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!(
            "{} {channel} (version {} -> {})\n",
            c["change"].as_str().unwrap_or_default(),
            version(&c["from_version"]),
            version(&c["to_version"]),
        ));
        if c["messages"].is_object() {
            out.push_str(&format!(
                "  {} -> {} messages\n",
                c["messages"]["from_count"], c["messages"]["to_count"]
            ));
            messages_text(out, &c["messages"]);
        } else if c.get("from_value").is_some() {
            for (sign, key) in [("-", "from_value"), ("+", "to_value")] {
                if !c[key].is_null() {
                    out.push_str(&format!(
                        "  {sign} {}\n",
                        shorten(&c[key].to_string(), LINE_WIDTH)
                    ));
                }
            }
        }
    }
}

/// `diff` for people.
pub fn diff_text(doc: &Value) -> String {
    let mut out = format!(
        "thread {} namespace {:?}: {} -> {}\n",
        doc["thread_id"].as_str().unwrap_or_default(),
        doc["checkpoint_ns"].as_str().unwrap_or_default(),
        doc["from"]["checkpoint_id"].as_str().unwrap_or_default(),
        doc["to"]["checkpoint_id"].as_str().unwrap_or_default(),
    );
    changes_text(&mut out, &doc["changed"]);
    let unchanged = doc["unchanged"].as_array().map_or(0, Vec::len);
    if doc["changed"].as_array().is_none_or(Vec::is_empty) {
        out.push_str("no channel changed\n");
    }
    if unchanged > 0 {
        out.push_str(&format!("{unchanged} channels unchanged\n"));
    }
    out
}

/// What [`SanitizeOnLoad`] changes in the latest checkpoint of a thread's namespace: the
/// violations of its message list, the repairs, and the messages they add, remove or change.
/// With `apply`, the repaired state is written as a new checkpoint (a child of the latest,
/// compare-and-set where the store supports it; history is never rewritten); a repair that
/// cannot be written (the checkpoint has pending writes, another writer moved the head) is
/// [`CliError::NotApplied`].
pub async fn repair(
    saver: Arc<dyn Saver>,
    thread: &str,
    ns: &str,
    channel: &str,
    apply: bool,
) -> Result<Value, CliError> {
    let loaded = load(&*saver, thread, ns, None).await?;
    let config = SanitizeConfig::default().channel(channel);
    let sanitizer = SanitizeOnLoad::new(saver.clone(), config.clone());
    let (repaired, report) = sanitizer.sanitize_tuple(loaded.clone())?;
    let state = match &report.state {
        ChannelState::Absent => "absent".to_owned(),
        ChannelState::NotMessages => "not_messages".to_owned(),
        ChannelState::Undecodable { .. } => "undecodable".to_owned(),
        ChannelState::Valid => "valid".to_owned(),
        ChannelState::Repaired => "repaired".to_owned(),
        other => format!("{other:?}"),
    };
    let mut doc = json!({
        "thread_id": thread,
        "checkpoint_ns": ns,
        "checkpoint_id": loaded.checkpoint.id,
        "channel": channel,
        "state": state,
        "violations": report.violations.iter().map(|v| json!({
            "provider": format!("{:?}", v.provider),
            "kind": format!("{:?}", v.kind),
            "message_index": v.message_index,
            "tool_call_id": v.tool_call_id,
        })).collect::<Vec<_>>(),
        "actions": report.actions.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>(),
        "deferred_to_pending_writes": report.deferred,
        "messages": message_diff(
            loaded.checkpoint.channel_values.get(channel),
            repaired.checkpoint.channel_values.get(channel),
        ),
        "applied": false,
        "new_checkpoint_id": null,
    });
    if let ChannelState::Undecodable { reason } = &report.state {
        doc["undecodable"] = json!(reason);
    }
    if apply && report.repaired() {
        let writer = SanitizeOnLoad::new(saver, config.write_back(true));
        let at = CheckpointConfig::new(thread)
            .with_ns(ns)
            .with_checkpoint_id(loaded.checkpoint.id.clone());
        let at = if writer.get_ref().capabilities().compare_and_set {
            at
        } else {
            CheckpointConfig::new(thread).with_ns(ns)
        };
        let (_, written) = writer
            .get_tuple_with_report(&at)
            .await?
            .ok_or_else(|| CliError::NotApplied("the checkpoint is gone".to_owned()))?;
        match written.write_back {
            WriteBack::Written(config) => {
                doc["applied"] = json!(true);
                doc["new_checkpoint_id"] = json!(config.checkpoint_id);
            }
            WriteBack::Skipped { reason } => return Err(CliError::NotApplied(reason)),
            WriteBack::NotRequested => {
                return Err(CliError::NotApplied(
                    "the latest checkpoint changed while repairing; run repair again".to_owned(),
                ));
            }
            other => return Err(CliError::NotApplied(format!("{other:?}"))),
        }
    }
    Ok(doc)
}

/// `repair` for people.
pub fn repair_text(doc: &Value) -> String {
    let mut out = format!(
        "thread {} namespace {:?}, latest checkpoint {}: {} {}\n",
        doc["thread_id"].as_str().unwrap_or_default(),
        doc["checkpoint_ns"].as_str().unwrap_or_default(),
        doc["checkpoint_id"].as_str().unwrap_or_default(),
        doc["channel"].as_str().unwrap_or_default(),
        match doc["state"].as_str().unwrap_or_default() {
            "absent" => "is not set; nothing to repair",
            "not_messages" => "is not a message list; nothing to repair",
            "undecodable" => "cannot be decoded; nothing can be repaired",
            "valid" => "is a list both providers accept; nothing to repair",
            _ => "needs repairs",
        }
    );
    if let Some(reason) = doc["undecodable"].as_str() {
        out.push_str(&format!("  {reason}\n"));
    }
    let actions = doc["actions"].as_array().map_or(&[][..], |a| a);
    if !actions.is_empty() {
        out.push_str(&format!("{}:\n", count(actions.len() as u64, "change")));
        if doc["messages"].is_object() {
            messages_text(&mut out, &doc["messages"]);
        }
    }
    for id in doc["deferred_to_pending_writes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "  tool call {} left alone: a pending write answers it\n",
            id.as_str().unwrap_or_default()
        ));
    }
    if doc["applied"] == true {
        out.push_str(&format!(
            "written as new checkpoint {}\n",
            doc["new_checkpoint_id"].as_str().unwrap_or_default()
        ));
    } else if !actions.is_empty() {
        out.push_str(
            "not written: run again with --apply to store the repaired state as a new checkpoint\n",
        );
    }
    out
}
