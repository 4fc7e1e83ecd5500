//! The model harness against savers with planted bugs: each bug is found and shrunk.

use std::sync::Arc;

use checkpoint_core::{BoxStream, async_trait};
use futures::StreamExt;

use super::*;
use crate::factory_fn;
use checkpoint_core::{
    Capabilities, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, Error, InMemorySaver, ListOptions, PruneStrategy, PutOptions,
    PutWritesOptions, Saver, SaverExt, Source, TypedValue,
};
use serde_json::json;
use std::collections::BTreeSet;

/// How a [`Broken`] saver departs from the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    /// None: a faithful forwarder.
    None,
    /// `put_writes` succeeds but stores nothing.
    DropsWrites,
    /// `list` yields oldest first.
    ReversesList,
    /// Advertises no optional operation and returns `Unsupported` for them.
    NoExtensions,
    /// Advertises no optional operation but performs them anyway.
    LiesAboutCapabilities,
    /// Compare-and-set behaves like a plain put.
    IgnoresCompareAndSet,
}

#[derive(Debug)]
struct Broken {
    inner: InMemorySaver,
    flaw: Flaw,
}

impl Broken {
    fn hides_extensions(&self) -> bool {
        matches!(self.flaw, Flaw::NoExtensions)
    }
}

#[async_trait]
impl Saver for Broken {
    fn capabilities(&self) -> Capabilities {
        match self.flaw {
            Flaw::NoExtensions | Flaw::LiesAboutCapabilities => Capabilities::none(),
            _ => self.inner.capabilities(),
        }
    }

    async fn get_tuple(
        &self,
        config: &CheckpointConfig,
    ) -> checkpoint_core::Result<Option<CheckpointTuple>> {
        self.inner.get_tuple(config).await
    }

    fn list(
        &self,
        options: ListOptions,
    ) -> BoxStream<'static, checkpoint_core::Result<CheckpointTuple>> {
        let stream = self.inner.list(options);
        if self.flaw != Flaw::ReversesList {
            return stream;
        }
        futures::stream::once(async move {
            let mut all: Vec<_> = stream.collect().await;
            all.reverse();
            futures::stream::iter(all)
        })
        .flatten()
        .boxed()
    }
    fn list_threads(&self) -> BoxStream<'static, checkpoint_core::Result<String>> {
        self.inner.list_threads()
    }
    fn list_threads_after(
        &self,
        after: &str,
    ) -> BoxStream<'static, checkpoint_core::Result<String>> {
        self.inner.list_threads_after(after)
    }

    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        options: PutOptions,
    ) -> checkpoint_core::Result<CheckpointConfig> {
        let options = if self.flaw == Flaw::IgnoresCompareAndSet {
            PutOptions::new()
        } else if self.hides_extensions() && options != PutOptions::new() {
            return Err(Error::Unsupported {
                op: "put (compare-and-set)",
            });
        } else {
            options
        };
        self.inner
            .put(config, checkpoint, metadata, new_versions, options)
            .await
    }

    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: PutWritesOptions,
    ) -> checkpoint_core::Result<()> {
        if self.flaw == Flaw::DropsWrites {
            config.require_checkpoint_id()?;
            return Ok(());
        }
        self.inner
            .put_writes(config, writes, task_id, options)
            .await
    }

    async fn delete_thread(&self, thread_id: &str) -> checkpoint_core::Result<()> {
        self.inner.delete_thread(thread_id).await
    }

    async fn copy_thread(&self, source: &str, target: &str) -> checkpoint_core::Result<()> {
        if self.hides_extensions() {
            return Err(Error::Unsupported { op: "copy_thread" });
        }
        self.inner.copy_thread(source, target).await
    }

    async fn prune(
        &self,
        thread_ids: &[String],
        strategy: PruneStrategy,
    ) -> checkpoint_core::Result<()> {
        if self.hides_extensions() {
            return Err(Error::Unsupported { op: "prune" });
        }
        self.inner.prune(thread_ids, strategy).await
    }

    async fn delete_for_runs(&self, run_ids: &[String]) -> checkpoint_core::Result<()> {
        if self.hides_extensions() {
            return Err(Error::Unsupported {
                op: "delete_for_runs",
            });
        }
        self.inner.delete_for_runs(run_ids).await
    }
    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> checkpoint_core::Result<Option<checkpoint_core::Lease>> {
        self.inner.acquire_lease(thread_id, holder, ttl).await
    }
    async fn renew_lease(
        &self,
        lease: &checkpoint_core::Lease,
        ttl: std::time::Duration,
    ) -> checkpoint_core::Result<checkpoint_core::Lease> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &checkpoint_core::Lease) -> checkpoint_core::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn claim(
        &self,
        key: &str,
        ttl: std::time::Duration,
    ) -> checkpoint_core::Result<checkpoint_core::Claim> {
        self.inner.claim(key, ttl).await
    }
    async fn complete_claim(
        &self,
        key: &str,
        token: u64,
        outcome: TypedValue,
    ) -> checkpoint_core::Result<()> {
        self.inner.complete_claim(key, token, outcome).await
    }
    async fn abandon_claim(&self, key: &str, token: u64) -> checkpoint_core::Result<()> {
        self.inner.abandon_claim(key, token).await
    }
}

