//! End-to-end runs of the benchmark on small parameters, through the public `Backend` trait
//! the way a new backend plugs in.

use std::sync::Arc;

use checkpoint_bench::backend::MemoryBackend;
use checkpoint_bench::report::WORKLOAD_FIGURES;
use checkpoint_bench::{Backend, Floors, Params, run};
use checkpoint_core::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, InMemorySaver, ListOptions, PruneStrategy, PutOptions, PutWritesOptions,
    Result, Saver, TypedValue, async_trait,
};
use futures::stream::BoxStream;

fn small() -> Params {
    Params {
        threads: 3,
        steps: 7,
        reps: 3,
        w4_threads: 5,
        workers: 2,
        ..Params::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_run_is_valid_and_complete() {
    let report = run(&MemoryBackend::new(), &small()).await;
    assert!(report.valid, "{:?}", report.errors);
    assert_eq!(report.repetitions.len(), 3);
    assert_eq!(report.summary_of_reps, 3);
    let s = report.summary.as_ref().unwrap();
    assert_eq!(s.operations.put.calls, 21);
    assert_eq!(s.operations.put_writes.calls, 21);
    assert_eq!(s.operations.get_tuple_latest.calls, 3);
    assert_eq!(s.operations.get_tuple_by_id.calls, 3);
    assert_eq!(s.operations.list_limit_10.calls, 3);
    assert_eq!(s.operations.full_list.calls, 3);
    assert_eq!(s.operations.filtered_list.calls, 5);
    assert_eq!(s.w4.steps, 35);
    assert_eq!(s.w4.put.calls, 35);
    assert!(s.bytes_stored_after_w1.unwrap() > 3 * 65536);
    for r in &report.repetitions {
        assert!(r.validation.valid);
        assert!(r.validation.checks > 1000);
        assert!(r.floor_samples.is_empty());
    }
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["summary"]["floors"].is_null());
    for name in WORKLOAD_FIGURES {
        let ratio = &json["summary"]["ratios"][name];
        assert!(ratio.is_null(), "{name}: {ratio}");
        assert!(
            json["summary"]["ratios"]
                .as_object()
                .unwrap()
                .contains_key(*name)
        );
    }
    assert!(json["repetitions"][0]["operations"]["put"]["p99_ms"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_delta_run_is_valid_and_stores_less() {
    let plain = run(&MemoryBackend::new(), &small()).await;
    let params = Params {
        delta: true,
        ..small()
    };
    let report = run(&MemoryBackend::new(), &params).await;
    assert!(report.valid, "{:?}", report.errors);
    assert!(report.workload.contains("delta"));
    let s = report.summary.as_ref().unwrap();
    let d = s.delta.as_ref().unwrap();
    assert_eq!(d.history_latest.calls, 3);
    assert!(d.history_over_get_latest.unwrap() > 0.0);
    // 3 × (65536 + 7 × 3552)
    assert_eq!(d.append_only_floor_bytes, 271_200);
    let (delta_bytes, plain_bytes) = (
        s.bytes_stored_after_w1.unwrap(),
        plain
            .summary
            .as_ref()
            .unwrap()
            .bytes_stored_after_w1
            .unwrap(),
    );
    assert!(delta_bytes < plain_bytes, "{delta_bytes} vs {plain_bytes}");
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["summary"]["delta"]["history_latest"]["p50_ms"].is_number());
    assert_eq!(json["parameters"]["delta"], true);
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json["summary"].get("delta").is_none());
}

/// A saver that loses pending writes: the run must be invalid.
#[derive(Debug, Default)]
struct LosesWrites(InMemorySaver);

#[async_trait]
impl Saver for LosesWrites {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        self.0.get_tuple(config).await
    }
    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        self.0.list(options)
    }
    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.0.list_threads()
    }
    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.0.list_threads_after(after)
    }
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> Result<CheckpointConfig> {
        self.0
            .put(config, checkpoint, metadata, new_versions, options)
            .await
    }
    async fn put_writes(
        &self,
        _config: &CheckpointConfig,
        _writes: Vec<(String, TypedValue)>,
        _task_id: &str,
        _options: PutWritesOptions,
    ) -> Result<()> {
        Ok(())
    }
    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.0.delete_thread(thread_id).await
    }
    async fn copy_thread(&self, source: &str, target: &str) -> Result<()> {
        self.0.copy_thread(source, target).await
    }
    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<()> {
        self.0.prune(thread_ids, strategy).await
    }
    async fn delete_for_runs(&self, run_ids: &[String]) -> Result<()> {
        self.0.delete_for_runs(run_ids).await
    }
    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<checkpoint_core::Lease>> {
        self.0.acquire_lease(thread_id, holder, ttl).await
    }
    async fn renew_lease(
        &self,
        lease: &checkpoint_core::Lease,
        ttl: std::time::Duration,
    ) -> Result<checkpoint_core::Lease> {
        self.0.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &checkpoint_core::Lease) -> Result<()> {
        self.0.release_lease(lease).await
    }
    async fn claim(&self, key: &str, ttl: std::time::Duration) -> Result<checkpoint_core::Claim> {
        self.0.claim(key, ttl).await
    }
    async fn complete_claim(&self, key: &str, token: u64, outcome: TypedValue) -> Result<()> {
        self.0.complete_claim(key, token, outcome).await
    }
    async fn abandon_claim(&self, key: &str, token: u64) -> Result<()> {
        self.0.abandon_claim(key, token).await
    }
}

