//! Thread leases with fencing tokens, and the idempotency ledger.
//!
//! Each call is one atomic single-document command (`findAndModify` or `update` with an
//! aggregation-pipeline update), so none needs a transaction. Expiry is decided with the
//! server's clock (`$$NOW`), never the caller's, so application hosts with skewed clocks
//! agree on who holds a lease. Dates are compared as milliseconds (`$toLong`), which every
//! MongoDB version since 4.0 evaluates the same way (the test server mis-compares a date
//! with `$$NOW` directly).
//!
//! Caller data inside a pipeline is always wrapped in `$literal`, so a holder named `"$h"`
//! stays a string.

use std::time::Duration;

use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::options::ReturnDocument;

use checkpoint_core::backend::validate_lease_request;
use checkpoint_core::{Claim, Error, Lease, Result, TypedValue, ValueType};

use crate::codec::{self, MAX_OUTCOME_BYTES};
use crate::core::Inner;
use crate::error::{MongoError, driver, is_duplicate_key};
use crate::keys::IDENTIFIERS;

/// The server's current time in milliseconds, inside a pipeline.
fn now_ms() -> Bson {
    Bson::Document(doc! { "$toLong": "$$NOW" })
}

/// Attempts of an upsert that races with another upsert of the same new document.
const UPSERT_ATTEMPTS: u32 = 16;

/// Runs a `findAndModify` upsert, again when it raced with a concurrent upsert of the same
/// `_id` (a duplicate key error, a write conflict, or no document returned), which the
/// server does not always retry by itself.
async fn upsert_returning(
    coll: &mongodb::Collection<Document>,
    filter: Document,
    pipeline: Vec<Document>,
    completed_is_duplicate: bool,
) -> Result<std::result::Result<Document, mongodb::error::Error>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let r = coll
            .find_one_and_update(filter.clone(), pipeline.clone())
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await;
        let raced = match &r {
            Ok(None) => true,
            Err(e) if is_duplicate_key(e) && completed_is_duplicate => return Ok(Err(e.clone())),
            Err(e) => {
                is_duplicate_key(e)
                    || crate::error::codes(e).contains(&crate::error::WRITE_CONFLICT)
            }
            Ok(Some(_)) => false,
        };
        if raced && attempt < UPSERT_ATTEMPTS {
            crate::txn::backoff(attempt).await;
            continue;
        }
        return match r {
            Ok(Some(d)) => Ok(Ok(d)),
            Ok(None) => Err(MongoError::Contention { attempts: attempt }.into()),
            Err(e) => Err(driver(e)),
        };
    }
}

fn unsupported(inner: &Inner) -> Result<()> {
    if inner.capabilities().leases {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op: "leases (need transactions to fence puts)",
        })
    }
}

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis())
        .unwrap_or(i64::MAX / 4)
        .max(1)
}

