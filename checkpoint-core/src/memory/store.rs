//! The in-memory store: threads, namespaces, values, writes, leases and the ledger, with
//! the bookkeeping shared by the operations.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::backend::legacy;
use crate::delta;
use crate::{
    ChannelVersion, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple, Error,
    PendingWrite, Result, TypedValue,
};

#[derive(Debug, Default)]
pub(super) struct Store {
    pub(super) threads: HashMap<String, ThreadData>,
    /// `(checkpoint_id, thread_id, checkpoint_ns)` of every checkpoint, for global listing.
    pub(super) global: BTreeSet<(String, String, String)>,
    /// thread id → its lease (kept after the thread is deleted: tokens never repeat).
    pub(super) leases: HashMap<String, LeaseState>,
    /// ledger key → claim state.
    pub(super) ledger: HashMap<String, LedgerEntry>,
    /// Thread TTLs.
    pub(super) retention: Retention,
}

/// The saver's TTL settings and each thread's (see `Saver::set_thread_ttl`). Only threads
/// with data and a TTL have a deadline.
#[derive(Debug, Default)]
pub(super) struct Retention {
    pub(super) default_ttl: Option<Duration>,
    pub(super) refresh_on_read: bool,
    /// Threads given their own TTL (`Some`) or pinned (`None`); the others have the default.
    pub(super) settings: HashMap<String, Option<Duration>>,
    /// When each thread expires.
    expires: HashMap<String, Instant>,
    /// The same, soonest first.
    deadlines: BTreeSet<(Instant, String)>,
}

impl Retention {
    /// The TTL a thread's writes restart.
    fn ttl_of(&self, thread_id: &str) -> Option<Duration> {
        match self.settings.get(thread_id) {
            Some(own) => *own,
            None => self.default_ttl,
        }
    }

    /// Whether some thread's TTL ran out by `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.deadlines.first().is_some_and(|(at, _)| *at <= now)
    }

    /// Time left for `thread_id` at `now`.
    pub(super) fn left(&self, thread_id: &str, now: Instant) -> Option<Duration> {
        self.expires
            .get(thread_id)
            .map(|at| at.saturating_duration_since(now))
    }

    fn set_deadline(&mut self, thread_id: &str, at: Option<Instant>) {
        if let Some(old) = self.expires.remove(thread_id) {
            self.deadlines.remove(&(old, thread_id.to_owned()));
        }
        if let Some(at) = at {
            self.expires.insert(thread_id.to_owned(), at);
            self.deadlines.insert((at, thread_id.to_owned()));
        }
    }

    /// Forgets everything about a thread (its data is gone).
    pub(super) fn forget(&mut self, thread_id: &str) {
        self.settings.remove(thread_id);
        self.set_deadline(thread_id, None);
    }
}

#[derive(Clone, Debug)]
pub(super) struct LeaseState {
    pub(super) holder: String,
    pub(super) token: u64,
    pub(super) expires_at: Instant,
}

#[derive(Clone, Debug)]
pub(super) struct LedgerEntry {
    pub(super) token: u64,
    pub(super) state: LedgerState,
}

#[derive(Clone, Debug)]
pub(super) enum LedgerState {
    Pending { expires_at: Instant },
    Abandoned,
    Completed(TypedValue),
}