/// A backend with a (fake) server floor, as a server backend reports it.
#[derive(Debug, Default)]
struct Fake {
    lose_writes: bool,
}

#[async_trait]
impl Backend for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    async fn fresh(&self) -> Result<Arc<dyn Saver>> {
        Ok(if self.lose_writes {
            Arc::new(LosesWrites::default())
        } else {
            Arc::new(InMemorySaver::new())
        })
    }
    async fn bytes_stored(&self, _saver: &dyn Saver) -> Result<Option<u64>> {
        Ok(None)
    }
    async fn floors(&self) -> Result<Option<Floors>> {
        Ok(Some(
            Floors::new()
                .figure("insert_commit_1k_p50_ms", 0.001)
                .figure("insert_commit_8conn_per_s", 1000.0)
                .compare("put_p50_ms", "insert_commit_1k_p50_ms")
                .compare("put_p99_ms", "insert_commit_1k_p50_ms")
                .compare("w4_steps_per_s", "insert_commit_8conn_per_s"),
        ))
    }
    async fn teardown(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floors_are_sampled_and_reported_as_ratios() {
    let report = run(&Fake::default(), &small()).await;
    assert!(report.valid, "{:?}", report.errors);
    let r = &report.repetitions[0];
    let at: Vec<&str> = r.floor_samples.iter().map(|s| s.at).collect();
    assert_eq!(
        at,
        ["before_w1", "after_w1", "after_w2", "after_w3", "after_w4"]
    );
    let s = report.summary.as_ref().unwrap();
    assert_eq!(s.floors.as_ref().unwrap()["insert_commit_1k_p50_ms"], 0.001);
    let put = s.ratios["put_p50_ms"].as_ref().unwrap();
    assert_eq!(put.floor, "insert_commit_1k_p50_ms");
    assert!(put.ratio > 0.0);
    assert!(s.ratios["put_p99_ms"].is_some());
    assert!(s.ratios["w4_steps_per_s"].is_some());
    assert!(s.ratios["get_tuple_latest_p50_ms"].is_none());
    assert_eq!(s.bytes_stored_after_w1, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saver_losing_writes_makes_the_run_invalid() {
    let report = run(&Fake { lose_writes: true }, &small()).await;
    assert!(!report.valid);
    assert!(
        report.errors.iter().any(|e| e.contains("pending writes")),
        "{:?}",
        report.errors
    );
    assert!(!report.repetitions[0].validation.valid);
}

#[tokio::test]
async fn zero_parameters_are_rejected() {
    let report = run(
        &MemoryBackend::new(),
        &Params {
            steps: 0,
            ..small()
        },
    )
    .await;
    assert!(!report.valid);
    assert!(report.summary.is_none());
}
