//! The [`Saver`] trait: the storage contract every backend and wrapper implements.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, TryStreamExt};

use std::collections::BTreeMap;

use crate::delta::{self, DeltaChannelHistory};
use crate::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Lease, ListOptions, PruneStrategy, PutOptions, PutWritesOptions,
    Result, ThreadTtl, TypedValue,
};
#[cfg(doc)]
use crate::{Error, PutMode};

/// The storage contract for checkpoints.
///
/// # Contract
///
/// A saver stores [`Checkpoint`]s addressed by `(thread_id, checkpoint_ns, checkpoint_id)`,
/// each with its [`CheckpointMetadata`], its parent id, and the pending writes recorded
/// against it. Channel values are stored per `(thread_id, checkpoint_ns, channel, version)`:
/// once a version of a channel is stored it is never stored again, and every checkpoint that
/// names that version shares the stored value.
///
/// * **Addressing.** `thread_id` must be non-empty ([`Error::InvalidInput`] otherwise).
///   `checkpoint_ns` `""` is the root graph. Threads, and namespaces within a thread, are
///   fully isolated: no operation on one reads or changes another, except `list` without a
///   thread or namespace, `delete_thread` (all namespaces of its thread) and the extended
///   operations that name several threads. Identifiers are data: any string a backend accepts
///   is stored and matched exactly (no escaping, globbing, trimming or case folding); a
///   string it cannot store (for example NUL or a length beyond its key limit) is rejected
///   with [`Error::InvalidInput`] and nothing is written.
/// * **Order.** "Latest" means the greatest checkpoint id of the thread and namespace. Ids are
///   compared as strings; [`new_checkpoint_id`](crate::new_checkpoint_id) makes string order
///   equal creation order, and `put` rejects a child whose id is not greater than its parent's.
/// * **Exactness.** A checkpoint read back equals the one put (every field; values byte for
///   byte with their type tags) except that `channel_values` holds exactly the values of the
///   channels in `channel_versions` whose stored value is not removed; metadata reads back
///   exactly as put. Keys in [`CheckpointConfig::extra`] are never persisted.
/// * **Atomicity.** Each `put` and each `put_writes` is atomic: a reader sees all of it or
///   none of it, also after a crash. A returned `Ok` means durable as far as the backend
///   provides durability.
/// * **Concurrency.** A saver is shared by many tasks (`Send + Sync`); every operation is safe
///   to call concurrently. [`PutMode::CompareAndSet`] lets racing writers on one thread detect
///   each other: exactly one of several puts naming the same parent wins.
/// * **Errors.** Input the contract rejects gives [`Error::InvalidInput`]; an optional
///   operation the saver does not advertise in [`capabilities`](Saver::capabilities) gives
///   [`Error::Unsupported`]; backend failures give [`Error::Unavailable`] (transient) or
///   [`Error::Backend`]. No operation panics on any input, and a failed operation leaves the
///   stored data as it was.
///
/// The crate `checkpoint-conformance` is the executable form of this contract.
#[async_trait]
pub trait Saver: std::fmt::Debug + Send + Sync + 'static {
    /// The optional operations this saver implements.
    fn capabilities(&self) -> Capabilities;

    /// Reads one checkpoint.
    ///
    /// # Behavior
    /// * With `checkpoint_id`: that checkpoint of the thread and namespace, or `None`.
    /// * Without: the latest checkpoint of the thread and namespace, or `None` when it has none.
    /// * The tuple's `config` carries thread, namespace and id; `parent_config` the parent's
    ///   address (same thread and namespace) or `None`; `pending_writes` every write recorded
    ///   against this checkpoint, ordered by `(task_path, task_id, idx)`.
    /// * An empty `thread_id` is [`Error::InvalidInput`].
    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>>;

    /// Streams checkpoints, newest first.
    ///
    /// # Behavior
    /// * Yields the checkpoints that pass every condition of `options` (thread, namespace,
    ///   checkpoint id, metadata filter, `before` as a strict upper bound on the id), at most
    ///   `limit` of them, each as complete as [`get_tuple`](Saver::get_tuple) returns it.
    /// * Order: by checkpoint id descending; ties (the same id in several threads or
    ///   namespaces) by thread id descending, then namespace descending.
    /// * The stream is lazy and pages through the store: a backend never loads a whole
    ///   history into memory. Checkpoints written while the stream is consumed may or may not
    ///   appear; none appears twice.
    /// * Without `thread_id` it lists every thread ("global listing"); an unknown thread, or a
    ///   filter nothing matches, yields an empty stream. Errors are yielded as stream items.
    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>>;

    /// The ids of the threads that hold at least one checkpoint, in any namespace.
    ///
    /// # Behavior
    /// * Each such thread once, in ascending order as the backend compares ids (byte order
    ///   on the backends of this workspace, except PostgreSQL, which uses the column's
    ///   collation); a thread whose checkpoints were all deleted is not listed.
    /// * Threads written while the stream is consumed may or may not appear; none appears
    ///   twice. Errors are yielded as stream items.
    /// * The default implementation reads the global listing (every checkpoint, once) and
    ///   holds the distinct ids in memory. The backends of this workspace read no checkpoint:
    ///   they page through an index of their thread ids (a page held at a time).
    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        use futures::TryStreamExt;
        let listing = self.list(ListOptions::new());
        crate::backend::collected_keys(listing.map_ok(|t| t.config.thread_id).try_collect())
    }

    /// The ids [`list_threads`](Saver::list_threads) yields after `after`, in its order: a
    /// listing resumed after the last id it yielded (a [`Retry`](crate::Retry) after an
    /// outage), or the next page of a list of threads.
    ///
    /// # Behavior
    /// * The ids `list_threads` would yield that come after `after` in its order; `after`
    ///   itself is not yielded, and need not be a thread's id (a thread deleted since, or any
    ///   string: `""` lists every thread).
    /// * Otherwise as `list_threads`: each thread once, threads written meanwhile may or may
    ///   not appear, errors are yielded as stream items.
    /// * The default implementation reads `list_threads` from the start and yields the ids
    ///   greater than `after` in byte order, which is `list_threads`' order on a saver that
    ///   keeps to the byte order; a saver whose order differs must override it. The
    ///   backends of this workspace start their index pages at `after` (PostgreSQL compares
    ///   with the column's collation, as its `list_threads` orders).
    ///
    /// Pages of two thread ids, each starting after the last id of the one before:
    ///
    /// ```
    /// use checkpoint_core::{Checkpoint, CheckpointConfig, CheckpointMetadata, InMemorySaver};
    /// use checkpoint_core::{PutOptions, Saver, Source};
    /// use futures::{StreamExt, TryStreamExt};
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let saver = InMemorySaver::new();
    /// for thread in ["chat-1", "chat-2", "chat-3"] {
    ///     let config = CheckpointConfig::new(thread);
    ///     let metadata = CheckpointMetadata::for_step(Source::Input, -1);
    ///     let options = PutOptions::default();
    ///     saver.put(&config, Checkpoint::new(), metadata, Default::default(), options).await?;
    /// }
    /// let mut pages: Vec<Vec<String>> = Vec::new();
    /// loop {
    ///     let threads = match pages.last().and_then(|page| page.last()) {
    ///         None => saver.list_threads(),
    ///         Some(last) => saver.list_threads_after(last),
    ///     };
    ///     let page: Vec<String> = threads.take(2).try_collect().await?;
    ///     if page.is_empty() {
    ///         break;
    ///     }
    ///     pages.push(page);
    /// }
    /// assert_eq!(pages, [vec!["chat-1", "chat-2"], vec!["chat-3"]]);
    /// # Ok::<(), checkpoint_core::Error>(()) }).unwrap();
    /// ```
    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        crate::backend::ids_after(self.list_threads(), after)
    }

    /// What a runtime needs to rebuild delta channels at a checkpoint (LangGraph's
    /// `get_delta_channel_history`; see [`delta`](crate::delta)).
    ///
    /// # Behavior
    /// * The target is the checkpoint `config` addresses (without `checkpoint_id`: the latest
    ///   of the thread and namespace). The walk starts at its parent and follows parent links
    ///   within the thread and namespace, so on a forked thread only the target's own
    ///   ancestors count, never a sibling branch.
    /// * For each channel of `channels` it ends at the first ancestor that stores a value
    ///   for it (the channel is in that checkpoint's `channel_values` as `get_tuple` returns
    ///   it); that value is the `seed`. Without such an ancestor the walk reaches the root
    ///   and `seed` is `None`.
    /// * `writes`: the channel's pending writes recorded against the ancestors walked, the
    ///   seed's checkpoint included (its writes produced its child) and the target excluded
    ///   (its writes belong to the next step), oldest checkpoint first, each checkpoint's
    ///   writes in `(task_path, task_id, idx)` order.
    /// * The result has an entry for every channel named (an unknown target: empty writes,
    ///   no seed); no channel named, an empty map. An empty `thread_id` is
    ///   [`Error::InvalidInput`].
    /// * The default implementation is [`delta::walk`] (one `get_tuple` per ancestor);
    ///   backends answer in a number of round trips that does not grow with the depth.
    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        delta::walk(self, config, channels).await
    }

    /// Stores a checkpoint and returns its address.
    ///
    /// # Behavior
    /// * `config` names the thread and namespace; its `checkpoint_id`, if any, becomes the
    ///   parent of the new checkpoint. The returned config is
    ///   `(thread_id, checkpoint_ns, checkpoint.id)` with no `extra`.
    /// * Values: only the channels named in `new_versions` are stored, each under its version
    ///   from `new_versions` (which must equal the checkpoint's `channel_versions` entry). A
    ///   channel in `new_versions` without a value in `channel_values` is stored as removed.
    ///   A channel whose version is already stored is not stored again (the first value
    ///   stays). Values of channels not in `new_versions` are not stored by this call: they
    ///   load from the earlier put that stored their version.
    /// * Putting the same checkpoint id again replaces its checkpoint, metadata and parent
    ///   and keeps its pending writes: repeating a put is idempotent.
    /// * Rejected with [`Error::InvalidInput`]: empty `thread_id` or checkpoint id; a parent
    ///   id not less than the checkpoint id; a `new_versions` entry that disagrees with
    ///   `channel_versions`.
    /// * [`PutMode::CompareAndSet`]: stores only if the parent is the current head of the
    ///   thread and namespace (for a config without id: the namespace is empty), checked and
    ///   written atomically; otherwise [`Error::Conflict`] and nothing is written. Repeating a
    ///   successful compare-and-set put (same id, same parent) succeeds again as long as that
    ///   checkpoint is still the head.
    /// * With [`PutOptions::fence`]: stores only if the token is the thread's current lease
    ///   token, checked and written atomically; otherwise [`Error::StaleFence`] and nothing is
    ///   written ([`Error::Unsupported`] when `leases` is not advertised).
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig>;

    /// Records pending writes of task `task_id` against the checkpoint `config` addresses.
    ///
    /// # Behavior
    /// * `config` must carry thread id and checkpoint id ([`Error::InvalidInput`] otherwise;
    ///   this is checked before anything else, also for an empty `writes`).
    /// * Writes are keyed by the checkpoint's address, not tied to a stored row: writes
    ///   recorded before their checkpoint is put belong to it once it is. They are deleted
    ///   with their checkpoint (by `delete_thread`, `prune`, `delete_for_runs`).
    /// * Each write gets an index: its position in `writes`, or the fixed negative index of a
    ///   special channel ([`SPECIAL_CHANNELS`](crate::SPECIAL_CHANNELS)).
    /// * At most one write exists per `(checkpoint, task_id, idx)`. A call made only of
    ///   special-channel writes replaces existing ones; any other call keeps an existing
    ///   write and ignores the new one. Repeating a call is therefore idempotent.
    /// * An empty `writes` is a no-op.
    /// * With [`PutWritesOptions::fence`]: as for `put`, a stale token gives
    ///   [`Error::StaleFence`] and nothing is written.
    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()>;

    /// Stores checkpoints read from another store as they were read: the bulk path of
    /// migrations and restores.
    ///
    /// # Behavior
    /// * Each tuple is stored as [`put`](Self::put) stores its checkpoint at its address
    ///   (thread, namespace, `checkpoint.id`) under its `parent_config`'s id with its
    ///   metadata, every channel of its `channel_versions` in `new_versions` (a channel
    ///   without a value is stored as removed), followed by [`put_writes`](Self::put_writes)
    ///   of its pending writes. A write keeps its task, task path, channel and value.
    ///   Backends with a bulk path store its index as given; [`import_by_put`] (the
    ///   default) recreates it through `put_writes` ([`write_calls`]), which is exact for
    ///   the writes LangGraph makes (special channels at their fixed indexes, the others at
    ///   their positions, gaps filled from a special write of the task) and otherwise keeps
    ///   each task's order.
    /// * As `put` and `put_writes`: a checkpoint at an existing address is replaced, a
    ///   value at an existing version kept, a regular write at an existing
    ///   `(checkpoint, task, idx)` kept and a special-channel one replaced; so importing the
    ///   same tuples again is idempotent, and completes an import that was interrupted.
    /// * A tuple's parent comes earlier in `tuples` or is stored already (or is absent from
    ///   both: the checkpoint is stored all the same). Tuples may belong to several threads.
    /// * No compare-and-set and no fence. Invalid identifiers are rejected as `put` and
    ///   `put_writes` reject them ([`Error::InvalidInput`]); a backend with a bulk path
    ///   rejects the whole call before writing anything, others may have stored the tuples
    ///   before the invalid one. No atomicity is promised across tuples.
    ///
    /// [`import_by_put`]: crate::backend::import_by_put
    /// [`write_calls`]: crate::backend::write_calls
    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        crate::backend::import_by_put(self, tuples).await
    }

    /// Deletes every checkpoint, value and pending write of a thread, in all namespaces.
    /// Deleting an unknown thread (the empty thread id included: it can hold nothing) is a
    /// no-op.
    async fn delete_thread(&self, thread_id: &str) -> Result<()>;

    /// Copies every checkpoint, value and pending write of `source` to `target`, keeping ids,
    /// namespaces, parents, metadata and order. Entries that already exist in `target` at the
    /// same address are kept, so a copy interrupted half-way can simply be repeated. An
    /// empty `target` is [`Error::InvalidInput`]; otherwise an unknown or empty `source`, or
    /// `source == target`, is a no-op. Optional
    /// ([`Capabilities::copy_thread`]).
    async fn copy_thread(&self, source: &str, target: &str) -> Result<()>;

    /// Deletes old checkpoints of each thread, per namespace, according to `strategy`, with
    /// the pending writes of deleted checkpoints (and, in a namespace where anything was
    /// deleted, writes recorded for checkpoints that do not exist) and the values no
    /// remaining checkpoint names. Kept checkpoints load exactly as before, and so does the
    /// [delta history](Saver::delta_channel_history) of their delta channels: the ancestors
    /// a kept checkpoint needs for them (see [`delta::needed_ancestors`]) are kept as well,
    /// whole. Unknown threads and an empty list are no-ops. Optional
    /// ([`Capabilities::prune`]).
    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()>;

    /// Deletes every checkpoint whose metadata `run_id` is one of `run_ids`, in every thread
    /// and namespace, with its pending writes (and, in a namespace where anything was
    /// deleted, writes recorded for checkpoints that do not exist) and the values no
    /// remaining checkpoint names; except the checkpoints a remaining checkpoint needs for
    /// its delta channels (see [`delta::needed_ancestors`]), which stay whole.
    /// An empty list is a no-op. Optional ([`Capabilities::delete_for_runs`]).
    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()>;

    /// Grants `holder` the lease on `thread_id` for `ttl`, or returns `None` while another
    /// holder's lease is live.
    ///
    /// # Behavior
    /// * No lease, or an expired one: granted with a token greater than every token granted
    ///   on this thread before.
    /// * A live lease of the same `holder`: extended to `ttl`, same token.
    /// * Tokens survive [`delete_thread`](Saver::delete_thread): a thread deleted and written
    ///   again never hands out a token it handed out before.
    /// * An empty `thread_id` or `holder`, or a zero `ttl`, is [`Error::InvalidInput`].
    /// * Optional ([`Capabilities::leases`]).
    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>>;

    /// Extends a lease to `ttl` from now. Succeeds while `lease.token` is the thread's current
    /// token (even after expiry, if nobody took the lease over); otherwise
    /// [`Error::StaleFence`]. Optional ([`Capabilities::leases`]).
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease>;

    /// Ends a lease so another holder can acquire it at once. A no-op when the token is no
    /// longer current. The token stays spent. Optional ([`Capabilities::leases`]).
    async fn release_lease(&self, lease: &Lease) -> Result<()>;

    /// Claims an idempotency-ledger key for `ttl` (see [`Claim`]).
    ///
    /// # Behavior
    /// * Unknown key, or a pending claim that expired or was abandoned:
    ///   [`Claim::Acquired`] with a token greater than any before on this key.
    /// * A live pending claim: [`Claim::Pending`]. A completed key: [`Claim::Completed`] with
    ///   the recorded outcome, forever.
    /// * Checked and recorded atomically: of any number of concurrent claims on a key, at
    ///   most one is `Acquired`.
    /// * Ledger keys are independent of threads: `delete_thread` does not touch them.
    /// * An empty key or a zero `ttl` is [`Error::InvalidInput`]. Optional
    ///   ([`Capabilities::ledger`]).
    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim>;

    /// Records the outcome of the effect run under a claim, making the key
    /// [`Claim::Completed`]. Succeeds while `token` is the key's current claim (even after
    /// expiry, if nobody retook it), and again for the same token once completed (a retried
    /// call); otherwise [`Error::StaleFence`] and nothing changes. Optional
    /// ([`Capabilities::ledger`]).
    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()>;

    /// Gives up a pending claim so the key can be claimed again at once (the effect failed
    /// and may be retried). A no-op when `token` is not the key's current pending claim.
    /// Optional ([`Capabilities::ledger`]).
    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()>;

    /// Sets how long `thread_id`'s data lives: applied at once to the data the thread has,
    /// and again after every later write (and, for a saver configured to refresh on read,
    /// every read).
    ///
    /// # Behavior
    /// * [`ThreadTtl::Expire`]: the thread expires that long after this call or its latest
    ///   write, whichever is later. [`ThreadTtl::Pinned`]: never, whatever the saver's
    ///   default. [`ThreadTtl::Default`]: back to the saver's default TTL (none unless the
    ///   saver was configured with one).
    /// * An expired thread is invisible at once: `get_tuple`, `list`, `list_threads` and
    ///   `delta_channel_history` answer as for a thread that never existed, and its next
    ///   write starts the thread afresh (old checkpoints, values and writes never reappear).
    ///   Expiry forgets the thread's TTL setting, as [`delete_thread`](Saver::delete_thread)
    ///   does.
    /// * Leases and ledger keys are never subject to a TTL (a fencing token is never handed
    ///   out twice, also after the thread's data expired).
    /// * An empty `thread_id` or a zero [`ThreadTtl::Expire`] is [`Error::InvalidInput`].
    /// * Optional ([`Capabilities::ttl`]); the default implementation returns
    ///   [`Error::Unsupported`].
    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        let _ = (thread_id, ttl);
        Err(crate::Error::Unsupported {
            op: "set_thread_ttl",
        })
    }

    /// Time left before `thread_id`'s data expires: `None` when the thread has no TTL, has
    /// no data, or has expired. Optional ([`Capabilities::ttl`]).
    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        let _ = thread_id;
        Err(crate::Error::Unsupported { op: "thread_ttl" })
    }

    /// Deletes the stored data of at most `limit` expired threads and returns how many
    /// threads it deleted. Expired threads are invisible already; sweeping reclaims their
    /// space. Each call is short (one batch); call it until it returns less than `limit`,
    /// or run [`spawn_sweeper`](crate::backend::spawn_sweeper). A saver whose server
    /// deletes expired data itself returns `0`. Optional ([`Capabilities::ttl`]).
    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        let _ = limit;
        Err(crate::Error::Unsupported {
            op: "sweep_expired",
        })
    }
}

