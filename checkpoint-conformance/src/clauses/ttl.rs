//! Clauses of the optional thread retention operations: per-thread TTLs, what an expired
//! thread looks like, and sweeping expired threads.
//!
//! They assume the factory's saver has no default TTL and does not refresh a TTL on read.

use std::time::{Duration, Instant};

use checkpoint_core::{
    CheckpointMetadata, Claim, DeltaChannelHistory, Error, ListOptions, PutOptions,
    PutWritesOptions, Saver, ThreadTtl,
};
use futures::TryStreamExt;
use serde_json::json;

use super::require_capability;
use crate::fixtures::{
    Put, addresses, cfg, expected, ids, list, put_chain, put_two_writes, step, val,
};
use crate::{SaverFactory, build};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(1_000);
/// How long to sleep for a thread set to expire after [`SHORT`] to have expired, with a
/// margin for a loaded machine.
const PAST_SHORT: Duration = Duration::from_millis(2_000);

/// Panics unless `thread` reads as a thread that never existed: no latest checkpoint in any
/// of `namespaces`, none of `puts` found by id, nothing listed, no TTL.
async fn assert_invisible(s: &dyn Saver, thread: &str, namespaces: &[&str], puts: &[Put]) {
    for ns in namespaces {
        let got = s.get_tuple(&cfg(thread, ns)).await.unwrap();
        assert_eq!(
            got.map(|t| t.config),
            None,
            "an expired thread has no latest checkpoint ({thread:?}, namespace {ns:?})"
        );
    }
    for p in puts {
        let got = s.get_tuple(&p.config).await.unwrap();
        assert_eq!(
            got.map(|t| t.config),
            None,
            "a checkpoint of an expired thread must not be found by id: {:?}",
            p.config
        );
    }
    let listed = list(s, ListOptions::thread(thread)).await;
    assert!(
        listed.is_empty(),
        "an expired thread {thread:?} lists nothing, got {:?}",
        addresses(&listed)
    );
    assert_eq!(
        s.thread_ttl(thread).await.unwrap(),
        None,
        "an expired thread {thread:?} has no time left"
    );
}

/// An expired thread is invisible at once to `get_tuple`, `list`, `list_threads` (and
/// `list_threads_after`), `delta_channel_history` and `thread_ttl`, in every namespace; other threads are untouched.
pub async fn ttl_expired_thread_is_invisible(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ttl, s.set_thread_ttl("t1", ThreadTtl::Pinned));
    let root = put_chain(&*s, "t1", "", 3, "r").await.unwrap();
    let child = put_chain(&*s, "t1", "child:1", 2, "r").await.unwrap();
    put_two_writes(&*s, &root[1].config, "task-root-1")
        .await
        .unwrap();
    put_two_writes(&*s, &root[2].config, "task-root-2")
        .await
        .unwrap();
    put_two_writes(&*s, &child[1].config, "task-child")
        .await
        .unwrap();
    let t2 = put_chain(&*s, "t2", "", 2, "r").await.unwrap();
    put_two_writes(&*s, &t2[1].config, "task").await.unwrap();
    let t2_before = list(&*s, ListOptions::thread("t2")).await;
    assert_eq!(
        s.thread_ttl("t1").await.unwrap(),
        None,
        "a thread whose TTL was never set has none (the saver has no default TTL)"
    );
    let channels = vec!["counter".to_owned(), "a".to_owned()];
    let history = s
        .delta_channel_history(&cfg("t1", ""), &channels)
        .await
        .unwrap();
    assert!(
        history.get("counter").is_some_and(|h| h.seed.is_some()),
        "before expiry the head's parent seeds `counter`, got {history:?}"
    );

    // Visible while a TTL runs (checked with a long one: a stalled machine could outlast a
    // short one between two calls), then gone once a short one has run out.
    s.set_thread_ttl("t1", ThreadTtl::Expire(LONG))
        .await
        .unwrap();
    assert!(
        s.get_tuple(&cfg("t1", "")).await.unwrap().is_some(),
        "a thread is visible until its TTL runs out"
    );
    let left = s.thread_ttl("t1").await.unwrap();
    assert!(
        matches!(left, Some(d) if d > Duration::ZERO && d <= LONG),
        "right after Expire(60 s) the time left must be in (0, 60 s], got {left:?}"
    );
    s.set_thread_ttl("t1", ThreadTtl::Expire(SHORT))
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT).await;

    let puts: Vec<Put> = root.iter().chain(&child).cloned().collect();
    assert_invisible(&*s, "t1", &["", "child:1"], &puts).await;
    let global = list(&*s, ListOptions::new()).await;
    assert!(
        global.iter().all(|t| t.config.thread_id != "t1"),
        "the global listing must not show an expired thread, got {:?}",
        addresses(&global)
    );
    assert_eq!(
        global, t2_before,
        "the global listing must hold exactly the other thread's checkpoints"
    );
    let threads: Vec<String> = s.list_threads().try_collect().await.unwrap();
    assert_eq!(
        threads,
        vec!["t2".to_owned()],
        "list_threads must not show an expired thread"
    );
    let after: Vec<String> = s.list_threads_after("t0").try_collect().await.unwrap();
    assert_eq!(
        after,
        vec!["t2".to_owned()],
        "list_threads_after must not show an expired thread"
    );
    for at in [cfg("t1", ""), cfg("t1", "child:1"), root[2].config.clone()] {
        let history = s.delta_channel_history(&at, &channels).await.unwrap();
        assert!(
            history
                .values()
                .all(|h| *h == DeltaChannelHistory::default()),
            "delta_channel_history of an expired thread answers as for an unknown target \
             (no seed, no writes) at {at:?}, got {history:?}"
        );
    }
    assert_eq!(
        list(&*s, ListOptions::thread("t2")).await,
        t2_before,
        "another thread's expiry must not change this one"
    );
    assert_eq!(
        s.get_tuple(&cfg("t2", "")).await.unwrap().as_ref(),
        t2_before.first(),
        "another thread's expiry must not change this one"
    );
}

