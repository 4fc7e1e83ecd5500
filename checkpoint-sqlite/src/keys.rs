//! How identifiers, channel versions and metadata conditions are represented in columns, and
//! which identifiers the saver stores.

use checkpoint_core::ChannelVersion;
use checkpoint_core::backend::{Identifiers, canonical_json_into, digest128};
use serde_json::Value;

/// Longest identifier accepted, in bytes. SQLite itself takes up to 1 GB; identifiers are
/// repeated in several keys and indexes, so anything longer is rejected up front.
pub const MAX_IDENTIFIER_BYTES: usize = 1 << 20;

/// What this backend stores as an identifier: up to [`MAX_IDENTIFIER_BYTES`], without NUL
/// (SQLite's string and JSON functions stop at a NUL).
pub(crate) const IDENTIFIERS: Identifiers =
    Identifiers::new("SQLite", MAX_IDENTIFIER_BYTES).without_nul();

/// The key of a channel version in `checkpoint_blobs.version` and in a checkpoint's `cv`
/// map: `i<decimal>` for an integer version, `s<string>` for a string one, so `Int(5)` and
/// `Str("5")` stay distinct.
pub(crate) fn version_key(v: &ChannelVersion) -> String {
    match v {
        ChannelVersion::Int(n) => format!("i{n}"),
        ChannelVersion::Str(s) => {
            let mut out = String::with_capacity(s.len() + 1);
            out.push('s');
            out.push_str(s);
            out
        }
    }
}

/// The version a [`version_key`] stands for, or `None` for a malformed key.
pub(crate) fn parse_version_key(key: &str) -> Option<ChannelVersion> {
    match key.split_at_checked(1)? {
        ("i", n) => n.parse().ok().map(ChannelVersion::Int),
        ("s", s) => Some(ChannelVersion::Str(s.to_owned())),
        _ => None,
    }
}

/// Entries longer than this are stored as a digest (a collision only makes a lookup return
/// one candidate more, which is re-checked exactly).
const MAX_ENTRY_LEN: usize = 200;

/// The metadata index entry of the condition `key == value`: the key as a JSON string, then
/// the value's canonical JSON text (values equal under `json_equal` share an entry), or `#`
/// and a digest of that text when it is long. Keys and values are data, never SQL: entries
/// are bound parameters compared for equality.
pub(crate) fn entry(key: &str, value: &Value) -> String {
    let mut text = serde_json::to_string(key).unwrap_or_default();
    canonical_json_into(&mut text, value);
    if text.len() <= MAX_ENTRY_LEN {
        text
    } else {
        format!("#{:032x}", digest128(text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn version_keys_round_trip_and_stay_distinct() {
        for v in [
            ChannelVersion::Int(0),
            ChannelVersion::Int(u64::MAX),
            ChannelVersion::Str(String::new()),
            ChannelVersion::Str("5".into()),
            ChannelVersion::Str("00000000000000000000000000000003.0123456789012345".into()),
        ] {
            assert_eq!(parse_version_key(&version_key(&v)), Some(v));
        }
        assert_ne!(
            version_key(&ChannelVersion::Int(5)),
            version_key(&ChannelVersion::Str("5".into()))
        );
        assert_eq!(parse_version_key("x1"), None);
        assert_eq!(parse_version_key(""), None);
        assert_eq!(parse_version_key("inope"), None);
    }

    #[test]
    fn entries_follow_json_equality_and_are_bounded() {
        assert_eq!(entry("step", &json!(5)), entry("step", &json!(5.0)));
        assert_ne!(entry("step", &json!(5)), entry("step", &json!("5")));
        assert_ne!(entry("a", &json!("b")), entry("a\"b", &json!("")));
        assert_eq!(entry("step", &json!(5)), r#""step"5.0"#);
        let long = entry("k", &json!("x".repeat(500)));
        assert_eq!(long.len(), 33);
        assert!(long.starts_with('#'));
    }
}
