//! Builders shared by the clauses and available to backend tests.

use std::collections::BTreeMap;

use checkpoint_core::{
    ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, ListOptions, PutOptions, PutWritesOptions, Result, Saver, SaverExt, Source,
    TypedValue,
};
use serde_json::json;

/// A config for `thread` in namespace `ns`, latest checkpoint.
pub fn cfg(thread: &str, ns: &str) -> CheckpointConfig {
    CheckpointConfig::new(thread).with_ns(ns)
}

/// A msgpack value of a JSON literal.
pub fn val(v: serde_json::Value) -> TypedValue {
    TypedValue::msgpack(&v).expect("encode")
}

/// A checkpoint that is the successor of `prev` (or a fresh one), with `changes` applied:
/// each channel set to the value (or removed for `None`) and its version bumped. Returns the
/// checkpoint and its `new_versions`.
pub fn step(
    prev: Option<&Checkpoint>,
    changes: &[(&str, Option<TypedValue>)],
) -> (Checkpoint, ChannelVersions) {
    let mut c = match prev {
        Some(p) => p.successor(),
        None => Checkpoint::new(),
    };
    let mut new_versions = BTreeMap::new();
    for (channel, value) in changes {
        let version = match value {
            Some(v) => c.set_typed(channel, v.clone()),
            None => {
                let next = ChannelVersion::next(c.channel_versions.get(*channel));
                c.channel_values.remove(*channel);
                c.channel_versions
                    .insert((*channel).to_owned(), next.clone());
                next
            }
        };
        new_versions.insert((*channel).to_owned(), version);
    }
    if let Some(p) = prev {
        c.versions_seen
            .insert("agent".to_owned(), p.channel_versions.clone());
    }
    (c, new_versions)
}

/// The checkpoint as the saver should return it: values of channels whose latest put value
/// is known. Used to compare round trips.
pub fn expected(c: &Checkpoint) -> Checkpoint {
    c.clone()
}

/// One put checkpoint in a chain built by [`put_chain`].
#[derive(Clone, Debug)]
pub struct Put {
    /// The address returned by `put`.
    pub config: CheckpointConfig,
    /// The checkpoint as put (with every current value).
    pub checkpoint: Checkpoint,
    /// The metadata as put.
    pub metadata: CheckpointMetadata,
}

/// Puts `n` checkpoints in a chain on `(thread, ns)`: step `i` changes channel `counter` to
/// `i`, step 0 also sets `static` to a fixed string; metadata is
/// `{"source": "input"|"loop", "step": i, "parents": {}, "run_id": run, "parity": "even"|"odd"}`.
pub async fn put_chain(
    saver: &dyn Saver,
    thread: &str,
    ns: &str,
    n: usize,
    run: &str,
) -> Result<Vec<Put>> {
    let mut out: Vec<Put> = Vec::with_capacity(n);
    for i in 0..n {
        let mut changes = vec![("counter", Some(val(json!(i))))];
        if i == 0 {
            changes.push(("static", Some(val(json!("unchanging value")))));
        }
        let (checkpoint, versions) = step(out.last().map(|p| &p.checkpoint), &changes);
        let metadata = CheckpointMetadata::for_step(
            if i == 0 { Source::Input } else { Source::Loop },
            i as i64,
        )
        .with_run_id(run)
        .with("parity", if i % 2 == 0 { "even" } else { "odd" });
        let parent = match out.last() {
            Some(p) => p.config.clone(),
            None => cfg(thread, ns),
        };
        let config = saver
            .put(
                &parent,
                checkpoint.clone(),
                metadata.clone(),
                versions,
                PutOptions::new(),
            )
            .await?;
        out.push(Put {
            config,
            checkpoint,
            metadata,
        });
    }
    Ok(out)
}

/// Puts one small checkpoint (channel `a` = 1) as the child of the checkpoint `parent`
/// names (or as the first of `parent`'s namespace when it names none); returns its address.
pub async fn put_child(saver: &dyn Saver, parent: &CheckpointConfig) -> Result<CheckpointConfig> {
    let (checkpoint, versions) = step(None, &[("a", Some(val(json!(1))))]);
    saver
        .put(
            parent,
            checkpoint,
            CheckpointMetadata::new(),
            versions,
            PutOptions::new(),
        )
        .await
}

/// Polls `check` every 20 ms until it holds, for at most `within`; whether it held.
pub async fn eventually(within: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    loop {
        if check() {
            return true;
        }
        if started.elapsed() >= within {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Records two writes of task `task` against `config`.
pub async fn put_two_writes(
    saver: &dyn Saver,
    config: &CheckpointConfig,
    task: &str,
) -> Result<()> {
    saver
        .put_writes(
            config,
            vec![
                ("a".into(), val(json!(1))),
                ("b".into(), val(json!({"x": "y"}))),
            ],
            task,
            PutWritesOptions::new(),
        )
        .await
}

/// Lists everything `options` selects.
pub async fn list(saver: &dyn Saver, options: ListOptions) -> Vec<CheckpointTuple> {
    saver.list_all(options).await.expect("list")
}

/// The checkpoint ids of tuples, in order.
pub fn ids(tuples: &[CheckpointTuple]) -> Vec<String> {
    tuples.iter().map(|t| t.checkpoint.id.clone()).collect()
}

/// `(thread, ns, id)` of tuples, in order.
pub fn addresses(tuples: &[CheckpointTuple]) -> Vec<(String, String, String)> {
    tuples
        .iter()
        .map(|t| {
            (
                t.config.thread_id.clone(),
                t.config.checkpoint_ns.clone(),
                t.checkpoint.id.clone(),
            )
        })
        .collect()
}

/// A metadata filter from a JSON object literal.
pub fn filter(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().expect("a JSON object").clone()
}
