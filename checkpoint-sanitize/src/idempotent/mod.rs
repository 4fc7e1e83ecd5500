//! [`Idempotent`]: exactly-once side effects on top of at-least-once execution, and one run
//! per thread at a time.

mod key;
mod layer;
mod lock;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use checkpoint_core::{
    BoxStream, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, Lease, ListOptions, PruneStrategy, PutOptions, PutWritesOptions,
    Result, Saver, ThreadTtl, TypedValue,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

pub use key::EffectKey;
pub use layer::IdempotentLayer;
pub use lock::ThreadGuard;

use lock::{HeldLease, Shared, spawn_renewal};

/// Configuration of [`Idempotent`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct IdempotentConfig {
    /// How long a claim protects a running effect (default 60 s). An effect running longer
    /// may be started again by another caller: keep it well above the effect's duration.
    pub claim_ttl: Duration,
    /// How long [`Idempotent::once`] waits for another holder's live claim to complete or
    /// expire before giving up with [`OnceError::Busy`] (default 120 s).
    pub pending_wait: Duration,
    /// How often a waiting call polls the ledger or the lease (default 50 ms).
    pub poll_interval: Duration,
    /// Prefix of every ledger key this wrapper writes (default `"checkpoint-sanitize:"`).
    pub key_prefix: String,
    /// Use the backend's thread lease in [`Idempotent::lock_thread`] when the saver
    /// supports leases (default `true`).
    pub use_leases: bool,
    /// Lease time-to-live; the guard renews it every third of it (default 30 s).
    pub lease_ttl: Duration,
    /// How long [`Idempotent::lock_thread`] waits for another process's lease (default
    /// 120 s).
    pub lease_wait: Duration,
}

impl Default for IdempotentConfig {
    fn default() -> Self {
        Self {
            claim_ttl: Duration::from_secs(60),
            pending_wait: Duration::from_secs(120),
            poll_interval: Duration::from_millis(50),
            key_prefix: "checkpoint-sanitize:".to_owned(),
            use_leases: true,
            lease_ttl: Duration::from_secs(30),
            lease_wait: Duration::from_secs(120),
        }
    }
}

impl IdempotentConfig {
    /// Sets the claim time-to-live.
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl;
        self
    }

    /// Sets how long `once` waits for another holder.
    pub fn pending_wait(mut self, wait: Duration) -> Self {
        self.pending_wait = wait;
        self
    }

    /// Sets the poll interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Turns the use of backend leases on or off.
    pub fn use_leases(mut self, yes: bool) -> Self {
        self.use_leases = yes;
        self
    }

    /// Sets the lease time-to-live.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets how long `lock_thread` waits for another process's lease.
    pub fn lease_wait(mut self, wait: Duration) -> Self {
        self.lease_wait = wait;
        self
    }
}

/// What an effect run under a claim gets: the key to hand to the downstream system
/// (idempotency key, job id, message metadata) and the claim's fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectContext {
    /// The full ledger key (prefix included): pass it downstream for exactly-once.
    pub key: String,
    /// The claim's fencing token: larger for every new holder of the key.
    pub token: u64,
}

/// Where the value returned by [`Idempotent::once`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// This call ran the effect and recorded its outcome.
    Ran,
    /// The effect had already run; this is its recorded outcome. It was not run again.
    Replayed,
    /// This call ran the effect but could not record its outcome (its claim expired and was
    /// retaken, or the ledger failed): another caller may run it again.
    RanUnrecorded,
}

/// The value of an effect run once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Once<T> {
    /// The effect's outcome.
    pub value: T,
    /// Whether it ran now or was replayed.
    pub origin: Origin,
}

/// What [`Idempotent::begin`] found for a key.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Begun {
    /// The caller holds the key: run the effect, then [`Idempotent::finish`] (or, if it
    /// failed, [`Idempotent::abandon`]) with this context.
    Run(EffectContext),
    /// The effect already ran; this is the outcome it recorded. Do not run it again.
    Replay(TypedValue),
}

/// Why [`Idempotent::once`] returned no outcome.
#[derive(Debug)]
#[non_exhaustive]
pub enum OnceError<E> {
    /// The effect failed; its claim was abandoned, so a retry runs it again.
    Effect(E),
    /// The saver failed (or does not support the ledger: [`Error::Unsupported`]).
    Saver(Error),
    /// Another holder's claim was still live after [`IdempotentConfig::pending_wait`].
    Busy {
        /// The ledger key.
        key: String,
        /// When the other claim expires.
        retry_in: Duration,
    },
}

