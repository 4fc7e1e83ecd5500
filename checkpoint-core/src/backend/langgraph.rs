//! Reading LangGraph's own serialized layouts: the formats Python's savers write where a
//! checkpoint is kept whole (`langgraph-checkpoint-sqlite`'s `checkpoints.checkpoint`,
//! `langgraph-checkpoint-mongodb`'s `checkpoint` field).
//!
//! * [`decode_checkpoint`]: a checkpoint serialized with `serde.dumps_typed`, channel values
//!   included, as a [`Checkpoint`] whose every channel value is a [`TypedValue`] holding
//!   exactly the bytes LangGraph wrote for it (MessagePack extension types included), so a
//!   checkpoint imported into a saver reads back in Python as LangGraph wrote it;
//! * [`typed_json`]: one `dumps_typed` value as JSON, for layouts that serialize each
//!   metadata entry on its own.

use std::collections::BTreeMap;
use std::ops::Range;

use rmpv::Value;

use super::legacy::migrate_pending_sends;
use crate::msgpack::{array_elements, decode_msgpack, value_end};
use crate::{
    Bytes, ChannelVersion, ChannelVersions, Checkpoint, DecodeLimits, Error, Result, TypedValue,
    ValueType,
};

/// A checkpoint LangGraph serialized whole (`type_tag`, `body`: the pair `dumps_typed`
/// returned), stored under checkpoint id `id` (used in errors, and as the id of legacy JSON
/// checkpoints without one).
///
/// `msgpack` checkpoints (every `langgraph-checkpoint` since 3) and legacy `json` ones are
/// read; each channel value keeps its own bytes (JSON text for `json` checkpoints). Before
/// checkpoint format 4, pending sends move into the `__pregel_tasks` channel as LangGraph's
/// loaders move them. Anything else, and every truncated or malformed body, is
/// [`Error::Serialization`], never a panic.
pub fn decode_checkpoint(id: &str, type_tag: Option<&str>, body: &[u8]) -> Result<Checkpoint> {
    match type_tag {
        Some("msgpack") => decode_msgpack_checkpoint(id, body),
        Some("json") => decode_json_checkpoint(id, body),
        other => Err(corrupt(
            id,
            format!("checkpoints serialized as {other:?} cannot be read (only msgpack and json)"),
        )),
    }
}

/// One value LangGraph serialized on its own (`dumps_typed`) as JSON: `null`, `json` and
/// `msgpack` values whose content JSON can hold (maps with string keys, arrays, strings,
/// numbers, booleans, nil). A MessagePack extension type (a Python object such as a
/// datetime), binary data or a pickled value has no exact JSON form: that is
/// [`Error::Serialization`] naming `what`, never a lossy conversion.
pub fn typed_json(what: &str, type_tag: &str, bytes: &[u8]) -> Result<serde_json::Value> {
    let limits = DecodeLimits::default();
    match type_tag {
        "null" => Ok(serde_json::Value::Null),
        "json" => crate::json::decode_json(bytes, &limits),
        "msgpack" => exact_json(what, &decode_msgpack(bytes, &limits)?),
        other => Err(Error::Serialization {
            reason: format!("{what}: a {other:?} value has no JSON form"),
            source: None,
        }),
    }
}

