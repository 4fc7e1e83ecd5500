//! Values: a type tag plus bytes, and the typed serializer that makes and reads them.
//!
//! A saver never interprets channel values or pending-write values: it stores the
//! [`TypedValue`] it is given and returns it byte for byte. Turning Rust values into
//! `TypedValue`s and back is the job of the [`Serializer`] (msgpack through `rmp-serde`, JSON
//! through `serde_json`), and inspecting a value of unknown shape is the job of
//! [`TypedValue::to_dynamic`], a closed decoder that never instantiates anything, keeps unknown
//! msgpack extension types as opaque data and enforces [`DecodeLimits`].

pub mod json;
pub mod msgpack;

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

pub use json::decode_json;
pub use msgpack::decode_msgpack;

/// The type tag of a stored value, with LangGraph's names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueType {
    /// `"null"`: no payload.
    Null,
    /// `"msgpack"`: MessagePack, maps with string keys for structs.
    Msgpack,
    /// `"json"`: UTF-8 JSON.
    Json,
    /// `"bytes"`: raw bytes.
    Bytes,
    /// `"bytearray"`: raw bytes (Python `bytearray`).
    Bytearray,
    /// Any other tag written by a foreign saver (e.g. `"pickle"`). Stored and returned
    /// unchanged; never decoded.
    Other(String),
}

impl ValueType {
    /// The tag string.
    pub fn as_str(&self) -> &str {
        match self {
            ValueType::Null => "null",
            ValueType::Msgpack => "msgpack",
            ValueType::Json => "json",
            ValueType::Bytes => "bytes",
            ValueType::Bytearray => "bytearray",
            ValueType::Other(s) => s,
        }
    }
}

impl FromStr for ValueType {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Ok(match s {
            "null" => ValueType::Null,
            "msgpack" => ValueType::Msgpack,
            "json" => ValueType::Json,
            "bytes" => ValueType::Bytes,
            "bytearray" => ValueType::Bytearray,
            other => ValueType::Other(other.to_owned()),
        })
    }
}

impl From<&str> for ValueType {
    fn from(s: &str) -> Self {
        match s.parse() {
            Ok(t) => t,
            Err(never) => match never {},
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ValueType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ValueType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(ValueType::from(s.as_str()))
    }
}

/// A serialized value: a [`ValueType`] tag and the encoded bytes.
///
/// Cloning is cheap (the bytes are reference counted).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TypedValue {
    /// How `bytes` are encoded.
    pub type_tag: ValueType,
    /// The encoded payload.
    pub bytes: Bytes,
}

impl fmt::Debug for TypedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 32;
        let head = &self.bytes[..self.bytes.len().min(SHOWN)];
        write!(
            f,
            "TypedValue({}, {} bytes: {:02x?}",
            self.type_tag,
            self.bytes.len(),
            head
        )?;
        if self.bytes.len() > SHOWN {
            f.write_str("…")?;
        }
        f.write_str(")")
    }
}

impl TypedValue {
    /// A value with the given tag and bytes.
    pub fn new(type_tag: ValueType, bytes: impl Into<Bytes>) -> Self {
        Self {
            type_tag,
            bytes: bytes.into(),
        }
    }

    /// The null value.
    pub fn null() -> Self {
        Self::new(ValueType::Null, Bytes::new())
    }

    /// Raw bytes.
    pub fn from_bytes(bytes: impl Into<Bytes>) -> Self {
        Self::new(ValueType::Bytes, bytes)
    }

    /// `value` encoded as msgpack (structs as maps with field names, as LangGraph writes them).
    pub fn msgpack<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        Serializer::msgpack().encode(value)
    }

    /// `value` encoded as JSON.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        Serializer::json().encode(value)
    }

    /// Decodes into `T` with the default [`DecodeLimits`].
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        Serializer::default().decode(self)
    }

    /// Decodes into a dynamic msgpack value with the default [`DecodeLimits`]: data only,
    /// unknown extension types kept as [`rmpv::Value::Ext`].
    pub fn to_dynamic(&self) -> Result<rmpv::Value> {
        self.to_dynamic_with(&DecodeLimits::default())
    }

    /// Decodes into a dynamic msgpack value under `limits`.
    pub fn to_dynamic_with(&self, limits: &DecodeLimits) -> Result<rmpv::Value> {
        limits.check_size(self.bytes.len())?;
        match &self.type_tag {
            ValueType::Null => Ok(rmpv::Value::Nil),
            ValueType::Bytes | ValueType::Bytearray => Ok(rmpv::Value::Binary(self.bytes.to_vec())),
            ValueType::Msgpack => decode_msgpack(&self.bytes, limits),
            ValueType::Json => json_to_dynamic(decode_json(&self.bytes, limits)?, limits, 0),
            ValueType::Other(tag) => Err(Error::Serialization {
                reason: format!("refusing to decode a value of type {tag:?}"),
                source: None,
            }),
        }
    }

    /// Length of the payload in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

