//! Validation of what the workload reads back (WORKLOAD.md §5 W2, §6 "validation").

use std::collections::BTreeMap;

use checkpoint_core::{CheckpointTuple, DeltaChannelHistory, TypedValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::payload::{BIG_DOC, MESSAGES, Message, SCRATCH, ThreadPayload};

/// Most error messages kept per repetition (all are counted).
pub const MAX_ERRORS: usize = 50;

/// The outcome of a repetition's checks.
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    /// No check failed.
    pub valid: bool,
    /// Checks made.
    pub checks: u64,
    /// Checks failed.
    pub error_count: u64,
    /// The first [`MAX_ERRORS`] failures.
    pub errors: Vec<String>,
}

impl Default for Validation {
    fn default() -> Self {
        Self::new()
    }
}

impl Validation {
    /// Nothing checked yet.
    pub fn new() -> Self {
        Self {
            valid: true,
            checks: 0,
            error_count: 0,
            errors: Vec::new(),
        }
    }

    /// Counts a check; records `message()` if it failed. Returns `ok`.
    pub fn check(&mut self, ok: bool, message: impl FnOnce() -> String) -> bool {
        self.checks += 1;
        if !ok {
            self.record(message());
        }
        ok
    }

    /// Records a failed check.
    pub fn fail(&mut self, message: String) {
        self.checks += 1;
        self.record(message);
    }

    /// Adds the checks and failures of `other`.
    pub fn merge(&mut self, other: Validation) {
        self.checks += other.checks;
        self.error_count += other.error_count;
        self.valid &= other.valid;
        let room = MAX_ERRORS.saturating_sub(self.errors.len());
        self.errors.extend(other.errors.into_iter().take(room));
    }

    fn record(&mut self, message: String) {
        self.valid = false;
        self.error_count += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(message);
        }
    }

    /// Checks a tuple read back: it must be the checkpoint of step `n` of `payload` with id
    /// `ids[n]` (the ids the run got for that thread, per step), complete and exact: address
    /// and parent, metadata, channel versions, `messages` (`n + 1` of them, as written),
    /// `scratch`, `big_doc`, and exactly the 2 pending writes of step `n`.
    pub fn tuple(
        &mut self,
        what: &str,
        t: &CheckpointTuple,
        payload: &ThreadPayload,
        n: usize,
        ids: &[String],
    ) {
        let at = || format!("{what} {} step {n}", payload.thread_id);
        let id = &ids[n];
        self.check(
            t.config.thread_id == payload.thread_id && t.config.checkpoint_ns.is_empty(),
            || format!("{}: address is {:?}", at(), t.config),
        );
        self.check(
            t.config.checkpoint_id.as_deref() == Some(id.as_str()) && t.checkpoint.id == *id,
            || {
                format!(
                    "{}: id {:?} / {:?}, expected {id:?}",
                    at(),
                    t.config.checkpoint_id,
                    t.checkpoint.id
                )
            },
        );
        let parent = t
            .parent_config
            .as_ref()
            .map(|p| (p.thread_id.as_str(), p.checkpoint_id.as_deref()));
        let expected_parent =
            (n > 0).then(|| (payload.thread_id.as_str(), Some(ids[n - 1].as_str())));
        self.check(parent == expected_parent, || {
            format!("{}: parent {parent:?}, expected {expected_parent:?}", at())
        });
        self.check(t.metadata.step() == Some(n as i64), || {
            format!("{}: metadata.step is {:?}", at(), t.metadata.get("step"))
        });
        self.check(t.metadata == payload.metadata(n), || {
            format!("{}: metadata is {:?}", at(), t.metadata)
        });
        self.check(
            t.checkpoint.channel_versions == payload.channel_versions(n),
            || format!("{}: channel_versions differ", at()),
        );
        let values = &t.checkpoint.channel_values;
        if payload.delta {
            let expected = payload.steps[n].delta_snapshot.as_ref();
            self.check(values.get(MESSAGES) == expected, || {
                format!(
                    "{}: messages snapshot is {}, expected {}",
                    at(),
                    present(values.get(MESSAGES)),
                    present(expected)
                )
            });
        } else if let Some(messages) =
            self.decode::<Vec<Message>>(&at(), MESSAGES, values.get(MESSAGES))
            && self.check(messages.len() == n + 1, || {
                format!("{}: {} messages, expected {}", at(), messages.len(), n + 1)
            })
        {
            self.check(messages == payload.messages(n), || {
                format!("{}: messages differ from what was written", at())
            });
        }
        if let Some(scratch) = self.decode::<String>(&at(), SCRATCH, values.get(SCRATCH)) {
            self.check(scratch == payload.steps[n].scratch, || {
                format!("{}: scratch differs from what was written", at())
            });
        }
        if let Some(doc) = self.decode::<String>(&at(), BIG_DOC, values.get(BIG_DOC)) {
            self.check(doc == payload.big_doc, || {
                format!("{}: big_doc differs from what was written", at())
            });
        }
        let writes = &t.pending_writes;
        if self.check(writes.len() == 2, || {
            format!("{}: {} pending writes, expected 2", at(), writes.len())
        }) {
            let step = &payload.steps[n];
            for (idx, (w, (channel, value))) in writes
                .iter()
                .zip([(MESSAGES, &step.wmsg), (SCRATCH, &step.wscr)])
                .enumerate()
            {
                self.check(
                    w.task_id == step.task_id && w.channel == channel && w.idx == idx as i64,
                    || {
                        format!(
                            "{}: pending write {idx} is ({:?}, {:?}, {}), expected ({:?}, {channel:?}, {idx})",
                            at(),
                            w.task_id,
                            w.channel,
                            w.idx,
                            step.task_id
                        )
                    },
                );
                if let Some(v) = self.decode::<String>(&at(), "pending write", Some(&w.value)) {
                    self.check(v == *value, || {
                        format!("{}: pending write {idx} value differs", at())
                    });
                }
            }
        }
    }

    /// Checks what `delta_channel_history(checkpoint of step n, ["messages"])` returned: the
    /// snapshot of the nearest snapshot step `k ≤ n - 1` (or none at step 0) as the seed,
    /// then the `messages` writes of steps `k .. n-1`, oldest first.
    pub fn delta_history(
        &mut self,
        what: &str,
        got: &BTreeMap<String, DeltaChannelHistory>,
        payload: &ThreadPayload,
        n: usize,
    ) {
        let at = || format!("{what} {} step {n}", payload.thread_id);
        self.check(got.len() == 1, || {
            format!("{}: {} channels, expected 1", at(), got.len())
        });
        let Some(h) = got.get(MESSAGES) else {
            self.fail(format!("{}: no history for messages", at()));
            return;
        };
        let seed_step = (0..n).rev().find(|&k| ThreadPayload::is_snapshot_step(k));
        let expected_seed = seed_step.and_then(|k| payload.steps[k].delta_snapshot.as_ref());
        self.check(h.seed.as_ref() == expected_seed, || {
            format!(
                "{}: seed is {}, expected {}",
                at(),
                present(h.seed.as_ref()),
                present(expected_seed)
            )
        });
        let from = seed_step.unwrap_or(n);
        let expected = &payload.steps[from..n];
        if self.check(h.writes.len() == expected.len(), || {
            format!(
                "{}: {} writes, expected {}",
                at(),
                h.writes.len(),
                expected.len()
            )
        }) {
            for (k, (w, step)) in h.writes.iter().zip(expected).enumerate() {
                self.check(
                    w.task_id == step.task_id
                        && w.channel == MESSAGES
                        && w.idx == 0
                        && w.value == step.wmsg_value,
                    || format!("{}: write {k} differs from step {}'s", at(), from + k),
                );
            }
        }
    }

    fn decode<T: DeserializeOwned>(
        &mut self,
        at: &str,
        what: &str,
        value: Option<&TypedValue>,
    ) -> Option<T> {
        let Some(value) = value else {
            self.fail(format!("{at}: {what} is missing"));
            return None;
        };
        match value.decode() {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(format!("{at}: {what} does not decode: {e}"));
                None
            }
        }
    }
}

