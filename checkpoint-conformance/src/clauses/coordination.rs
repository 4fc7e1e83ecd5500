//! Clauses of the optional coordination operations: thread leases with fencing tokens, and
//! the idempotency ledger.

use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{
    CheckpointMetadata, Claim, Error, ListOptions, PutOptions, PutWritesOptions, TypedValue,
};
use serde_json::json;

use super::require_capability;
use crate::fixtures::{cfg, list, put_chain, step, val};
use crate::{SaverFactory, build};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(1_000);

/// A live lease excludes other holders; its holder re-acquiring keeps the token; release
/// lets the next holder in with a larger token. Invalid requests are rejected.
pub async fn lease_excludes_other_holders_until_released(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, leases, s.acquire_lease("t1", "a", LONG));
    let a = s
        .acquire_lease("t1", "holder-a", LONG)
        .await
        .unwrap()
        .expect("free lease");
    assert_eq!(
        (a.thread_id.as_str(), a.holder.as_str()),
        ("t1", "holder-a")
    );
    assert!(a.token > 0);
    assert_eq!(s.acquire_lease("t1", "holder-b", LONG).await.unwrap(), None);
    let again = s
        .acquire_lease("t1", "holder-a", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.token, a.token,
        "the holder re-acquiring keeps its token"
    );
    // Another thread is independent.
    assert!(
        s.acquire_lease("t2", "holder-b", LONG)
            .await
            .unwrap()
            .is_some()
    );
    s.release_lease(&a).await.unwrap();
    let b = s
        .acquire_lease("t1", "holder-b", LONG)
        .await
        .unwrap()
        .expect("released lease");
    assert!(b.token > a.token);
    // Releasing a stale lease does nothing.
    s.release_lease(&a).await.unwrap();
    assert_eq!(s.acquire_lease("t1", "holder-c", LONG).await.unwrap(), None);
    for (thread, holder, ttl) in [("", "h", LONG), ("t", "", LONG), ("t", "h", Duration::ZERO)] {
        let r = s.acquire_lease(thread, holder, ttl).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{thread:?} {holder:?} {ttl:?}: {r:?}"
        );
    }
}

/// An expired lease is taken over with a larger token; the old holder can no longer renew,
/// put or write, and nothing it tries is stored.
pub async fn lease_expiry_takeover_fences_the_old_holder(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, leases, s.acquire_lease("t1", "a", LONG));
    let chain = put_chain(&*s, "t1", "", 1, "r").await.unwrap();
    let old = s.acquire_lease("t1", "old", SHORT).await.unwrap().unwrap();
    // The holder writes while its token is current.
    let (c, v) = step(
        Some(&chain[0].checkpoint),
        &[("counter", Some(val(json!("by old"))))],
    );
    let head = s
        .put(
            &chain[0].config,
            c.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new().fence(old.token),
        )
        .await
        .unwrap();
    tokio::time::sleep(SHORT + Duration::from_millis(500)).await;
    let new = s
        .acquire_lease("t1", "new", LONG)
        .await
        .unwrap()
        .expect("expired lease is free");
    assert!(new.token > old.token);
    let before = list(&*s, ListOptions::new()).await;
    // The paused old holder wakes up: every fenced call is refused.
    let r = s.renew_lease(&old, LONG).await;
    assert!(matches!(r, Err(Error::StaleFence { .. })), "renew: {r:?}");
    let (c2, v2) = step(Some(&c), &[("counter", Some(val(json!("late write"))))]);
    let r = s
        .put(
            &head,
            c2,
            CheckpointMetadata::new(),
            v2,
            PutOptions::new().fence(old.token),
        )
        .await;
    match r {
        Err(Error::StaleFence { token, current, .. }) => {
            assert_eq!((token, current), (old.token, new.token))
        }
        other => panic!("stale put: {other:?}"),
    }
    let r = s
        .put_writes(
            &head,
            vec![("x".into(), val(json!(1)))],
            "task",
            PutWritesOptions::new().fence(old.token),
        )
        .await;
    assert!(
        matches!(r, Err(Error::StaleFence { .. })),
        "stale writes: {r:?}"
    );
    assert_eq!(
        list(&*s, ListOptions::new()).await,
        before,
        "a fenced-out call must not write"
    );
    // The new holder writes with its token; a fence on a thread never leased is stale.
    let (c3, v3) = step(Some(&c), &[("counter", Some(val(json!("by new"))))]);
    s.put(
        &head,
        c3,
        CheckpointMetadata::new(),
        v3,
        PutOptions::new().fence(new.token),
    )
    .await
    .unwrap();
    s.put_writes(
        &head,
        vec![("x".into(), val(json!(2)))],
        "task",
        PutWritesOptions::new().fence(new.token),
    )
    .await
    .unwrap();
    let (c4, v4) = step(None, &[("a", Some(val(json!(1))))]);
    let r = s
        .put(
            &cfg("never-leased", ""),
            c4,
            CheckpointMetadata::new(),
            v4,
            PutOptions::new().fence(1),
        )
        .await;
    assert!(
        matches!(r, Err(Error::StaleFence { current: 0, .. })),
        "{r:?}"
    );
}

