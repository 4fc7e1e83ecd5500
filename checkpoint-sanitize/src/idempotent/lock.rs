//! The per-thread serializer: an in-process lock map that never leaks, plus the backend's
//! lease with its fencing token.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use checkpoint_core::{Lease, Saver};
use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio::task::JoinHandle;

/// State shared by an [`Idempotent`](super::Idempotent) and its clones and guards.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// thread id → its in-process lock. An entry exists only while a guard holds it or a
    /// task waits for it.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// thread id → the lease a guard of this process holds on it.
    leases: Mutex<HashMap<String, Lease>>,
}

impl Shared {
    pub(crate) fn lock_entry(&self, thread_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(locks.entry(thread_id.to_owned()).or_default())
    }

    /// Releases `guard` and removes the thread's entry if nobody else holds or waits for it.
    fn unlock(&self, thread_id: &str, guard: OwnedMutexGuard<()>) {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        drop(guard);
        if locks
            .get(thread_id)
            .is_some_and(|entry| Arc::strong_count(entry) == 1)
        {
            locks.remove(thread_id);
        }
    }

    /// Removes the entry of a lock attempt that was abandoned before it got the lock.
    pub(crate) fn forget(&self, thread_id: &str, entry: Arc<tokio::sync::Mutex<()>>) {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        drop(entry);
        if locks
            .get(thread_id)
            .is_some_and(|entry| Arc::strong_count(entry) == 1)
        {
            locks.remove(thread_id);
        }
    }

    pub(crate) fn locked_threads(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(crate) fn set_lease(&self, lease: Lease) {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lease.thread_id.clone(), lease);
    }

    fn clear_lease(&self, lease: &Lease) {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if leases
            .get(&lease.thread_id)
            .is_some_and(|l| l.token == lease.token)
        {
            leases.remove(&lease.thread_id);
        }
    }

    /// The fencing token of the lease this process holds on `thread_id`.
    pub(crate) fn fence(&self, thread_id: &str) -> Option<u64> {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(thread_id)
            .map(|l| l.token)
    }
}

/// The lease part of a guard: the lease and the task renewing it.
pub(crate) struct HeldLease {
    pub(crate) lease: Lease,
    pub(crate) lost: Arc<AtomicBool>,
    pub(crate) stop: Option<oneshot::Sender<()>>,
    pub(crate) task: Option<JoinHandle<()>>,
}

/// Renews `lease` every third of `ttl` until told to stop, then releases it. Marks the lease
/// lost when a renewal is refused (someone else holds the thread now).
pub(crate) fn spawn_renewal<S: Saver + Clone>(
    saver: S,
    lease: Lease,
    ttl: std::time::Duration,
    lost: Arc<AtomicBool>,
    mut stop: oneshot::Receiver<()>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let period = (ttl / 3).max(std::time::Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = &mut stop => break,
                () = tokio::time::sleep(period) => {
                    if lost.load(Ordering::SeqCst) {
                        continue;
                    }
                    if let Err(e) = saver.renew_lease(&lease, ttl).await
                        && !e.is_transient() {
                            lost.store(true, Ordering::SeqCst);
                            tracing::warn!(
                                thread_id = %lease.thread_id,
                                token = lease.token,
                                error = %e,
                                "thread lease lost: another holder took over; fenced writes will be refused"
                            );
                        }
                }
            }
        }
        if let Err(e) = saver.release_lease(&lease).await {
            tracing::warn!(thread_id = %lease.thread_id, error = %e, "releasing a thread lease failed; it will expire");
        }
    })
}

/// Exclusive access to one thread: held while the guard lives.
///
/// Within the process, the guard is a lock on the thread id. Across processes, when the
/// saver supports leases, it also holds the thread's lease, renewed in the background while
/// the guard lives; every `put` and `put_writes` on the thread through the
/// [`Idempotent`](super::Idempotent) that issued it carries the lease's fencing token, so a
/// holder whose lease expired and was taken over cannot write any more
/// ([`Error::StaleFence`](checkpoint_core::Error::StaleFence)).
///
/// Dropping the guard releases everything (the lease release runs in the background);
/// [`release`](Self::release) does it and waits.
pub struct ThreadGuard {
    pub(crate) thread_id: String,
    pub(crate) shared: Arc<Shared>,
    pub(crate) local: Option<OwnedMutexGuard<()>>,
    pub(crate) lease: Option<HeldLease>,
}

impl fmt::Debug for ThreadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadGuard")
            .field("thread_id", &self.thread_id)
            .field("lease", &self.lease.as_ref().map(|l| &l.lease))
            .finish()
    }
}

impl ThreadGuard {
    /// The thread.
    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The backend lease, when the saver supports leases.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref().map(|l| &l.lease)
    }

    /// The fencing token to pass to writes made outside the wrapper.
    pub fn fence(&self) -> Option<u64> {
        self.lease().map(|l| l.token)
    }

    /// Whether the lease was taken over by another holder (writes will be refused).
    pub fn is_lost(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|l| l.lost.load(Ordering::SeqCst))
    }

    /// Releases the lease and the lock, waiting for the lease release to finish.
    pub async fn release(mut self) {
        if let Some(mut held) = self.lease.take() {
            self.shared.clear_lease(&held.lease);
            if let Some(stop) = held.stop.take() {
                let _ = stop.send(());
            }
            if let Some(task) = held.task.take()
                && let Err(e) = task.await
            {
                tracing::warn!(error = %e, "the lease renewal task failed");
            }
        }
        // Drop releases the local lock.
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        if let Some(mut held) = self.lease.take() {
            self.shared.clear_lease(&held.lease);
            if let Some(stop) = held.stop.take() {
                // The renewal task releases the lease when told to stop (or, if the runtime
                // is gone, the lease expires on its own).
                let _ = stop.send(());
            }
        }
        if let Some(local) = self.local.take() {
            self.shared.unlock(&self.thread_id, local);
        }
    }
}
