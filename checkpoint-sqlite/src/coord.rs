//! Coordination: thread leases with fencing tokens, and the idempotency ledger, on the
//! writer, timed by the machine's clock (which every process sharing the file shares).

use std::time::Duration;

use checkpoint_core::backend::validate_claim_request;
use checkpoint_core::{Bytes, Claim, Error, Lease, Result, TypedValue, ValueType};
use sqlx::Row;

use crate::config::duration_ms;
use crate::core::{Inner, warm};
use crate::error::{SqliteResult, classify};
use crate::keys::IDENTIFIERS;
use crate::sql;

fn token_i64(token: u64) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}

fn token_u64(token: i64) -> u64 {
    u64::try_from(token).unwrap_or(0)
}

pub(crate) async fn acquire_lease(
    inner: &Inner,
    thread_id: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Lease>> {
    IDENTIFIERS.check_lease(thread_id, holder, ttl)?;
    let token: Option<i64> = {
        let _turn = inner.write_turn().await;
        warm!(inner.writer, |conn| sqlx::query_scalar(&sql::ACQUIRE_LEASE)
            .bind(thread_id)
            .bind(holder)
            .bind(duration_ms(ttl))
            .fetch_optional(conn))
        .map_err(classify)?
    };
    Ok(token.map(|token| Lease {
        thread_id: thread_id.to_owned(),
        holder: holder.to_owned(),
        token: token_u64(token),
        ttl,
    }))
}

pub(crate) async fn renew_lease(inner: &Inner, lease: &Lease, ttl: Duration) -> Result<Lease> {
    IDENTIFIERS.check_lease(&lease.thread_id, &lease.holder, ttl)?;
    let renewed: Option<i64> = {
        let _turn = inner.write_turn().await;
        warm!(inner.writer, |conn| sqlx::query_scalar(&sql::RENEW_LEASE)
            .bind(&lease.thread_id)
            .bind(&lease.holder)
            .bind(token_i64(lease.token))
            .bind(duration_ms(ttl))
            .fetch_optional(conn))
        .map_err(classify)?
    };
    if renewed.is_some() {
        return Ok(Lease {
            ttl,
            ..lease.clone()
        });
    }
    Err(stale_fence(inner, &lease.thread_id, lease.token).await?)
}

/// The refusal of a write fenced with `token` on `thread_id`, with the current token.
pub(crate) async fn stale_fence(inner: &Inner, thread_id: &str, token: u64) -> Result<Error> {
    let current =
        warm!(inner.reader, |conn| sql::lease_token(conn, thread_id)).map_err(classify)?;
    Ok(Error::stale_lease(thread_id, token, current))
}

pub(crate) async fn release_lease(inner: &Inner, lease: &Lease) -> Result<()> {
    if !IDENTIFIERS.storable(&lease.thread_id) || !IDENTIFIERS.storable(&lease.holder) {
        return Ok(());
    }
    let _turn = inner.write_turn().await;
    warm!(inner.writer, |conn| sqlx::query(&sql::RELEASE_LEASE)
        .bind(&lease.thread_id)
        .bind(&lease.holder)
        .bind(token_i64(lease.token))
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}

pub(crate) async fn claim(inner: &Inner, key: &str, ttl: Duration) -> Result<Claim> {
    validate_claim_request(key, ttl)?;
    IDENTIFIERS.check("ledger key", key)?;
    let mut tx = inner.begin_write().await?;
    let conn = tx.conn();
    let claim: SqliteResult<Claim> = async {
        let acquired: Option<i64> = sqlx::query_scalar(&sql::CLAIM)
            .bind(key)
            .bind(duration_ms(ttl))
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(token) = acquired {
            return Ok(Claim::Acquired {
                token: token_u64(token),
            });
        }
        // Not taken: completed, or pending and live (the statement above saw it so, in
        // this same transaction).
        let row = sqlx::query(&sql::CLAIM_STATE)
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
        let state: String = row.try_get(0)?;
        if state == "completed" {
            let ty: Option<String> = row.try_get(2)?;
            let bytes: Option<Vec<u8>> = row.try_get(3)?;
            return Ok(Claim::Completed {
                outcome: TypedValue::new(
                    ValueType::from(ty.as_deref().unwrap_or("null")),
                    Bytes::from(bytes.unwrap_or_default()),
                ),
            });
        }
        let left: i64 = row.try_get::<Option<i64>, _>(1)?.unwrap_or(0);
        Ok(Claim::Pending {
            expires_in: Duration::from_millis(u64::try_from(left).unwrap_or(0)),
        })
    }
    .await;
    let claim = claim?;
    tx.commit().await?;
    Ok(claim)
}

pub(crate) async fn complete_claim(
    inner: &Inner,
    key: &str,
    token: u64,
    outcome: TypedValue,
) -> Result<()> {
    IDENTIFIERS.check("ledger key", key)?;
    let mut tx = inner.begin_write().await?;
    let conn = tx.conn();
    let found: SqliteResult<(i64, String)> = async {
        sqlx::query(sql::COMPLETE_CLAIM)
            .bind(key)
            .bind(token_i64(token))
            .bind(outcome.type_tag.as_str())
            .bind(&outcome.bytes[..])
            .execute(&mut *conn)
            .await?;
        let row: Option<(i64, String)> = sqlx::query_as(sql::CLAIM_TOKEN)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
        Ok(row.unwrap_or((0, String::new())))
    }
    .await;
    let (current, state) = found?;
    tx.commit().await?;
    if token_u64(current) == token && state == "completed" {
        return Ok(());
    }
    Err(Error::StaleFence {
        scope: format!(
            "ledger key {key:?}{}",
            if token_u64(current) == token && state == "abandoned" {
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
    if !IDENTIFIERS.storable(key) {
        return Ok(());
    }
    let _turn = inner.write_turn().await;
    warm!(inner.writer, |conn| sqlx::query(sql::ABANDON_CLAIM)
        .bind(key)
        .bind(token_i64(token))
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}