fn json_to_dynamic(
    v: serde_json::Value,
    limits: &DecodeLimits,
    depth: usize,
) -> Result<rmpv::Value> {
    use serde_json::Value as J;
    if depth > limits.max_depth {
        return Err(Error::LimitExceeded {
            limit: "depth",
            actual: depth as u64,
            max: limits.max_depth as u64,
        });
    }
    Ok(match v {
        J::Null => rmpv::Value::Nil,
        J::Bool(b) => rmpv::Value::Boolean(b),
        J::Number(n) => {
            if let Some(u) = n.as_u64() {
                rmpv::Value::from(u)
            } else if let Some(i) = n.as_i64() {
                rmpv::Value::from(i)
            } else {
                rmpv::Value::F64(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => rmpv::Value::String(s.into()),
        J::Array(a) => rmpv::Value::Array(
            a.into_iter()
                .map(|x| json_to_dynamic(x, limits, depth + 1))
                .collect::<Result<_>>()?,
        ),
        J::Object(o) => rmpv::Value::Map(
            o.into_iter()
                .map(|(k, x)| {
                    Ok((
                        rmpv::Value::String(k.into()),
                        json_to_dynamic(x, limits, depth + 1)?,
                    ))
                })
                .collect::<Result<_>>()?,
        ),
    })
}

/// Bounds applied when decoding a value, so that a hostile blob ends in a typed error with
/// bounded memory instead of a panic, a stack overflow or an out-of-memory abort.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeLimits {
    /// Largest payload accepted, in bytes (default 64 MiB).
    pub max_bytes: usize,
    /// Deepest nesting of arrays/maps accepted (default 128).
    pub max_depth: usize,
    /// Most values (scalars, arrays, maps, map keys) in one payload (default 16 Mi).
    pub max_elements: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_bytes: 64 << 20,
            max_depth: 128,
            max_elements: 16 << 20,
        }
    }
}

impl DecodeLimits {
    /// Sets `max_bytes`.
    pub fn with_max_bytes(mut self, n: usize) -> Self {
        self.max_bytes = n;
        self
    }

    /// Sets `max_depth`.
    pub fn with_max_depth(mut self, n: usize) -> Self {
        self.max_depth = n;
        self
    }

    /// Sets `max_elements`.
    pub fn with_max_elements(mut self, n: usize) -> Self {
        self.max_elements = n;
        self
    }

    fn check_size(&self, len: usize) -> Result<()> {
        if len > self.max_bytes {
            return Err(Error::LimitExceeded {
                limit: "bytes",
                actual: len as u64,
                max: self.max_bytes as u64,
            });
        }
        Ok(())
    }
}

/// Encoding used by [`Serializer::encode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// MessagePack via `rmp-serde` (the default, as in LangGraph).
    #[default]
    Msgpack,
    /// JSON via `serde_json`.
    Json,
}

/// The typed serializer: encodes Rust values to [`TypedValue`]s and decodes them back.
///
/// Decoding dispatches on the value's tag (not on the configured format), so one serializer
/// reads values written in either format. Decoding is closed: only the requested Rust type is
/// produced, and [`DecodeLimits`] apply.
///
/// ```
/// use checkpoint_core::{Serializer, TypedValue};
/// let s = Serializer::default();
/// let v = s.encode(&vec!["a", "b"])?;
/// assert_eq!(v.type_tag.as_str(), "msgpack");
/// let back: Vec<String> = s.decode(&v)?;
/// assert_eq!(back, ["a", "b"]);
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Serializer {
    format: Format,
    limits: DecodeLimits,
}

impl Serializer {
    /// A msgpack serializer with default limits.
    pub fn msgpack() -> Self {
        Self::default()
    }

