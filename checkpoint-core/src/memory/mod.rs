//! [`InMemorySaver`]: the reference implementation of the [`Saver`] contract.

mod delta;
mod list;
mod store;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::backend::{
    Page, paged, thread_ttl_ms, validate_claim_request, validate_lease_request, validate_put,
    validate_put_writes,
};
use crate::writes::{replaces_existing, write_index};
use crate::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, DeltaChannelHistory, Error, Lease, ListOptions, PruneStrategy, PutMode,
    PutOptions, PutWritesOptions, Result, Saver, ThreadTtl, TypedValue,
};
use list::{Cursor, next_page};
use store::{LeaseState, LedgerEntry, LedgerState, Store, Stored, StoredWrite, ThreadData};

/// How many tuples one step of a `list` stream reads under the lock.
const PAGE: usize = 64;

/// The in-memory reference saver: every operation of the contract, extended ones included,
/// with per-channel-version value dedup and compare-and-set.
///
/// Clones share the same store. It is thread-safe: every operation takes a lock for its
/// duration and never awaits while holding it, so operations are atomic and linearizable.
/// `list` pages through ordered indexes (no whole-history snapshot).
///
/// Thread TTLs ([`InMemorySaver::builder`], [`Saver::set_thread_ttl`]) are kept by deleting
/// an expired thread's data before the next operation that finds its time passed, so
/// [`Saver::sweep_expired`] usually has nothing left to delete.
///
/// ```
/// use checkpoint_core::{Checkpoint, CheckpointConfig, CheckpointMetadata, InMemorySaver, Saver, PutOptions};
/// # tokio_test_block_on(async {
/// let saver = InMemorySaver::new();
/// let mut cp = Checkpoint::new();
/// let v = cp.set("messages", &vec!["hello"])?;
/// let cfg = saver
///     .put(&CheckpointConfig::new("t1"), cp, CheckpointMetadata::new(), [("messages".into(), v)].into(), PutOptions::new())
///     .await?;
/// let tuple = saver.get_tuple(&cfg).await?.expect("stored");
/// assert_eq!(tuple.checkpoint.require::<Vec<String>>("messages")?, ["hello"]);
/// # Ok::<(), checkpoint_core::Error>(()) });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct InMemorySaver {
    store: Arc<RwLock<Store>>,
}

/// Settings of an [`InMemorySaver`]: thread retention.
#[derive(Clone, Debug, Default)]
pub struct InMemorySaverBuilder {
    default_ttl: Option<Duration>,
    refresh_on_read: bool,
}

