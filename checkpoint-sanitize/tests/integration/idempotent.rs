//! `Idempotent`: the ledger protocol of `once`, and the per-thread serializer (no leaks,
//! leases, fencing).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Claim, Error, InMemorySaver, PutOptions,
    Saver, TypedValue,
};
use checkpoint_sanitize::{Begun, EffectKey, Idempotent, IdempotentConfig, OnceError, Origin};

fn fast() -> IdempotentConfig {
    IdempotentConfig::default().poll_interval(Duration::from_millis(5))
}

#[tokio::test]
async fn a_completed_effect_is_replayed_and_a_failed_one_runs_again() {
    let idem = Idempotent::new(InMemorySaver::new(), fast());
    let key = EffectKey::new("charge:order-7").unwrap();
    let runs = AtomicUsize::new(0);
    let counter = &runs;
    let failed = idem
        .once(&key, |_| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>("card network down")
        })
        .await;
    assert!(matches!(
        failed,
        Err(OnceError::Effect("card network down"))
    ));
    let ran = idem
        .once(&key, |ctx| async move {
            counter.fetch_add(1, Ordering::SeqCst);
            assert!(ctx.key.ends_with("charge:order-7"));
            Ok::<_, String>(42u32)
        })
        .await
        .unwrap();
    assert_eq!((ran.value, ran.origin), (42, Origin::Ran));
    let replayed = idem
        .once(&key, |_| async { Ok::<_, String>(0u32) })
        .await
        .unwrap();
    assert_eq!((replayed.value, replayed.origin), (42, Origin::Replayed));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// The protocol split at the effect, as a language binding runs it around an effect in its
/// own runtime: `begin`, then `finish` or `abandon`; `once` and it share one ledger record.
#[tokio::test]
async fn begin_finish_and_abandon_are_the_protocol_of_once() {
    let idem = Idempotent::new(
        InMemorySaver::new(),
        fast().pending_wait(Duration::from_millis(30)),
    );
    let key = EffectKey::new("email:case-9").unwrap();
    let Ok(Begun::Run(first)) = idem.begin(&key).await else {
        panic!("a fresh key is run")
    };
    assert_eq!(first.key, idem.ledger_key(&key));
    // While the first holder runs the effect, another caller waits, then is told it is busy.
    let busy = idem.begin(&key).await;
    assert!(matches!(busy, Err(OnceError::Busy { .. })), "{busy:?}");
    // The effect failed: the claim is given up, and the next caller runs it, fenced anew.
    idem.abandon(&first).await;
    let Ok(Begun::Run(second)) = idem.begin(&key).await else {
        panic!("an abandoned claim is retaken at once")
    };
    assert!(second.token > first.token);
    let outcome = TypedValue::msgpack(&"msg-1").unwrap();
    assert_eq!(idem.finish(&second, outcome.clone()).await, Origin::Ran);
    // A finish for the claim given up is refused: it cannot overwrite the outcome.
    assert_eq!(
        idem.finish(&first, TypedValue::msgpack(&"late").unwrap())
            .await,
        Origin::RanUnrecorded
    );
    assert!(matches!(idem.begin(&key).await, Ok(Begun::Replay(o)) if o == outcome));
    let replayed = idem
        .once(&key, |_| async { Ok::<_, String>("again".to_owned()) })
        .await
        .unwrap();
    assert_eq!(
        (replayed.value.as_str(), replayed.origin),
        ("msg-1", Origin::Replayed)
    );
}

#[tokio::test]
async fn a_live_claim_makes_others_wait_then_busy_and_an_expired_one_is_retaken() {
    let saver = InMemorySaver::new();
    let idem = Idempotent::new(
        saver.clone(),
        fast().pending_wait(Duration::from_millis(50)),
    );
    let key = EffectKey::new("k").unwrap();
    let Claim::Acquired { token: dead } = saver
        .claim(&idem.ledger_key(&key), Duration::from_millis(1_500))
        .await
        .unwrap()
    else {
        panic!("fresh key")
    };
    let busy = idem.once(&key, |_| async { Ok::<_, String>(1) }).await;
    assert!(matches!(busy, Err(OnceError::Busy { .. })), "{busy:?}");
    // Waiting long enough, the crashed holder's claim expires and is retaken.
    let patient = Idempotent::new(saver.clone(), fast());
    let ran = patient
        .once(&key, |ctx| async move {
            assert!(ctx.token > dead);
            Ok::<_, String>(ctx.token)
        })
        .await
        .unwrap();
    assert_eq!(ran.origin, Origin::Ran);
    // The crashed holder comes back: its completion is refused.
    let late = saver
        .complete_claim(
            &idem.ledger_key(&key),
            dead,
            checkpoint_core::TypedValue::null(),
        )
        .await;
    assert!(matches!(late, Err(Error::StaleFence { .. })));
}

