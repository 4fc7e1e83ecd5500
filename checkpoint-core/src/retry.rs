//! [`Retry`]: calls that failed with a transient error, made again after a backoff.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use tower_layer::Layer;

use crate::delta::DeltaChannelHistory;
use crate::{
    BoxError, Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, Lease, ListOptions, PruneStrategy, PutOptions, PutWritesOptions,
    Result, Saver, ThreadTtl, TypedValue,
};

/// Wraps a saver so that a call failing with a transient error ([`Error::is_transient`]: a
/// lost connection, a server restarting or failing over, a [`Timeout`](crate::Timeout)) is
/// made again after a growing delay, up to a bounded number of times; the last error is
/// returned when they run out, with a [`RetriesExhausted`] source (the error it had as that
/// one's source), which no other `Retry` retries. Other errors (a compare-and-set
/// [`Error::Conflict`], a [`Error::StaleFence`], bad input) are returned at once.
///
/// A transient error does not say whether the call took effect: the answer may be what was
/// lost. Every call is retried as it is because the [`Saver`] contract makes repeating it
/// safe:
///
/// * `put`, `put_writes`, `import`, `copy_thread`, the deletions, `set_thread_ttl` and the
///   reads are idempotent. A deletion repeated after a lost answer deletes what was written
///   in between too, as the caller's own retry would. A compare-and-set put that was stored and whose answer was lost
///   succeeds again while it is still the head; if another writer has put after it in the
///   meantime, the retry fails with [`Error::Conflict`] although the put was stored (read
///   the head to tell, as after any conflict).
/// * `acquire_lease` of the same holder extends its own lease (same token); `renew_lease`,
///   `release_lease`, `complete_claim` and `abandon_claim` are keyed by their token.
/// * `claim`: of any number of claims on a key at most one is
///   [`Acquired`](Claim::Acquired), retried ones included. A claim whose `Acquired` answer
///   was lost answers [`Pending`](Claim::Pending) when retried, as a retry by the caller
///   would: the claim lapses after its TTL and can then be taken again.
/// * `sweep_expired` is *not* retried: a second run would delete another batch and its count
///   would hide the first run's. A sweeper calls it again on its own schedule.
/// * `list` is opened again after a transient error wherever it comes, and resumes after
///   the last checkpoint it yielded: checkpoints with a lower id (`before`), and those
///   with the same id in a thread or namespace not yet yielded (the listing's ties), within
///   what is left of `limit`. It yields what an uncut listing yields, each checkpoint once
///   (checkpoints written meanwhile may or may not appear, as in any listing). The policy's
///   retries count from the last checkpoint yielded, so each outage a long listing meets
///   has them all. `list_threads` and `list_threads_after` resume the same way, after the
///   last id yielded ([`Saver::list_threads_after`]).
///
/// Each retry is logged as a `tracing` warning with the operation, the attempt, the delay
/// and the error. Calls made again keep their arguments: `put` clones its checkpoint (its
/// values are shared [`Bytes`](bytes::Bytes), so only the maps are copied).
///
/// Put it outside a [`TimeoutLayer`](crate::TimeoutLayer), so that every attempt gets the
/// deadline and a call cut short is retried; a `TimeoutLayer` outside it bounds the whole.
/// Backoff delays come from [`backon`]'s exponential schedule, with jitter by default so
/// that many clients that lost the same server do not come back in step. It needs a
/// tokio runtime with the time driver.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_core::{InMemorySaver, RetryLayer, Saver, TimeoutLayer};
/// use tower_layer::Layer;
/// let saver = RetryLayer::new()
///     .max_retries(4)
///     .delays(Duration::from_millis(50), Duration::from_secs(1))
///     .layer(TimeoutLayer::new(Duration::from_secs(5)).layer(InMemorySaver::new()));
/// # let _: &dyn Saver = &saver;
/// ```
#[derive(Debug)]
pub struct Retry<S> {
    /// Shared with the streams of `list` and `list_threads`, which may open it again.
    inner: Arc<S>,
    policy: RetryLayer,
}

impl<S> Clone for Retry<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            policy: self.policy,
        }
    }
}

/// The [`Layer`] of [`Retry`], and its policy: how many times, and how long to wait before
/// each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryLayer {
    max_retries: usize,
    first_delay: Duration,
    max_delay: Duration,
    jitter: bool,
}