/// The first write after a thread expired starts it afresh: old checkpoints, values and
/// writes never reappear, and the expired thread's TTL setting is forgotten.
pub async fn ttl_write_after_expiry_starts_afresh(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ttl, s.thread_ttl("t1"));
    let old = put_chain(&*s, "t1", "", 3, "r").await.unwrap();
    for (i, p) in old.iter().enumerate() {
        put_two_writes(&*s, &p.config, &format!("task-{i}"))
            .await
            .unwrap();
    }
    s.set_thread_ttl("t1", ThreadTtl::Expire(SHORT))
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    assert_invisible(&*s, "t1", &[""], &old).await;

    // A new root: its `counter` version is the one the old root stored, so an old value
    // left behind would read back instead of the new one.
    let (c, v) = step(None, &[("counter", Some(val(json!("afresh"))))]);
    let config = s
        .put(
            &cfg("t1", ""),
            c.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let listed = list(&*s, ListOptions::thread("t1")).await;
    assert_eq!(
        ids(&listed),
        vec![c.id.clone()],
        "after expiry the thread holds only the checkpoint written since"
    );
    let t = &listed[0];
    assert_eq!(
        t.checkpoint,
        expected(&c),
        "values of the expired thread must not reappear"
    );
    assert_eq!(t.metadata, CheckpointMetadata::new());
    assert_eq!(t.parent_config, None);
    assert!(
        t.pending_writes.is_empty(),
        "writes of the expired thread must not reappear, got {:?}",
        t.pending_writes
    );
    assert_eq!(s.get_tuple(&config).await.unwrap().as_ref(), Some(t));
    for p in &old {
        assert_eq!(
            s.get_tuple(&p.config).await.unwrap().map(|t| t.config),
            None,
            "an old checkpoint must not reappear after a new write"
        );
    }
    assert_eq!(
        s.thread_ttl("t1").await.unwrap(),
        None,
        "expiry forgets the thread's TTL setting"
    );
}

