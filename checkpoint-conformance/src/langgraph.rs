//! Checking readers of LangGraph's own layouts against the real Python library.
//!
//! The interop scripts (`checkpoint-sqlite/interop/langgraph_sqlite.py`,
//! `checkpoint-mongo/interop/langgraph_mongodb.py`) run LangGraph's graphs on LangGraph's
//! savers and print every checkpoint as LangGraph reads it back (`expectations`: ids,
//! parent, metadata, versions, and each value and pending write as LangGraph's serializer
//! encodes it alone). [`as_langgraph_json`] puts a tuple a reader of ours returned in the
//! same form, so the two compare as JSON.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use checkpoint_core::{CheckpointTuple, TypedValue};
use serde_json::{Value, json};

/// The Python with the pinned LangGraph packages (`CHECKPOINT_TEST_LANGGRAPH_PYTHON`, set by
/// `scripts/services/langgraph.sh`): `None` (the test skips) when unset, a panic when
/// servers are required ([`servers_required`](crate::servers_required)).
pub fn python() -> Option<String> {
    match std::env::var("CHECKPOINT_TEST_LANGGRAPH_PYTHON") {
        Ok(py) if !py.is_empty() => Some(py),
        _ if crate::servers_required() => panic!(
            "CHECKPOINT_TEST_LANGGRAPH_PYTHON is required under CI (scripts/services/langgraph.sh installs it)"
        ),
        _ => {
            eprintln!("SKIPPED: CHECKPOINT_TEST_LANGGRAPH_PYTHON is not set");
            None
        }
    }
}

/// Runs `script` with `args` on `python` and parses the JSON document it prints; a failing
/// script panics with its stderr.
pub fn run_python(python: &str, script: &Path, args: &[&str]) -> Value {
    let out = Command::new(python)
        // Python sets iterate in hash order; a fixed seed makes their encoding repeatable.
        .env("PYTHONHASHSEED", "0")
        .arg(script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python {} {args:?} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("python prints JSON")
}

/// A tuple in the form the interop scripts print (`expectations`), without the readable
/// `json` renderings; pending writes in one order whatever order a store keeps them in (by
/// task, channel and value).
pub fn as_langgraph_json(t: &CheckpointTuple) -> Value {
    let value = |v: &TypedValue| json!({"type": v.type_tag.as_str(), "b64": B64.encode(&v.bytes)});
    let mut writes: Vec<Value> = t
        .pending_writes
        .iter()
        .map(|w| {
            let mut v = value(&w.value);
            v["task_id"] = json!(w.task_id);
            v["channel"] = json!(w.channel);
            v
        })
        .collect();
    sort_writes(&mut writes);
    json!({
        "thread_id": t.config.thread_id,
        "checkpoint_ns": t.config.checkpoint_ns,
        "checkpoint_id": t.checkpoint.id,
        "parent_checkpoint_id": t.parent_config.as_ref().and_then(|p| p.checkpoint_id.clone()),
        "metadata": t.metadata,
        "v": t.checkpoint.v,
        "ts": t.checkpoint.ts,
        "channel_versions": t.checkpoint.channel_versions,
        "versions_seen": t.checkpoint.versions_seen,
        "updated_channels": t.checkpoint.updated_channels,
        "values": t.checkpoint.channel_values.iter()
            .map(|(c, v)| (c.clone(), value(v)))
            .collect::<BTreeMap<_, _>>(),
        "writes": writes,
    })
}

/// One checkpoint of `expectations` without the readable `json` renderings, its writes in
/// [`as_langgraph_json`]'s order.
pub fn comparable(expected: &Value) -> Value {
    let mut e = expected.clone();
    if let Some(values) = e["values"].as_object_mut() {
        for v in values.values_mut() {
            if let Some(v) = v.as_object_mut() {
                v.remove("json");
            }
        }
    }
    if let Some(writes) = e["writes"].as_array_mut() {
        for w in writes.iter_mut() {
            if let Some(w) = w.as_object_mut() {
                w.remove("json");
            }
        }
        sort_writes(writes);
    }
    e
}

fn sort_writes(writes: &mut [Value]) {
    let key = |w: &Value| {
        ["task_id", "channel", "type", "b64"].map(|k| w[k].as_str().unwrap_or_default().to_owned())
    };
    writes.sort_by_key(key);
}

/// `ours` (everything a reader returned, newest first) matches LangGraph's own reading
/// (`expected`, from `expectations`) checkpoint by checkpoint.
pub fn assert_reads_like_langgraph(ours: &[CheckpointTuple], expected: &[Value]) {
    assert_eq!(ours.len(), expected.len(), "how many checkpoints");
    for (t, e) in ours.iter().zip(expected) {
        assert_eq!(
            as_langgraph_json(t),
            comparable(e),
            "checkpoint {}",
            t.checkpoint.id
        );
    }
}