impl Default for RetryLayer {
    /// Up to 6 retries, waiting 100 ms before the first and doubling up to 3.2 s, with
    /// jitter: 6.3 s of waiting in all, up to twice that with the jitter; enough to ride out
    /// a server restart or a failover.
    fn default() -> Self {
        Self {
            max_retries: 6,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(3_200),
            jitter: true,
        }
    }
}

impl RetryLayer {
    /// The default policy (see [`Default`](#impl-Default-for-RetryLayer)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes a call at most `retries` more times after its first attempt (0: never again).
    pub fn max_retries(mut self, retries: usize) -> Self {
        self.max_retries = retries;
        self
    }

    /// Waits `first` before the first retry, twice as long before each next one, and never
    /// longer than `max` (raised to `first` when smaller); jitter draws each delay between
    /// that and twice that.
    pub fn delays(mut self, first: Duration, max: Duration) -> Self {
        self.first_delay = first;
        self.max_delay = max.max(first);
        self
    }

    /// With jitter (the default), each delay is drawn between itself and twice itself.
    /// Without, delays are exact: for tests, or a single client.
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    fn backoff(&self) -> ExponentialBuilder {
        let builder = ExponentialBuilder::new()
            .with_factor(2.0)
            .with_min_delay(self.first_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries);
        if self.jitter {
            builder.with_jitter()
        } else {
            builder
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::new(inner, *self)
    }
}

impl<S> Retry<S> {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: S, policy: RetryLayer) -> Self {
        Self {
            inner: Arc::new(inner),
            policy,
        }
    }

    /// The wrapped saver.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped saver, shared with this wrapper's clones and open streams.
    pub fn into_inner(self) -> Arc<S> {
        self.inner
    }
}

/// Makes `call` until it succeeds, fails with an error that is not transient (or one
/// another `Retry` already gave up on), or the policy's retries run out; a transient error
/// it gives up with gets a [`RetriesExhausted`] source.
async fn retried<T, F, Fut>(policy: RetryLayer, operation: &'static str, call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempt = 1u32;
    let result = call
        .retry(policy.backoff())
        .when(retryable)
        .notify(|error: &Error, delay: Duration| {
            warn_retry(operation, attempt, delay, error);
            attempt += 1;
        })
        .await;
    result.map_err(|e| gave_up(e, attempt))
}

/// Whether a `Retry` makes a call that failed with `e` again: a transient error no other
/// `Retry` gave up on.
fn retryable(e: &Error) -> bool {
    e.is_transient() && RetriesExhausted::of(e).is_none()
}

fn warn_retry(operation: &'static str, attempt: u32, delay: Duration, error: &Error) {
    tracing::warn!(
        operation,
        attempt,
        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        error = %error.chain(),
        "saver call failed with a transient error; retrying"
    );
}

/// The error a `Retry` gives up with after `attempts`: a transient one gets a
/// [`RetriesExhausted`] source (once).
fn gave_up(e: Error, attempts: u32) -> Error {
    match e {
        Error::Unavailable { backend, source } if !source.is::<RetriesExhausted>() => {
            Error::Unavailable {
                backend,
                source: Box::new(RetriesExhausted { attempts, source }),
            }
        }
        other => other,
    }
}

/// The source of the transient error a [`Retry`] gives up with: the attempts it made, and
/// the last attempt's error as its own source. A `Retry` passes such an error on without
/// retrying it, so retries nested in a stack of wrappers (a `Retry` around a wrapper that
/// has its own around the backend) do not multiply their attempts.
#[derive(Debug)]
pub struct RetriesExhausted {
    /// Attempts made, the first included.
    pub attempts: u32,
    source: BoxError,
}

impl RetriesExhausted {
    /// The `RetriesExhausted` an error carries, if a `Retry` gave up with it.
    pub fn of(error: &Error) -> Option<&RetriesExhausted> {
        match error {
            Error::Unavailable { source, .. } => source.downcast_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for RetriesExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gave up after {} attempts", self.attempts)
    }
}

impl std::error::Error for RetriesExhausted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Where a stream read through a [`Retry`] stopped, and how to open it again from there.
trait Cursor: Send + 'static {
    type Item: Send + 'static;

    /// The operation, for the retry warnings.
    fn operation(&self) -> &'static str;

    /// The stream from where it stopped: from its start until an item was noted.
    fn reopen(&self) -> BoxStream<'static, Result<Self::Item>>;

    /// Notes an item yielded.
    fn note(&mut self, item: &Self::Item);

