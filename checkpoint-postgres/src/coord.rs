//! Coordination: thread leases with fencing tokens, and the idempotency ledger, timed by
//! the server's clock.
//!
//! Every statement here may run twice (`warm!(idempotent ...)`: sent again when its
//! connection turns out dead, so a server restart fails none of them). Run again after its
//! answer was lost, each has the outcome of the first: a holder acquiring the lease it holds
//! keeps its token, a renewal or release of the same token repeats itself, completing a
//! completed claim with its token succeeds, abandoning is a no-op. A claim that was acquired
//! but whose answer was lost answers `Pending` to its rerun, as it would to the caller's own
//! retry: the effect waits for the claim to expire and never runs twice at once.

use std::time::Duration;

use checkpoint_core::{Claim, Error, Lease, Result, TypedValue, ValueType};
use sqlx::Row;

use crate::core::{Inner, warm};
use crate::error::classify;
use crate::keys::{IDENTIFIERS, micros, storable, token_i64, token_u64};
use crate::sql;

pub(crate) async fn acquire_lease(
    inner: &Inner,
    thread_id: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Lease>> {
    IDENTIFIERS.check_lease(thread_id, holder, ttl)?;
    let token: Option<i64> =
        warm!(idempotent inner.conns, |conn| sqlx::query_scalar(sql::ACQUIRE_LEASE)
        .bind(thread_id)
        .bind(holder)
        .bind(micros(ttl))
        .fetch_optional(conn))
        .map_err(classify)?;
    Ok(token.map(|token| Lease {
        thread_id: thread_id.to_owned(),
        holder: holder.to_owned(),
        token: token_u64(token),
        ttl,
    }))
}

pub(crate) async fn renew_lease(inner: &Inner, lease: &Lease, ttl: Duration) -> Result<Lease> {
    IDENTIFIERS.check_lease(&lease.thread_id, &lease.holder, ttl)?;
    let row = warm!(idempotent inner.conns, |conn| sqlx::query(sql::RENEW_LEASE)
        .bind(&lease.thread_id)
        .bind(&lease.holder)
        .bind(token_i64(lease.token))
        .bind(micros(ttl))
        .fetch_one(conn))
    .map_err(classify)?;
    let renewed: bool = row.try_get("renewed").map_err(classify)?;
    if renewed {
        return Ok(Lease {
            ttl,
            ..lease.clone()
        });
    }
    let current: i64 = row.try_get("current").map_err(classify)?;
    Err(Error::stale_lease(
        &lease.thread_id,
        lease.token,
        token_u64(current),
    ))
}

pub(crate) async fn release_lease(inner: &Inner, lease: &Lease) -> Result<()> {
    if !storable(&lease.thread_id) || !storable(&lease.holder) {
        return Ok(());
    }
    warm!(idempotent inner.conns, |conn| sqlx::query(sql::RELEASE_LEASE)
        .bind(&lease.thread_id)
        .bind(&lease.holder)
        .bind(token_i64(lease.token))
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}

pub(crate) async fn claim(inner: &Inner, key: &str, ttl: Duration) -> Result<Claim> {
    IDENTIFIERS.check_claim(key, ttl)?;
    // A concurrent claimer may commit between the two statements; a few rounds settle it.
    for _ in 0..8 {
        let acquired: Option<i64> =
            warm!(idempotent inner.conns, |conn| sqlx::query_scalar(sql::CLAIM)
            .bind(key)
            .bind(micros(ttl))
            .fetch_optional(conn))
            .map_err(classify)?;
        if let Some(token) = acquired {
            return Ok(Claim::Acquired {
                token: token_u64(token),
            });
        }
        let state = warm!(idempotent inner.conns, |conn| sqlx::query(sql::CLAIM_STATE)
            .bind(key)
            .fetch_optional(conn))
        .map_err(classify)?;
        let Some(row) = state else { continue };
        let status: String = row.try_get("state").map_err(classify)?;
        match status.as_str() {
            "completed" => {
                let ty: Option<String> = row.try_get("outcome_type").map_err(classify)?;
                let outcome: Option<Vec<u8>> = row.try_get("outcome").map_err(classify)?;
                return Ok(Claim::Completed {
                    outcome: TypedValue::new(
                        ValueType::from(ty.as_deref().unwrap_or("null")),
                        outcome.unwrap_or_default(),
                    ),
                });
            }
            "pending" => {
                let us: i64 = row.try_get("expires_in_us").map_err(classify)?;
                if us > 0 {
                    return Ok(Claim::Pending {
                        expires_in: Duration::from_micros(u64::try_from(us).unwrap_or(0)),
                    });
                }
            }
            _ => {}
        }
    }
    Err(Error::Unavailable {
        backend: "postgres",
        source: format!("ledger key {key:?} kept changing state while being claimed").into(),
    })
}

pub(crate) async fn complete_claim(
    inner: &Inner,
    key: &str,
    token: u64,
    outcome: TypedValue,
) -> Result<()> {
    IDENTIFIERS.check("ledger key", key)?;
    let row = warm!(idempotent inner.conns, |conn| sqlx::query(sql::COMPLETE_CLAIM)
        .bind(key)
        .bind(token_i64(token))
        .bind(outcome.type_tag.as_str())
        .bind(&outcome.bytes[..])
        .fetch_one(conn))
    .map_err(classify)?;
    let current: i64 = row.try_get("token").map_err(classify)?;
    let state: String = row.try_get("state").map_err(classify)?;
    if token_u64(current) == token && state == "completed" {
        return Ok(());
    }
    Err(Error::StaleFence {
        scope: format!(
            "ledger key {key:?}{}",
            if state == "abandoned" {
                " (abandoned)"
            } else {
                ""
            }
        ),
        token,
        current: token_u64(current),
    })
}

pub(crate) async fn abandon_claim(inner: &Inner, key: &str, token: u64) -> Result<()> {
    if !storable(key) {
        return Ok(());
    }
    warm!(idempotent inner.conns, |conn| sqlx::query(sql::ABANDON_CLAIM)
        .bind(key)
        .bind(token_i64(token))
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}