fn factory(flaw: Flaw) -> impl SaverFactory {
    factory_fn(move || async move {
        Ok(Arc::new(Broken {
            inner: InMemorySaver::new(),
            flaw,
        }) as Arc<dyn Saver>)
    })
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn check_against_model_future_is_send() {
    let f = factory(Flaw::None);
    let fut = check_against_model(&f, 1);
    assert_send(&fut);
}

#[tokio::test]
async fn reference_matches_itself() {
    let f = factory_fn(|| async { Ok(Arc::new(InMemorySaver::new()) as Arc<dyn Saver>) });
    check_against_model(&f, 24)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faithful_wrapper_passes_on_a_multi_thread_runtime() {
    check_against_model(&factory(Flaw::None), 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn saver_without_extensions_passes_when_it_returns_unsupported() {
    check_against_model(&factory(Flaw::NoExtensions), 24)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn detected(flaw: Flaw, expect: &[&str]) {
    let err = check_against_model(&factory(flaw), 48)
        .await
        .expect_err("the flaw must be detected");
    for needle in expect {
        assert!(err.contains(needle), "{flaw:?}: {needle:?} not in:\n{err}");
    }
    assert!(err.contains("Minimal failing sequence"), "{err}");
}

#[tokio::test]
async fn dropped_pending_writes_are_detected() {
    detected(Flaw::DropsWrites, &["PutWrites", "pending_writes"]).await;
}

#[tokio::test]
async fn reversed_list_order_is_detected() {
    detected(Flaw::ReversesList, &["element 0"]).await;
}

#[tokio::test]
async fn unadvertised_operations_that_succeed_are_detected() {
    detected(
        Flaw::LiesAboutCapabilities,
        &["did not return Error::Unsupported"],
    )
    .await;
}

#[tokio::test]
async fn ignored_compare_and_set_is_detected() {
    detected(
        Flaw::IgnoresCompareAndSet,
        &["compare_and_set: true", "Conflict"],
    )
    .await;
}

#[tokio::test]
async fn shrinking_finds_a_short_sequence() {
    let err = check_against_model(&factory(Flaw::DropsWrites), 48)
        .await
        .expect_err("detected");
    let ops = err
        .lines()
        .filter(|l| {
            l.trim_start()
                .split(':')
                .next()
                .is_some_and(|n| n.parse::<usize>().is_ok())
        })
        .count();
    // A put and the put_writes whose writes vanish.
    assert_eq!(ops, 2, "{err}");
}

#[tokio::test]
async fn factory_failures_are_reported_without_shrinking() {
    let f = factory_fn(|| async {
        Err::<Arc<dyn Saver>, checkpoint_core::BoxError>("no server".into())
    });
    let err = check_against_model(&f, 3).await.expect_err("fails");
    assert!(err.contains("no server"), "{err}");
}

fn put(thread: &str, ns: &str, parent: Parent, compare_and_set: bool) -> Op {
    Op::Put {
        thread: thread.to_owned(),
        ns: ns.to_owned(),
        parent,
        changes: vec![
            ("messages".to_owned(), Some(msgpack("hi"))),
            ("counter".to_owned(), None),
        ],
        string_versions: false,
        metadata: CheckpointMetadata::for_step(Source::Loop, 1).with_run_id("run-a"),
        compare_and_set,
        fault: None,
    }
}

#[tokio::test]
async fn every_kind_of_operation_runs_against_the_reference() {
    let ops = vec![
        put("t0", "", Parent::None, true),
        put("t0", "", Parent::Head, true),
        put("t0", "", Parent::None, true), // conflict: the namespace is not empty
        put("t0", "", Parent::Older(0), true), // conflict: not the head
        put("t0", "", Parent::Older(0), false), // a fork
        put("t1", "child:1|inner:2", Parent::Head, false),
        Op::RepeatPut {
            target: 0,
            metadata: CheckpointMetadata::new().with(CUSTOM_KEY, 1.0),
            compare_and_set: true,
        },
        Op::PutWrites {
            target: 1,
            writes: vec![
                ("__interrupt__".to_owned(), TypedValue::null()),
                ("messages".to_owned(), TypedValue::from_bytes(vec![0, 1])),
            ],
            task_id: "task-1".to_owned(),
            task_path: String::new(),
            fault: None,
        },
        Op::PutWrites {
            target: 1,
            writes: vec![("__error__".to_owned(), msgpack("boom"))],
            task_id: "task-1".to_owned(),
            task_path: "~__pregel_pull, agent".to_owned(),
            fault: Some(WritesFault::NoCheckpointId),
        },
        Op::GetTuple {
            target: GetTarget::Existing(2),
        },
        Op::GetTuple {
            target: GetTarget::Missing {
                thread: "t0".to_owned(),
                ns: String::new(),
            },
        },
        Op::GetTuple {
            target: GetTarget::EmptyThread,
        },
        Op::List {
            thread: None,
            ns: Some(String::new()),
            checkpoint_id: None,
            filter: [("step".to_owned(), json!(1.0))].into_iter().collect(),
            before: Some(1),
            limit: Some(2),
        },
        Op::CopyThread {
            source: "t0".to_owned(),
            target: "t1".to_owned(),
        },
        Op::Prune {
            threads: vec!["t1".to_owned(), UNKNOWN_THREAD.to_owned()],
            strategy: PruneStrategy::KeepLast(1),
        },
        Op::DeleteForRuns {
            runs: vec!["run-a".to_owned()],
        },
        Op::DeleteThread {
            thread: "t0".to_owned(),
        },
    ];
    let saver = InMemorySaver::new();
    let model = InMemorySaver::new();
    run_ops(&saver, &model, &ops)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The repeated put dropped `run_id` from one checkpoint, which its copy in t1 keeps.
    let left = saver.list_all(ListOptions::new()).await.unwrap();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0].config.thread_id, "t1");
    assert_eq!(left[0].metadata.get(CUSTOM_KEY), Some(&json!(1.0)));
}

/// Regression, found by this module: `delete_for_runs` emptying a thread that holds the
/// run's checkpoints in two namespaces once dropped the thread after the first namespace
/// and left the second one's entries in the global index, so the next global `list`
/// panicked.
#[tokio::test]
async fn reference_delete_for_runs_emptying_a_thread_with_two_namespaces() {
    let put = |ns: &str| Op::Put {
        thread: "t1".to_owned(),
        ns: ns.to_owned(),
        parent: Parent::None,
        changes: vec![],
        string_versions: false,
        metadata: CheckpointMetadata::new().with_run_id("run-a"),
        compare_and_set: false,
        fault: None,
    };
    let ops = [
        put("child:1"),
        put(""),
        Op::DeleteForRuns {
            runs: vec!["run-a".to_owned()],
        },
    ];
    run_ops(&InMemorySaver::new(), &InMemorySaver::new(), &ops)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn run_ops_reports_the_step_and_both_results() {
    let saver = Broken {
        inner: InMemorySaver::new(),
        flaw: Flaw::DropsWrites,
    };
    let ops = vec![
        put("t0", "", Parent::None, false),
        Op::PutWrites {
            target: 0,
            writes: vec![("messages".to_owned(), msgpack(1))],
            task_id: "task-2".to_owned(),
            task_path: String::new(),
            fault: None,
        },
    ];
    let err = run_ops(&saver, &InMemorySaver::new(), &ops)
        .await
        .expect_err("detected");
    assert!(err.starts_with("step 1 of 2 (PutWrites"), "{err}");
    assert!(
        err.contains("--- saver under test:") && err.contains("--- model"),
        "{err}"
    );
}

#[tokio::test]
async fn run_ops_rejects_savers_that_start_different() {
    let saver = InMemorySaver::new();
    run_ops(
        &saver,
        &InMemorySaver::new(),
        &[put("t0", "", Parent::None, false)],
    )
    .await
    .unwrap();
    let err = run_ops(&saver, &InMemorySaver::new(), &[])
        .await
        .expect_err("saver is not empty");
    assert!(err.starts_with("before the first operation"), "{err}");
}

#[test]
fn generated_sequences_cover_every_operation() {
    let mut runner = TestRunner::deterministic();
    let strategy = ops(DEFAULT_MAX_OPS);
    let mut seen = BTreeSet::new();
    let mut faults = 0;
    let mut special_only = 0;
    for _ in 0..64 {
        for op in strategy.new_tree(&mut runner).unwrap().current() {
            seen.insert(
                format!("{op:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap()
                    .to_owned(),
            );
            match &op {
                Op::Put { fault: Some(_), .. } | Op::PutWrites { fault: Some(_), .. } => {
                    faults += 1;
                }
                Op::PutWrites { writes, .. }
                    if !writes.is_empty() && writes.iter().all(|(c, _)| c.starts_with("__")) =>
                {
                    special_only += 1;
                }
                _ => {}
            }
        }
    }
    let all = [
        "Put",
        "RepeatPut",
        "PutWrites",
        "GetTuple",
        "List",
        "DeleteThread",
        "CopyThread",
        "Prune",
        "DeleteForRuns",
    ];
    for name in all {
        assert!(seen.contains(name), "{name} never generated: {seen:?}");
    }
    assert!(faults > 0 && special_only > 0, "{faults} {special_only}");
}