    /// A JSON serializer with default limits.
    pub fn json() -> Self {
        Self {
            format: Format::Json,
            limits: DecodeLimits::default(),
        }
    }

    /// Replaces the decode limits.
    pub fn with_limits(mut self, limits: DecodeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The decode limits.
    pub fn limits(&self) -> &DecodeLimits {
        &self.limits
    }

    /// Encodes `value` in the configured format.
    pub fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<TypedValue> {
        match self.format {
            Format::Msgpack => rmp_serde::to_vec_named(value)
                .map(|b| TypedValue::new(ValueType::Msgpack, b))
                .map_err(|e| Error::serialization("msgpack encoding failed", e)),
            Format::Json => serde_json::to_vec(value)
                .map(|b| TypedValue::new(ValueType::Json, b))
                .map_err(|e| Error::serialization("JSON encoding failed", e)),
        }
    }

    /// Decodes `value` into `T`, according to its tag.
    pub fn decode<T: DeserializeOwned>(&self, value: &TypedValue) -> Result<T> {
        self.limits.check_size(value.bytes.len())?;
        match &value.type_tag {
            ValueType::Msgpack => {
                // Validate structure, depth and element counts with the bounded decoder first:
                // it never allocates more than the input justifies.
                msgpack::validate(&value.bytes, &self.limits)?;
                rmp_serde::from_slice(&value.bytes)
                    .map_err(|e| Error::serialization("msgpack decoding failed", e))
            }
            ValueType::Json => {
                // The same bounds as msgpack, checked before anything is allocated.
                json::validate(&value.bytes, &self.limits)?;
                serde_json::from_slice(&value.bytes)
                    .map_err(|e| Error::serialization("JSON decoding failed", e))
            }
            ValueType::Null => rmp_serde::from_slice(&[0xc0])
                .map_err(|e| Error::serialization("null does not decode into this type", e)),
            ValueType::Bytes | ValueType::Bytearray => {
                let dynamic = rmpv::Value::Binary(value.bytes.to_vec());
                rmpv::ext::from_value(dynamic)
                    .map_err(|e| Error::serialization("bytes do not decode into this type", e))
            }
            ValueType::Other(tag) => Err(Error::Serialization {
                reason: format!("refusing to decode a value of type {tag:?}"),
                source: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Msg {
        role: String,
        content: String,
        n: Option<i64>,
    }

    #[test]
    fn msgpack_and_json_roundtrip() {
        let m = Msg {
            role: "ai".into(),
            content: "héllo ✓".into(),
            n: Some(-3),
        };
        for s in [Serializer::msgpack(), Serializer::json()] {
            let v = s.encode(&m).unwrap();
            assert_eq!(s.decode::<Msg>(&v).unwrap(), m);
            // Either serializer reads either format.
            assert_eq!(Serializer::default().decode::<Msg>(&v).unwrap(), m);
        }
    }

    #[test]
    fn dynamic_from_json_and_msgpack_agree() {
        let j = TypedValue::json(&serde_json::json!({"a": [1, "x", null, true]})).unwrap();
        let m = TypedValue::msgpack(&serde_json::json!({"a": [1, "x", null, true]})).unwrap();
        assert_eq!(j.to_dynamic().unwrap(), m.to_dynamic().unwrap());
    }

    #[test]
    fn bytes_and_null_decode() {
        let b = TypedValue::from_bytes(vec![0u8, 255, 7]);
        assert_eq!(
            b.to_dynamic().unwrap(),
            rmpv::Value::Binary(vec![0, 255, 7])
        );
        let n = TypedValue::null();
        assert_eq!(n.decode::<Option<String>>().unwrap(), None);
        assert_eq!(n.to_dynamic().unwrap(), rmpv::Value::Nil);
    }

    #[test]
    fn foreign_tags_are_kept_but_never_decoded() {
        let p = TypedValue::new(ValueType::from("pickle"), vec![0x80, 0x04]);
        assert_eq!(p.type_tag, ValueType::Other("pickle".into()));
        assert!(matches!(p.to_dynamic(), Err(Error::Serialization { .. })));
        assert!(matches!(
            p.decode::<String>(),
            Err(Error::Serialization { .. })
        ));
    }

    #[test]
    fn size_limit_is_enforced_before_decoding() {
        let v = TypedValue::msgpack(&"x".repeat(1000)).unwrap();
        let s = Serializer::default().with_limits(DecodeLimits::default().with_max_bytes(100));
        assert!(matches!(
            s.decode::<String>(&v),
            Err(Error::LimitExceeded { limit: "bytes", .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn typed_decode_of_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            for tag in [ValueType::Msgpack, ValueType::Json, ValueType::Bytes, ValueType::Null] {
                let v = TypedValue::new(tag, bytes.clone());
                let _ = v.decode::<serde_json::Value>();
                let _ = v.decode::<Vec<Msg>>();
                let _ = v.decode::<std::collections::BTreeMap<String, Option<f64>>>();
                let _ = v.to_dynamic();
            }
        }
    }

    #[test]
    fn hostile_msgpack_through_the_typed_path_is_a_typed_error() {
        // A map32 declaring 4 Gi entries, a str32 declaring 4 GiB, deep nesting.
        for bytes in [
            vec![0xdf, 0xff, 0xff, 0xff, 0xff],
            vec![0xdb, 0xff, 0xff, 0xff, 0xff],
            vec![0x91; 100_000],
        ] {
            let v = TypedValue::new(ValueType::Msgpack, bytes);
            assert!(v.decode::<serde_json::Value>().is_err());
        }
    }

    #[test]
    fn json_honours_every_limit_like_msgpack() {
        // Regression: JSON values ignored max_elements (a 34 MB array decoded under
        // max_elements = 1000) while the same data as msgpack was refused.
        let data: Vec<u32> = (0..2000).collect();
        let limits = DecodeLimits::default().with_max_elements(1000);
        let s = Serializer::default().with_limits(limits.clone());
        for v in [
            TypedValue::json(&data).unwrap(),
            TypedValue::msgpack(&data).unwrap(),
        ] {
            assert!(
                matches!(
                    v.to_dynamic_with(&limits),
                    Err(Error::LimitExceeded {
                        limit: "elements",
                        ..
                    })
                ),
                "{:?}",
                v.type_tag
            );
            assert!(
                matches!(
                    s.decode::<Vec<u32>>(&v),
                    Err(Error::LimitExceeded {
                        limit: "elements",
                        ..
                    })
                ),
                "{:?}",
                v.type_tag
            );
        }
        // Within the limits both decode, to the same dynamic value.
        let small: Vec<u32> = (0..999).collect();
        let (j, m) = (
            TypedValue::json(&small).unwrap(),
            TypedValue::msgpack(&small).unwrap(),
        );
        assert_eq!(
            j.to_dynamic_with(&limits).unwrap(),
            m.to_dynamic_with(&limits).unwrap()
        );
        assert_eq!(s.decode::<Vec<u32>>(&j).unwrap(), small);
        // Nesting: both refuse the same depth.
        let nested = serde_json::json!([[[[1]]]]);
        let shallow = DecodeLimits::default().with_max_depth(3);
        for v in [
            TypedValue::json(&nested).unwrap(),
            TypedValue::msgpack(&nested).unwrap(),
        ] {
            assert!(matches!(
                v.to_dynamic_with(&shallow),
                Err(Error::LimitExceeded { limit: "depth", .. })
            ));
        }
    }

    #[test]
    fn a_json_value_over_the_default_element_limit_is_refused_before_decoding() {
        // 16 Mi + 1 zeros: 32 MiB of JSON, under the default 64 MiB size limit.
        let n = (16 << 20) + 1;
        let mut text = Vec::with_capacity(2 * n + 1);
        text.push(b'[');
        for i in 0..n {
            if i > 0 {
                text.push(b',');
            }
            text.push(b'0');
        }
        text.push(b']');
        let v = TypedValue::new(ValueType::Json, text);
        assert!(matches!(
            v.to_dynamic(),
            Err(Error::LimitExceeded {
                limit: "elements",
                ..
            })
        ));
        assert!(matches!(
            v.decode::<serde_json::Value>(),
            Err(Error::LimitExceeded {
                limit: "elements",
                ..
            })
        ));
    }

    #[test]
    fn deep_json_is_a_typed_error() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let v = TypedValue::new(ValueType::Json, deep.into_bytes());
        assert!(v.to_dynamic().is_err());
        assert!(v.decode::<serde_json::Value>().is_err());
    }
}