#[derive(Clone, Debug, Default)]
pub(super) struct ThreadData {
    pub(super) namespaces: BTreeMap<String, NsData>,
    /// `(checkpoint_id, checkpoint_ns)` of every checkpoint of the thread.
    pub(super) by_id: BTreeSet<(String, String)>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct NsData {
    pub(super) checkpoints: BTreeMap<String, Stored>,
    /// channel → version → value (`None`: the channel was removed at that version).
    pub(super) blobs: FastMap<String, Versions>,
    /// checkpoint id → (task_id, idx) → write.
    pub(super) writes: FastMap<String, BTreeMap<(String, i64), StoredWrite>>,
}

/// A hash map with foldhash's hasher (randomly seeded per process), several times cheaper
/// than the standard library's SipHash for the ids and version strings a delta history walk
/// looks up at every ancestor.
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A channel's stored values by version (`None`: the channel was removed at that version).
pub(super) type Versions = FastMap<ChannelVersion, Option<TypedValue>>;

#[derive(Clone, Debug)]
pub(super) struct Stored {
    /// The checkpoint without channel values.
    pub(super) checkpoint: Checkpoint,
    pub(super) metadata: CheckpointMetadata,
    pub(super) parent: Option<String>,
}

#[derive(Clone, Debug)]
pub(super) struct StoredWrite {
    pub(super) channel: String,
    pub(super) value: TypedValue,
    pub(super) task_path: String,
}

impl StoredWrite {
    /// This write as the pending write of task `task_id` at `idx`.
    pub(super) fn pending(&self, task_id: &str, idx: i64) -> PendingWrite {
        PendingWrite {
            task_id: task_id.to_owned(),
            channel: self.channel.clone(),
            value: self.value.clone(),
            idx,
            task_path: self.task_path.clone(),
        }
    }
}

impl NsData {
    pub(super) fn tuple(&self, thread_id: &str, ns: &str, id: &str) -> Option<CheckpointTuple> {
        let stored = self.checkpoints.get(id)?;
        let mut checkpoint = stored.checkpoint.clone();
        for (channel, version) in &checkpoint.channel_versions {
            if let Some(Some(value)) = self.blobs.get(channel).and_then(|v| v.get(version)) {
                checkpoint
                    .channel_values
                    .insert(channel.clone(), value.clone());
            }
        }
        let mut pending_writes: Vec<PendingWrite> = self
            .writes
            .get(id)
            .into_iter()
            .flatten()
            .map(|((task_id, idx), w)| w.pending(task_id, *idx))
            .collect();
        // Already ordered by (task_id, idx); a stable sort by task_path gives the contract's order.
        pending_writes.sort_by(|a, b| a.task_path.cmp(&b.task_path));
        let address = |id: &str| {
            CheckpointConfig::new(thread_id)
                .with_ns(ns)
                .with_checkpoint_id(id)
        };
        let mut tuple = CheckpointTuple {
            config: address(id),
            checkpoint,
            metadata: stored.metadata.clone(),
            parent_config: stored.parent.as_deref().map(address),
            pending_writes,
        };
        // A checkpoint of a format before 4 reads with its parent's sends, as LangGraph's
        // savers read it.
        if legacy::sends_parent(&tuple).is_some()
            && let Some(parent) = stored.parent.as_deref()
        {
            let writes: Vec<PendingWrite> = self
                .writes
                .get(parent)
                .into_iter()
                .flatten()
                .map(|((task_id, idx), w)| PendingWrite {
                    task_id: task_id.clone(),
                    channel: w.channel.clone(),
                    value: w.value.clone(),
                    idx: *idx,
                    task_path: w.task_path.clone(),
                })
                .collect();
            legacy::apply_parent_sends(&mut tuple, &writes);
        }
        Some(tuple)
    }

    /// Whether checkpoint `id` stores a value for `channel`.
    fn stores(&self, id: &str, channel: &str) -> bool {
        self.checkpoints
            .get(id)
            .and_then(|s| s.checkpoint.channel_versions.get(channel))
            .and_then(|v| self.blobs.get(channel).and_then(|b| b.get(v)))
            .is_some_and(Option::is_some)
    }

    /// The checkpoints `kept` need for their delta channels (see
    /// [`needed_ancestors`](crate::delta::needed_ancestors)).
    pub(super) fn delta_needed(&self, kept: impl IntoIterator<Item = String>) -> BTreeSet<String> {
        delta::needed_ancestors(
            kept,
            |id| self.checkpoints.get(id).and_then(|s| s.parent.clone()),
            |id| {
                self.checkpoints
                    .get(id)
                    .map(|s| {
                        delta::channels_needing_history(
                            &s.metadata,
                            &s.checkpoint.channel_versions,
                            |c| self.stores(id, c),
                        )
                    })
                    .unwrap_or_default()
            },
            |id, channel| self.stores(id, channel),
        )
    }

