//! [`Tracing`]: one `tracing` span per [`Saver`] call.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::stream::{BoxStream, Stream, StreamExt};
use tower_layer::Layer;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::delta::DeltaChannelHistory;
use crate::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, Lease, ListOptions, PruneStrategy, PutOptions, PutWritesOptions,
    Result, Saver, ThreadTtl, TypedValue,
};

/// Wraps a saver so that every call runs in a `tracing` span named `saver` (level `DEBUG`)
/// with the fields
///
/// | field | value |
/// |---|---|
/// | `backend` | the name given to [`TracingLayer::new`] |
/// | `operation` | the [`Saver`] method (`put`, `get_tuple`, `list`, ...) |
/// | `thread_id`, `checkpoint_ns` | when the call is about one thread (and namespace) |
/// | `outcome` | `ok`, or the error's [`kind`](Error::kind) |
/// | `duration_ms` | time from the call to its result (for `list`: to the end of the stream) |
///
/// and ends with one event: `DEBUG` when it succeeded or failed as the contract foresees
/// (a conflict, a stale fence, invalid input, ...), `WARN` for a transient backend failure
/// ([`Error::is_transient`]), `ERROR` for any other backend or serialization failure. A
/// `list` span also records `items`, the number of tuples the stream yielded.
///
/// Put it outermost, above the `checkpoint-sanitize` wrappers, to time what the caller
/// sees; or directly above the backend to time the store alone.
///
/// ```
/// use checkpoint_core::{InMemorySaver, Saver, TracingLayer};
/// use tower_layer::Layer;
/// let saver = TracingLayer::new("memory").layer(InMemorySaver::new());
/// # let _: &dyn Saver = &saver;
/// ```
#[derive(Clone, Debug)]
pub struct Tracing<S> {
    inner: S,
    backend: Cow<'static, str>,
}

/// The [`Layer`] of [`Tracing`].
#[derive(Clone, Debug)]
pub struct TracingLayer {
    backend: Cow<'static, str>,
}

impl TracingLayer {
    /// Spans will carry `backend` (e.g. `"postgres"`) in their `backend` field.
    pub fn new(backend: impl Into<Cow<'static, str>>) -> Self {
        Self {
            backend: backend.into(),
        }
    }
}

impl<S> Layer<S> for TracingLayer {
    type Service = Tracing<S>;

    fn layer(&self, inner: S) -> Tracing<S> {
        Tracing::new(inner, self.backend.clone())
    }
}

impl<S> Tracing<S> {
    /// Wraps `inner`; spans carry `backend` in their `backend` field.
    pub fn new(inner: S, backend: impl Into<Cow<'static, str>>) -> Self {
        Self {
            inner,
            backend: backend.into(),
        }
    }

    /// The wrapped saver.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the saver.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn span(&self, operation: &'static str, thread_id: Option<&str>, ns: Option<&str>) -> Span {
        let span = tracing::debug_span!(
            "saver",
            backend = %self.backend,
            operation,
            thread_id = Empty,
            checkpoint_ns = Empty,
            outcome = Empty,
            duration_ms = Empty,
            items = Empty,
        );
        if let Some(thread_id) = thread_id {
            span.record("thread_id", thread_id);
        }
        if let Some(ns) = ns {
            span.record("checkpoint_ns", ns);
        }
        span
    }
}