impl InMemorySaverBuilder {
    /// A TTL for every thread, counted from its last write (`None`, the default: data never
    /// expires); threads can have their own with [`Saver::set_thread_ttl`]. At least 1 ms.
    pub fn default_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Whether `get_tuple` also restarts the TTL of the thread it read (default `false`:
    /// only writes do).
    pub fn refresh_on_read(mut self, yes: bool) -> Self {
        self.refresh_on_read = yes;
        self
    }

    /// An empty saver with these settings; a zero default TTL is [`Error::InvalidInput`].
    pub fn build(self) -> Result<InMemorySaver> {
        if self
            .default_ttl
            .is_some_and(|t| t < Duration::from_millis(1))
        {
            return Err(Error::invalid("default_ttl must be at least 1 ms"));
        }
        let saver = InMemorySaver::new();
        {
            let mut store = saver.write();
            store.retention.default_ttl = self.default_ttl;
            store.retention.refresh_on_read = self.refresh_on_read;
        }
        Ok(saver)
    }
}

impl InMemorySaver {
    /// An empty saver.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder for a saver with thread retention settings.
    pub fn builder() -> InMemorySaverBuilder {
        InMemorySaverBuilder::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Store> {
        live_read(&self.store)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Store> {
        live_write(&self.store)
    }

    /// Total length of the stored serialized payloads: value and write bytes, plus each
    /// checkpoint (without values) and its metadata as JSON. This is the figure the
    /// benchmark reports as "bytes stored" for this saver.
    pub fn stored_bytes(&self) -> usize {
        let store = self.read();
        let mut total = 0;
        for thread in store.threads.values() {
            for ns in thread.namespaces.values() {
                for stored in ns.checkpoints.values() {
                    total += serde_json::to_vec(&stored.checkpoint).map_or(0, |v| v.len());
                    total += serde_json::to_vec(&stored.metadata).map_or(0, |v| v.len());
                }
                for versions in ns.blobs.values() {
                    total += versions
                        .values()
                        .flatten()
                        .map(TypedValue::len)
                        .sum::<usize>();
                }
                for writes in ns.writes.values() {
                    total += writes.values().map(|w| w.value.len()).sum::<usize>();
                }
            }
        }
        total
    }

    /// The ids of the threads holding a checkpoint, ascending, after `after` if given.
    fn thread_ids(&self, after: Option<&str>) -> BoxStream<'static, Result<String>> {
        let mut ids: Vec<String> = self
            .read()
            .threads
            .iter()
            .filter(|(id, t)| !t.by_id.is_empty() && after.is_none_or(|a| id.as_str() > a))
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        Box::pin(futures::stream::iter(ids.into_iter().map(Ok)))
    }
}

#[async_trait]
impl Saver for InMemorySaver {
    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        let thread_id = config.require_thread()?;
        let store = self.read();
        let Some(data) = store
            .threads
            .get(thread_id)
            .and_then(|t| t.namespaces.get(&config.checkpoint_ns))
        else {
            return Ok(None);
        };
        let id = match &config.checkpoint_id {
            Some(id) => id.as_str(),
            None => match data.checkpoints.keys().next_back() {
                Some(id) => id.as_str(),
                None => return Ok(None),
            },
        };
        let tuple = data.tuple(thread_id, &config.checkpoint_ns, id);
        let refresh = tuple.is_some()
            && store.retention.refresh_on_read
            && store.retention.left(thread_id, Instant::now()).is_some();
        drop(store);
        if refresh {
            self.write().touch(thread_id, Instant::now());
        }
        Ok(tuple)
    }

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        let thread_id = config.require_thread()?;
        let store = self.read();
        let data = store
            .threads
            .get(thread_id)
            .and_then(|t| t.namespaces.get(&config.checkpoint_ns));
        delta::history(data, config.checkpoint_id.as_deref(), channels)
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let store = Arc::clone(&self.store);
        paged(
            options.limit,
            PAGE,
            Cursor::Start,
            move |mut cursor, want| {
                let page = next_page(&live_read(&store), &options, &mut cursor, want);
                let last = matches!(cursor, Cursor::Done);
                async move { Ok((cursor, Page::new(page, last))) }
            },
        )
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.thread_ids(None)
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.thread_ids(Some(after))
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        mut checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        validate_put(config, &checkpoint, &new_versions)?;
        let thread_id = config.thread_id.clone();
        let ns = config.checkpoint_ns.clone();
        let parent = config.checkpoint_id.clone();
        let id = checkpoint.id.clone();
        let values = std::mem::take(&mut checkpoint.channel_values);