/// Renewing keeps the token and keeps others out past the original expiry; tokens are not
/// reset by deleting the thread.
pub async fn lease_renewal_extends_and_tokens_survive_delete(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, leases, s.acquire_lease("t1", "a", LONG));
    let a = s.acquire_lease("t1", "a", SHORT).await.unwrap().unwrap();
    let renewed = s.renew_lease(&a, LONG).await.unwrap();
    assert_eq!(renewed.token, a.token);
    tokio::time::sleep(SHORT + Duration::from_millis(500)).await;
    assert_eq!(
        s.acquire_lease("t1", "b", LONG).await.unwrap(),
        None,
        "renewal must extend the lease"
    );
    s.release_lease(&renewed).await.unwrap();
    s.delete_thread("t1").await.unwrap();
    let b = s.acquire_lease("t1", "b", LONG).await.unwrap().unwrap();
    assert!(
        b.token > a.token,
        "tokens must never repeat, even after delete_thread"
    );
}

/// Concurrent acquisitions of one free lease: exactly one holder gets it.
pub async fn lease_concurrent_acquire_has_one_winner(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, leases, s.acquire_lease("t1", "a", LONG));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                s.acquire_lease("contended", &format!("h{i}"), LONG)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap().is_some());
    }
    assert_eq!(winners, 1);
}

/// Claim, complete, replay: the outcome is recorded once and returned forever after.
pub async fn ledger_claim_complete_replay(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ledger, s.claim("k", LONG));
    let Claim::Acquired { token } = s.claim("send-email:case-1", LONG).await.unwrap() else {
        panic!("a new key must be acquired");
    };
    assert!(matches!(
        s.claim("send-email:case-1", LONG).await.unwrap(),
        Claim::Pending { .. }
    ));
    let outcome = TypedValue::msgpack(&json!({"message_id": "m-1"})).unwrap();
    s.complete_claim("send-email:case-1", token, outcome.clone())
        .await
        .unwrap();
    // A retried completion with the same token is fine; the outcome does not change.
    s.complete_claim("send-email:case-1", token, val(json!("other")))
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            s.claim("send-email:case-1", LONG).await.unwrap(),
            Claim::Completed {
                outcome: outcome.clone()
            }
        );
    }
    // Ledger keys are independent of threads.
    s.delete_thread("send-email:case-1").await.unwrap();
    assert!(matches!(
        s.claim("send-email:case-1", LONG).await.unwrap(),
        Claim::Completed { .. }
    ));
    for (key, ttl) in [("", LONG), ("k", Duration::ZERO)] {
        assert!(matches!(
            s.claim(key, ttl).await,
            Err(Error::InvalidInput { .. })
        ));
    }
}

/// A claim whose holder crashed expires and is retaken with a larger token; the crashed
/// holder can no longer complete it.
pub async fn ledger_expired_claim_is_retaken_and_fenced(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ledger, s.claim("k", LONG));
    let Claim::Acquired { token: old } = s.claim("k", SHORT).await.unwrap() else {
        panic!()
    };
    tokio::time::sleep(SHORT + Duration::from_millis(500)).await;
    let Claim::Acquired { token: new } = s.claim("k", LONG).await.unwrap() else {
        panic!("an expired claim must be retaken");
    };
    assert!(new > old);
    let r = s.complete_claim("k", old, val(json!("stale"))).await;
    assert!(matches!(r, Err(Error::StaleFence { .. })), "{r:?}");
    s.complete_claim("k", new, val(json!("fresh")))
        .await
        .unwrap();
    assert_eq!(
        s.claim("k", LONG).await.unwrap(),
        Claim::Completed {
            outcome: val(json!("fresh"))
        }
    );
    let r = s.complete_claim("unknown", 1, val(json!(1))).await;
    assert!(
        matches!(r, Err(Error::StaleFence { current: 0, .. })),
        "{r:?}"
    );
}

/// Abandoning a claim frees the key at once; abandoning with a stale token does nothing.
pub async fn ledger_abandon_allows_immediate_retake(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ledger, s.claim("k", LONG));
    let Claim::Acquired { token } = s.claim("k", LONG).await.unwrap() else {
        panic!()
    };
    s.abandon_claim("k", token + 100).await.unwrap();
    assert!(matches!(
        s.claim("k", LONG).await.unwrap(),
        Claim::Pending { .. }
    ));
    s.abandon_claim("k", token).await.unwrap();
    let Claim::Acquired { token: again } = s.claim("k", LONG).await.unwrap() else {
        panic!("an abandoned claim must be free");
    };
    assert!(again > token);
    let r = s.complete_claim("k", token, val(json!(1))).await;
    assert!(matches!(r, Err(Error::StaleFence { .. })), "{r:?}");
}

/// Concurrent claims of one key: exactly one is acquired, the rest see it pending.
pub async fn ledger_concurrent_claims_have_one_winner(f: &dyn SaverFactory) {
    let s = build(f).await;
    require_capability!(s, ledger, s.claim("k", LONG));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let s = Arc::clone(&s);
            tokio::spawn(async move { s.claim("exactly-once", LONG).await.unwrap() })
        })
        .collect();
    let mut acquired = 0;
    for t in tasks {
        match t.await.unwrap() {
            Claim::Acquired { .. } => acquired += 1,
            Claim::Pending { expires_in } => assert!(expires_in <= LONG),
            Claim::Completed { .. } => panic!("nobody completed"),
        }
    }
    assert_eq!(acquired, 1);
}
