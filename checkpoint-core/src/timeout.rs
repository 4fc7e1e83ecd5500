//! [`Timeout`]: a deadline on every [`Saver`] call.

use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, Stream, StreamExt};
use tokio::time::Sleep;
use tower_layer::Layer;

use crate::delta::DeltaChannelHistory;
use crate::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, Lease, ListOptions, PruneStrategy, PutOptions, PutWritesOptions,
    Result, Saver, ThreadTtl, TypedValue,
};

/// Wraps a saver so that no call waits longer than a deadline: a call still running when it
/// passes is dropped and fails with [`Error::Unavailable`] (transient, so a
/// [`RetryLayer`](crate::RetryLayer) outside it retries it), its source a [`TimedOut`]. A
/// `list` or `list_threads` stream gets the deadline for each item: a stream that yields
/// nothing for that long yields the error and ends.
///
/// A call cut short is like one whose connection broke: it may have taken effect or not,
/// and the caller finds out by reading. Each backend's `put` and `put_writes` is one
/// statement, transaction or script, so a cut one is stored whole or not at all; calls that
/// are several steps are not (`import`, MongoDB without transactions, the sanitize
/// wrappers' puts, which also write markers), and may leave what their own retry repairs. A
/// lease or claim that was granted just as its call timed out stays held until its TTL runs
/// out. A zero limit passes only calls that answer at their first poll.
///
/// The deadline ends the caller's wait, not the server's work. On PostgreSQL a statement
/// waiting for another session's lock keeps its connection until the lock is released, so
/// give `checkpoint-postgres`'s saver the same limit as its `statement_timeout` too.
///
/// Put it outermost, so the deadline covers what the caller waits for; it needs a tokio
/// runtime with the time driver.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_core::{InMemorySaver, Saver, TimeoutLayer};
/// use tower_layer::Layer;
/// let saver = TimeoutLayer::new(Duration::from_secs(5)).layer(InMemorySaver::new());
/// # let _: &dyn Saver = &saver;
/// ```
#[derive(Clone, Debug)]
pub struct Timeout<S> {
    inner: S,
    limit: Duration,
}

/// The [`Layer`] of [`Timeout`].
#[derive(Clone, Copy, Debug)]
pub struct TimeoutLayer {
    limit: Duration,
}

impl TimeoutLayer {
    /// Calls will fail after `limit`.
    pub fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout::new(inner, self.limit)
    }
}

impl<S> Timeout<S> {
    /// Wraps `inner`; its calls fail after `limit`.
    pub fn new(inner: S, limit: Duration) -> Self {
        Self { inner, limit }
    }

    /// The wrapped saver.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the saver.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// Runs `call` for at most `limit`.
async fn bounded<T: Send>(
    limit: Duration,
    operation: &'static str,
    call: impl Future<Output = Result<T>> + Send,
) -> Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(timed_out(operation, limit)),
    }
}

/// What a call that ran out of time failed with: the source of its [`Error::Unavailable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// The [`Saver`] method.
    pub operation: &'static str,
    /// The deadline it missed.
    pub limit: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} got no answer within {:?}",
            self.operation, self.limit
        )
    }
}

impl std::error::Error for TimedOut {}

fn timed_out(operation: &'static str, limit: Duration) -> Error {
    Error::Unavailable {
        backend: "saver",
        source: Box::new(TimedOut { operation, limit }),
    }
}

/// A stream whose every item must come within the limit.
struct TimedStream<T> {
    inner: BoxStream<'static, Result<T>>,
    operation: &'static str,
    limit: Duration,
    /// The deadline of the item being waited for.
    deadline: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl<T> TimedStream<T> {
    fn new(inner: BoxStream<'static, Result<T>>, operation: &'static str, limit: Duration) -> Self {
        Self {
            inner,
            operation,
            limit,
            deadline: None,
            done: false,
        }
    }
}

impl<T: Send + 'static> TimedStream<T> {
    /// Ends the stream, dropping the inner one (and the connection or cursor it holds).
    fn finish(&mut self) {
        self.done = true;
        self.deadline = None;
        self.inner = futures::stream::empty().boxed();
    }
}

