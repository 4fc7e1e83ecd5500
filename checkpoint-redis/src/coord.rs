//! Coordination: thread leases with fencing tokens, and the idempotency ledger. Each call
//! is one script on one hash (the thread's lease key, or the ledger key), timed by the
//! server's clock.

use std::time::Duration;

use checkpoint_core::backend::{validate_claim_request, validate_lease_request};
use checkpoint_core::{Claim, Error, Lease, Result, TypedValue};
use redis::Value;

use crate::codec::{array, bulk, decode_typed, encode_typed, number};
use crate::config::duration_ms;
use crate::core::{Inner, reply_status};
use crate::error::{corrupt, protocol};
use crate::keys::LEASE;
use crate::scripts::{ClaimArgs, LeaseArgs};

fn lease_key(inner: &Inner, thread_id: &str) -> String {
    inner.layout.thread_keys(thread_id)[LEASE].clone()
}

pub(crate) async fn acquire_lease(
    inner: &Inner,
    thread_id: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Lease>> {
    validate_lease_request(thread_id, holder, ttl)?;
    let call = LeaseArgs::Acquire {
        holder,
        ttl_ms: duration_ms(ttl),
    }
    .call(lease_key(inner, thread_id));
    match inner.link.eval(&call).await? {
        Value::Nil => Ok(None),
        v => Ok(Some(Lease {
            thread_id: thread_id.to_owned(),
            holder: holder.to_owned(),
            token: number(&v)?,
            ttl,
        })),
    }
}

pub(crate) async fn renew_lease(inner: &Inner, lease: &Lease, ttl: Duration) -> Result<Lease> {
    validate_lease_request(&lease.thread_id, &lease.holder, ttl)?;
    let call = LeaseArgs::Renew {
        holder: &lease.holder,
        token: lease.token,
        ttl_ms: duration_ms(ttl),
    }
    .call(lease_key(inner, &lease.thread_id));
    let reply = array(inner.link.eval(&call).await?)?;
    match reply_status(&reply)? {
        "OK" => Ok(Lease {
            ttl,
            ..lease.clone()
        }),
        "FENCE" => Err(Error::stale_lease(
            &lease.thread_id,
            lease.token,
            number(reply.get(1).ok_or_else(|| protocol("fence"))?)?,
        )),
        other => Err(protocol(format!("renew answered {other:?}"))),
    }
}

pub(crate) async fn release_lease(inner: &Inner, lease: &Lease) -> Result<()> {
    if lease.thread_id.is_empty() {
        return Ok(());
    }
    let call = LeaseArgs::Release {
        holder: &lease.holder,
        token: lease.token,
    }
    .call(lease_key(inner, &lease.thread_id));
    inner.link.eval(&call).await?;
    Ok(())
}

pub(crate) async fn claim(inner: &Inner, key: &str, ttl: Duration) -> Result<Claim> {
    validate_claim_request(key, ttl)?;
    let call = ClaimArgs::Claim {
        ttl_ms: duration_ms(ttl),
    }
    .call(inner.layout.ledger_key(key));
    // Sent again when its connection turned out dead. A claim acquired whose reply was lost
    // finds itself `Pending` when sent again, as the caller's own retry would: the effect
    // waits for the claim to expire and never runs twice at once.
    let reply = array(inner.link.eval(&call).await?)?;
    let arg = reply.get(1).ok_or_else(|| protocol("claim reply"))?;
    match reply_status(&reply)? {
        "A" => Ok(Claim::Acquired {
            token: number(arg)?,
        }),
        "P" => Ok(Claim::Pending {
            expires_in: Duration::from_millis(number(arg)?),
        }),
        "C" => Ok(Claim::Completed {
            outcome: bulk(arg)
                .and_then(decode_typed)
                .ok_or_else(|| corrupt(format!("outcome of {key:?}")))?,
        }),
        other => Err(protocol(format!("claim answered {other:?}"))),
    }
}

pub(crate) async fn complete_claim(
    inner: &Inner,
    key: &str,
    token: u64,
    outcome: TypedValue,
) -> Result<()> {
    let call = ClaimArgs::Complete {
        token,
        outcome: encode_typed(&outcome),
    }
    .call(inner.layout.ledger_key(key));
    let reply = array(inner.link.eval(&call).await?)?;
    let current = || number(reply.get(1).ok_or_else(|| protocol("fence"))?);
    match reply_status(&reply)? {
        "OK" => Ok(()),
        "ABANDONED" => Err(Error::StaleFence {
            scope: format!("ledger key {key:?} (abandoned)"),
            token,
            current: current()?,
        }),
        "FENCE" => Err(Error::StaleFence {
            scope: format!("ledger key {key:?}"),
            token,
            current: current()?,
        }),
        other => Err(protocol(format!("complete_claim answered {other:?}"))),
    }
}

pub(crate) async fn abandon_claim(inner: &Inner, key: &str, token: u64) -> Result<()> {
    let call = ClaimArgs::Abandon { token }.call(inner.layout.ledger_key(key));
    inner.link.eval(&call).await?;
    Ok(())
}