fn token_of(doc: &Document, what: &'static str) -> Result<u64> {
    let n = codec::number(doc, "tok", what).map_err(Error::from)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

async fn current_lease_token(inner: &Inner, thread_id: &str) -> Result<u64> {
    match inner
        .leases
        .find_one(doc! { "_id": thread_id })
        .await
        .map_err(driver)?
    {
        Some(d) => token_of(&d, "lease"),
        None => Ok(0),
    }
}

pub(crate) async fn acquire_lease(
    inner: &Inner,
    thread_id: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Lease>> {
    unsupported(inner)?;
    IDENTIFIERS.check_lease(thread_id, holder, ttl)?;
    let me = doc! { "$literal": holder };
    // free: no holder (never leased, or released) or expired.
    // mine: held, live, by this holder.
    let pipeline = vec![
        doc! { "$set": {
            "_free": { "$or": [
                { "$eq": [{ "$ifNull": ["$h", ""] }, ""] },
                { "$lte": [{ "$toLong": { "$ifNull": ["$exp", DateTime::from_millis(0)] } }, now_ms()] },
            ] },
        } },
        doc! { "$set": {
            "_mine": { "$and": [{ "$not": ["$_free"] }, { "$eq": ["$h", me.clone()] }] },
        } },
        doc! { "$set": {
            "tok": { "$cond": ["$_free", { "$add": [{ "$ifNull": ["$tok", 0_i64] }, 1_i64] }, "$tok"] },
            "h": { "$cond": [{ "$or": ["$_free", "$_mine"] }, me, "$h"] },
            "exp": { "$cond": [
                { "$or": ["$_free", "$_mine"] },
                { "$add": ["$$NOW", millis(ttl)] },
                "$exp",
            ] },
        } },
        doc! { "$unset": ["_free", "_mine"] },
    ];
    let doc = upsert_returning(&inner.leases, doc! { "_id": thread_id }, pipeline, false)
        .await?
        .map_err(driver)?;
    if doc.get_str("h").ok() != Some(holder) {
        return Ok(None);
    }
    Ok(Some(Lease {
        thread_id: thread_id.to_owned(),
        holder: holder.to_owned(),
        token: token_of(&doc, "lease")?,
        ttl,
    }))
}

pub(crate) async fn renew_lease(inner: &Inner, lease: &Lease, ttl: Duration) -> Result<Lease> {
    unsupported(inner)?;
    validate_lease_request(&lease.thread_id, &lease.holder, ttl)?;
    let token = i64::try_from(lease.token).unwrap_or(-1);
    let r = inner
        .leases
        .update_one(
            doc! { "_id": lease.thread_id.as_str(), "tok": token, "h": lease.holder.as_str() },
            vec![doc! { "$set": { "exp": { "$add": ["$$NOW", millis(ttl)] } } }],
        )
        .await
        .map_err(driver)?;
    if r.matched_count == 1 {
        return Ok(Lease {
            ttl,
            ..lease.clone()
        });
    }
    Err(Error::stale_lease(
        &lease.thread_id,
        lease.token,
        current_lease_token(inner, &lease.thread_id).await?,
    ))
}

pub(crate) async fn release_lease(inner: &Inner, lease: &Lease) -> Result<()> {
    unsupported(inner)?;
    let token = i64::try_from(lease.token).unwrap_or(-1);
    // Expire it now and clear the holder; the token stays spent.
    inner
        .leases
        .update_one(
            doc! { "_id": lease.thread_id.as_str(), "tok": token, "h": lease.holder.as_str() },
            vec![doc! { "$set": { "exp": "$$NOW", "h": "" } }],
        )
        .await
        .map_err(driver)?;
    Ok(())
}

/// Ledger states.
const PENDING: &str = "p";
const ABANDONED: &str = "a";
const COMPLETED: &str = "c";

fn outcome_of(doc: &Document) -> Result<TypedValue> {
    let o = doc.get_document("o").map_err(|_| {
        Error::from(MongoError::corrupt(
            "ledger entry",
            "completed without outcome",
        ))
    })?;
    let ty = o
        .get_str("ty")
        .map_err(|_| Error::from(MongoError::corrupt("ledger entry", "outcome without type")))?;
    let bytes = o
        .get_binary_generic("d")
        .map_err(|_| Error::from(MongoError::corrupt("ledger entry", "outcome without bytes")))?;
    Ok(TypedValue::new(ValueType::from(ty), bytes.clone()))
}

pub(crate) async fn claim(inner: &Inner, key: &str, ttl: Duration) -> Result<Claim> {
    IDENTIFIERS.check_claim(key, ttl)?;
    // Take the key when it is new, abandoned or its pending claim expired; record the
    // server's time of this call (`at`) to report how long a pending claim has left.
    let pipeline = vec![
        doc! { "$set": {
            "_take": { "$or": [
                { "$eq": [{ "$ifNull": ["$st", ABANDONED] }, ABANDONED] },
                { "$and": [{ "$eq": ["$st", PENDING] }, { "$lte": [{ "$toLong": "$exp" }, now_ms()] }] },
            ] },
        } },
        doc! { "$set": {
            "tok": { "$cond": ["$_take", { "$add": [{ "$ifNull": ["$tok", 0_i64] }, 1_i64] }, "$tok"] },
            "st": { "$cond": ["$_take", PENDING, "$st"] },
            "exp": { "$cond": ["$_take", { "$add": ["$$NOW", millis(ttl)] }, "$exp"] },
            "tl": { "$cond": ["$_take", millis(ttl), "$tl"] },
            "tk": "$_take",
            "at": "$$NOW",
        } },
        doc! { "$unset": ["_take"] },
    ];
    // A completed key does not match, so the upsert's insert hits the existing `_id`: that
    // duplicate key means "completed", and the outcome is read without writing anything.
    let mut attempt = 0;
    let doc = loop {
        attempt += 1;
        let updated = upsert_returning(
            &inner.ledger,
            doc! { "_id": key, "st": { "$ne": COMPLETED } },
            pipeline.clone(),
            true,
        )
        .await?;
        match updated {
            Ok(d) => break d,
            Err(e) => {
                let d = inner
                    .ledger
                    .find_one(doc! { "_id": key })
                    .await
                    .map_err(driver)?;
                match d {
                    Some(d) if d.get_str("st").ok() == Some(COMPLETED) => break d,
                    // Not completed: two first claims raced and this one lost; run it
                    // again to see the winner's claim.
                    _ if attempt < UPSERT_ATTEMPTS => crate::txn::backoff(attempt).await,
                    _ => return Err(driver(e)),
                }
            }
        }
    };
    match doc.get_str("st").unwrap_or_default() {
        COMPLETED => Ok(Claim::Completed {
            outcome: outcome_of(&doc)?,
        }),
        PENDING if doc.get_bool("tk").unwrap_or(false) => Ok(Claim::Acquired {
            token: token_of(&doc, "ledger entry")?,
        }),
        PENDING => Ok(pending(&doc)),
        other => {
            Err(MongoError::corrupt("ledger entry", format!("unknown state {other:?}")).into())
        }
    }
}

/// A pending claim: time left from the server's time of the last claim to the expiry.
fn pending(doc: &Document) -> Claim {
    let exp = doc
        .get_datetime("exp")
        .map(|d| d.timestamp_millis())
        .unwrap_or(0);
    let at = doc
        .get_datetime("at")
        .map(|d| d.timestamp_millis())
        .unwrap_or(exp);
    // Concurrent commands may evaluate `$$NOW` in another order than they apply: never
    // report more than the claim's own time to live.
    let granted = codec::number(doc, "tl", "ledger entry").unwrap_or(i64::MAX);
    let left = u64::try_from(exp.saturating_sub(at).min(granted)).unwrap_or(0);
    Claim::Pending {
        expires_in: Duration::from_millis(left),
    }
}

pub(crate) async fn complete_claim(
    inner: &Inner,
    key: &str,
    token: u64,
    outcome: TypedValue,
) -> Result<()> {
    if outcome.len() > MAX_OUTCOME_BYTES {
        return Err(Error::invalid(format!(
            "a ledger outcome of {} bytes is larger than the {MAX_OUTCOME_BYTES} bytes the MongoDB saver stores",
            outcome.len()
        )));
    }
    let tok = i64::try_from(token).unwrap_or(-1);
    let stored = doc! {
        "ty": outcome.type_tag.as_str(),
        "d": Bson::Binary(mongodb::bson::Binary {
            subtype: BinarySubtype::Generic,
            bytes: outcome.bytes.to_vec(),
        }),
    };
    let r = inner
        .ledger
        .update_one(
            doc! { "_id": key, "tok": tok, "st": PENDING },
            doc! { "$set": { "st": COMPLETED, "o": stored } },
        )
        .await
        .map_err(driver)?;
    if r.matched_count == 1 {
        return Ok(());
    }
    let current = inner
        .ledger
        .find_one(doc! { "_id": key })
        .await
        .map_err(driver)?;
    match current {
        // A retried completion: the first outcome stays.
        Some(d)
            if d.get_str("st").ok() == Some(COMPLETED)
                && token_of(&d, "ledger entry")? == token =>
        {
            Ok(())
        }
        Some(d) => {
            let current = token_of(&d, "ledger entry")?;
            let abandoned = d.get_str("st").ok() == Some(ABANDONED) && current == token;
            Err(Error::StaleFence {
                scope: if abandoned {
                    format!("ledger key {key:?} (abandoned)")
                } else {
                    format!("ledger key {key:?}")
                },
                token,
                current,
            })
        }
        None => Err(Error::StaleFence {
            scope: format!("ledger key {key:?}"),
            token,
            current: 0,
        }),
    }
}

pub(crate) async fn abandon_claim(inner: &Inner, key: &str, token: u64) -> Result<()> {
    let tok = i64::try_from(token).unwrap_or(-1);
    inner
        .ledger
        .update_one(
            doc! { "_id": key, "tok": tok, "st": PENDING },
            doc! { "$set": { "st": ABANDONED } },
        )
        .await
        .map_err(driver)?;
    Ok(())
}