        let mut store = self.write();
        store.check_fence(&thread_id, options.fence)?;
        let thread = store.threads.entry(thread_id.clone()).or_default();
        let data = thread.namespaces.entry(ns.clone()).or_default();
        if options.mode == PutMode::CompareAndSet {
            let head = data.checkpoints.keys().next_back().cloned();
            let retry_of_winner = head.as_deref() == Some(id.as_str())
                && data
                    .checkpoints
                    .get(&id)
                    .is_some_and(|s| s.parent == parent);
            if head != parent && !retry_of_winner {
                let expected = parent;
                store.drop_empty(&thread_id);
                return Err(Error::Conflict {
                    thread_id,
                    checkpoint_ns: ns,
                    expected,
                    found: head,
                });
            }
        }
        for (channel, version) in new_versions {
            let value = values.get(&channel).cloned();
            data.blobs
                .entry(channel)
                .or_default()
                .entry(version)
                .or_insert(value);
        }
        data.checkpoints.insert(
            id.clone(),
            Stored {
                checkpoint,
                metadata,
                parent,
            },
        );
        thread.by_id.insert((id.clone(), ns.clone()));
        store
            .global
            .insert((id.clone(), thread_id.clone(), ns.clone()));
        store.touch(&thread_id, Instant::now());
        Ok(CheckpointConfig::new(thread_id)
            .with_ns(ns)
            .with_checkpoint_id(id))
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        let Some(checkpoint_id) = validate_put_writes(config, &writes)? else {
            return Ok(());
        };
        let checkpoint_id = checkpoint_id.to_owned();
        let replace = replaces_existing(&writes);
        let mut store = self.write();
        store.check_fence(&config.thread_id, options.fence)?;
        let data = store
            .threads
            .entry(config.thread_id.clone())
            .or_default()
            .namespaces
            .entry(config.checkpoint_ns.clone())
            .or_default();
        let slot = data.writes.entry(checkpoint_id).or_default();
        for (position, (channel, value)) in writes.into_iter().enumerate() {
            let key = (task_id.to_owned(), write_index(&channel, position));
            let write = StoredWrite {
                channel,
                value,
                task_path: options.task_path.clone(),
            };
            if replace {
                slot.insert(key, write);
            } else {
                slot.entry(key).or_insert(write);
            }
        }
        store.touch(&config.thread_id, Instant::now());
        Ok(())
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        let mut store = self.write();
        store.remove_thread(thread_id);
        store.retention.forget(thread_id);
        Ok(())
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        if target.is_empty() {
            return Err(Error::invalid("copy_thread target has an empty thread id"));
        }
        if source == target {
            return Ok(());
        }
        let mut store = self.write();
        let Some(src) = store.threads.get(source).cloned() else {
            return Ok(());
        };
        let ThreadData { namespaces, by_id } = store.threads.entry(target.to_owned()).or_default();
        let mut added = Vec::new();
        for (ns, data) in src.namespaces {
            let into = namespaces.entry(ns.clone()).or_default();
            for (id, stored) in data.checkpoints {
                if let std::collections::btree_map::Entry::Vacant(e) =
                    into.checkpoints.entry(id.clone())
                {
                    e.insert(stored);
                    by_id.insert((id.clone(), ns.clone()));
                    added.push((id, ns.clone()));
                }
            }
            for (channel, versions) in data.blobs {
                let slot = into.blobs.entry(channel).or_default();
                for (version, value) in versions {
                    slot.entry(version).or_insert(value);
                }
            }
            for (id, writes) in data.writes {
                let slot = into.writes.entry(id).or_default();
                for (key, write) in writes {
                    slot.entry(key).or_insert(write);
                }
            }
        }
        for (id, ns) in added {
            store.global.insert((id, target.to_owned(), ns));
        }
        store.touch(target, Instant::now());
        Ok(())
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        let keep = strategy.keep_per_namespace();
        let mut store = self.write();
        for thread_id in thread_ids {
            let Some(thread) = store.threads.get_mut(thread_id) else {
                continue;
            };
            let mut removed = Vec::new();
            for (ns, data) in &mut thread.namespaces {
                let cut = data.checkpoints.len().saturating_sub(keep);
                // What the kept checkpoints' delta channels need stays too.
                let needed = data.delta_needed(data.checkpoints.keys().skip(cut).cloned());
                let doomed: HashSet<String> = data
                    .checkpoints
                    .keys()
                    .take(cut)
                    .filter(|id| !needed.contains(*id))
                    .cloned()
                    .collect();
                let ids = data.remove_where(|id, _| doomed.contains(id));
                if keep == 0 {
                    data.writes.clear();
                }
                removed.push((ns.clone(), ids));
            }
            for (ns, ids) in removed {
                store.unindex(thread_id, &ns, &ids);
            }
            store.drop_empty(thread_id);
            store.forget_if_empty(thread_id);
        }
        Ok(())
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let runs: HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        let mut store = self.write();
        let mut removed = Vec::new();
        for (thread_id, thread) in &mut store.threads {
            for (ns, data) in &mut thread.namespaces {
                let of_runs = |s: &Stored| s.metadata.run_id().is_some_and(|r| runs.contains(r));
                // What the remaining checkpoints' delta channels need stays.
                let remaining = data
                    .checkpoints
                    .iter()
                    .filter(|(_, s)| !of_runs(s))
                    .map(|(id, _)| id.clone());
                let needed = data.delta_needed(remaining.collect::<Vec<_>>());
                let ids = data.remove_where(|id, s| of_runs(s) && !needed.contains(id));
                if !ids.is_empty() {
                    removed.push((thread_id.clone(), ns.clone(), ids));
                }
            }
        }
        for (thread_id, ns, ids) in &removed {
            store.unindex(thread_id, ns, ids);
        }
        for (thread_id, _, _) in &removed {
            store.drop_empty(thread_id);
            store.forget_if_empty(thread_id);
        }
        Ok(())
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_lease_request(thread_id, holder, ttl)?;
        let mut store = self.write();
        // Read the clock under the lock: a time taken before waiting for it could be older
        // than a grant made meanwhile.
        let now = Instant::now();
        let token = match store.leases.get(thread_id) {
            Some(l) if l.expires_at > now && l.holder != holder => return Ok(None),
            Some(l) if l.expires_at > now => l.token,
            Some(l) => l.token + 1,
            None => 1,
        };
        store.leases.insert(
            thread_id.to_owned(),
            LeaseState {
                holder: holder.to_owned(),
                token,
                expires_at: now + ttl,
            },
        );
        Ok(Some(Lease {
            thread_id: thread_id.to_owned(),
            holder: holder.to_owned(),
            token,
            ttl,
        }))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_lease_request(&lease.thread_id, &lease.holder, ttl)?;
        let mut store = self.write();
        let current = store.leases.get_mut(&lease.thread_id);
        match current {
            Some(l) if l.token == lease.token && l.holder == lease.holder => {
                l.expires_at = Instant::now() + ttl;
                Ok(Lease {
                    ttl,
                    ..lease.clone()
                })
            }
            other => Err(Error::stale_lease(
                &lease.thread_id,
                lease.token,
                other.map_or(0, |l| l.token),
            )),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let mut store = self.write();
        if let Some(l) = store.leases.get_mut(&lease.thread_id)
            && l.token == lease.token
            && l.holder == lease.holder
        {
            // Expire it now; the token stays spent, the next grant gets token + 1.
            l.expires_at = Instant::now();
            l.holder.clear();
        }
        Ok(())
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        validate_claim_request(key, ttl)?;
        let mut store = self.write();
        // Under the lock (see acquire_lease): otherwise a claim made meanwhile could report
        // more time left than its TTL.
        let now = Instant::now();
        let token = match store.ledger.get(key) {
            Some(LedgerEntry {
                state: LedgerState::Completed(outcome),
                ..
            }) => {
                return Ok(Claim::Completed {
                    outcome: outcome.clone(),
                });
            }
            Some(LedgerEntry {
                state: LedgerState::Pending { expires_at },
                ..
            }) if *expires_at > now => {
                return Ok(Claim::Pending {
                    expires_in: *expires_at - now,
                });
            }
            Some(e) => e.token + 1,
            None => 1,
        };
        store.ledger.insert(
            key.to_owned(),
            LedgerEntry {
                token,
                state: LedgerState::Pending {
                    expires_at: now + ttl,
                },
            },
        );
        Ok(Claim::Acquired { token })
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        let mut store = self.write();
        match store.ledger.get_mut(key) {
            Some(e) if e.token == token => match e.state {
                LedgerState::Pending { .. } => {
                    e.state = LedgerState::Completed(outcome);
                    Ok(())
                }
                LedgerState::Completed(_) => Ok(()),
                LedgerState::Abandoned => Err(Error::StaleFence {
                    scope: format!("ledger key {key:?} (abandoned)"),
                    token,
                    current: e.token,
                }),
            },
            other => Err(Error::StaleFence {
                scope: format!("ledger key {key:?}"),
                token,
                current: other.map_or(0, |e| e.token),
            }),
        }
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        let mut store = self.write();
        if let Some(e) = store.ledger.get_mut(key)
            && e.token == token
            && matches!(e.state, LedgerState::Pending { .. })
        {
            e.state = LedgerState::Abandoned;
        }
        Ok(())
    }

    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        // As every backend stores it: `Some(0)` pinned, else whole milliseconds.
        let own = thread_ttl_ms(thread_id, ttl)?.map(|ms| match ms {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        });
        let mut store = self.write();
        match own {
            Some(own) => store.retention.settings.insert(thread_id.to_owned(), own),
            None => store.retention.settings.remove(thread_id),
        };
        store.touch(thread_id, Instant::now());
        Ok(())
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        let store = self.read();
        if !store.threads.contains_key(thread_id) {
            return Ok(None);
        }
        // No time left is expired, which reads as no TTL.
        Ok(store
            .retention
            .left(thread_id, Instant::now())
            .filter(|left| !left.is_zero()))
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        let mut store = self.store.write().unwrap_or_else(PoisonError::into_inner);
        Ok(store.expire(Instant::now(), limit))
    }
}

