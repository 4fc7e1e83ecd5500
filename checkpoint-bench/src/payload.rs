//! Pre-generated payloads of one workload thread (WORKLOAD.md §2–§4), and the checkpoint,
//! metadata, versions, config and writes of each step built from them.

use std::collections::BTreeMap;

use checkpoint_core::{
    CHECKPOINT_FORMAT_VERSION, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig,
    CheckpointMetadata, Result, Source, TypedValue,
};
use serde::{Deserialize, Serialize};

use crate::rng::SplitMix64;

/// Length of `big_doc`.
pub const BIG_DOC_LEN: usize = 65536;
/// Length of each message's content.
pub const MSG_CONTENT_LEN: usize = 480;
/// Length of `scratch` and of each pending write value.
pub const SCRATCH_LEN: usize = 1024;

/// Channel names.
pub const MESSAGES: &str = "messages";
/// The scratch channel.
pub const SCRATCH: &str = "scratch";
/// The big document channel.
pub const BIG_DOC: &str = "big_doc";
/// The node named in `versions_seen`.
pub const NODE: &str = "agent";

/// One element of the `messages` channel: `{"type", "id", "content"}`, encoded as a msgpack
/// map with these keys in this order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `"human"` for even `k`, `"ai"` for odd `k`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `"msg-%04d" % k`.
    pub id: String,
    /// The message content drawn at step `k`.
    pub content: String,
}

impl Message {
    /// Message `k` with its content.
    pub fn new(k: usize, content: &str) -> Self {
        Self {
            kind: if k.is_multiple_of(2) { "human" } else { "ai" }.to_owned(),
            id: format!("msg-{k:04}"),
            content: content.to_owned(),
        }
    }
}

/// Delta variant: a checkpoint stores a snapshot of `messages` every this many updates
/// (LangGraph's default `snapshot_frequency`).
pub const SNAPSHOT_EVERY: usize = 100;

/// One element of the delta variant's `messages` value: the first message, or a later
/// step's `messages` write (a string), each encoded as it is stored elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum DeltaEntry<'a> {
    /// `m_0`.
    Message(Message),
    /// `wmsg_k`.
    Write(&'a str),
}

/// A version in the spec's form `"%032d.%016d" % (counter, suffix)`.
pub fn version(counter: u64, suffix: u64) -> ChannelVersion {
    ChannelVersion::Str(format!("{counter:032}.{suffix:016}"))
}

/// The payloads of one step of one thread, raw (for validation) and encoded (for the calls).
#[derive(Clone, Debug)]
pub struct StepPayload {
    /// `msg_content_n`.
    pub msg_content: String,
    /// `scratch_n`.
    pub scratch: String,
    /// `wmsg_n`, the pending write to `messages`.
    pub wmsg: String,
    /// `wscr_n`, the pending write to `scratch`.
    pub wscr: String,
    /// `task_id_n`.
    pub task_id: String,
    /// `V_msg(n+1)`.
    pub messages_version: ChannelVersion,
    /// `V_scr(n+1)`.
    pub scratch_version: ChannelVersion,
    /// `[m_0, ..., m_n]` as msgpack.
    pub messages_value: TypedValue,
    /// `scratch_n` as msgpack.
    pub scratch_value: TypedValue,
    /// `wmsg_n` as msgpack.
    pub wmsg_value: TypedValue,
    /// `wscr_n` as msgpack.
    pub wscr_value: TypedValue,
    /// Delta variant: the snapshot of `messages` this step's checkpoint stores, if any.
    pub delta_snapshot: Option<TypedValue>,
}

/// Everything one thread writes, generated before timing starts.
#[derive(Clone, Debug)]
pub struct ThreadPayload {
    /// `thread-%05d` or `w4thread-%05d`.
    pub thread_id: String,
    /// The thread number seeding the generator.
    pub tn: u64,
    /// `big_doc`.
    pub big_doc: String,
    /// `big_doc` as msgpack.
    pub big_doc_value: TypedValue,
    /// `V_doc(1)`.
    pub big_doc_version: ChannelVersion,
    /// One entry per step `0 .. S-1`.
    pub steps: Vec<StepPayload>,
    /// Whether `messages` is a delta channel (the `--delta` variant, docs/workload.md §9).
    pub delta: bool,
}