/// `present` or `absent`, for messages about optional values.
fn present(v: Option<&TypedValue>) -> &'static str {
    if v.is_some() { "present" } else { "absent" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::{InMemorySaver, Saver};

    use crate::stats::Latencies;
    use crate::workload::run_step;

    /// Runs steps `0..steps` of `p` and returns the checkpoint ids.
    async fn run_thread(
        saver: &InMemorySaver,
        p: &ThreadPayload,
        steps: usize,
        v: &mut Validation,
    ) -> Vec<String> {
        let (mut a, mut b) = (Latencies::new(), Latencies::new());
        let mut ids: Vec<String> = Vec::new();
        for n in 0..steps {
            let parent = ids.last().map(String::as_str);
            let id = run_step(saver, p, n, parent, &mut a, &mut b, v)
                .await
                .unwrap();
            ids.push(id);
        }
        ids
    }

    #[tokio::test]
    async fn accepts_what_was_written_and_rejects_a_wrong_step() {
        let saver = InMemorySaver::new();
        let p = ThreadPayload::generate(42, 0, "thread-00000".into(), 3).unwrap();
        let mut v = Validation::new();
        let ids = run_thread(&saver, &p, 3, &mut v).await;
        let latest = saver.get_tuple(&p.config(None)).await.unwrap().unwrap();
        v.tuple("test", &latest, &p, 2, &ids);
        assert!(v.valid, "{:?}", v.errors);
        assert!(v.checks > 10);
        v.tuple("test", &latest, &p, 1, &ids);
        assert!(!v.valid);
        assert!(v.error_count >= 3, "{:?}", v.errors);
    }

    #[tokio::test]
    async fn delta_variant_tuples_and_history() {
        let saver = InMemorySaver::new();
        let p = ThreadPayload::generate(42, 0, "thread-00000".into(), 4)
            .unwrap()
            .with_delta(true)
            .unwrap();
        let mut v = Validation::new();
        let ids = run_thread(&saver, &p, 4, &mut v).await;
        let latest = saver.get_tuple(&p.config(None)).await.unwrap().unwrap();
        v.tuple("test", &latest, &p, 3, &ids);
        let first = saver.get_tuple(&p.config(Some(&ids[0]))).await.unwrap();
        v.tuple("test", &first.unwrap(), &p, 0, &ids);
        let channels = [MESSAGES.to_owned()];
        let history = saver
            .delta_channel_history(&p.config(None), &channels)
            .await
            .unwrap();
        v.delta_history("test", &history, &p, 3);
        assert!(v.valid, "{:?}", v.errors);
        assert_eq!(history[MESSAGES].writes.len(), 3);
        // The history of step 3 is not that of step 2.
        v.delta_history("test", &history, &p, 2);
        assert!(!v.valid);
    }
}