    /// Whether everything the stream may yield was yielded (a `list`'s `limit`).
    fn exhausted(&self) -> bool {
        false
    }
}

/// A stream through a [`Retry`]: opened again after a transient error, wherever it comes,
/// from where its [`Cursor`] says it stopped. The policy's retries are counted from the
/// last item yielded: a stream that yields again after a retry has them all for its next
/// outage.
struct Resumed<C: Cursor> {
    cursor: C,
    policy: RetryLayer,
    backoff: <ExponentialBuilder as BackoffBuilder>::Backoff,
    /// The stream being read; `None` until (re)opened.
    current: Option<BoxStream<'static, Result<C::Item>>>,
    attempt: u32,
    done: bool,
}

impl<C: Cursor> Resumed<C> {
    fn stream(cursor: C, policy: RetryLayer) -> BoxStream<'static, Result<C::Item>> {
        let resumed = Self {
            cursor,
            policy,
            backoff: policy.backoff().build(),
            current: None,
            attempt: 1,
            done: false,
        };
        stream::unfold(resumed, |mut resumed| async move {
            let item = resumed.next_item().await?;
            Some((item, resumed))
        })
        .boxed()
    }

    async fn next_item(&mut self) -> Option<Result<C::Item>> {
        loop {
            if self.done {
                return None;
            }
            let items = match &mut self.current {
                Some(items) => items,
                None => self.current.insert(self.cursor.reopen()),
            };
            match items.next().await {
                Some(Ok(item)) => {
                    self.cursor.note(&item);
                    if self.attempt > 1 {
                        // Resumed: the next outage gets the policy's retries afresh.
                        self.backoff = self.policy.backoff().build();
                        self.attempt = 1;
                    }
                    return Some(Ok(item));
                }
                None => {
                    self.done = true;
                    return None;
                }
                // Everything the stream may yield was yielded: nothing is left to read again.
                Some(Err(e)) if retryable(&e) && self.cursor.exhausted() => {
                    self.done = true;
                    return None;
                }
                Some(Err(e)) if retryable(&e) => match self.backoff.next() {
                    Some(delay) => {
                        warn_retry(self.cursor.operation(), self.attempt, delay, &e);
                        self.attempt += 1;
                        self.current = None;
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        self.done = true;
                        return Some(Err(gave_up(e, self.attempt)));
                    }
                },
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Where a `list_threads` stopped: after the last id it yielded, which
/// [`Saver::list_threads_after`] resumes from in the saver's own order.
struct ThreadCursor<S> {
    inner: Arc<S>,
    operation: &'static str,
    /// The last id yielded (or the `after` the listing started from).
    last: Option<String>,
}

impl<S: Saver> Cursor for ThreadCursor<S> {
    type Item = String;

    fn operation(&self) -> &'static str {
        self.operation
    }

    fn reopen(&self) -> BoxStream<'static, Result<String>> {
        match &self.last {
            None => self.inner.list_threads(),
            Some(after) => self.inner.list_threads_after(after),
        }
    }

    fn note(&mut self, id: &String) {
        self.last = Some(id.clone());
    }
}

/// Where a `list` stopped (see [`reopen`](Cursor::reopen)).
struct ListCursor<S> {
    inner: Arc<S>,
    options: ListOptions,
    /// Checkpoints yielded so far.
    yielded: usize,
    /// The id of the last checkpoint yielded, and the `(thread, namespace)` of every
    /// checkpoint with that id yielded (the listing orders by id; ties are several threads
    /// or namespaces).
    last: Option<(String, HashSet<(String, String)>)>,
}

impl<S> ListCursor<S> {
    fn new(inner: Arc<S>, options: ListOptions) -> Self {
        Self {
            inner,
            options,
            yielded: 0,
            last: None,
        }
    }

    /// What is left of `limit`.
    fn remaining(&self) -> Option<usize> {
        self.options.limit.map(|l| l.saturating_sub(self.yielded))
    }
}

impl<S: Saver> Cursor for ListCursor<S> {
    type Item = CheckpointTuple;

    fn operation(&self) -> &'static str {
        "list"
    }

    /// The listing from where it stopped. The checkpoints not yet yielded are those with an
    /// id below the last one's (`before`, which the backend compares as it orders), and
    /// those with the last one's id in a thread or namespace not yet yielded at that id
    /// (none when the listing is of one thread and namespace, where ids are unique);
    /// `limit` counts what was yielded.
    fn reopen(&self) -> BoxStream<'static, Result<CheckpointTuple>> {
        let Some((id, seen)) = &self.last else {
            return self.inner.list(self.options.clone());
        };
        let remaining = self.remaining();
        let one_namespace =
            self.options.thread_id.is_some() && self.options.checkpoint_ns.is_some();
        if remaining == Some(0) || (one_namespace && self.options.checkpoint_id.is_some()) {
            return stream::empty().boxed();
        }
        let mut ties = self.options.clone();
        ties.checkpoint_id = Some(id.clone());
        ties.before = None;
        ties.limit = None;
        let seen = seen.clone();
        let ties = if one_namespace {
            stream::empty().boxed()
        } else {
            self.inner
                .list(ties)
                .try_filter(move |t| {
                    let key = (t.config.thread_id.clone(), t.config.checkpoint_ns.clone());
                    futures::future::ready(!seen.contains(&key))
                })
                .boxed()
        };
        let rest = if self.options.checkpoint_id.is_some() {
            stream::empty().boxed()
        } else {
            let mut rest = self.options.clone();
            rest.before = Some(id.clone());
            rest.limit = remaining;
            self.inner.list(rest)
        };
        let resumed = ties.chain(rest);
        match remaining {
            Some(n) => resumed.take(n).boxed(),
            None => resumed.boxed(),
        }
    }

    fn note(&mut self, tuple: &CheckpointTuple) {
        self.yielded += 1;
        let key = (
            tuple.config.thread_id.clone(),
            tuple.config.checkpoint_ns.clone(),
        );
        match &mut self.last {
            Some((id, seen)) if *id == tuple.checkpoint.id => {
                seen.insert(key);
            }
            last => *last = Some((tuple.checkpoint.id.clone(), HashSet::from([key]))),
        }
    }

    fn exhausted(&self) -> bool {
        self.remaining() == Some(0)
    }
}