impl ThreadPayload {
    /// Draws the payloads of `steps` steps for thread `tn` under `seed`, in the spec's order.
    pub fn generate(seed: u64, tn: u64, thread_id: String, steps: usize) -> Result<Self> {
        let mut g = SplitMix64::for_thread(seed, tn);
        let big_doc = g.text(BIG_DOC_LEN);
        let mut big_doc_version = None;
        let mut messages = Vec::with_capacity(steps);
        let mut out = Vec::with_capacity(steps);
        for n in 0..steps {
            let msg_content = g.text(MSG_CONTENT_LEN);
            let scratch = g.text(SCRATCH_LEN);
            let wmsg = g.text(SCRATCH_LEN);
            let wscr = g.text(SCRATCH_LEN);
            let task_id = g.uuid4();
            let counter = n as u64 + 1;
            let messages_version = version(counter, g.suffix());
            let scratch_version = version(counter, g.suffix());
            if n == 0 {
                big_doc_version = Some(version(1, g.suffix()));
            }
            messages.push(Message::new(n, &msg_content));
            out.push(StepPayload {
                messages_value: TypedValue::msgpack(&messages)?,
                scratch_value: TypedValue::msgpack(&scratch)?,
                wmsg_value: TypedValue::msgpack(&wmsg)?,
                wscr_value: TypedValue::msgpack(&wscr)?,
                delta_snapshot: None,
                msg_content,
                scratch,
                wmsg,
                wscr,
                task_id,
                messages_version,
                scratch_version,
            });
        }
        Ok(Self {
            thread_id,
            tn,
            big_doc_value: TypedValue::msgpack(&big_doc)?,
            big_doc,
            // With zero steps the document is never written; its version is never used.
            big_doc_version: big_doc_version.unwrap_or_else(|| version(1, 0)),
            steps: out,
            delta: false,
        })
    }

