//! Thread retention shared by the backends that implement [`Capabilities::ttl`]: the argument
//! check of [`Saver::set_thread_ttl`] and a background sweeper.
//!
//! [`Capabilities::ttl`]: crate::Capabilities::ttl

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::{Error, Result, Saver, ThreadTtl};

/// The longest TTL stored, in milliseconds (about 73 million years): far beyond any date a
/// server stores, small enough that `now + ttl` never overflows.
pub const MAX_TTL_MS: u64 = 1 << 61;

/// Checks a [`Saver::set_thread_ttl`] call and gives the TTL as stored: `None` for the
/// saver's default, `Some(0)` for pinned, `Some(ms)` (1 ms at least, a sub-millisecond TTL
/// rounded up, at most [`MAX_TTL_MS`]) for an expiry.
///
/// An empty `thread_id` or a zero [`ThreadTtl::Expire`] is [`Error::InvalidInput`].
pub fn thread_ttl_ms(thread_id: &str, ttl: ThreadTtl) -> Result<Option<u64>> {
    if thread_id.is_empty() {
        return Err(Error::invalid("set_thread_ttl on an empty thread id"));
    }
    Ok(match ttl {
        ThreadTtl::Default => None,
        ThreadTtl::Pinned => Some(0),
        ThreadTtl::Expire(d) if d.is_zero() => {
            return Err(Error::invalid("a thread TTL must be at least 1 ms"));
        }
        ThreadTtl::Expire(d) => Some(
            u64::try_from(d.as_millis())
                .unwrap_or(MAX_TTL_MS)
                .clamp(1, MAX_TTL_MS),
        ),
    })
}

/// Runs [`Saver::sweep_expired`] in the background: every `every`, batches of `batch`
/// threads until a batch comes back short, so no call holds locks for long. Errors are
/// logged and retried at the next tick. Runs until the handle is aborted or the runtime
/// stops; a saver without [`Capabilities::ttl`](crate::Capabilities::ttl) ends it at once.
/// [`spawn_sweeper_reporting`] also keeps counts an application can read.
pub fn spawn_sweeper<S: Saver + ?Sized>(
    saver: Arc<S>,
    every: Duration,
    batch: usize,
) -> tokio::task::JoinHandle<()> {
    spawn_sweeper_reporting(saver, every, batch, Arc::default())
}

/// [`spawn_sweeper`], recording what each sweep did in `status`: for a health check or a
/// host language that does not see Rust's `tracing` (the Python binding's `sweeper`).
pub fn spawn_sweeper_reporting<S: Saver + ?Sized>(
    saver: Arc<S>,
    every: Duration,
    batch: usize,
    status: Arc<SweeperStatus>,
) -> tokio::task::JoinHandle<()> {
    let batch = batch.max(1);
    tokio::spawn(async move {
        if !saver.capabilities().ttl {
            return;
        }
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let mut swept = 0;
            let outcome = loop {
                match saver.sweep_expired(batch).await {
                    Ok(n) if n >= batch => swept += n,
                    Ok(n) => break Ok(swept + n),
                    Err(error) => break Err((swept, error)),
                }
            };
            status.record(outcome.map_err(|(swept, error)| {
                let error = error.chain();
                tracing::warn!(%error, "sweeping expired threads failed; retrying at the next tick");
                (swept, error)
            }));
        }
    })
}

/// What a background sweeper ([`spawn_sweeper_reporting`]) has done so far, shared with the
/// task that runs it; [`SweeperStatus::report`] reads it.
#[derive(Debug, Default)]
pub struct SweeperStatus(Mutex<SweeperReport>);

/// A reading of a [`SweeperStatus`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweeperReport {
    /// Sweeps finished (every tick runs one: batches until one comes back short).
    pub sweeps: u64,
    /// Of those, the sweeps that ended in an error (retried at the next tick).
    pub failures: u64,
    /// Threads deleted in all, by failed sweeps' batches before their error too.
    pub swept: u64,
    /// When the last sweep finished.
    pub last_sweep: Option<SystemTime>,
    /// When the last failed sweep finished, and its error with its sources; kept after later
    /// sweeps succeed.
    pub last_failure: Option<(SystemTime, String)>,
}

impl SweeperStatus {
    /// The counts so far.
    pub fn report(&self) -> SweeperReport {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, outcome: std::result::Result<usize, (usize, String)>) {
        let now = SystemTime::now();
        let mut report = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        report.sweeps += 1;
        report.last_sweep = Some(now);
        let swept = match outcome {
            Ok(swept) => swept,
            Err((swept, error)) => {
                report.failures += 1;
                report.last_failure = Some((now, error));
                swept
            }
        };
        report.swept = report
            .swept
            .saturating_add(u64::try_from(swept).unwrap_or(u64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_arguments() {
        assert!(thread_ttl_ms("", ThreadTtl::Pinned).is_err());
        assert!(thread_ttl_ms("t", ThreadTtl::Expire(Duration::ZERO)).is_err());
        assert_eq!(thread_ttl_ms("t", ThreadTtl::Default).unwrap(), None);
        assert_eq!(thread_ttl_ms("t", ThreadTtl::Pinned).unwrap(), Some(0));
        assert_eq!(
            thread_ttl_ms("t", ThreadTtl::Expire(Duration::from_micros(10))).unwrap(),
            Some(1)
        );
        assert_eq!(
            thread_ttl_ms("t", ThreadTtl::Expire(Duration::MAX)).unwrap(),
            Some(MAX_TTL_MS)
        );
    }
}
