//! Thread retention shared by the backends that implement [`Capabilities::ttl`]: the argument
//! check of [`Saver::set_thread_ttl`] and a background sweeper.
//!
//! [`Capabilities::ttl`]: crate::Capabilities::ttl

use std::sync::Arc;
use std::time::Duration;

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
pub fn spawn_sweeper<S: Saver + ?Sized>(
    saver: Arc<S>,
    every: Duration,
    batch: usize,
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
            loop {
                match saver.sweep_expired(batch).await {
                    Ok(n) if n >= batch => continue,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "sweeping expired threads failed; retrying at the next tick");
                        break;
                    }
                }
            }
        }
    })
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