impl OnceError<std::convert::Infallible> {
    /// The same error as a `OnceError<E>` of any effect error `E`.
    pub fn widen<E>(self) -> OnceError<E> {
        match self {
            OnceError::Effect(never) => match never {},
            OnceError::Saver(e) => OnceError::Saver(e),
            OnceError::Busy { key, retry_in } => OnceError::Busy { key, retry_in },
        }
    }
}

impl<E: fmt::Display> fmt::Display for OnceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnceError::Effect(e) => write!(f, "the effect failed: {e}"),
            OnceError::Saver(e) => write!(f, "the idempotency ledger failed: {e}"),
            OnceError::Busy { key, retry_in } => write!(
                f,
                "effect {key:?} is being run by another holder; retry in {retry_in:?}"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for OnceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OnceError::Effect(e) => Some(e),
            OnceError::Saver(e) => Some(e),
            OnceError::Busy { .. } => None,
        }
    }
}

/// The lease wait ran out.
#[derive(Debug)]
struct LeaseTimeout {
    thread_id: String,
    waited: Duration,
}

impl fmt::Display for LeaseTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "thread {:?} stayed leased by another holder for {:?}",
            self.thread_id, self.waited
        )
    }
}

impl std::error::Error for LeaseTimeout {}

/// A [`Saver`] with exactly-once side effects ([`once`](Self::once)) and a per-thread
/// serializer ([`lock_thread`](Self::lock_thread)).
///
/// # What is guaranteed
/// * **Effects.** [`once`](Self::once) claims the key in the saver's idempotency ledger
///   ([`Saver::claim`], atomic: one holder at a time), runs the effect, records its outcome
///   ([`Saver::complete_claim`]); any later call with the key returns the recorded outcome
///   without running the effect. While a holder runs it, other callers wait. A failed
///   effect abandons its claim, so a retry runs it. A holder that crashed (or outlived
///   [`IdempotentConfig::claim_ttl`]) loses its claim when it expires, and the next caller
///   runs the effect.
/// * So the effect runs **at least once**, and **more than once only** when a holder ran it
///   and died (or stalled past the claim's TTL) before recording the outcome. It is
///   **exactly once** when the effect hands [`EffectContext::key`] to a downstream system
///   that deduplicates by it (an email queue's job id, a payment API's idempotency key, a
///   unique index): this is the durable-execution guarantee (Temporal, Restate, Stripe),
///   and nothing stronger is possible when the effect and the ledger are different systems.
///   Use [`EffectContext::token`] as a fencing token where the downstream supports one.
/// * **Threads.** [`lock_thread`](Self::lock_thread) gives one run per thread at a time:
///   in-process by a lock map whose entries exist only while held or awaited, across
///   processes by the saver's lease (when supported), renewed while held, with its fencing
///   token added to every `put` and `put_writes` on the thread through this wrapper so a
///   holder that lost its lease cannot write.
///
/// Requires [`Capabilities::ledger`] for `once` (otherwise [`Error::Unsupported`]). Reads and
/// all other operations are forwarded unchanged. Clones share their locks and leases.
#[derive(Clone, Debug)]
pub struct Idempotent<S> {
    inner: S,
    config: IdempotentConfig,
    shared: Arc<Shared>,
    holder: Arc<str>,
    guards: Arc<AtomicU64>,
}

impl<S> Idempotent<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: IdempotentConfig) -> Self {
        Self {
            inner,
            config,
            shared: Arc::new(Shared::default()),
            holder: Arc::from(uuid::Uuid::new_v4().to_string()),
            guards: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The wrapped saver.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The configuration.
    pub fn config(&self) -> &IdempotentConfig {
        &self.config
    }

    /// How many threads have an entry in the in-process lock map (held or awaited). Entries
    /// are removed as soon as nobody holds or waits for them.
    pub fn locked_threads(&self) -> usize {
        self.shared.locked_threads()
    }

    /// The ledger key of `key`.
    pub fn ledger_key(&self, key: &EffectKey) -> String {
        format!("{}{}", self.config.key_prefix, key.as_str())
    }

    fn fence_for(&self, thread_id: &str, requested: Option<u64>) -> Option<u64> {
        requested.or_else(|| self.shared.fence(thread_id))
    }
}

impl<S: Saver> Idempotent<S> {
    /// Runs `effect` at most once per `key` as far as the ledger can tell (see the type's
    /// docs for the exact guarantee), returning its outcome or the recorded one.
    ///
    /// The outcome `T` is stored in the ledger (msgpack); to make a permanent failure final
    /// rather than retried, return it as part of `T` (e.g. `T = Result<Sent, Rejected>`).
    /// Built on [`begin`](Self::begin), [`finish`](Self::finish) and
    /// [`abandon`](Self::abandon), which a caller whose effect cannot be a Rust future (a
    /// language binding) uses directly.
    pub async fn once<T, E, F, Fut>(
        &self,
        key: &EffectKey,
        effect: F,
    ) -> std::result::Result<Once<T>, OnceError<E>>
    where
        T: Serialize + DeserializeOwned + Send,
        F: FnOnce(EffectContext) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
        E: Send,
    {
        let context = match self.begin(key).await.map_err(OnceError::widen)? {
            Begun::Replay(outcome) => {
                let value = outcome.decode().map_err(OnceError::Saver)?;
                return Ok(Once {
                    value,
                    origin: Origin::Replayed,
                });
            }
            Begun::Run(context) => context,
        };
        match effect(context.clone()).await {
            Ok(value) => {
                let origin = match TypedValue::msgpack(&value) {
                    Ok(outcome) => self.finish(&context, outcome).await,
                    Err(e) => {
                        tracing::warn!(key = %context.key, error = %e, "the effect's outcome cannot be encoded; it is not recorded");
                        Origin::RanUnrecorded
                    }
                };
                Ok(Once { value, origin })
            }
            Err(e) => {
                self.abandon(&context).await;
                Err(OnceError::Effect(e))
            }
        }
    }

