//! Channel versions: opaque, totally ordered values.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// The version of one channel's value.
///
/// Two forms exist in the wild: plain integers (LangGraph's in-memory saver) and LangGraph
/// PostgreSQL saver's strings, a zero-padded counter, a dot and a random suffix
/// (`"00000000000000000000000000000003.0123456789012345"`). Both are accepted and round-trip
/// unchanged.
///
/// # Order
/// The order is total and consistent with equality. Each version has a counter: the integer
/// itself, or the decimal digits before the first `.` of a string. Versions compare by counter
/// first; on a tie an integer comes before a string, and strings compare as strings (for
/// LangGraph's zero-padded form this is exactly its lexicographic order). Strings without a
/// numeric counter sort after every version that has one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum ChannelVersion {
    /// An integer version.
    Int(u64),
    /// A string version.
    Str(String),
}

/// Accepts an unsigned integer or a string (UTF-8 bytes too), like `#[serde(untagged)]`
/// would, but in one pass: the derived untagged form buffers the input and builds (and
/// formats) an error for every string version before trying the string variant, which
/// showed up in profiles of listing checkpoints.
impl<'de> Deserialize<'de> for ChannelVersion {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl serde::de::Visitor<'_> for Visitor {
            type Value = ChannelVersion;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a channel version (an unsigned integer or a string)")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ChannelVersion::Int(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(ChannelVersion::Int)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ChannelVersion::Str(v.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(ChannelVersion::Str(v))
            }

            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                std::str::from_utf8(v)
                    .map(|s| ChannelVersion::Str(s.to_owned()))
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Bytes(v), &self))
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// Channel name → version.
pub type ChannelVersions = BTreeMap<String, ChannelVersion>;

impl ChannelVersion {
    /// The numeric counter of the version (see the type docs), if it has one.
    pub fn counter(&self) -> Option<u64> {
        match self {
            ChannelVersion::Int(n) => Some(*n),
            ChannelVersion::Str(s) => {
                let digits = s.split('.').next().unwrap_or("");
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                digits.parse().ok()
            }
        }
    }

    /// The next integer version after `current` (`1` when there is none).
    pub fn next_int(current: Option<&ChannelVersion>) -> ChannelVersion {
        ChannelVersion::Int(current.and_then(ChannelVersion::counter).unwrap_or(0) + 1)
    }

    /// The next version in LangGraph's PostgreSQL string form: the counter incremented,
    /// zero-padded to 32 digits, a dot, and a random 16-digit suffix.
    pub fn next_string(current: Option<&ChannelVersion>) -> ChannelVersion {
        let counter = current.and_then(ChannelVersion::counter).unwrap_or(0) + 1;
        let suffix: u64 = rand::rng().random_range(0..10_000_000_000_000_000);
        ChannelVersion::Str(format!("{counter:032}.{suffix:016}"))
    }

    /// The next version in the same form as `current` (integer when there is none).
    ///
    /// ```
    /// use checkpoint_core::ChannelVersion;
    /// let v1 = ChannelVersion::next(None);
    /// let v2 = ChannelVersion::next(Some(&v1));
    /// assert!(v2 > v1);
    /// let s1 = ChannelVersion::next_string(None);
    /// assert!(ChannelVersion::next(Some(&s1)) > s1);
    /// ```
    pub fn next(current: Option<&ChannelVersion>) -> ChannelVersion {
        match current {
            Some(ChannelVersion::Str(_)) => Self::next_string(current),
            _ => Self::next_int(current),
        }
    }

    fn sort_key(&self) -> (bool, u64, u8, &str) {
        let counter = self.counter();
        let (kind, text) = match self {
            ChannelVersion::Int(_) => (0, ""),
            ChannelVersion::Str(s) => (1, s.as_str()),
        };
        (counter.is_none(), counter.unwrap_or(0), kind, text)
    }
}

/// LangGraph's `get_next_version`: the version after `current` in the same form (see
/// [`ChannelVersion::next`]; integers when there is no current version).
///
/// ```
/// use checkpoint_core::{ChannelVersion, next_version};
/// assert_eq!(next_version(None), ChannelVersion::Int(1));
/// assert_eq!(next_version(Some(&ChannelVersion::Int(4))), ChannelVersion::Int(5));
/// ```
pub fn next_version(current: Option<&ChannelVersion>) -> ChannelVersion {
    ChannelVersion::next(current)
}

impl Ord for ChannelVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}

