//! Byte-level handling of a stored list: splitting it into the exact bytes of each element and
//! splicing a new list together from kept bytes and newly encoded elements.
//!
//! Kept elements are copied byte for byte, so a message the sanitizer does not touch is
//! stored exactly as its writer encoded it, whatever encoder that was (extension types stay
//! opaque, JSON keeps its spacing and escapes).

use std::ops::Range;

use checkpoint_core::{Error, Result};
use rmpv::Value;

/// LangGraph's `EXT_DELTA_SNAPSHOT`: a delta channel's snapshot wraps the channel value.
pub(crate) const EXT_DELTA_SNAPSHOT: i8 = 7;

/// How the list itself is encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Container {
    /// A msgpack array, optionally wrapped in a delta-snapshot extension.
    Msgpack {
        /// Wrapped in `EXT_DELTA_SNAPSHOT`.
        delta: bool,
    },
    /// A JSON array; the text before the first element, between elements and after the last
    /// is kept so that a rewritten list looks like its writer's output.
    Json {
        prefix: String,
        separator: String,
        suffix: String,
    },
}

/// One element of a rewritten list.
#[derive(Clone, Debug)]
pub(crate) enum Piece<'a> {
    /// Bytes of an element of the original list, copied as they are.
    Raw(&'a [u8]),
    /// A new or modified element.
    Value(Value),
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Serialization {
        reason: reason.into(),
        source: None,
    }
}

/// The element ranges and the surrounding text of a JSON array. `None` when the text is not
/// a JSON array.
pub(crate) fn json_array_elements(text: &[u8]) -> Result<Option<(Container, Vec<Range<usize>>)>> {
    // Bounded first: a hostile array must not become millions of slices.
    match checkpoint_core::json::validate(text, &checkpoint_core::DecodeLimits::default()) {
        Err(e @ Error::LimitExceeded { .. }) => return Err(e),
        Err(_) => return Ok(None),
        Ok(()) => {}
    }
    let elements: Vec<&serde_json::value::RawValue> = match serde_json::from_slice(text) {
        Ok(e) => e,
        Err(_) => return Ok(None),
    };
    let base = text.as_ptr() as usize;
    let mut ranges = Vec::with_capacity(elements.len());
    for raw in &elements {
        let s = raw.get();
        let start = (s.as_ptr() as usize)
            .checked_sub(base)
            .filter(|&o| o + s.len() <= text.len())
            .ok_or_else(|| malformed("JSON element outside of its array"))?;
        ranges.push(start..start + s.len());
    }
    let utf8 = |r: Range<usize>| -> Result<String> {
        std::str::from_utf8(&text[r])
            .map(str::to_owned)
            .map_err(|_| malformed("JSON array is not UTF-8"))
    };
    let container = match (ranges.first(), ranges.last()) {
        (Some(first), Some(last)) => Container::Json {
            prefix: utf8(0..first.start)?,
            separator: match ranges.get(1) {
                Some(second) => utf8(first.end..second.start)?,
                None => ",".to_owned(),
            },
            suffix: utf8(last.end..text.len())?,
        },
        _ => Container::Json {
            prefix: "[".to_owned(),
            separator: ",".to_owned(),
            suffix: "]".to_owned(),
        },
    };
    Ok(Some((container, ranges)))
}

/// Encodes a list from its pieces in the container's format.
pub(crate) fn encode_list(container: &Container, pieces: &[Piece<'_>]) -> Result<Vec<u8>> {
    match container {
        Container::Msgpack { delta } => {
            let mut body = Vec::new();
            let n = u32::try_from(pieces.len()).map_err(|_| malformed("list too long"))?;
            rmp::encode::write_array_len(&mut body, n)
                .map_err(|e| Error::serialization("msgpack encoding failed", e))?;
            for piece in pieces {
                match piece {
                    Piece::Raw(bytes) => body.extend_from_slice(bytes),
                    Piece::Value(v) => rmpv::encode::write_value(&mut body, v)
                        .map_err(|e| Error::serialization("msgpack encoding failed", e))?,
                }
            }
            if !*delta {
                return Ok(body);
            }
            let mut out = Vec::with_capacity(body.len() + 6);
            let len = u32::try_from(body.len()).map_err(|_| malformed("list too long"))?;
            rmp::encode::write_ext_meta(&mut out, len, EXT_DELTA_SNAPSHOT)
                .map_err(|e| Error::serialization("msgpack encoding failed", e))?;
            out.extend_from_slice(&body);
            Ok(out)
        }
        Container::Json {
            prefix,
            separator,
            suffix,
        } => {
            let mut out = String::new();
            out.push_str(if pieces.is_empty() { "[" } else { prefix });
            for (i, piece) in pieces.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                match piece {
                    Piece::Raw(bytes) => out.push_str(
                        std::str::from_utf8(bytes).map_err(|_| malformed("JSON is not UTF-8"))?,
                    ),
                    Piece::Value(v) => {
                        let json = to_json(v)?;
                        out.push_str(
                            &serde_json::to_string(&json)
                                .map_err(|e| Error::serialization("JSON encoding failed", e))?,
                        );
                    }
                }
            }
            out.push_str(if pieces.is_empty() { "]" } else { suffix });
            Ok(out.into_bytes())
        }
    }
}