    /// The first half of [`once`](Self::once): claims `key` in the ledger, waiting up to
    /// [`IdempotentConfig::pending_wait`] while another holder's claim is live.
    /// [`Begun::Run`]: the caller now holds the key; it runs the effect, then calls
    /// [`finish`](Self::finish) with the outcome or, if the effect failed,
    /// [`abandon`](Self::abandon). [`Begun::Replay`]: the effect already ran; do not run it.
    pub async fn begin(
        &self,
        key: &EffectKey,
    ) -> std::result::Result<Begun, OnceError<std::convert::Infallible>> {
        let ledger_key = self.ledger_key(key);
        let deadline = Instant::now() + self.config.pending_wait;
        loop {
            let claim = self
                .inner
                .claim(&ledger_key, self.config.claim_ttl)
                .await
                .map_err(OnceError::Saver)?;
            match claim {
                Claim::Completed { outcome } => return Ok(Begun::Replay(outcome)),
                Claim::Pending { expires_in } => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(OnceError::Busy {
                            key: ledger_key,
                            retry_in: expires_in,
                        });
                    }
                    let nap = self
                        .config
                        .poll_interval
                        .min(expires_in.max(Duration::from_millis(1)))
                        .min(deadline - now);
                    tokio::time::sleep(nap).await;
                }
                Claim::Acquired { token } => {
                    return Ok(Begun::Run(EffectContext {
                        key: ledger_key,
                        token,
                    }));
                }
            }
        }
    }

    /// Records `outcome` of the effect run under `context` (retrying transient ledger
    /// failures, unless a [`RetryLayer`](checkpoint_core::RetryLayer) under this wrapper
    /// already gave up on one): [`Origin::Ran`], or [`Origin::RanUnrecorded`] when the claim
    /// was lost or the ledger kept failing (logged; another caller may run the effect
    /// again).
    pub async fn finish(&self, context: &EffectContext, outcome: TypedValue) -> Origin {
        let (key, token) = (context.key.as_str(), context.token);
        for attempt in 0..3u32 {
            match self.inner.complete_claim(key, token, outcome.clone()).await {
                Ok(()) => return Origin::Ran,
                Err(e)
                    if e.is_transient()
                        && checkpoint_core::RetriesExhausted::of(&e).is_none()
                        && attempt < 2 =>
                {
                    tokio::time::sleep(self.config.poll_interval * (attempt + 1)).await;
                }
                Err(e) => {
                    tracing::warn!(
                        key,
                        token,
                        error = %e,
                        "the effect ran but its outcome could not be recorded; it may run again"
                    );
                    return Origin::RanUnrecorded;
                }
            }
        }
        Origin::RanUnrecorded
    }

    /// Gives up the claim of an effect that failed, so a retry runs it at once (a failure to
    /// do so is logged: the claim then expires after [`IdempotentConfig::claim_ttl`]).
    pub async fn abandon(&self, context: &EffectContext) {
        if let Err(err) = self.inner.abandon_claim(&context.key, context.token).await {
            tracing::warn!(key = %context.key, error = %err, "abandoning a claim failed; it will expire");
        }
    }

    /// [`once`](Self::once) with the key derived from the checkpoint `config` addresses, the
    /// task and the effect's name ([`EffectKey::for_task`]).
    pub async fn once_for_task<T, E, F, Fut>(
        &self,
        config: &CheckpointConfig,
        task_id: &str,
        effect_name: &str,
        effect: F,
    ) -> std::result::Result<Once<T>, OnceError<E>>
    where
        T: Serialize + DeserializeOwned + Send,
        F: FnOnce(EffectContext) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
        E: Send,
    {
        let key = EffectKey::for_task(config, task_id, effect_name).map_err(OnceError::Saver)?;
        self.once(&key, effect).await
    }
}

