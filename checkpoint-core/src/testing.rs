//! A saver for the wrappers' unit tests: the reference saver with faults scripted for its
//! next calls and, optionally, slow reads.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};

use crate::delta::DeltaChannelHistory;
use crate::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Claim, Error, InMemorySaver, Lease, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Result, Saver, ThreadTtl, TypedValue,
};

/// What the scripted saver does to its next call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    /// Fails before the call reaches the store: nothing happened.
    Refused,
    /// The call takes effect and its answer is lost.
    AnswerLost,
    /// Fails with an error that is not transient.
    Rejected,
    /// A stream yields this many items (at most), then a transient error.
    After(usize),
}

/// The reference saver, with faults scripted for its next calls, in order, and reads
/// (`get_tuple`, `list`, `list_threads`) that take [`slow_reads`](Self::slow_reads) first.
#[derive(Debug)]
pub(crate) struct Scripted {
    inner: InMemorySaver,
    faults: Mutex<VecDeque<Fault>>,
    calls: Mutex<Vec<&'static str>>,
    read_delay: Duration,
}

/// A lost connection.
fn lost() -> Error {
    Error::Unavailable {
        backend: "test",
        source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
    }
}

impl Scripted {
    /// With a default TTL of an hour, so that the TTL calls are offered.
    pub(crate) fn new() -> Self {
        let inner = InMemorySaver::builder()
            .default_ttl(Some(Duration::from_secs(3600)))
            .build()
            .unwrap();
        Self {
            inner,
            faults: Mutex::new(VecDeque::new()),
            calls: Mutex::new(Vec::new()),
            read_delay: Duration::ZERO,
        }
    }

    /// Reads take `delay` before they start.
    pub(crate) fn slow_reads(mut self, delay: Duration) -> Self {
        self.read_delay = delay;
        self
    }

    /// Faults for the next calls (after those scripted before); forgets the calls made.
    pub(crate) fn script(&self, faults: &[Fault]) {
        self.faults.lock().unwrap().extend(faults);
        self.calls.lock().unwrap().clear();
    }

    /// Calls made since the last script.
    pub(crate) fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().unwrap().clone()
    }

    fn next(&self, operation: &'static str) -> Option<Fault> {
        self.calls.lock().unwrap().push(operation);
        self.faults.lock().unwrap().pop_front()
    }

    async fn through<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match self.next(operation) {
            None | Some(Fault::After(_)) => call.await,
            Some(Fault::Refused) => Err(lost()),
            Some(Fault::AnswerLost) => {
                call.await?;
                Err(lost())
            }
            Some(Fault::Rejected) => Err(Error::invalid("rejected by the script")),
        }
    }

    fn streamed<T: Send + 'static>(
        &self,
        operation: &'static str,
        items: BoxStream<'static, Result<T>>,
    ) -> BoxStream<'static, Result<T>> {
        match self.next(operation) {
            None | Some(Fault::AnswerLost) => items,
            Some(Fault::Refused) => stream::once(async { Err(lost()) }).boxed(),
            Some(Fault::Rejected) => {
                stream::once(async { Err(Error::invalid("rejected by the script")) }).boxed()
            }
            Some(Fault::After(n)) => items
                .take(n)
                .chain(stream::once(async { Err(lost()) }))
                .boxed(),
        }
    }

    /// `items`, whose first item comes after the scripted read delay.
    fn delayed<T: Send + 'static>(
        &self,
        items: BoxStream<'static, Result<T>>,
    ) -> BoxStream<'static, Result<T>> {
        stream::once(tokio::time::sleep(self.read_delay))
            .flat_map(|()| stream::empty())
            .chain(items)
            .boxed()
    }
}

#[async_trait]
impl Saver for Scripted {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        tokio::time::sleep(self.read_delay).await;
        self.through("get_tuple", self.inner.get_tuple(config))
            .await
    }
    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let items = self.streamed("list", self.inner.list(options));
        self.delayed(items)
    }
    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        let items = self.streamed("list_threads", self.inner.list_threads());
        self.delayed(items)
    }
    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        let items = self.streamed("list_threads_after", self.inner.list_threads_after(after));
        self.delayed(items)
    }
    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaChannelHistory>> {
        self.through(
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
        self.through(
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
        self.through(
            "put_writes",
            self.inner.put_writes(config, writes, task_id, options),
        )
        .await
    }
    async fn import(&self, tuples: Vec<CheckpointTuple>) -> Result<()> {
        self.through("import", self.inner.import(tuples)).await
    }
    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.through("delete_thread", self.inner.delete_thread(thread_id))
            .await
    }
    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        self.through("copy_thread", self.inner.copy_thread(source, target))
            .await
    }
    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        self.through("prune", self.inner.prune(thread_ids, strategy))
            .await
    }
    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        self.through("delete_for_runs", self.inner.delete_for_runs(run_ids))
            .await
    }
    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.through(
            "acquire_lease",
            self.inner.acquire_lease(thread_id, holder, ttl),
        )
        .await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.through("renew_lease", self.inner.renew_lease(lease, ttl))
            .await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.through("release_lease", self.inner.release_lease(lease))
            .await
    }
    async fn claim(&self, key: &str, ttl: Duration) -> Result<Claim> {
        self.through("claim", self.inner.claim(key, ttl)).await
    }
    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        self.through(
            "complete_claim",
            self.inner.complete_claim(key, token, outcome),
        )
        .await
    }
    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        self.through("abandon_claim", self.inner.abandon_claim(key, token))
            .await
    }
    async fn set_thread_ttl(&self, thread_id: &str, ttl: ThreadTtl) -> Result<()> {
        self.through("set_thread_ttl", self.inner.set_thread_ttl(thread_id, ttl))
            .await
    }
    async fn thread_ttl(&self, thread_id: &str) -> Result<Option<Duration>> {
        self.through("thread_ttl", self.inner.thread_ttl(thread_id))
            .await
    }
    async fn sweep_expired(&self, limit: usize) -> Result<usize> {
        self.through("sweep_expired", self.inner.sweep_expired(limit))
            .await
    }
}