#[async_trait]
impl<S: Saver> Saver for Retry<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        retried(self.policy, "get_tuple", || self.inner.get_tuple(config)).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let cursor = ListCursor::new(Arc::clone(&self.inner), options);
        Resumed::stream(cursor, self.policy)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        let cursor = ThreadCursor {
            inner: Arc::clone(&self.inner),
            operation: "list_threads",
            last: None,
        };
        Resumed::stream(cursor, self.policy)
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        let cursor = ThreadCursor {
            inner: Arc::clone(&self.inner),
            operation: "list_threads_after",
            last: Some(after.to_owned()),
        };
        Resumed::stream(cursor, self.policy)
    }

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        retried(self.policy, "delta_channel_history", || {
            self.inner.delta_channel_history(config, channels)
        })
        .await
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        retried(self.policy, "put", || {
            self.inner.put(
                config,
                checkpoint.clone(),
                metadata.clone(),
                new_versions.clone(),
                options.clone(),
            )
        })
        .await
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        retried(self.policy, "put_writes", || {
            self.inner
                .put_writes(config, writes.clone(), task_id, options.clone())
        })
        .await
    }

    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        retried(self.policy, "import", || self.inner.import(tuples.clone())).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        retried(self.policy, "delete_thread", || {
            self.inner.delete_thread(thread_id)
        })
        .await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        retried(self.policy, "copy_thread", || {
            self.inner.copy_thread(source, target)
        })
        .await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        retried(self.policy, "prune", || {
            self.inner.prune(thread_ids, strategy)
        })
        .await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        retried(self.policy, "delete_for_runs", || {
            self.inner.delete_for_runs(run_ids)
        })
        .await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        retried(self.policy, "acquire_lease", || {
            self.inner.acquire_lease(thread_id, holder, ttl)
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        retried(self.policy, "renew_lease", || {
            self.inner.renew_lease(lease, ttl)
        })
        .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        retried(self.policy, "release_lease", || {
            self.inner.release_lease(lease)
        })
        .await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        retried(self.policy, "claim", || self.inner.claim(key, ttl)).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        retried(self.policy, "complete_claim", || {
            self.inner.complete_claim(key, token, outcome.clone())
        })
        .await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        retried(self.policy, "abandon_claim", || {
            self.inner.abandon_claim(key, token)
        })
        .await
    }

    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        retried(self.policy, "set_thread_ttl", || {
            self.inner.set_thread_ttl(thread_id, ttl)
        })
        .await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        retried(self.policy, "thread_ttl", || {
            self.inner.thread_ttl(thread_id)
        })
        .await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        self.inner.sweep_expired(limit).await
    }
}