impl<S: Saver + Clone> Idempotent<S> {
    /// Waits for exclusive access to `thread_id` (see [`ThreadGuard`]): the in-process lock,
    /// then, when the saver supports leases and [`IdempotentConfig::use_leases`] is on, the
    /// thread's lease (polling up to [`IdempotentConfig::lease_wait`], then
    /// [`Error::Unavailable`], which is transient).
    pub async fn lock_thread(&self, thread_id: &str) -> Result<ThreadGuard> {
        if thread_id.is_empty() {
            return Err(Error::invalid("cannot lock an empty thread id"));
        }
        let entry = self.shared.lock_entry(thread_id);
        let waiter = Waiter {
            shared: Arc::clone(&self.shared),
            thread_id,
            entry: Some(Arc::clone(&entry)),
        };
        let local = entry.lock_owned().await;
        drop(waiter);
        let mut guard = ThreadGuard {
            thread_id: thread_id.to_owned(),
            shared: Arc::clone(&self.shared),
            local: Some(local),
            lease: None,
        };
        if !(self.config.use_leases && self.inner.capabilities().leases) {
            return Ok(guard);
        }
        let n = self.guards.fetch_add(1, Ordering::Relaxed);
        let holder = format!("{}:{n}", self.holder);
        let started = Instant::now();
        let lease = loop {
            if let Some(lease) = self
                .inner
                .acquire_lease(thread_id, &holder, self.config.lease_ttl)
                .await?
            {
                break lease;
            }
            let waited = started.elapsed();
            if waited >= self.config.lease_wait {
                return Err(Error::Unavailable {
                    backend: "thread lease",
                    source: Box::new(LeaseTimeout {
                        thread_id: thread_id.to_owned(),
                        waited,
                    }),
                });
            }
            tokio::time::sleep(
                self.config
                    .poll_interval
                    .min(self.config.lease_wait - waited),
            )
            .await;
        };
        let lost = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = oneshot::channel();
        let task = spawn_renewal(
            self.inner.clone(),
            lease.clone(),
            self.config.lease_ttl,
            Arc::clone(&lost),
            stopped,
        );
        self.shared.set_lease(lease.clone());
        guard.lease = Some(HeldLease {
            lease,
            lost,
            stop: Some(stop),
            task: Some(task),
        });
        Ok(guard)
    }
}

/// Cleans up the lock-map entry of a `lock_thread` call that is dropped while waiting.
struct Waiter<'a> {
    shared: Arc<Shared>,
    thread_id: &'a str,
    entry: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.shared.forget(self.thread_id, entry);
        }
    }
}

#[async_trait]
impl<S: Saver> Saver for Idempotent<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        self.inner.get_tuple(config).await
    }

    /// Forwarded unchanged: the history is the raw input of the runtime's reconstruction.
    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<std::collections::BTreeMap<String, checkpoint_core::DeltaChannelHistory>> {
        self.inner.delta_channel_history(config, channels).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        self.inner.list(options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.inner.list_threads()
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.inner.list_threads_after(after)
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        mut options: PutOptions,
    ) -> Result<CheckpointConfig> {
        options.fence = self.fence_for(&config.thread_id, options.fence);
        self.inner
            .put(config, checkpoint, metadata, new_versions, options)
            .await
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        mut options: PutWritesOptions,
    ) -> Result<()> {
        options.fence = self.fence_for(&config.thread_id, options.fence);
        self.inner
            .put_writes(config, writes, task_id, options)
            .await
    }

    /// Forwarded unchanged: an import copies stored data exactly, so nothing of this
    /// wrapper applies to it.
    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        self.inner.import(tuples).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.inner.delete_thread(thread_id).await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        self.inner.copy_thread(source, target).await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        self.inner.prune(thread_ids, strategy).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        self.inner.delete_for_runs(run_ids).await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.inner.acquire_lease(thread_id, holder, ttl).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.renew_lease(lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.inner.release_lease(lease).await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        self.inner.claim(key, ttl).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        self.inner.complete_claim(key, token, outcome).await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        self.inner.abandon_claim(key, token).await
    }
    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        self.inner.set_thread_ttl(thread_id, ttl).await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        self.inner.thread_ttl(thread_id).await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        self.inner.sweep_expired(limit).await
    }
}
