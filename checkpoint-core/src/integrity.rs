//! Integrity scans of a store's own records: damage the [`Saver`](crate::Saver) API cannot
//! show.
//!
//! A checkpoint names a version of each of its channels; a read joins those versions with
//! the stored values. When a value record is lost (deleted by hand, by a faulty script, by a
//! partial restore), reads still succeed and return the checkpoint **without that
//! channel**, exactly as if the channel had been emptied — through the API the two cases are
//! indistinguishable. A backend that can tell them apart (it stores a marker for an emptied
//! channel) implements [`IntegrityScan`] so tools such as `checkpoint verify` can report the
//! loss.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Result;

/// Damage in one thread's stored records.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorageIssue {
    /// A checkpoint names a channel version of which neither a value nor the marker of an
    /// emptied channel is stored (for a value stored in parts, a part is missing). Reads
    /// return the checkpoint without the channel.
    MissingValue {
        /// The checkpoint's namespace.
        checkpoint_ns: String,
        /// The checkpoint.
        checkpoint_id: String,
        /// The channel.
        channel: String,
        /// The version it names, as displayed ([`ChannelVersion`](crate::ChannelVersion)'s
        /// `Display`).
        version: String,
    },
    /// Pending writes recorded against a checkpoint that is not stored. The contract allows
    /// writes to precede their checkpoint's put, so this is a put still to come or, more
    /// likely, writes left behind (by a crash, or a deletion that stopped half-way); they
    /// are invisible to every read.
    WritesWithoutCheckpoint {
        /// The namespace.
        checkpoint_ns: String,
        /// The checkpoint the writes name.
        checkpoint_id: String,
        /// How many.
        writes: u64,
    },
}

impl StorageIssue {
    /// The issues of one thread's scan, in the order [`IntegrityScan::scan_thread`] returns
    /// them, from its findings: `missing` values as `(namespace, checkpoint id, channel,
    /// version)` and `writes_without_checkpoint` as `(namespace, checkpoint id, count)`.
    pub fn collect(
        missing: impl IntoIterator<Item = (String, String, String, String)>,
        writes_without_checkpoint: impl IntoIterator<Item = (String, String, u64)>,
    ) -> Vec<StorageIssue> {
        let mut issues: Vec<StorageIssue> = missing
            .into_iter()
            .map(
                |(checkpoint_ns, checkpoint_id, channel, version)| StorageIssue::MissingValue {
                    checkpoint_ns,
                    checkpoint_id,
                    channel,
                    version,
                },
            )
            .chain(writes_without_checkpoint.into_iter().map(
                |(checkpoint_ns, checkpoint_id, writes)| StorageIssue::WritesWithoutCheckpoint {
                    checkpoint_ns,
                    checkpoint_id,
                    writes,
                },
            ))
            .collect();
        issues.sort_by(|a, b| {
            (a.at(), a.kind(), format!("{a:?}")).cmp(&(b.at(), b.kind(), format!("{b:?}")))
        });
        issues
    }

    /// A short name of the kind of issue (`missing_value`, `writes_without_checkpoint`).
    pub fn kind(&self) -> &'static str {
        match self {
            StorageIssue::MissingValue { .. } => "missing_value",
            StorageIssue::WritesWithoutCheckpoint { .. } => "writes_without_checkpoint",
        }
    }

    /// The namespace and checkpoint id the issue is about.
    pub fn at(&self) -> (&str, &str) {
        match self {
            StorageIssue::MissingValue {
                checkpoint_ns,
                checkpoint_id,
                ..
            }
            | StorageIssue::WritesWithoutCheckpoint {
                checkpoint_ns,
                checkpoint_id,
                ..
            } => (checkpoint_ns, checkpoint_id),
        }
    }
}

impl std::fmt::Display for StorageIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageIssue::MissingValue {
                channel, version, ..
            } => write!(
                f,
                "the value of channel {channel:?} at version {version} is not stored"
            ),
            StorageIssue::WritesWithoutCheckpoint { writes, .. } => {
                write!(
                    f,
                    "{writes} pending writes name this checkpoint, which is not stored"
                )
            }
        }
    }
}

/// A store that can check its own records of a thread (see the [module docs](self)).
#[async_trait]
pub trait IntegrityScan: Send + Sync {
    /// Every [`StorageIssue`] of the thread, in all namespaces, ordered by namespace and
    /// checkpoint id. An unknown thread has none. Reads only; the work is proportional to
    /// the thread's stored records (values are not decoded).
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>>;

    /// [`scan_thread`](Self::scan_thread) of several threads: the issues of each thread
    /// that has some, by thread id (a thread without issues, or unknown, has no entry). The
    /// default scans them one at a time; a backend may answer for all of them in a bounded
    /// number of round trips.
    async fn scan_threads(
        &self,
        thread_ids: &[String],
    ) -> Result<BTreeMap<String, Vec<StorageIssue>>> {
        let mut out = BTreeMap::new();
        for thread in thread_ids {
            let issues = self.scan_thread(thread).await?;
            if !issues.is_empty() {
                out.insert(thread.clone(), issues);
            }
        }
        Ok(out)
    }
}