/// Encodes one msgpack value.
pub(crate) fn encode_msgpack(v: &Value) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v)
        .map_err(|e| Error::serialization("msgpack encoding failed", e))?;
    Ok(out)
}

/// A dynamic value as JSON. Fails for what JSON cannot hold (binary, extension types,
/// non-string keys, non-finite floats, invalid UTF-8).
pub(crate) fn to_json(v: &Value) -> Result<serde_json::Value> {
    use serde_json::Value as J;
    Ok(match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => {
            if let Some(u) = i.as_u64() {
                J::from(u)
            } else if let Some(s) = i.as_i64() {
                J::from(s)
            } else {
                return Err(malformed("integer out of range for JSON"));
            }
        }
        Value::F32(f) => float(f64::from(*f))?,
        Value::F64(f) => float(*f)?,
        Value::String(s) => J::String(
            s.as_str()
                .ok_or_else(|| malformed("string is not UTF-8"))?
                .to_owned(),
        ),
        Value::Binary(_) => return Err(malformed("binary data cannot be written as JSON")),
        Value::Ext(..) => return Err(malformed("an extension type cannot be written as JSON")),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect::<Result<_>>()?),
        Value::Map(entries) => {
            let mut map = serde_json::Map::new();
            for (k, x) in entries {
                let key = k
                    .as_str()
                    .ok_or_else(|| malformed("a JSON object key must be a string"))?;
                map.insert(key.to_owned(), to_json(x)?);
            }
            J::Object(map)
        }
    })
}

fn float(f: f64) -> Result<serde_json::Value> {
    serde_json::Number::from_f64(f)
        .map(serde_json::Value::Number)
        .ok_or_else(|| malformed("non-finite float cannot be written as JSON"))
}

/// A JSON value as a dynamic msgpack value.
pub(crate) fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                Value::F64(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::Array(a.iter().map(from_json).collect()),
        J::Object(o) => Value::Map(
            o.iter()
                .map(|(k, x)| (Value::from(k.as_str()), from_json(x)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::msgpack::array_elements;

    #[test]
    fn msgpack_ranges_cover_each_element_exactly() {
        let list = Value::Array(vec![
            Value::from("a"),
            Value::Ext(5, vec![1, 2, 3]),
            Value::Map(vec![(Value::from("k"), Value::Array(vec![Value::Nil; 20]))]),
            Value::from(u64::MAX),
            Value::F64(1.5),
        ]);
        let bytes = encode_msgpack(&list).unwrap();
        let ranges = array_elements(&bytes).unwrap().unwrap();
        let Value::Array(items) = &list else {
            unreachable!()
        };
        assert_eq!(ranges.len(), items.len());
        for (r, item) in ranges.iter().zip(items) {
            assert_eq!(&bytes[r.clone()], encode_msgpack(item).unwrap().as_slice());
        }
        let pieces: Vec<Piece<'_>> = ranges
            .iter()
            .map(|r| Piece::Raw(&bytes[r.clone()]))
            .collect();
        let again = encode_list(&Container::Msgpack { delta: false }, &pieces).unwrap();
        assert_eq!(again, bytes);
    }

    #[test]
    fn truncated_or_hostile_msgpack_is_an_error_not_a_panic() {
        for bytes in [
            vec![0x92, 0xa5, b'a'],
            vec![0x91, 0xdd, 0xff, 0xff, 0xff, 0xff],
            vec![0x91, 0xc1],
            vec![0x91, 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01],
            vec![0xdc, 0xff, 0xff],
        ] {
            assert!(array_elements(&bytes).is_err(), "{bytes:x?}");
        }
        assert!(array_elements(&[0xa1, b'x']).unwrap().is_none());
        assert!(array_elements(&[]).unwrap().is_none());
    }

    #[test]
    fn json_keeps_spacing_of_untouched_elements() {
        let text = br#"[ {"a": 1},  "x" , [1,2] ]"#;
        let (container, ranges) = json_array_elements(text).unwrap().unwrap();
        let pieces: Vec<Piece<'_>> = ranges
            .iter()
            .map(|r| Piece::Raw(&text[r.clone()]))
            .collect();
        // Separators are normalised to the first one; untouched elements are verbatim.
        let out = encode_list(&container, &pieces).unwrap();
        assert_eq!(out, br#"[ {"a": 1},  "x",  [1,2] ]"#);
        let mut pieces = pieces;
        pieces.push(Piece::Value(Value::Map(vec![(
            Value::from("b"),
            Value::Boolean(true),
        )])));
        let out = encode_list(&container, &pieces).unwrap();
        assert_eq!(out, br#"[ {"a": 1},  "x",  [1,2],  {"b":true} ]"#);
        assert!(json_array_elements(b"{\"a\": 1}").unwrap().is_none());
    }

    #[test]
    fn json_conversion_rejects_what_json_cannot_hold() {
        assert!(to_json(&Value::Binary(vec![1])).is_err());
        assert!(to_json(&Value::Ext(1, vec![])).is_err());
        assert!(to_json(&Value::F64(f64::NAN)).is_err());
        assert!(to_json(&Value::Map(vec![(Value::from(1), Value::Nil)])).is_err());
        let j = serde_json::json!({"a": [1, -2, 2.5, "s", null, true]});
        assert_eq!(to_json(&from_json(&j)).unwrap(), j);
    }
}