impl<T: Send + 'static> Stream for TimedStream<T> {
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = this.inner.poll_next_unpin(cx) {
            this.deadline = None;
            if item.is_none() {
                this.finish();
            }
            return Poll::Ready(item);
        }
        let limit = this.limit;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.finish();
                Poll::Ready(Some(Err(timed_out(this.operation, this.limit))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[async_trait]
impl<S: Saver> Saver for Timeout<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        bounded(self.limit, "get_tuple", self.inner.get_tuple(config)).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        TimedStream::new(self.inner.list(options), "list", self.limit).boxed()
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        TimedStream::new(self.inner.list_threads(), "list_threads", self.limit).boxed()
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        let threads = self.inner.list_threads_after(after);
        TimedStream::new(threads, "list_threads_after", self.limit).boxed()
    }

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        bounded(
            self.limit,
            "delta_channel_history",
            self.inner.delta_channel_history(config, channels),
        )
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
        bounded(
            self.limit,
            "put",
            self.inner
                .put(config, checkpoint, metadata, new_versions, options),
        )
        .await
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> Result<()> {
        bounded(
            self.limit,
            "put_writes",
            self.inner.put_writes(config, writes, task_id, options),
        )
        .await
    }

    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        bounded(self.limit, "import", self.inner.import(tuples)).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        bounded(
            self.limit,
            "delete_thread",
            self.inner.delete_thread(thread_id),
        )
        .await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        bounded(
            self.limit,
            "copy_thread",
            self.inner.copy_thread(source, target),
        )
        .await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        bounded(self.limit, "prune", self.inner.prune(thread_ids, strategy)).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        bounded(
            self.limit,
            "delete_for_runs",
            self.inner.delete_for_runs(run_ids),
        )
        .await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        bounded(
            self.limit,
            "acquire_lease",
            self.inner.acquire_lease(thread_id, holder, ttl),
        )
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        bounded(
            self.limit,
            "renew_lease",
            self.inner.renew_lease(lease, ttl),
        )
        .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        bounded(self.limit, "release_lease", self.inner.release_lease(lease)).await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        bounded(self.limit, "claim", self.inner.claim(key, ttl)).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        bounded(
            self.limit,
            "complete_claim",
            self.inner.complete_claim(key, token, outcome),
        )
        .await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        bounded(
            self.limit,
            "abandon_claim",
            self.inner.abandon_claim(key, token),
        )
        .await
    }

    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        bounded(
            self.limit,
            "set_thread_ttl",
            self.inner.set_thread_ttl(thread_id, ttl),
        )
        .await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        bounded(self.limit, "thread_ttl", self.inner.thread_ttl(thread_id)).await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        bounded(self.limit, "sweep_expired", self.inner.sweep_expired(limit)).await
    }
}

#[cfg(test)]
mod tests {
    use futures::TryStreamExt;

    use super::*;
    use crate::testing::Scripted;

    fn timed_out_of(e: &Error) -> Option<&TimedOut> {
        match e {
            Error::Unavailable { source, .. } => source.downcast_ref::<TimedOut>(),
            _ => None,
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_late_call_fails_transient_and_an_in_time_one_passes() {
        let limit = Duration::from_millis(500);
        let slow = |delay| TimeoutLayer::new(limit).layer(Scripted::new().slow_reads(delay));
        let thread = CheckpointConfig::new("t");

        let late = slow(Duration::from_millis(1_500));
        let stored = late
            .put(
                &thread,
                Checkpoint::new(),
                CheckpointMetadata::new(),
                ChannelVersions::new(),
                PutOptions::new(),
            )
            .await
            .expect("a fast call passes");
        let err = late.get_tuple(&stored).await.unwrap_err();
        assert!(err.is_transient(), "{err:?}");
        assert_eq!(
            timed_out_of(&err),
            Some(&TimedOut {
                operation: "get_tuple",
                limit
            })
        );
        let mut listed = late.list(ListOptions::thread("t"));
        let first = listed.try_next().await.unwrap_err();
        assert_eq!(timed_out_of(&first).map(|t| t.operation), Some("list"));
        assert!(
            listed.try_next().await.unwrap().is_none(),
            "the stream ends"
        );
        let err = late.list_threads().try_next().await.unwrap_err();
        assert_eq!(
            timed_out_of(&err).map(|t| t.operation),
            Some("list_threads")
        );

        let in_time = slow(Duration::from_millis(400));
        in_time
            .put(
                &thread,
                Checkpoint::new(),
                CheckpointMetadata::new(),
                ChannelVersions::new(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        assert!(in_time.get_tuple(&thread).await.unwrap().is_some());
        let listed: Vec<_> = in_time
            .list(ListOptions::thread("t"))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
    }

    /// The deadline is per item: a stream whose items each come within the limit passes
    /// however long it runs in all.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn each_item_of_a_stream_has_its_own_deadline() {
        let limit = Duration::from_millis(500);
        let items = futures::stream::iter(0..5)
            .then(|i| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<_, Error>(i)
            })
            .boxed();
        let all: Vec<i32> = TimedStream::new(items, "list", limit)
            .try_collect()
            .await
            .unwrap();
        assert_eq!(all, [0, 1, 2, 3, 4]);
    }
}
