//! Building blocks for savers: the pieces every backend needs, written once.
//!
//! A backend built on these gets the contract's argument checks, `list` paging and metadata
//! index entries exactly as the other backends have them:
//!
//! * [`Identifiers`]: the argument checks of [`Saver::put`](crate::Saver::put),
//!   [`Saver::put_writes`](crate::Saver::put_writes) and the coordination calls, under the
//!   backend's own limits on identifiers (length, NUL);
//! * [`paged`]: [`Saver::list`](crate::Saver::list) as a lazy stream over pages the backend
//!   fetches one at a time;
//! * [`canonical_json`] and [`digest128`]: the text of a metadata condition such that
//!   values equal under [`json_equal`](crate::json_equal) get equal text, and a stable
//!   128-bit digest for entries too long to index as they are;
//! * [`msgpack`](crate::msgpack): walking stored MessagePack without decoding it;
//! * [`legacy`]: reading checkpoints of LangGraph's formats before 4;
//! * [`import_by_put`]: [`Saver::import`](crate::Saver::import) through `put` and
//!   `put_writes`, for backends without a bulk path;
//! * [`langgraph`]: reading checkpoints LangGraph's own savers serialized whole;
//! * [`ReadSource`] and [`ReadOnly`]: a store that is only read, as a [`Saver`](crate::Saver);
//! * [`thread_ttl_ms`], [`spawn_sweeper`] and [`spawn_sweeper_reporting`]: thread retention
//!   ([`Capabilities::ttl`](crate::Capabilities::ttl));
//! * `Warm` (feature `sqlx`): connections kept out of an sqlx pool between a saver's
//!   operations, sparing the pool's test of every returned connection.

mod checks;
mod import;
mod index;
pub mod langgraph;
pub mod legacy;
mod paging;
mod read_only;
mod retention;
#[cfg(feature = "sqlx")]
mod warm;

pub use checks::{
    Identifiers, validate_claim_request, validate_lease_request, validate_put, validate_put_writes,
};
pub use import::{WriteCall, import_by_put, put_address, write_calls};
pub use index::{canonical_json, canonical_json_into, digest128};
pub use paging::{
    FIRST_KEY_PAGE, Page, collected_keys, ids_after, paged, paged_keys, share_values,
};
pub use read_only::{ReadOnly, ReadSource};
pub use retention::{
    MAX_TTL_MS, SweeperReport, SweeperStatus, spawn_sweeper, spawn_sweeper_reporting, thread_ttl_ms,
};
#[cfg(feature = "sqlx")]
pub use warm::{Conn, LostConnections, Warm, warm};