/// Records the outcome and duration on `span` and emits the closing event inside it.
fn finish(span: &Span, started: Instant, error: Option<&Error>) {
    let duration_ms = millis(started.elapsed());
    span.record("duration_ms", duration_ms);
    let _entered = span.enter();
    let Some(e) = error else {
        span.record("outcome", "ok");
        tracing::debug!(outcome = "ok", duration_ms, "saver call succeeded");
        return;
    };
    let outcome = e.kind();
    span.record("outcome", outcome);
    match e {
        Error::Unavailable { .. } => {
            tracing::warn!(outcome, duration_ms, error = %e, "saver call failed (transient)")
        }
        Error::Backend { .. } | Error::Serialization { .. } => {
            tracing::error!(outcome, duration_ms, error = %e, "saver call failed")
        }
        _ => tracing::debug!(outcome, duration_ms, error = %e, "saver call refused"),
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `call` in `span` and closes the span with its outcome.
async fn traced<T>(span: Span, call: impl Future<Output = Result<T>>) -> Result<T> {
    let started = Instant::now();
    let result = call.instrument(span.clone()).await;
    finish(&span, started, result.as_ref().err());
    result
}

/// A `list` stream polled inside its span, closed when it ends or fails.
struct TracedStream {
    inner: BoxStream<'static, Result<CheckpointTuple>>,
    span: Span,
    started: Instant,
    items: u64,
    done: bool,
}

impl TracedStream {
    fn close(&mut self, error: Option<&Error>) {
        if !self.done {
            self.done = true;
            self.span.record("items", self.items);
            finish(&self.span, self.started, error);
        }
    }
}

impl Stream for TracedStream {
    type Item = Result<CheckpointTuple>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.span.enter();
            this.inner.poll_next_unpin(cx)
        };
        match &polled {
            Poll::Ready(Some(Ok(_))) => self.items += 1,
            Poll::Ready(Some(Err(e))) => self.close(Some(e)),
            Poll::Ready(None) => self.close(None),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for TracedStream {
    fn drop(&mut self) {
        // Dropped before its end (the caller took what it needed): a success.
        self.close(None);
    }
}

#[async_trait]
impl<S: Saver> Saver for Tracing<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        let span = self.span(
            "get_tuple",
            Some(&config.thread_id),
            Some(&config.checkpoint_ns),
        );
        traced(span, self.inner.get_tuple(config)).await
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        let span = self.span("list_threads", None, None);
        let _entered = span.enter();
        self.inner.list_threads()
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        let span = self.span("list_threads_after", None, None);
        let _entered = span.enter();
        self.inner.list_threads_after(after)
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let span = self.span(
            "list",
            options.thread_id.as_deref(),
            options.checkpoint_ns.as_deref(),
        );
        let inner = {
            let _entered = span.enter();
            self.inner.list(options)
        };
        TracedStream {
            inner,
            span,
            started: Instant::now(),
            items: 0,
            done: false,
        }
        .boxed()
    }

    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        let span = self.span(
            "delta_channel_history",
            Some(&config.thread_id),
            Some(&config.checkpoint_ns),
        );
        traced(span, self.inner.delta_channel_history(config, channels)).await
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        let span = self.span("put", Some(&config.thread_id), Some(&config.checkpoint_ns));
        traced(
            span,
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
        let span = self.span(
            "put_writes",
            Some(&config.thread_id),
            Some(&config.checkpoint_ns),
        );
        traced(
            span,
            self.inner.put_writes(config, writes, task_id, options),
        )
        .await
    }

    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        let span = self.span("import", None, None);
        traced(span, self.inner.import(tuples)).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        let span = self.span("delete_thread", Some(thread_id), None);
        traced(span, self.inner.delete_thread(thread_id)).await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        let span = self.span("copy_thread", Some(source), None);
        traced(span, self.inner.copy_thread(source, target)).await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        let one = match thread_ids {
            [only] => Some(only.as_str()),
            _ => None,
        };
        let span = self.span("prune", one, None);
        traced(span, self.inner.prune(thread_ids, strategy)).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        let span = self.span("delete_for_runs", None, None);
        traced(span, self.inner.delete_for_runs(run_ids)).await
    }

    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let span = self.span("acquire_lease", Some(thread_id), None);
        traced(span, self.inner.acquire_lease(thread_id, holder, ttl)).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let span = self.span("renew_lease", Some(&lease.thread_id), None);
        traced(span, self.inner.renew_lease(lease, ttl)).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let span = self.span("release_lease", Some(&lease.thread_id), None);
        traced(span, self.inner.release_lease(lease)).await
    }

    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        let span = self.span("claim", None, None);
        traced(span, self.inner.claim(key, ttl)).await
    }

    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        let span = self.span("complete_claim", None, None);
        traced(span, self.inner.complete_claim(key, token, outcome)).await
    }

    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        let span = self.span("abandon_claim", None, None);
        traced(span, self.inner.abandon_claim(key, token)).await
    }
    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        let span = self.span("set_thread_ttl", Some(thread_id), None);
        traced(span, self.inner.set_thread_ttl(thread_id, ttl)).await
    }

    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        let span = self.span("thread_ttl", Some(thread_id), None);
        traced(span, self.inner.thread_ttl(thread_id)).await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        let span = self.span("sweep_expired", None, None);
        traced(span, self.inner.sweep_expired(limit)).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use futures::TryStreamExt;
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::*;
    use crate::{InMemorySaver, SaverExt};

    /// Spans (their fields, recorded late too) and events (level, fields, enclosing span).
    #[derive(Default)]
    struct Log {
        spans: BTreeMap<u64, BTreeMap<String, String>>,
        events: Vec<(tracing::Level, BTreeMap<String, String>, Option<u64>)>,
        stack: Vec<u64>,
    }

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Log>>, Arc<AtomicU64>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl tracing::field::Visit for Fields<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            let mut s = String::new();
            let _ = write!(s, "{value:?}");
            self.0.insert(field.name().to_owned(), s);
        }
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attrs: &Attributes<'_>) -> Id {
            let id = self.1.fetch_add(1, Ordering::SeqCst) + 1;
            let mut fields = BTreeMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().spans.insert(id, fields);
            Id::from_u64(id)
        }
        fn record(&self, id: &Id, values: &Record<'_>) {
            let mut log = self.0.lock().unwrap();
            if let Some(fields) = log.spans.get_mut(&id.into_u64()) {
                values.record(&mut Fields(fields));
            }
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            let mut log = self.0.lock().unwrap();
            let current = log.stack.last().copied();
            log.events
                .push((*event.metadata().level(), fields, current));
        }
        fn enter(&self, id: &Id) {
            self.0.lock().unwrap().stack.push(id.into_u64());
        }
        fn exit(&self, _: &Id) {
            self.0.lock().unwrap().stack.pop();
        }
    }

    #[test]
    fn every_call_gets_a_span_with_its_outcome() {
        let capture = Capture::default();
        let log = Arc::clone(&capture.0);
        tracing::subscriber::with_default(capture, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async {
                let saver = TracingLayer::new("memory").layer(InMemorySaver::new());
                let thread = CheckpointConfig::new("t1").with_ns("ns");
                let mut cp = Checkpoint::new();
                let v = cp.set("messages", &vec!["hi"]).unwrap();
                let stored = saver
                    .put(
                        &thread,
                        cp,
                        CheckpointMetadata::new(),
                        [("messages".to_owned(), v)].into(),
                        PutOptions::new(),
                    )
                    .await
                    .unwrap();
                // A compare-and-set put against a stale parent: a conflict.
                let err = saver
                    .put_cas(
                        &thread,
                        Checkpoint::new(),
                        CheckpointMetadata::new(),
                        ChannelVersions::new(),
                    )
                    .await
                    .unwrap_err();
                assert!(matches!(err, Error::Conflict { .. }));
                let listed: Vec<_> = saver
                    .list(ListOptions::thread("t1"))
                    .try_collect()
                    .await
                    .unwrap();
                assert_eq!(listed.len(), 1);
                assert!(saver.get_tuple(&stored).await.unwrap().is_some());
            });
        });
        let log = log.lock().unwrap();
        let spans: Vec<&BTreeMap<String, String>> = log.spans.values().collect();
        let ops: Vec<&str> = spans.iter().map(|s| s["operation"].as_str()).collect();
        assert_eq!(ops, ["put", "put", "list", "get_tuple"]);
        for span in &spans {
            assert_eq!(span["backend"], "memory");
            assert_eq!(span["thread_id"], "t1");
            assert!(span.contains_key("duration_ms"), "{span:?}");
        }
        assert_eq!(spans[0]["outcome"], "ok");
        assert_eq!(spans[0]["checkpoint_ns"], "ns");
        assert_eq!(spans[1]["outcome"], "conflict");
        assert_eq!(spans[2]["outcome"], "ok");
        assert_eq!(spans[2]["items"], "1");
        assert!(!spans[2].contains_key("checkpoint_ns"));
        // One closing event per call, inside its span; the conflict at DEBUG, not as a failure.
        assert_eq!(log.events.len(), 4);
        assert!(log.events.iter().all(|(_, _, span)| span.is_some()));
        assert!(
            log.events
                .iter()
                .all(|(level, _, _)| *level == tracing::Level::DEBUG)
        );
        assert_eq!(log.events[1].1["outcome"], "conflict");
    }
}