/// Conveniences on top of [`Saver`], for every saver.
#[async_trait]
pub trait SaverExt: Saver {
    /// The checkpoint `config` addresses, without metadata and writes.
    async fn get(&self, config: &CheckpointConfig) -> Result<Option<Checkpoint>> {
        Ok(self.get_tuple(config).await?.map(|t| t.checkpoint))
    }

    /// Collects [`Saver::list`] into a vector (mind the size of what you list).
    async fn list_all(&self, options: ListOptions) -> Result<Vec<CheckpointTuple>> {
        self.list(options).try_collect().await
    }

    /// A compare-and-set [`Saver::put`].
    async fn put_cas(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Result<CheckpointConfig> {
        self.put(
            config,
            checkpoint,
            metadata,
            new_versions,
            PutOptions::compare_and_set(),
        )
        .await
    }
}

impl<S: Saver + ?Sized> SaverExt for S {}

macro_rules! forward_saver {
    ($ty:ty) => {
        #[async_trait]
        impl<S: Saver + ?Sized> Saver for $ty {
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            async fn get_tuple(
                &self,
                config: &CheckpointConfig,
            ) -> Result<Option<CheckpointTuple>> {
                (**self).get_tuple(config).await
            }
            fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
                (**self).list(options)
            }
            fn list_threads(&self) -> BoxStream<'static, Result<String>> {
                (**self).list_threads()
            }
            fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
                (**self).list_threads_after(after)
            }
            async fn delta_channel_history(
                &self,
                config: &CheckpointConfig,
                channels: &[String],
            ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
                (**self).delta_channel_history(config, channels).await
            }
            async fn put(
                &self,
                config: &CheckpointConfig,
                checkpoint: Checkpoint,
                metadata: CheckpointMetadata,
                new_versions: ChannelVersions,
                options: PutOptions,
            ) -> Result<CheckpointConfig> {
                (**self)
                    .put(config, checkpoint, metadata, new_versions, options)
                    .await
            }
            async fn put_writes(
                &self,
                config: &CheckpointConfig,
                writes: Vec<(String, TypedValue)>,
                task_id: &str,
                options: PutWritesOptions,
            ) -> Result<()> {
                (**self).put_writes(config, writes, task_id, options).await
            }
            async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
                (**self).import(tuples).await
            }
            async fn delete_thread(&self, thread_id: &str) -> Result<()> {
                (**self).delete_thread(thread_id).await
            }
            async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
                (**self).copy_thread(source, target).await
            }
            async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
                (**self).prune(thread_ids, strategy).await
            }
            async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
                (**self).delete_for_runs(run_ids).await
            }
            async fn acquire_lease(
                &self,
                thread_id: &str,
                holder: &str,
                ttl: Duration,
            ) -> Result<Option<Lease>> {
                (**self).acquire_lease(thread_id, holder, ttl).await
            }
            async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
                (**self).renew_lease(lease, ttl).await
            }
            async fn release_lease(&self, lease: &Lease) -> Result<()> {
                (**self).release_lease(lease).await
            }
            async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
                (**self).claim(key, ttl).await
            }
            async fn complete_claim(
                &self,
                key: &str,
                token: u64,
                outcome: TypedValue,
            ) -> Result<()> {
                (**self).complete_claim(key, token, outcome).await
            }
            async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
                (**self).abandon_claim(key, token).await
            }
            async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
                (**self).set_thread_ttl(thread_id, ttl).await
            }
            async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
                (**self).thread_ttl(thread_id).await
            }
            async fn sweep_expired(&self, limit: usize) -> Result<usize> {
                (**self).sweep_expired(limit).await
            }
        }
    };
}

forward_saver!(Arc<S>);
forward_saver!(Box<S>);