#[tokio::test]
async fn an_effect_that_outlives_its_claim_reports_that_it_was_not_recorded() {
    let saver = InMemorySaver::new();
    let slow = Idempotent::new(saver.clone(), fast().claim_ttl(Duration::from_millis(40)));
    let key = EffectKey::new("slow").unwrap();
    let other = Idempotent::new(saver.clone(), fast());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let slow_run = tokio::spawn({
        let key = key.clone();
        async move {
            slow.once(&key, |_| async move {
                let _ = rx.await;
                Ok::<_, String>("slow".to_owned())
            })
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(80)).await;
    let fast_run = other
        .once(&key, |_| async { Ok::<_, String>("fast".to_owned()) })
        .await
        .unwrap();
    assert_eq!(fast_run.origin, Origin::Ran, "the expired claim is retaken");
    tx.send(()).unwrap();
    let slow_result = slow_run.await.unwrap().unwrap();
    assert_eq!(slow_result.origin, Origin::RanUnrecorded);
    let recorded = other
        .once(&key, |_| async { Ok::<_, String>("again".to_owned()) })
        .await
        .unwrap();
    assert_eq!(
        (recorded.value.as_str(), recorded.origin),
        ("fast", Origin::Replayed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thread_lock_map_does_not_leak() {
    let idem = Idempotent::new(InMemorySaver::new(), fast().use_leases(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let idem = idem.clone();
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                let thread = format!("thread-{}", i % 7);
                let guard = idem.lock_thread(&thread).await.unwrap();
                inside.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                drop(guard);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(inside.load(Ordering::SeqCst), 200);
    assert_eq!(
        idem.locked_threads(),
        0,
        "every entry is removed when unused"
    );

    // A waiter that gives up (its future is dropped) leaves nothing behind either.
    let held = idem.lock_thread("busy").await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(20), idem.lock_thread("busy")).await;
    assert!(waiting.is_err(), "the thread is held");
    assert_eq!(idem.locked_threads(), 1);
    drop(held);
    assert_eq!(idem.locked_threads(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thread_lease_excludes_other_processes_and_fences_writes() {
    let saver = InMemorySaver::new();
    let idem = Idempotent::new(saver.clone(), fast().lease_ttl(Duration::from_millis(900)));
    let guard = idem.lock_thread("t").await.unwrap();
    let token = guard.fence().expect("the in-memory saver has leases");
    assert_eq!(
        saver
            .acquire_lease("t", "someone-else", Duration::from_secs(1))
            .await
            .unwrap(),
        None
    );
    // Held past several TTLs: the guard renews it.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(!guard.is_lost());
    assert_eq!(
        saver
            .acquire_lease("t", "someone-else", Duration::from_secs(1))
            .await
            .unwrap(),
        None
    );
    // Puts through the wrapper carry the token (a stale one would be refused).
    let mut cp = Checkpoint::new();
    let v = cp.set("x", &1).unwrap();
    idem.put(
        &CheckpointConfig::new("t"),
        cp,
        CheckpointMetadata::new(),
        [("x".into(), v)].into(),
        PutOptions::new(),
    )
    .await
    .unwrap();
    guard.release().await;
    let next = saver
        .acquire_lease("t", "someone-else", Duration::from_secs(1))
        .await
        .unwrap()
        .expect("released");
    assert!(next.token > token);
    let mut cp = Checkpoint::new();
    let v = cp.set("x", &2).unwrap();
    let stale = saver
        .put(
            &CheckpointConfig::new("t"),
            cp,
            CheckpointMetadata::new(),
            [("x".into(), v)].into(),
            PutOptions::new().fence(token),
        )
        .await;
    assert!(matches!(stale, Err(Error::StaleFence { .. })));
    assert_eq!(idem.locked_threads(), 0);
    // Waiting for another holder's lease times out with a transient error.
    let impatient = Idempotent::new(saver.clone(), fast().lease_wait(Duration::from_millis(30)));
    let err = impatient.lock_thread("t").await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(impatient.locked_threads(), 0);
}

/// The reference saver whose `complete_claim` fails with a transient error, counting its
/// calls.
#[derive(Debug, Default)]
struct LedgerDown {
    inner: InMemorySaver,
    completions: AtomicUsize,
}

#[checkpoint_core::async_trait]
impl Saver for LedgerDown {
    fn capabilities(&self) -> checkpoint_core::Capabilities {
        self.inner.capabilities()
    }
    async fn get_tuple(
        &self,
        config: &CheckpointConfig,
    ) -> checkpoint_core::Result<Option<checkpoint_core::CheckpointTuple>> {
        self.inner.get_tuple(config).await
    }
    fn list(
        &self,
        options: checkpoint_core::ListOptions,
    ) -> checkpoint_core::BoxStream<
        'static,
        checkpoint_core::Result<checkpoint_core::CheckpointTuple>,
    > {
        self.inner.list(options)
    }
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: checkpoint_core::ChannelVersions,
        options: PutOptions,
    ) -> checkpoint_core::Result<CheckpointConfig> {
        self.inner
            .put(config, checkpoint, metadata, new_versions, options)
            .await
    }
    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(String, TypedValue)>,
        task_id: &str,
        options: checkpoint_core::PutWritesOptions,
    ) -> checkpoint_core::Result<()> {
        self.inner
            .put_writes(config, writes, task_id, options)
            .await
    }
    async fn delete_thread(&self, thread_id: &str) -> checkpoint_core::Result<()> {
        self.inner.delete_thread(thread_id).await
    }
    async fn copy_thread(&self, source: &str, target: &str) -> checkpoint_core::Result<()> {
        self.inner.copy_thread(source, target).await
    }
    async fn prune(
        &self,
        thread_ids: &[String],
        strategy: checkpoint_core::PruneStrategy,
    ) -> checkpoint_core::Result<()> {
        self.inner.prune(thread_ids, strategy).await
    }
    async fn delete_for_runs(&self, run_ids: &[String]) -> checkpoint_core::Result<()> {
        self.inner.delete_for_runs(run_ids).await
    }
    async fn acquire_lease(
        &self,
        thread_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> checkpoint_core::Result<Option<checkpoint_core::Lease>> {
        self.inner.acquire_lease(thread_id, holder, ttl).await
    }
    async fn renew_lease(
        &self,
        lease: &checkpoint_core::Lease,
        ttl: Duration,
    ) -> checkpoint_core::Result<checkpoint_core::Lease> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &checkpoint_core::Lease) -> checkpoint_core::Result<()> {
        self.inner.release_lease(lease).await
    }
    async fn claim(&self, key: &str, ttl: Duration) -> checkpoint_core::Result<Claim> {
        self.inner.claim(key, ttl).await
    }
    async fn complete_claim(
        &self,
        _key: &str,
        _token: u64,
        _outcome: TypedValue,
    ) -> checkpoint_core::Result<()> {
        self.completions.fetch_add(1, Ordering::SeqCst);
        Err(Error::Unavailable {
            backend: "test",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        })
    }
    async fn abandon_claim(&self, key: &str, token: u64) -> checkpoint_core::Result<()> {
        self.inner.abandon_claim(key, token).await
    }
}

/// `finish` retries a transient ledger failure itself, but not one a `RetryLayer` under the
/// wrapper already gave up on: their attempts add up instead of multiplying.
#[tokio::test]
async fn finish_does_not_retry_what_a_retry_layer_gave_up_on() {
    use checkpoint_core::{Retry, RetryLayer};

    let outcome = TypedValue::msgpack(&"done").unwrap();
    let key = EffectKey::new("k").unwrap();
    let bare = Arc::new(LedgerDown::default());
    let idem = Idempotent::new(Arc::clone(&bare), fast());
    let Ok(Begun::Run(context)) = idem.begin(&key).await else {
        panic!("a fresh key is run")
    };
    assert_eq!(
        idem.finish(&context, outcome.clone()).await,
        Origin::RanUnrecorded
    );
    assert_eq!(
        bare.completions.load(Ordering::SeqCst),
        3,
        "its own 3 attempts"
    );

    let retried = Arc::new(LedgerDown::default());
    let layer = RetryLayer::new()
        .max_retries(2)
        .delays(Duration::from_millis(1), Duration::from_millis(2));
    let idem = Idempotent::new(Retry::new(Arc::clone(&retried), layer), fast());
    let Ok(Begun::Run(context)) = idem.begin(&key).await else {
        panic!("a fresh key is run")
    };
    assert_eq!(idem.finish(&context, outcome).await, Origin::RanUnrecorded);
    assert_eq!(
        retried.completions.load(Ordering::SeqCst),
        3,
        "the layer's 3 attempts, not 3 x 3"
    );
}