    /// Removes checkpoints for which `drop` is true, with their writes, then values no
    /// remaining checkpoint names.
    pub(super) fn remove_where(
        &mut self,
        mut drop: impl FnMut(&str, &Stored) -> bool,
    ) -> Vec<String> {
        let removed: Vec<String> = self
            .checkpoints
            .iter()
            .filter(|(id, s)| drop(id, s))
            .map(|(id, _)| id.clone())
            .collect();
        if removed.is_empty() {
            return removed;
        }
        for id in &removed {
            self.checkpoints.remove(id);
            self.writes.remove(id);
        }
        self.collect_garbage();
        removed
    }

    pub(super) fn collect_garbage(&mut self) {
        let live: HashSet<(&String, &ChannelVersion)> = self
            .checkpoints
            .values()
            .flat_map(|s| s.checkpoint.channel_versions.iter())
            .collect();
        for (channel, versions) in &mut self.blobs {
            versions.retain(|v, _| live.contains(&(channel, v)));
        }
        self.blobs.retain(|_, versions| !versions.is_empty());
        let checkpoints = &self.checkpoints;
        self.writes.retain(|id, _| checkpoints.contains_key(id));
    }
}

impl Store {
    /// Restarts the TTL of `thread_id` at `now` (a write, a TTL set, or a read of a saver
    /// that refreshes on read); a thread without data has none.
    pub(super) fn touch(&mut self, thread_id: &str, now: Instant) {
        // A TTL too long for the clock never runs out.
        let at = if self.threads.contains_key(thread_id) {
            self.retention
                .ttl_of(thread_id)
                .and_then(|ttl| now.checked_add(ttl))
        } else {
            None
        };
        self.retention.set_deadline(thread_id, at);
    }

    /// Deletes the data of at most `limit` threads whose TTL ran out by `now`, and forgets
    /// their TTL settings; how many threads had data.
    pub(super) fn expire(&mut self, now: Instant, limit: usize) -> usize {
        let mut deleted = 0;
        while deleted < limit {
            let Some((at, thread_id)) = self.retention.deadlines.first().cloned() else {
                break;
            };
            if at > now {
                break;
            }
            self.retention.forget(&thread_id);
            if self.remove_thread(&thread_id) {
                deleted += 1;
            }
        }
        deleted
    }

    /// Forgets the TTL setting of a thread left without data (as deleting it does).
    pub(super) fn forget_if_empty(&mut self, thread_id: &str) {
        if !self.threads.contains_key(thread_id) {
            self.retention.forget(thread_id);
        }
    }

    /// Removes a thread's checkpoints, values and writes (not its lease); whether it had any.
    pub(super) fn remove_thread(&mut self, thread_id: &str) -> bool {
        let Some(thread) = self.threads.remove(thread_id) else {
            return false;
        };
        for (id, ns) in thread.by_id {
            self.global.remove(&(id, thread_id.to_owned(), ns));
        }
        true
    }

    pub(super) fn check_fence(&self, thread_id: &str, fence: Option<u64>) -> Result<()> {
        let Some(token) = fence else { return Ok(()) };
        let current = self.leases.get(thread_id).map_or(0, |l| l.token);
        if token != current {
            return Err(Error::stale_lease(thread_id, token, current));
        }
        Ok(())
    }

    pub(super) fn unindex(&mut self, thread_id: &str, ns: &str, ids: &[String]) {
        for id in ids {
            self.global
                .remove(&(id.clone(), thread_id.to_owned(), ns.to_owned()));
            if let Some(thread) = self.threads.get_mut(thread_id) {
                thread.by_id.remove(&(id.clone(), ns.to_owned()));
            }
        }
    }

    pub(super) fn drop_empty(&mut self, thread_id: &str) {
        if let Some(thread) = self.threads.get_mut(thread_id) {
            thread
                .namespaces
                .retain(|_, ns| !ns.checkpoints.is_empty() || !ns.writes.is_empty());
            if thread.namespaces.is_empty() {
                self.threads.remove(thread_id);
            }
        }
    }
}