impl PartialOrd for ChannelVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ChannelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelVersion::Int(n) => write!(f, "{n}"),
            ChannelVersion::Str(s) => f.write_str(s),
        }
    }
}

impl From<u64> for ChannelVersion {
    fn from(v: u64) -> Self {
        ChannelVersion::Int(v)
    }
}

impl From<&str> for ChannelVersion {
    fn from(v: &str) -> Self {
        ChannelVersion::Str(v.to_owned())
    }
}

impl From<String> for ChannelVersion {
    fn from(v: String) -> Self {
        ChannelVersion::Str(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn version() -> impl Strategy<Value = ChannelVersion> {
        prop_oneof![
            (0u64..50).prop_map(ChannelVersion::Int),
            (0u64..50, 0u64..1000)
                .prop_map(|(c, s)| ChannelVersion::Str(format!("{c:032}.{s:016}"))),
            (0u64..50, "[0-9a-z.]{0,4}").prop_map(|(c, s)| ChannelVersion::Str(format!("{c}{s}"))),
            "[a-z.]{0,4}".prop_map(ChannelVersion::Str),
        ]
    }

    #[test]
    fn versions_deserialize_from_json_and_msgpack_and_reject_other_shapes() {
        let from_json = |j: &str| serde_json::from_str::<ChannelVersion>(j);
        assert_eq!(from_json("7").unwrap(), ChannelVersion::Int(7));
        assert_eq!(
            from_json("\"00000001.5\"").unwrap(),
            ChannelVersion::Str("00000001.5".into())
        );
        for bad in ["-1", "1.5", "null", "[1]", "{}", "true"] {
            let e = from_json(bad).unwrap_err().to_string();
            assert!(e.contains("channel version"), "{bad}: {e}");
        }
        for v in [
            ChannelVersion::Int(0),
            ChannelVersion::Int(u64::MAX),
            ChannelVersion::Str(String::new()),
            ChannelVersion::Str("00000000000000000000000000000003.0123456789012345".into()),
        ] {
            let packed = rmp_serde::to_vec(&v).unwrap();
            assert_eq!(rmp_serde::from_slice::<ChannelVersion>(&packed).unwrap(), v);
            let named = rmp_serde::to_vec_named(&v).unwrap();
            assert_eq!(rmp_serde::from_slice::<ChannelVersion>(&named).unwrap(), v);
        }
        // A msgpack bin holding UTF-8 is read as a string version, as the derived form did.
        let bin = rmp_serde::to_vec(&serde_bytes_like(b"4.2")).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<ChannelVersion>(&bin).unwrap(),
            ChannelVersion::Str("4.2".into())
        );
        let negative = rmp_serde::to_vec(&-3i64).unwrap();
        assert!(rmp_serde::from_slice::<ChannelVersion>(&negative).is_err());
    }

    /// A value that serializes as msgpack `bin`.
    fn serde_bytes_like(b: &'static [u8]) -> impl serde::Serialize {
        struct Bin(&'static [u8]);
        impl serde::Serialize for Bin {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
        Bin(b)
    }

    proptest! {
        #[test]
        fn order_is_total_and_transitive(a in version(), b in version(), c in version()) {
            prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
            prop_assert_eq!(a.cmp(&b) == Ordering::Equal, a == b);
            if a <= b && b <= c { prop_assert!(a <= c); }
        }

        #[test]
        fn next_is_greater(a in version()) {
            if a.counter().is_some() {
                prop_assert!(ChannelVersion::next(Some(&a)) > a);
            }
        }
    }

    #[test]
    fn padded_strings_order_like_langgraph() {
        let a = ChannelVersion::from(format!("{:032}.{:016}", 9, 999));
        let b = ChannelVersion::from(format!("{:032}.{:016}", 10, 1));
        assert!(a < b);
        assert!(a.to_string() < b.to_string());
        assert_eq!(ChannelVersion::next_int(Some(&b)), ChannelVersion::Int(11));
        let s = ChannelVersion::next_string(Some(&b));
        assert_eq!(s.counter(), Some(11));
        assert_eq!(s.to_string().len(), 49);
    }

    #[test]
    fn serde_keeps_the_form() {
        let v: ChannelVersions = serde_json::from_str(r#"{"a": 3, "b": "0001.5"}"#).unwrap();
        assert_eq!(v["a"], ChannelVersion::Int(3));
        assert_eq!(v["b"], ChannelVersion::Str("0001.5".into()));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"a":3,"b":"0001.5"}"#
        );
    }
}