    /// The same thread with `messages` as a delta channel (docs/workload.md §9).
    pub fn with_delta(mut self, delta: bool) -> Result<Self> {
        self.delta = delta;
        let snapshots = (0..self.steps.len())
            .map(|n| {
                if delta {
                    self.delta_snapshot(n)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        for (step, snapshot) in self.steps.iter_mut().zip(snapshots) {
            step.delta_snapshot = snapshot;
        }
        Ok(self)
    }

    /// Delta variant: the logical `messages` value at step `n`, `[m_0, wmsg_0, ...,
    /// wmsg_{n-1}]` (the first message, then each earlier step's `messages` write).
    pub fn delta_list(&self, n: usize) -> Vec<DeltaEntry<'_>> {
        std::iter::once(DeltaEntry::Message(Message::new(
            0,
            &self.steps[0].msg_content,
        )))
        .chain(self.steps[..n].iter().map(|s| DeltaEntry::Write(&s.wmsg)))
        .collect()
    }

    /// Delta variant: whether the checkpoint of step `n` stores a snapshot of `messages`
    /// (the first step and every [`SNAPSHOT_EVERY`]th update after it).
    pub fn is_snapshot_step(n: usize) -> bool {
        n.is_multiple_of(SNAPSHOT_EVERY)
    }

    /// Delta variant: the snapshot the checkpoint of step `n` stores, if it stores one.
    pub fn delta_snapshot(&self, n: usize) -> Result<Option<TypedValue>> {
        if !Self::is_snapshot_step(n) {
            return Ok(None);
        }
        let list = TypedValue::msgpack(&self.delta_list(n))?;
        checkpoint_core::delta::snapshot(&list).map(Some)
    }

    /// The expected `messages` list at step `n`.
    pub fn messages(&self, n: usize) -> Vec<Message> {
        (0..=n)
            .map(|k| Message::new(k, &self.steps[k].msg_content))
            .collect()
    }

    /// `channel_versions` of the checkpoint of step `n`.
    pub fn channel_versions(&self, n: usize) -> ChannelVersions {
        let s = &self.steps[n];
        BTreeMap::from([
            (MESSAGES.to_owned(), s.messages_version.clone()),
            (SCRATCH.to_owned(), s.scratch_version.clone()),
            (BIG_DOC.to_owned(), self.big_doc_version.clone()),
        ])
    }

    /// `new_versions` of step `n`: all three channels at `n = 0`, then messages and scratch.
    pub fn new_versions(&self, n: usize) -> ChannelVersions {
        let mut v = self.channel_versions(n);
        if n > 0 {
            v.remove(BIG_DOC);
        }
        v
    }

    /// The checkpoint of step `n`, with the given id and timestamp.
    pub fn checkpoint(&self, n: usize, id: String, ts: String) -> Checkpoint {
        let s = &self.steps[n];
        let mut channel_values = BTreeMap::from([
            (SCRATCH.to_owned(), s.scratch_value.clone()),
            (BIG_DOC.to_owned(), self.big_doc_value.clone()),
        ]);
        let messages = if self.delta {
            self.steps[n].delta_snapshot.clone()
        } else {
            Some(s.messages_value.clone())
        };
        if let Some(m) = messages {
            channel_values.insert(MESSAGES.to_owned(), m);
        }
        let versions_seen = if n == 0 {
            BTreeMap::new()
        } else {
            let prev = &self.steps[n - 1];
            BTreeMap::from([(
                NODE.to_owned(),
                BTreeMap::from([
                    (MESSAGES.to_owned(), prev.messages_version.clone()),
                    (SCRATCH.to_owned(), prev.scratch_version.clone()),
                ]),
            )])
        };
        let updated: &[&str] = if n == 0 {
            &[BIG_DOC, MESSAGES, SCRATCH]
        } else {
            &[MESSAGES, SCRATCH]
        };
        Checkpoint {
            v: CHECKPOINT_FORMAT_VERSION,
            id,
            ts,
            channel_values,
            channel_versions: self.channel_versions(n),
            versions_seen,
            updated_channels: Some(updated.iter().map(|c| (*c).to_owned()).collect()),
        }
    }

    /// `{"source": "loop", "step": n, "parents": {}}`.
    pub fn metadata(&self, n: usize) -> CheckpointMetadata {
        let metadata = CheckpointMetadata::for_step(Source::Loop, n as i64);
        let since = n % SNAPSHOT_EVERY;
        if self.delta && since > 0 {
            metadata.with(
                checkpoint_core::delta::DELTA_COUNTERS,
                serde_json::json!({ MESSAGES: [since, since] }),
            )
        } else {
            metadata
        }
    }

    /// The config of the put at step `n`: this thread, namespace `""`, and the parent's id.
    pub fn config(&self, parent: Option<&str>) -> CheckpointConfig {
        let cfg = CheckpointConfig::new(self.thread_id.clone());
        match parent {
            Some(id) => cfg.with_checkpoint_id(id),
            None => cfg,
        }
    }

    /// The pending writes of step `n`: `[("messages", wmsg_n), ("scratch", wscr_n)]`.
    pub fn writes(&self, n: usize) -> Vec<(String, TypedValue)> {
        let s = &self.steps[n];
        vec![
            (MESSAGES.to_owned(), s.wmsg_value.clone()),
            (SCRATCH.to_owned(), s.wscr_value.clone()),
        ]
    }
}

/// The payloads of a whole run: the W1 threads and the W4 threads.
#[derive(Clone, Debug)]
pub struct Payloads {
    /// W1 threads `thread-%05d`, `tn = i`.
    pub w1: Vec<ThreadPayload>,
    /// W4 threads `w4thread-%05d`, `tn = 1_000_000 + j`.
    pub w4: Vec<ThreadPayload>,
}

impl Payloads {
    /// Generates every payload of a run.
    pub fn generate(
        seed: u64,
        threads: usize,
        w4_threads: usize,
        steps: usize,
        delta: bool,
    ) -> Result<Self> {
        let w1 = (0..threads)
            .map(|i| {
                ThreadPayload::generate(seed, i as u64, format!("thread-{i:05}"), steps)?
                    .with_delta(delta)
            })
            .collect::<Result<_>>()?;
        let w4 = (0..w4_threads)
            .map(|j| {
                ThreadPayload::generate(
                    seed,
                    1_000_000 + j as u64,
                    format!("w4thread-{j:05}"),
                    steps,
                )?
                .with_delta(delta)
            })
            .collect::<Result<_>>()?;
        Ok(Self { w1, w4 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draw_order_and_shapes() {
        let p = ThreadPayload::generate(42, 0, "thread-00000".into(), 3).unwrap();
        let mut g = SplitMix64::for_thread(42, 0);
        assert_eq!(p.big_doc, g.text(BIG_DOC_LEN));
        for (n, s) in p.steps.iter().enumerate() {
            assert_eq!(s.msg_content, g.text(MSG_CONTENT_LEN));
            assert_eq!(s.scratch, g.text(SCRATCH_LEN));
            assert_eq!(s.wmsg, g.text(SCRATCH_LEN));
            assert_eq!(s.wscr, g.text(SCRATCH_LEN));
            assert_eq!(s.task_id, g.uuid4());
            assert_eq!(s.messages_version, version(n as u64 + 1, g.suffix()));
            assert_eq!(s.scratch_version, version(n as u64 + 1, g.suffix()));
            if n == 0 {
                assert_eq!(p.big_doc_version, version(1, g.suffix()));
            }
            assert_eq!(s.messages_version.to_string().len(), 49);
        }
        assert_eq!(p.big_doc_version.to_string()[..33], format!("{:032}.", 1));
        let msgs: Vec<Message> = p.steps[2].messages_value.decode().unwrap();
        assert_eq!(msgs, p.messages(2));
        assert_eq!(msgs[1].kind, "ai");
        assert_eq!(msgs[1].id, "msg-0001");
    }

    #[test]
    fn checkpoint_of_step_follows_the_spec() {
        let p = ThreadPayload::generate(42, 7, "thread-00007".into(), 2).unwrap();
        let c0 = p.checkpoint(0, "a".into(), "t".into());
        assert_eq!(c0.v, 4);
        assert!(c0.versions_seen.is_empty());
        assert_eq!(
            c0.updated_channels.as_deref().unwrap(),
            ["big_doc", "messages", "scratch"]
        );
        assert_eq!(p.new_versions(0).len(), 3);
        let c1 = p.checkpoint(1, "b".into(), "t".into());
        assert_eq!(c1.channel_values.len(), 3);
        assert_eq!(
            c1.versions_seen[NODE][MESSAGES],
            p.steps[0].messages_version
        );
        assert_eq!(c1.versions_seen[NODE][SCRATCH], p.steps[0].scratch_version);
        assert_eq!(
            p.new_versions(1).keys().collect::<Vec<_>>(),
            ["messages", "scratch"]
        );
        assert_eq!(
            serde_json::to_string(&p.metadata(1)).unwrap(),
            r#"{"source":"loop","step":1,"parents":{}}"#
        );
        assert_eq!(p.config(Some("a")).checkpoint_id.as_deref(), Some("a"));
    }

    #[test]
    fn delta_variant_stores_snapshots_and_counters() {
        let p = ThreadPayload::generate(42, 3, "thread-00003".into(), 201)
            .unwrap()
            .with_delta(true)
            .unwrap();
        // Step 0: a snapshot of [m_0], no counters.
        let c0 = p.checkpoint(0, "a".into(), "t".into());
        let inner = checkpoint_core::delta::snapshot_inner(&c0.channel_values[MESSAGES]).unwrap();
        let m0: Vec<Message> = inner.decode().unwrap();
        assert_eq!(m0, p.messages(0));
        assert_eq!(p.metadata(0), CheckpointMetadata::for_step(Source::Loop, 0));
        // Step 1: the version moves, no value, one update since the snapshot.
        let c1 = p.checkpoint(1, "b".into(), "t".into());
        assert!(!c1.channel_values.contains_key(MESSAGES));
        assert!(p.new_versions(1).contains_key(MESSAGES));
        assert_eq!(
            serde_json::to_string(&p.metadata(1)).unwrap(),
            r#"{"source":"loop","step":1,"parents":{},"counters_since_delta_snapshot":{"messages":[1,1]}}"#
        );
        // Step 200: the second snapshot after step 0; counters reset.
        let c200 = p.checkpoint(200, "c".into(), "t".into());
        let inner = checkpoint_core::delta::snapshot_inner(&c200.channel_values[MESSAGES]);
        let list: Vec<serde_json::Value> = inner.unwrap().decode().unwrap();
        assert_eq!(list.len(), 201);
        assert_eq!(list[0]["id"], "msg-0000");
        assert_eq!(list[200], serde_json::json!(p.steps[199].wmsg));
        assert!(
            p.metadata(200)
                .get("counters_since_delta_snapshot")
                .is_none()
        );
        assert_eq!(
            p.metadata(150).get("counters_since_delta_snapshot"),
            Some(&serde_json::json!({"messages": [50, 50]}))
        );
    }
}
