//! Writer exclusion and exactly-once bookkeeping: per-thread leases with fencing tokens, and
//! the idempotency ledger.

use std::time::Duration;

use crate::TypedValue;

/// Exclusive write permission on one thread for one holder, identified by a fencing token.
///
/// Tokens of a thread only grow: every grant to a new holder gets a larger token than any
/// before it. Puts and writes that carry a token ([`PutOptions::fence`](crate::PutOptions),
/// [`PutWritesOptions::fence`](crate::PutWritesOptions)) are refused with
/// [`Error::StaleFence`](crate::Error::StaleFence) once a newer token exists, so a holder
/// whose lease expired while it was paused can never overwrite the work of the next holder
/// (the lock-expiry hazard of plain distributed locks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The thread the lease is on.
    pub thread_id: String,
    /// Who holds it (an id unique to the acquiring task, e.g. a UUID).
    pub holder: String,
    /// The fencing token.
    pub token: u64,
    /// How long the lease was granted for, from the moment the saver granted it.
    pub ttl: Duration,
}

/// The state of an idempotency-ledger key after [`Saver::claim`](crate::Saver::claim).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The caller now holds the key: run the effect, then
    /// [`complete_claim`](crate::Saver::complete_claim) with this token.
    Acquired {
        /// The claim's fencing token.
        token: u64,
    },
    /// The effect already ran; this is the outcome it recorded. Do not run it again.
    Completed {
        /// The recorded outcome.
        outcome: TypedValue,
    },
    /// Another holder claimed the key and has neither completed nor abandoned it, and its
    /// claim has not expired yet. Retry after `expires_in`.
    Pending {
        /// Time left until the claim expires and can be retaken; never more than the `ttl`
        /// the holding claim was granted with (savers reading a server clock clamp it).
        expires_in: Duration,
    },
}