fn exact_json(what: &str, v: &Value) -> Result<serde_json::Value> {
    let inexact = |kind: &str| Error::Serialization {
        reason: format!("{what}: {kind} has no exact JSON form"),
        source: None,
    };
    Ok(match v {
        Value::Nil => serde_json::Value::Null,
        Value::Boolean(b) => serde_json::Value::Bool(*b),
        Value::Integer(i) => i
            .as_i64()
            .map(serde_json::Value::from)
            .or_else(|| i.as_u64().map(serde_json::Value::from))
            .ok_or_else(|| inexact("an integer"))?,
        Value::F32(f) => serde_json::Number::from_f64(f64::from(*f))
            .map(serde_json::Value::Number)
            .ok_or_else(|| inexact("a non-finite float"))?,
        Value::F64(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| inexact("a non-finite float"))?,
        Value::String(s) => serde_json::Value::String(
            s.as_str()
                .ok_or_else(|| inexact("a string that is not UTF-8"))?
                .to_owned(),
        ),
        Value::Array(items) => serde_json::Value::Array(
            items
                .iter()
                .map(|i| exact_json(what, i))
                .collect::<Result<_>>()?,
        ),
        Value::Map(entries) => serde_json::Value::Object(
            entries
                .iter()
                .map(|(k, v)| match k {
                    Value::String(s) if s.as_str().is_some() => Ok((
                        s.as_str().unwrap_or_default().to_owned(),
                        exact_json(what, v)?,
                    )),
                    _ => Err(inexact("a map key that is not a string")),
                })
                .collect::<Result<_>>()?,
        ),
        Value::Binary(_) => return Err(inexact("binary data")),
        Value::Ext(code, _) => {
            return Err(inexact(&format!(
                "MessagePack extension type {code} (a Python object)"
            )));
        }
    })
}

fn corrupt(id: &str, what: impl std::fmt::Display) -> Error {
    Error::Serialization {
        reason: format!("LangGraph checkpoint {id:?}: {what}"),
        source: None,
    }
}

/// The `(key, value range)` entries of the msgpack map at `range` of `bytes`.
fn map_entries(id: &str, bytes: &[u8], range: Range<usize>) -> Result<Vec<(String, Range<usize>)>> {
    let buf = &bytes[..range.end];
    let mut pos = range.start;
    let marker = *buf.get(pos).ok_or_else(|| corrupt(id, "truncated map"))?;
    let be = |at: usize, n: usize| -> Result<usize> {
        let b = buf
            .get(at..at + n)
            .ok_or_else(|| corrupt(id, "truncated map"))?;
        Ok(b.iter().fold(0usize, |acc, &x| (acc << 8) | usize::from(x)))
    };
    let count = match marker {
        0x80..=0x8f => {
            pos += 1;
            usize::from(marker & 0x0f)
        }
        0xde => {
            let n = be(pos + 1, 2)?;
            pos += 3;
            n
        }
        0xdf => {
            let n = be(pos + 1, 4)?;
            pos += 5;
            n
        }
        _ => return Err(corrupt(id, "expected a msgpack map")),
    };
    if count > buf.len().saturating_sub(pos) {
        return Err(corrupt(
            id,
            "a map declares more entries than there are bytes",
        ));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let key_end = value_end(buf, pos)?;
        let key = match decode_msgpack(&buf[pos..key_end], &DecodeLimits::default())? {
            Value::String(s) => s
                .into_str()
                .ok_or_else(|| corrupt(id, "a map key is not UTF-8"))?,
            other => other.to_string(),
        };
        let value_end_at = value_end(buf, key_end)?;
        out.push((key, key_end..value_end_at));
        pos = value_end_at;
    }
    Ok(out)
}

fn version_of(id: &str, v: &Value) -> Result<ChannelVersion> {
    Ok(match v {
        Value::String(s) => ChannelVersion::Str(
            s.as_str()
                .ok_or_else(|| corrupt(id, "a version is not UTF-8"))?
                .to_owned(),
        ),
        Value::Integer(i) => ChannelVersion::Int(
            i.as_u64()
                .ok_or_else(|| corrupt(id, "a negative channel version"))?,
        ),
        // A float version (custom `get_next_version`): integral ones as integers, others
        // as their text.
        Value::F64(f) if f.fract() == 0.0 && *f >= 0.0 && *f < 2f64.powi(63) => {
            ChannelVersion::Int(*f as u64)
        }
        Value::F64(f) => ChannelVersion::Str(f.to_string()),
        Value::F32(f) => ChannelVersion::Str(f.to_string()),
        other => return Err(corrupt(id, format!("channel version {other}"))),
    })
}

fn versions_of(id: &str, v: &Value) -> Result<ChannelVersions> {
    match v {
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| Ok((text_of(id, k)?, version_of(id, v)?)))
            .collect(),
        Value::Nil => Ok(ChannelVersions::new()),
        other => Err(corrupt(id, format!("versions {other}"))),
    }
}