#[cfg(test)]
mod tests {
    use futures::TryStreamExt;
    use tokio::time::Instant;

    use super::*;
    use crate::testing::{Fault, Scripted};

    /// Exact delays, so paused time can check them.
    fn exact() -> RetryLayer {
        RetryLayer::new().jitter(false)
    }

    fn value(n: i64) -> TypedValue {
        TypedValue::msgpack(&serde_json::json!(n)).unwrap()
    }

    /// Puts a successor of `parent` (or a first checkpoint) with channel `a` set to `n`.
    async fn put_next(
        saver: &dyn Saver,
        thread: &str,
        parent: Option<&CheckpointTuple>,
        n: i64,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        let mut checkpoint = parent.map_or_else(Checkpoint::new, |p| p.checkpoint.successor());
        let version = checkpoint.set_typed("a", value(n));
        let config = parent.map_or_else(|| CheckpointConfig::new(thread), |p| p.config.clone());
        saver
            .put(
                &config,
                checkpoint,
                CheckpointMetadata::new(),
                ChannelVersions::from([("a".to_owned(), version)]),
                options,
            )
            .await
    }

    /// `ms` have passed (in paused time) since `started`, give or take the timer's rounding.
    fn assert_waited(started: Instant, ms: u64) {
        let waited = started.elapsed();
        let expected = Duration::from_millis(ms);
        assert!(
            (expected..=expected + Duration::from_millis(5)).contains(&waited),
            "waited {waited:?}, expected {expected:?}"
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn transient_errors_are_retried_after_growing_delays() {
        let saver = exact()
            .max_retries(4)
            .delays(Duration::from_millis(100), Duration::from_millis(300))
            .layer(Scripted::new());
        let scripted = saver.get_ref();
        put_next(&saver, "t", None, 1, PutOptions::new())
            .await
            .unwrap();

        scripted.script(&[Fault::Refused; 4]);
        let started = Instant::now();
        let head = saver.get_tuple(&CheckpointConfig::new("t")).await.unwrap();
        assert!(head.is_some());
        assert_eq!(scripted.calls(), ["get_tuple"; 5]);
        // 100, 200, then 300 twice (the cap); tokio's timer rounds each sleep up to its
        // next millisecond.
        assert_waited(started, 900);

        scripted.script(&[Fault::Refused; 5]);
        let started = Instant::now();
        let err = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap_err();
        assert!(err.is_transient(), "the last error is returned: {err:?}");
        assert_eq!(RetriesExhausted::of(&err).map(|r| r.attempts), Some(5));
        assert_eq!(
            err.chain(),
            "test is unavailable: gave up after 5 attempts: connection reset"
        );
        assert_eq!(scripted.calls(), ["get_tuple"; 5], "1 attempt + 4 retries");
        assert_waited(started, 900);
        scripted.script(&[]);

        let never = exact().max_retries(0).layer(Scripted::new());
        never.get_ref().script(&[Fault::Refused]);
        assert!(never.get_tuple(&CheckpointConfig::new("t")).await.is_err());
        assert_eq!(never.get_ref().calls(), ["get_tuple"]);
    }

    /// A `Retry` around another (through wrappers that have their own, say) does not retry
    /// what the inner one gave up on: attempts add up, they do not multiply.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn nested_retries_do_not_multiply() {
        let policy = exact().max_retries(2);
        let saver = policy.layer(policy.layer(Scripted::new()));
        let scripted = saver.get_ref().get_ref();
        scripted.script(&[Fault::Refused; 10]);
        let err = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap_err();
        assert_eq!(scripted.calls(), ["get_tuple"; 3]);
        assert_eq!(RetriesExhausted::of(&err).map(|r| r.attempts), Some(3));
        assert!(err.is_transient());
        scripted.script(&[]);

        // Opening a stream likewise.
        scripted.script(&[Fault::Refused; 10]);
        let err = saver
            .list(ListOptions::thread("t"))
            .try_next()
            .await
            .unwrap_err();
        assert_eq!(scripted.calls(), ["list"; 3]);
        assert_eq!(RetriesExhausted::of(&err).map(|r| r.attempts), Some(3));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn jittered_delays_stay_between_the_delay_and_twice_it() {
        let saver = RetryLayer::new()
            .max_retries(3)
            .delays(Duration::from_millis(100), Duration::from_secs(10))
            .layer(Scripted::new());
        for _ in 0..20 {
            saver.get_ref().script(&[Fault::Refused; 3]);
            let started = Instant::now();
            saver.get_tuple(&CheckpointConfig::new("t")).await.unwrap();
            let waited = started.elapsed();
            assert!(
                (Duration::from_millis(700)..=Duration::from_millis(1_405)).contains(&waited),
                "{waited:?}"
            );
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn errors_that_are_not_transient_are_returned_at_once() {
        let saver = exact().layer(Scripted::new());
        let scripted = saver.get_ref();
        scripted.script(&[Fault::Rejected, Fault::Refused]);
        let err = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert_eq!(scripted.calls(), ["get_tuple"]);
        scripted.script(&[]);

        // A compare-and-set put on a parent that is not the head: a conflict, not retried.
        let first = put_next(&saver, "t", None, 1, PutOptions::new())
            .await
            .unwrap();
        let first = saver.get_tuple(&first).await.unwrap().unwrap();
        put_next(&saver, "t", Some(&first), 2, PutOptions::new())
            .await
            .unwrap();
        scripted.script(&[]);
        let err = put_next(&saver, "t", Some(&first), 3, PutOptions::compare_and_set())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
        assert_eq!(scripted.calls(), ["put"]);
    }

    /// Every call but `sweep_expired` is made again after a transient error; each succeeds.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn every_call_but_the_sweep_is_retried() {
        let saver = exact().layer(Scripted::new());
        let scripted = saver.get_ref();
        let first = put_next(&saver, "t", None, 1, PutOptions::new())
            .await
            .unwrap();
        let tuple = saver.get_tuple(&first).await.unwrap().unwrap();
        let lease = saver
            .acquire_lease("t", "me", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let Claim::Acquired { token } = saver.claim("k", Duration::from_secs(60)).await.unwrap()
        else {
            panic!("a new key is acquired");
        };
        let threads = ["t".to_owned()];

        macro_rules! retried_once {
            ($operation:literal, $call:expr) => {{
                scripted.script(&[Fault::Refused]);
                let result = $call.await;
                assert!(result.is_ok(), "{}: {:?}", $operation, result.err());
                assert_eq!(scripted.calls(), [$operation; 2], "{}", $operation);
            }};
        }
        retried_once!("get_tuple", saver.get_tuple(&first));
        retried_once!(
            "delta_channel_history",
            saver.delta_channel_history(&first, &["a".to_owned()])
        );
        retried_once!(
            "put",
            put_next(&saver, "t", Some(&tuple), 2, PutOptions::new())
        );
        retried_once!(
            "put_writes",
            saver.put_writes(
                &first,
                vec![("a".to_owned(), value(5))],
                "task",
                PutWritesOptions::new()
            )
        );
        retried_once!("import", saver.import(vec![tuple.clone()]));
        retried_once!("copy_thread", saver.copy_thread("t", "u"));
        retried_once!("prune", saver.prune(&threads, PruneStrategy::KeepLatest));
        retried_once!(
            "delete_for_runs",
            saver.delete_for_runs(&["run".to_owned()])
        );
        retried_once!(
            "acquire_lease",
            saver.acquire_lease("t", "me", Duration::from_secs(60))
        );
        retried_once!(
            "renew_lease",
            saver.renew_lease(&lease, Duration::from_secs(60))
        );
        retried_once!("release_lease", saver.release_lease(&lease));
        retried_once!("claim", saver.claim("k2", Duration::from_secs(60)));
        retried_once!("abandon_claim", saver.abandon_claim("k2", 1));
        retried_once!("complete_claim", saver.complete_claim("k", token, value(7)));
        retried_once!(
            "set_thread_ttl",
            saver.set_thread_ttl("t", ThreadTtl::Pinned)
        );
        retried_once!("thread_ttl", saver.thread_ttl("t"));
        retried_once!(
            "list",
            saver.list(ListOptions::thread("t")).try_collect::<Vec<_>>()
        );
        retried_once!("list_threads", saver.list_threads().try_collect::<Vec<_>>());
        retried_once!("delete_thread", saver.delete_thread("u"));

        scripted.script(&[Fault::Refused]);
        let err = saver.sweep_expired(10).await.unwrap_err();
        assert!(err.is_transient());
        assert_eq!(scripted.calls(), ["sweep_expired"]);
    }

    /// A call that took effect and lost its answer, made again, has the outcome of one call,
    /// as the contract promises for each.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_call_whose_answer_was_lost_has_one_outcome() {
        let saver = exact().layer(Scripted::new());
        let scripted = saver.get_ref();
        let first = put_next(&saver, "t", None, 1, PutOptions::new())
            .await
            .unwrap();
        let first = saver.get_tuple(&first).await.unwrap().unwrap();

        scripted.script(&[Fault::AnswerLost]);
        let second = put_next(&saver, "t", Some(&first), 2, PutOptions::compare_and_set())
            .await
            .expect("a compare-and-set put stored, retried while it is the head, succeeds");
        let stored: Vec<_> = saver
            .list(ListOptions::thread("t"))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(stored.len(), 2);
        assert_eq!(stored[0].config, second);

        scripted.script(&[Fault::AnswerLost]);
        saver
            .put_writes(
                &second,
                vec![("a".to_owned(), value(3)), ("b".to_owned(), value(4))],
                "task",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        let head = saver.get_tuple(&second).await.unwrap().unwrap();
        assert_eq!(head.pending_writes.len(), 2, "the writes are stored once");

        scripted.script(&[Fault::AnswerLost]);
        let lease = saver
            .acquire_lease("t", "me", Duration::from_secs(60))
            .await
            .unwrap()
            .expect("the holder's own lease, extended");
        assert_eq!(scripted.calls(), ["acquire_lease"; 2]);
        let other = saver
            .acquire_lease("t", "other", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(other.is_none(), "one lease, held by `me`: {other:?}");
        saver
            .put(
                &head.config,
                head.checkpoint.successor(),
                CheckpointMetadata::new(),
                ChannelVersions::new(),
                PutOptions::new().fence(lease.token),
            )
            .await
            .expect("the retried lease's token is the thread's current one");

        scripted.script(&[Fault::AnswerLost]);
        let claim = saver.claim("k", Duration::from_secs(60)).await.unwrap();
        assert!(
            matches!(claim, Claim::Pending { .. }),
            "a claim whose grant was lost is pending, never granted twice: {claim:?}"
        );
    }

    /// `n` checkpoints in a line on `thread`.
    async fn put_line(saver: &dyn Saver, thread: &str, n: i64) {
        let mut parent = None;
        for i in 0..n {
            let config = put_next(saver, thread, parent.as_ref(), i, PutOptions::new())
                .await
                .unwrap();
            parent = saver.get_tuple(&config).await.unwrap();
        }
    }

    /// The addresses of a listing, in order.
    fn addresses(tuples: &[CheckpointTuple]) -> Vec<(String, String, String)> {
        tuples
            .iter()
            .map(|t| {
                (
                    t.checkpoint.id.clone(),
                    t.config.thread_id.clone(),
                    t.config.checkpoint_ns.clone(),
                )
            })
            .collect()
    }

    /// A listing cut by transient errors, anywhere, resumes after the checkpoint it yielded
    /// last: it yields what an uncut one yields, in order, each once, `limit` included.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_list_resumes_after_the_last_checkpoint_it_yielded() {
        let saver = exact().layer(Scripted::new());
        let scripted = saver.get_ref();
        put_line(&saver, "t", 5).await;
        let listing = |options: ListOptions| {
            let saver = &saver;
            async move {
                saver
                    .list(options)
                    .try_collect::<Vec<_>>()
                    .await
                    .map(|t| addresses(&t))
            }
        };
        let whole = listing(ListOptions::thread("t")).await.unwrap();
        assert_eq!(whole.len(), 5);
        for faults in [
            &[Fault::Refused, Fault::Refused][..],
            &[Fault::After(2)],
            &[Fault::After(1), Fault::Refused, Fault::After(1)],
            &[Fault::After(4)],
            &[Fault::After(5)],
        ] {
            scripted.script(faults);
            assert_eq!(
                listing(ListOptions::thread("t")).await.unwrap(),
                whole,
                "{faults:?}"
            );
            scripted.script(faults);
            assert_eq!(
                listing(ListOptions::thread("t").limit(3)).await.unwrap(),
                whole[..3],
                "{faults:?}, limit 3"
            );
        }
        scripted.script(&[]);

        // Ties: a copied thread has the same ids, so the global listing orders each id's
        // two checkpoints by thread. A cut between them resumes at the one not yet yielded.
        saver.copy_thread("t", "u").await.unwrap();
        let global = listing(ListOptions::new()).await.unwrap();
        assert_eq!(global.len(), 10);
        assert_eq!(global[0].0, global[1].0, "a tie: {global:?}");
        for cut in 1..10 {
            scripted.script(&[Fault::After(cut), Fault::After(2)]);
            assert_eq!(
                listing(ListOptions::new()).await.unwrap(),
                global,
                "cut at {cut}"
            );
        }
        scripted.script(&[]);

        // The retries count from the last checkpoint yielded: a listing cut after each item
        // completes with one retry; one that yields nothing more gives up after them.
        let few = exact().max_retries(1).layer(Scripted::new());
        put_line(&few, "t", 5).await;
        let thread = ListOptions::thread("t").namespace("");
        let whole: Vec<_> = few.list(thread.clone()).try_collect().await.unwrap();
        let whole = addresses(&whole);
        few.get_ref().script(&[Fault::After(1); 5]);
        let resumed: Vec<_> = few.list(thread.clone()).try_collect().await.unwrap();
        assert_eq!(addresses(&resumed), whole);
        // A listing whose last item is met by an error it need not read past ends cleanly,
        // with no retry to spend.
        let none = exact().max_retries(0).layer(Scripted::new());
        put_line(&none, "t", 5).await;
        none.get_ref().script(&[Fault::After(3)]);
        let limited: Vec<_> = none
            .list(thread.clone().limit(3))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(limited.len(), 3);
        few.get_ref()
            .script(&[Fault::After(1), Fault::Refused, Fault::Refused]);
        let mut listed = few.list(thread);
        assert!(listed.try_next().await.unwrap().is_some());
        let err = listed.try_next().await.unwrap_err();
        assert_eq!(RetriesExhausted::of(&err).map(|r| r.attempts), Some(2));
        assert!(
            listed.try_next().await.unwrap().is_none(),
            "the stream ends"
        );

        // An error that is not transient ends the stream at once.
        scripted.script(&[Fault::Rejected]);
        let err = listing(ListOptions::thread("t")).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert_eq!(scripted.calls(), ["list"]);
    }

    /// A cut `list_threads` (or `list_threads_after`) is opened again after the last id it
    /// yielded, each outage with the policy's retries afresh.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn list_threads_resume_after_the_last_id_yielded() {
        let saver = exact().max_retries(3).layer(Scripted::new());
        let scripted = saver.get_ref();
        for thread in ["a", "b", "c", "d"] {
            put_line(&saver, thread, 1).await;
        }

        scripted.script(&[Fault::Refused, Fault::Refused]);
        let all: Vec<String> = saver.list_threads().try_collect().await.unwrap();
        assert_eq!(all, ["a", "b", "c", "d"]);
        assert_eq!(scripted.calls(), ["list_threads"; 3]);

        // Cut after one id, then after two more: each reopening starts after the last id.
        scripted.script(&[Fault::After(1), Fault::After(2)]);
        let all: Vec<String> = saver.list_threads().try_collect().await.unwrap();
        assert_eq!(all, ["a", "b", "c", "d"]);
        assert_eq!(
            scripted.calls(),
            ["list_threads", "list_threads_after", "list_threads_after"]
        );

        // A thread deleted while the listing was cut: the rest still comes.
        scripted.script(&[Fault::After(2)]);
        let mut listed = saver.list_threads();
        assert_eq!(listed.try_next().await.unwrap().as_deref(), Some("a"));
        assert_eq!(listed.try_next().await.unwrap().as_deref(), Some("b"));
        saver.delete_thread("b").await.unwrap();
        let rest: Vec<String> = listed.try_collect().await.unwrap();
        assert_eq!(rest, ["c", "d"]);

        // Resumed from a position of the caller's, cut too.
        scripted.script(&[Fault::After(1)]);
        let rest: Vec<String> = saver.list_threads_after("a").try_collect().await.unwrap();
        assert_eq!(rest, ["c", "d"]);

        // Every outage gets the policy's 3 retries afresh (6 are made in all), and errors
        // that are not transient end the stream at once.
        scripted.script(&[
            Fault::After(1),
            Fault::Refused,
            Fault::Refused,
            Fault::After(1),
            Fault::Refused,
            Fault::Refused,
        ]);
        let all: Vec<String> = saver.list_threads().try_collect().await.unwrap();
        assert_eq!(all, ["a", "c", "d"]);
        scripted.script(&[Fault::Rejected]);
        let mut listed = saver.list_threads();
        let err = listed.try_next().await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(listed.try_next().await.unwrap().is_none());
    }
}