/// `Expire` counts from the thread's latest write: a `put` or a `put_writes` restarts the
/// clock.
///
/// The checks hold however slowly the machine runs: what is left after a write must be at
/// least the whole TTL less the time since the write began, and (with a TTL far longer than
/// any stall) the thread cannot expire on the way.
pub async fn ttl_writes_restart_the_clock(f: &dyn SaverFactory) {
    /// Rounding to milliseconds and the distance between the server's clock and ours.
    const SLACK: Duration = Duration::from_millis(250);
    const PAUSE: Duration = Duration::from_millis(1_200);
    let restarted = |left: Option<Duration>, since: Instant, what: &str| {
        let at_least = LONG.saturating_sub(since.elapsed() + SLACK);
        assert!(
            matches!(left, Some(d) if d >= at_least && d <= LONG),
            "{what} restarts the clock of Expire({LONG:?}): at least {at_least:?} left, got \
             {left:?}"
        );
    };
    let s = build(f).await;
    require_capability!(s, ttl, s.sweep_expired(10));
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    s.set_thread_ttl("t1", ThreadTtl::Expire(LONG))
        .await
        .unwrap();
    tokio::time::sleep(PAUSE).await;
    let left = s.thread_ttl("t1").await.unwrap();
    assert!(
        matches!(left, Some(d) if d <= LONG - PAUSE + SLACK),
        "{PAUSE:?} after Expire({LONG:?}) at most {:?} are left, got {left:?}",
        LONG - PAUSE
    );
    let (c, v) = step(
        Some(&chain[0].checkpoint),
        &[("counter", Some(val(json!("later"))))],
    );
    let before = Instant::now();
    let head = s
        .put(
            &chain[0].config,
            c.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    restarted(s.thread_ttl("t1").await.unwrap(), before, "a put");
    tokio::time::sleep(PAUSE).await;
    let before = Instant::now();
    s.put_writes(
        &head,
        vec![("x".into(), val(json!(1)))],
        "task",
        PutWritesOptions::new(),
    )
    .await
    .unwrap();
    restarted(s.thread_ttl("t1").await.unwrap(), before, "put_writes");
    let t = s
        .get_tuple(&cfg("t1", ""))
        .await
        .unwrap()
        .expect("the thread is still live");
    assert_eq!(t.checkpoint.id, c.id);
    assert_eq!(t.pending_writes.len(), 1);
    assert_eq!(list(&*s, ListOptions::thread("t1")).await.len(), 2);
}

/// `Pinned` and `Default` (without a default TTL) remove a thread's expiry; setting a TTL on
/// a thread without data succeeds and creates nothing.
pub async fn ttl_pinned_and_default(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ttl, s.thread_ttl("t1"));
    put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let before = list(&*s, ListOptions::thread("t1")).await;

    // Replacing an expiry, Pinned and Default (none here) both leave the thread without a
    // TTL: it must not expire. The expiry replaced is long enough for the replacing call to
    // come first even on a stalled machine; the check waits until well after it ran out.
    const EARLIER: Duration = Duration::from_secs(3);
    for (ttl, name) in [
        (ThreadTtl::Pinned, "Pinned"),
        (ThreadTtl::Default, "Default"),
    ] {
        let set_at = tokio::time::Instant::now();
        s.set_thread_ttl("t1", ThreadTtl::Expire(EARLIER))
            .await
            .unwrap();
        s.set_thread_ttl("t1", ttl).await.unwrap();
        assert_eq!(
            s.thread_ttl("t1").await.unwrap(),
            None,
            "{name} (without a default TTL) leaves no TTL"
        );
        tokio::time::sleep_until(set_at + EARLIER + Duration::from_millis(500)).await;
        assert_eq!(
            list(&*s, ListOptions::thread("t1")).await,
            before,
            "{name} replaces an earlier Expire: the thread must not expire"
        );
    }

    s.set_thread_ttl("t1", ThreadTtl::Expire(LONG))
        .await
        .unwrap();
    let left = s.thread_ttl("t1").await.unwrap();
    assert!(
        matches!(left, Some(d) if d > Duration::from_secs(50) && d <= LONG),
        "right after Expire(60 s) the time left must be in (50 s, 60 s], got {left:?}"
    );

    assert_eq!(s.thread_ttl("unknown").await.unwrap(), None);
    s.set_thread_ttl("no-data", ThreadTtl::Expire(LONG))
        .await
        .unwrap();
    assert_eq!(
        s.thread_ttl("no-data").await.unwrap(),
        None,
        "a thread without data has no time left"
    );
    s.set_thread_ttl("no-data", ThreadTtl::Pinned)
        .await
        .unwrap();
    assert_eq!(s.thread_ttl("no-data").await.unwrap(), None);
    assert_eq!(s.get_tuple(&cfg("no-data", "")).await.unwrap(), None);
    let threads: Vec<String> = s.list_threads().try_collect().await.unwrap();
    assert_eq!(
        threads,
        vec!["t1".to_owned()],
        "setting a TTL creates no thread"
    );
}

