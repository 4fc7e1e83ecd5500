//! One `pub async fn` per clause of the contract, grouped by operation. Each takes the
//! factory, builds the saver(s) it needs and panics on a violation.

pub mod beyond;
pub mod coordination;
pub mod delta;
pub mod extended;
pub mod get;
pub mod hostile;
pub mod list;
pub mod put;
pub mod ttl;
pub mod writes;

/// For an optional operation: when the saver does not advertise `$cap`, checks that `$call`
/// returns `Error::Unsupported` and ends the clause.
macro_rules! require_capability {
    ($saver:expr, $cap:ident, $call:expr) => {
        if !$saver.capabilities().$cap {
            let result = $call.await;
            assert!(
                matches!(result, Err(checkpoint_core::Error::Unsupported { .. })),
                "{} is not advertised, so it must return Error::Unsupported, got {:?}",
                stringify!($cap),
                result
            );
            return;
        }
    };
}
pub(crate) use require_capability;