fn text_of(id: &str, v: &Value) -> Result<String> {
    match v {
        Value::String(s) => s
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| corrupt(id, "a string is not UTF-8")),
        other => Ok(other.to_string()),
    }
}

/// A msgpack checkpoint: the fields decoded, each channel value kept as its own bytes.
fn decode_msgpack_checkpoint(id: &str, bytes: &[u8]) -> Result<Checkpoint> {
    let limits = DecodeLimits::default();
    let mut checkpoint = Checkpoint {
        v: 1,
        id: id.to_owned(),
        ts: String::new(),
        channel_values: BTreeMap::new(),
        channel_versions: ChannelVersions::new(),
        versions_seen: BTreeMap::new(),
        updated_channels: None,
    };
    let mut pending_sends = None;
    for (key, range) in map_entries(id, bytes, 0..bytes.len())? {
        let field = || decode_msgpack(&bytes[range.clone()], &limits);
        match key.as_str() {
            "channel_values" => {
                for (channel, value) in map_entries(id, bytes, range.clone())? {
                    checkpoint
                        .channel_values
                        .insert(channel, standalone(&bytes[value]));
                }
            }
            "v" => {
                checkpoint.v = field()?
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| corrupt(id, "field v"))?;
            }
            "id" => checkpoint.id = text_of(id, &field()?)?,
            "ts" => checkpoint.ts = text_of(id, &field()?)?,
            "channel_versions" => checkpoint.channel_versions = versions_of(id, &field()?)?,
            "versions_seen" => {
                if let Value::Map(nodes) = field()? {
                    for (node, versions) in &nodes {
                        checkpoint
                            .versions_seen
                            .insert(text_of(id, node)?, versions_of(id, versions)?);
                    }
                }
            }
            "updated_channels" => {
                checkpoint.updated_channels = match field()? {
                    Value::Array(items) => Some(
                        items
                            .iter()
                            .map(|c| text_of(id, c))
                            .collect::<Result<_>>()?,
                    ),
                    _ => None,
                };
            }
            "pending_sends" => pending_sends = Some(range),
            // Any future field: not part of the model.
            _ => {}
        }
    }
    if checkpoint.v < 4
        && let Some(range) = pending_sends
    {
        let sends = array_elements(&bytes[range.clone()])?.unwrap_or_default();
        let sends: Vec<TypedValue> = sends
            .into_iter()
            .map(|r| {
                TypedValue::new(
                    ValueType::Msgpack,
                    Bytes::copy_from_slice(&bytes[range.start + r.start..range.start + r.end]),
                )
            })
            .collect();
        migrate_pending_sends(&mut checkpoint, sends.iter());
    }
    Ok(checkpoint)
}

/// A channel value cut out of a checkpoint's MessagePack map, as the `TypedValue` LangGraph's
/// serializer gives the value on its own (`dumps_typed`): `None` is `null` without bytes,
/// `bytes` are `bytes` with the raw payload, anything else is the MessagePack as written.
fn standalone(bytes: &[u8]) -> TypedValue {
    if bytes == [0xc0] {
        TypedValue::new(ValueType::Null, Bytes::new())
    } else if let Some(payload) = decode_bin(bytes) {
        TypedValue::new(ValueType::Bytes, Bytes::copy_from_slice(payload))
    } else {
        TypedValue::new(ValueType::Msgpack, Bytes::copy_from_slice(bytes))
    }
}

/// The payload of a MessagePack `bin` value that is all of `bytes`.
fn decode_bin(bytes: &[u8]) -> Option<&[u8]> {
    let (&marker, rest) = bytes.split_first()?;
    let width = match marker {
        0xc4 => 1,
        0xc5 => 2,
        0xc6 => 4,
        _ => return None,
    };
    let (len, payload) = rest.split_at_checked(width)?;
    let len = len
        .iter()
        .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
    (payload.len() == len).then_some(payload)
}