/// The store under its read lock, with no thread past its TTL: those are deleted first.
fn live_read(store: &RwLock<Store>) -> RwLockReadGuard<'_, Store> {
    loop {
        let guard = store.read().unwrap_or_else(PoisonError::into_inner);
        if !guard.retention.due(Instant::now()) {
            return guard;
        }
        drop(guard);
        drop(live_write(store));
    }
}

/// The store under its write lock, threads past their TTL deleted (all of them: the
/// reference saver favours exactness over `sweep_expired`'s bounded batches).
fn live_write(store: &RwLock<Store>) -> RwLockWriteGuard<'_, Store> {
    let mut guard = store.write().unwrap_or_else(PoisonError::into_inner);
    guard.expire(Instant::now(), usize::MAX);
    guard
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Puts a one-checkpoint thread.
    async fn put_thread(saver: &InMemorySaver, thread_id: &str) {
        let mut checkpoint = Checkpoint::new();
        let version = checkpoint.set("x", &1).unwrap();
        saver
            .put(
                &CheckpointConfig::new(thread_id),
                checkpoint,
                CheckpointMetadata::new(),
                [("x".to_owned(), version)].into(),
                PutOptions::new(),
            )
            .await
            .unwrap();
    }

    async fn visible(saver: &InMemorySaver, thread_id: &str) -> bool {
        saver
            .get_tuple(&CheckpointConfig::new(thread_id))
            .await
            .unwrap()
            .is_some()
    }

    /// The builder's default TTL expires threads counted from their last write, or from
    /// their last read with `refresh_on_read`; a pinned thread stays. (The conformance
    /// suite covers per-thread TTLs on a saver without a default.)
    #[tokio::test(flavor = "current_thread")]
    async fn the_default_ttl_and_refresh_on_read() {
        let ttl = Duration::from_millis(2_000);
        let plain = InMemorySaver::builder()
            .default_ttl(Some(ttl))
            .build()
            .unwrap();
        let refreshing = InMemorySaver::builder()
            .default_ttl(Some(ttl))
            .refresh_on_read(true)
            .build()
            .unwrap();
        put_thread(&plain, "t").await;
        put_thread(&plain, "pinned").await;
        plain
            .set_thread_ttl("pinned", ThreadTtl::Pinned)
            .await
            .unwrap();
        put_thread(&refreshing, "t").await;
        let left = plain.thread_ttl("t").await.unwrap();
        assert!(
            matches!(left, Some(d) if d > Duration::ZERO && d <= ttl),
            "{left:?}"
        );
        assert_eq!(plain.thread_ttl("pinned").await.unwrap(), None);

        tokio::time::sleep(ttl * 6 / 10).await;
        assert!(visible(&plain, "t").await && visible(&refreshing, "t").await);
        tokio::time::sleep(ttl * 6 / 10).await;
        assert!(!visible(&plain, "t").await, "expired 2.4 s after its write");
        assert!(
            visible(&refreshing, "t").await,
            "read 1.2 s ago: not expired"
        );
        assert!(visible(&plain, "pinned").await);
        assert_eq!(plain.thread_ttl("t").await.unwrap(), None);

        let zero = InMemorySaver::builder()
            .default_ttl(Some(Duration::ZERO))
            .build();
        assert!(matches!(zero, Err(Error::InvalidInput { .. })), "{zero:?}");
        assert!(InMemorySaver::new().capabilities().ttl);
    }
}
