#![doc = include_str!("../README.md")]

pub mod idempotent;
pub mod messages;
pub mod pending_markers;
pub mod sanitize_on_load;
#[cfg(feature = "testing")]
pub mod scenarios;
pub mod skip_unsafe_put;
mod stack;
mod util;

pub use idempotent::{
    Begun, EffectContext, EffectKey, Idempotent, IdempotentConfig, IdempotentLayer, Once,
    OnceError, Origin, ThreadGuard,
};
pub use pending_markers::{
    CallState, Decision, NonIdempotentAction, Outstanding, OutstandingCall, PendingMarkers,
    PendingMarkersConfig, PendingMarkersLayer, Recovery, Resolution, Resolved, ToolReplayer,
};
pub use sanitize_on_load::{
    ChannelState, ReportHook, SanitizeConfig, SanitizeOnLoad, SanitizeOnLoadLayer, SanitizeReport,
    UndecodablePolicy, WriteBack,
};
pub use skip_unsafe_put::{
    SKIPPED_KEY, SkipUnsafePut, SkipUnsafePutConfig, SkipUnsafePutLayer, UnsafeCheck,
    UnsafePutPolicy, is_unsafe_put_rejection,
};
pub use stack::{CanonicalLayer, CanonicalStack, StackConfig, canonical_layer, canonical_stack};
pub use util::METADATA_KEY;