/// A legacy JSON checkpoint (`langgraph-checkpoint` before 3): channel values kept as their
/// JSON text.
fn decode_json_checkpoint(id: &str, bytes: &[u8]) -> Result<Checkpoint> {
    #[derive(serde::Deserialize)]
    struct Legacy<'a> {
        #[serde(default = "one")]
        v: u32,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        ts: String,
        #[serde(default, borrow)]
        channel_values: BTreeMap<String, &'a serde_json::value::RawValue>,
        #[serde(default)]
        channel_versions: ChannelVersions,
        #[serde(default)]
        versions_seen: BTreeMap<String, ChannelVersions>,
        #[serde(default)]
        updated_channels: Option<Vec<String>>,
        #[serde(default, borrow)]
        pending_sends: Vec<&'a serde_json::value::RawValue>,
    }
    fn one() -> u32 {
        1
    }
    let legacy: Legacy<'_> = serde_json::from_slice(bytes)
        .map_err(|e| Error::serialization(format!("LangGraph checkpoint {id:?}"), e))?;
    let json = |raw: &serde_json::value::RawValue| {
        TypedValue::new(
            ValueType::Json,
            Bytes::copy_from_slice(raw.get().as_bytes()),
        )
    };
    let mut checkpoint = Checkpoint {
        v: legacy.v,
        id: legacy.id.unwrap_or_else(|| id.to_owned()),
        ts: legacy.ts,
        channel_values: legacy
            .channel_values
            .into_iter()
            .map(|(c, raw)| (c, json(raw)))
            .collect(),
        channel_versions: legacy.channel_versions,
        versions_seen: legacy.versions_seen,
        updated_channels: legacy.updated_channels,
    };
    if checkpoint.v < 4 {
        let sends: Vec<TypedValue> = legacy.pending_sends.into_iter().map(json).collect();
        migrate_pending_sends(&mut checkpoint, sends.iter());
    }
    Ok(checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::TASKS;

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn channel_values_keep_their_exact_bytes_extensions_included() {
        let message = Value::Ext(
            5,
            encode(&Value::Array(vec![
                Value::from("langchain_core.messages.ai"),
                Value::from("AIMessage"),
                Value::Map(vec![(Value::from("content"), Value::from("hi"))]),
            ])),
        );
        let checkpoint = Value::Map(vec![
            (Value::from("v"), Value::from(4)),
            (
                Value::from("ts"),
                Value::from("2026-11-23T20:04:04.284026+00:00"),
            ),
            (
                Value::from("id"),
                Value::from("1f1e7790-8612-698c-bfff-8884add5aa23"),
            ),
            (
                Value::from("channel_values"),
                Value::Map(vec![
                    (Value::from("messages"), Value::Array(vec![message.clone()])),
                    (Value::from("counter"), Value::from(3)),
                ]),
            ),
            (
                Value::from("channel_versions"),
                Value::Map(vec![
                    (
                        Value::from("messages"),
                        Value::from("00000000000000000000000000000002.0.5"),
                    ),
                    (Value::from("counter"), Value::from(7)),
                ]),
            ),
            (
                Value::from("versions_seen"),
                Value::Map(vec![(Value::from("__input__"), Value::Map(vec![]))]),
            ),
            (
                Value::from("updated_channels"),
                Value::Array(vec![Value::from("messages")]),
            ),
        ]);
        let bytes = encode(&checkpoint);
        let cp = decode_msgpack_checkpoint("x", &bytes).unwrap();
        assert_eq!(cp.v, 4);
        assert_eq!(cp.id, "1f1e7790-8612-698c-bfff-8884add5aa23");
        assert_eq!(
            cp.channel_values["messages"].bytes[..],
            encode(&Value::Array(vec![message]))[..]
        );
        assert_eq!(cp.channel_values["counter"].bytes[..], [3]);
        assert_eq!(cp.channel_versions["counter"], ChannelVersion::Int(7));
        assert_eq!(
            cp.channel_versions["messages"],
            ChannelVersion::Str("00000000000000000000000000000002.0.5".into())
        );
        assert!(cp.versions_seen["__input__"].is_empty());
        assert_eq!(
            cp.updated_channels.as_deref(),
            Some(&["messages".to_owned()][..])
        );
        // Truncations are typed errors, never panics.
        for cut in 0..bytes.len() {
            assert!(decode_msgpack_checkpoint("x", &bytes[..cut]).is_err());
        }
    }

    #[test]
    fn values_read_as_langgraph_serializes_them_alone() {
        assert_eq!(
            standalone(&[0xc0]),
            TypedValue::new(ValueType::Null, Bytes::new())
        );
        assert_eq!(
            standalone(&[0xc4, 2, 0xfe, 0xff]),
            TypedValue::new(ValueType::Bytes, Bytes::from_static(&[0xfe, 0xff]))
        );
        let long = encode(&Value::Binary(vec![7; 300]));
        assert_eq!(standalone(&long).type_tag, ValueType::Bytes);
        assert_eq!(standalone(&long).bytes.len(), 300);
        // Not a whole bin value: kept as MessagePack.
        assert_eq!(standalone(&[0xc4, 5, 1]).type_tag, ValueType::Msgpack);
        assert_eq!(
            standalone(&[0x03]),
            TypedValue::new(ValueType::Msgpack, Bytes::from_static(&[3]))
        );
    }

    #[test]
    fn pending_sends_of_old_checkpoints_move_into_the_tasks_channel() {
        let send = |node: &str| {
            Value::Ext(
                2,
                encode(&Value::Array(vec![
                    Value::from("langgraph.types"),
                    Value::from("Send"),
                    Value::Map(vec![(Value::from("node"), Value::from(node))]),
                ])),
            )
        };
        let checkpoint = |v: i64, sends: Vec<Value>| {
            encode(&Value::Map(vec![
                (Value::from("v"), Value::from(v)),
                (Value::from("id"), Value::from("c")),
                (
                    Value::from("channel_values"),
                    Value::Map(vec![(Value::from("x"), Value::from(1))]),
                ),
                (
                    Value::from("channel_versions"),
                    Value::Map(vec![
                        (
                            Value::from("x"),
                            Value::from("00000000000000000000000000000002.0.5"),
                        ),
                        (
                            Value::from("y"),
                            Value::from("00000000000000000000000000000007.0.1"),
                        ),
                    ]),
                ),
                (Value::from("pending_sends"), Value::Array(sends)),
            ]))
        };
        let cp =
            decode_msgpack_checkpoint("c", &checkpoint(3, vec![send("a"), send("b")])).unwrap();
        assert_eq!(
            cp.channel_values[TASKS],
            TypedValue::new(
                ValueType::Msgpack,
                Bytes::from(encode(&Value::Array(vec![send("a"), send("b")])))
            )
        );
        assert_eq!(
            cp.channel_versions[TASKS],
            ChannelVersion::Str("00000000000000000000000000000007.0.1".into())
        );
        // No sends, or the current format: nothing added.
        let cp = decode_msgpack_checkpoint("c", &checkpoint(3, vec![])).unwrap();
        assert!(!cp.channel_values.contains_key(TASKS));
        let cp = decode_msgpack_checkpoint("c", &checkpoint(4, vec![send("a")])).unwrap();
        assert!(!cp.channel_values.contains_key(TASKS));

        // Legacy JSON checkpoints: the sends' JSON text, as one array.
        let json = br#"{"v": 1, "id": "j", "channel_values": {"x": {"a": [1, 2]}},
            "channel_versions": {"x": 3}, "pending_sends": [{"node": "a"}, {"node": "b"}]}"#;
        let cp = decode_json_checkpoint("j", json).unwrap();
        assert_eq!(cp.channel_values["x"].bytes.as_ref(), br#"{"a": [1, 2]}"#);
        assert_eq!(
            cp.channel_values[TASKS],
            TypedValue::new(
                ValueType::Json,
                Bytes::from_static(br#"[{"node": "a"},{"node": "b"}]"#)
            )
        );
        assert_eq!(cp.channel_versions[TASKS], ChannelVersion::Int(3));
    }
}
