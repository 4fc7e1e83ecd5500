//! Running a body inside a multi-document transaction, retried on transient errors.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mongodb::ClientSession;
use mongodb::bson::doc;
use mongodb::error::ErrorKind;
use mongodb::options::ReadConcern;

use crate::core::Inner;
use crate::error::MongoError;

/// Runs `body` in a transaction on a fresh session and commits it.
///
/// * A body error or a commit error labelled `TransientTransactionError` (write conflict,
///   election, network) aborts and reruns the whole transaction after a short randomized
///   backoff, until [`MongoConfig::transaction_retry_time`](crate::MongoConfig) has passed.
/// * A commit labelled `UnknownTransactionCommitResult` is retried as a commit (the driver
///   makes the retry idempotent), within the same time budget.
/// * Any other error aborts the transaction and is returned, so a body returns a core error
///   (`Conflict`, `StaleFence`) through [`MongoError::Domain`] to abort without retrying.
pub(crate) async fn run<T, F>(inner: &Inner, mut body: F) -> Result<T, MongoError>
where
    T: Send,
    F: for<'s> FnMut(&'s mut ClientSession) -> BoxFuture<'s, Result<T, MongoError>> + Send,
{
    let mut session = inner.client.start_session().await?;
    let deadline = Instant::now() + inner.config.transaction_retry_time;
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        if let Err(e) = session
            .start_transaction()
            .read_concern(ReadConcern::snapshot())
            .write_concern(inner.config.write_concern.clone())
            .await
        {
            // The driver decides from its view of the topology, which is empty while no
            // server is reachable: then the reachability error is the one to report.
            if matches!(e.kind.as_ref(), ErrorKind::Transaction { .. }) {
                inner
                    .client
                    .database("admin")
                    .run_command(doc! { "ping": 1 })
                    .await?;
            }
            return Err(e.into());
        }
        let outcome = match body(&mut session).await {
            Ok(value) => commit(&mut session, deadline).await.map(|()| value),
            Err(e) => {
                // The server may already have aborted it; an abort error changes nothing.
                let _ = session.abort_transaction().await;
                Err(e)
            }
        };
        match outcome {
            Ok(value) => return Ok(value),
            Err(e) if e.is_transient_transaction_error() => {
                if Instant::now() >= deadline {
                    return Err(MongoError::RetriesExhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    });
                }
                tracing::debug!(attempt, error = %e, "retrying a MongoDB transaction");
                backoff(attempt).await;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn commit(session: &mut ClientSession, deadline: Instant) -> Result<(), MongoError> {
    loop {
        match session.commit_transaction().await {
            Ok(()) => return Ok(()),
            Err(e) => {
                let e = MongoError::from(e);
                if e.is_unknown_commit_result() && Instant::now() < deadline {
                    continue;
                }
                return Err(e);
            }
        }
    }
}

/// Randomized exponential backoff: up to 0.5 ms × 2^attempt, at most 50 ms.
pub(crate) async fn backoff(attempt: u32) {
    let cap_us = (500u64 << attempt.min(7)).min(50_000);
    let us = rand::random_range(0..=cap_us);
    tokio::time::sleep(Duration::from_micros(us)).await;
}