/// `sweep_expired` deletes expired threads only, at most `limit` per call, and reports how
/// many (always 0 for a saver whose server expires data itself); a swept thread starts afresh.
pub async fn ttl_sweep_deletes_expired_threads_only(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ttl, s.sweep_expired(10));
    let mut expiring = Vec::new();
    for thread in ["x1", "x2", "x3"] {
        let chain = put_chain(&*s, thread, "", 2, "r").await.unwrap();
        put_two_writes(&*s, &chain[1].config, "task").await.unwrap();
        s.set_thread_ttl(thread, ThreadTtl::Expire(Duration::from_millis(500)))
            .await
            .unwrap();
        expiring.push((thread, chain));
    }
    for thread in ["kept", "plain"] {
        let chain = put_chain(&*s, thread, "", 2, "r").await.unwrap();
        put_two_writes(&*s, &chain[1].config, "task").await.unwrap();
    }
    s.set_thread_ttl("kept", ThreadTtl::Pinned).await.unwrap();
    let kept = list(&*s, ListOptions::thread("kept")).await;
    let plain = list(&*s, ListOptions::thread("plain")).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let mut total = 0;
    for calls in 1.. {
        let n = s.sweep_expired(2).await.unwrap();
        assert!(n <= 2, "sweep_expired(2) deleted {n} threads");
        total += n;
        if n < 2 {
            break;
        }
        assert!(
            calls < 10,
            "sweep_expired(2) still returns 2 after {calls} calls (3 threads expired)"
        );
    }
    assert!(
        total == 0 || total == 3,
        "sweeping must delete exactly the 3 expired threads (or none, when the server \
         expires data itself), deleted {total}"
    );
    assert_eq!(
        s.sweep_expired(10).await.unwrap(),
        0,
        "nothing is left to sweep"
    );

    assert_eq!(
        list(&*s, ListOptions::thread("kept")).await,
        kept,
        "sweeping must not touch a pinned thread"
    );
    assert_eq!(
        list(&*s, ListOptions::thread("plain")).await,
        plain,
        "sweeping must not touch a thread without TTL"
    );
    for (thread, chain) in &expiring {
        assert_invisible(&*s, thread, &[""], chain).await;
    }
    let threads: Vec<String> = s.list_threads().try_collect().await.unwrap();
    assert_eq!(threads, vec!["kept".to_owned(), "plain".to_owned()]);

    let fresh = put_chain(&*s, "x1", "", 1, "r2").await.unwrap();
    let listed = list(&*s, ListOptions::thread("x1")).await;
    assert_eq!(
        ids(&listed),
        vec![fresh[0].checkpoint.id.clone()],
        "a swept thread starts afresh"
    );
    assert!(listed[0].pending_writes.is_empty());
    assert_eq!(s.thread_ttl("x1").await.unwrap(), None);
    assert_eq!(s.sweep_expired(10).await.unwrap(), 0);
    assert_eq!(
        list(&*s, ListOptions::thread("x1")).await,
        listed,
        "a thread written again after expiry is not swept"
    );
    assert_eq!(s.sweep_expired(0).await.unwrap(), 0);
}

/// An empty thread id or a zero `Expire` is rejected; leases and ledger keys are never
/// subject to a TTL (a fencing token is not handed out twice after the thread expired).
pub async fn ttl_bad_input_and_leases(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ttl, s.set_thread_ttl("t1", ThreadTtl::Pinned));
    put_chain(&*s, "t", "", 1, "r").await.unwrap();
    for (thread, ttl) in [
        ("", ThreadTtl::Pinned),
        ("", ThreadTtl::Expire(LONG)),
        ("t", ThreadTtl::Expire(Duration::ZERO)),
    ] {
        let r = s.set_thread_ttl(thread, ttl).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "set_thread_ttl({thread:?}, {ttl:?}): {r:?}"
        );
    }
    assert_eq!(
        s.thread_ttl("t").await.unwrap(),
        None,
        "a rejected call sets nothing"
    );

    let caps = s.capabilities();
    if !caps.leases && !caps.ledger {
        return;
    }
    let chain = put_chain(&*s, "t1", "", 2, "r").await.unwrap();
    let lease = if caps.leases {
        let lease = s
            .acquire_lease("t1", "a", LONG)
            .await
            .unwrap()
            .expect("free lease");
        Some(lease)
    } else {
        None
    };
    if caps.ledger {
        let Claim::Acquired { token } = s.claim("t1", LONG).await.unwrap() else {
            panic!("a new key must be acquired");
        };
        s.complete_claim("t1", token, val(json!("done")))
            .await
            .unwrap();
    }
    s.set_thread_ttl("t1", ThreadTtl::Expire(SHORT))
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    assert_invisible(&*s, "t1", &[""], &chain).await;
    let swept = s.sweep_expired(10).await.unwrap();
    assert!(swept <= 1, "one thread expired, {swept} swept");

    if let Some(a) = lease {
        s.release_lease(&a).await.unwrap();
        let b = s
            .acquire_lease("t1", "b", LONG)
            .await
            .unwrap()
            .expect("released lease");
        assert!(
            b.token > a.token,
            "fencing tokens must never repeat, also after the thread expired ({} then {})",
            a.token,
            b.token
        );
    }
    if caps.ledger {
        assert_eq!(
            s.claim("t1", LONG).await.unwrap(),
            Claim::Completed {
                outcome: val(json!("done"))
            },
            "ledger keys are not subject to a thread's TTL"
        );
    }
}
