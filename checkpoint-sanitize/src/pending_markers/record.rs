//! The marker and resolution records, stored as msgpack maps (readable by any LangGraph
//! serializer: plain maps, strings, binary).

use checkpoint_core::{DecodeLimits, Result, TypedValue, ValueType, now_iso8601};
use rmpv::Value;

use crate::messages::ToolCall;
use crate::messages::raw::{encode_msgpack, from_json, to_json};

/// The pending-write channel of in-flight tool-call markers.
pub const MARKER_CHANNEL: &str = "__checkpoint_sanitize_tool_calls__";
/// The pending-write channel of tool-call resolutions.
pub const RESOLUTION_CHANNEL: &str = "__checkpoint_sanitize_resolution__";

/// Task id prefix of marker writes (followed by the first call id of the message).
pub(crate) const MARKER_TASK_PREFIX: &str = "checkpoint-sanitize:tool-calls:";
/// Task id prefix of resolution writes (followed by `<kind>:<call id>`).
pub(crate) const RESOLUTION_TASK_PREFIX: &str = "checkpoint-sanitize:resolution:";

/// Whether `channel` is one of the channels [`PendingMarkers`](super::PendingMarkers) writes.
pub fn is_marker_channel(channel: &str) -> bool {
    channel == MARKER_CHANNEL || channel == RESOLUTION_CHANNEL
}

/// An AI message whose calls are in flight.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Marker {
    /// The checkpoint whose list holds the message (possibly one that was not stored).
    pub(crate) checkpoint_id: String,
    /// The message's id.
    pub(crate) message_id: Option<String>,
    /// The message's element bytes.
    pub(crate) message: Vec<u8>,
    /// Whether `message` is msgpack (else JSON text).
    pub(crate) msgpack: bool,
    /// The calls in flight.
    pub(crate) calls: Vec<ToolCall>,
    /// When it was recorded.
    pub(crate) recorded_at: String,
}

fn s(v: &str) -> Value {
    Value::from(v)
}

fn get<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn get_string(map: &[(Value, Value)], key: &str) -> Option<String> {
    get(map, key).and_then(Value::as_str).map(str::to_owned)
}

impl Marker {
    pub(crate) fn encode(&self) -> Result<TypedValue> {
        let calls = self
            .calls
            .iter()
            .map(|c| {
                Value::Map(vec![
                    (s("id"), c.id.as_deref().map_or(Value::Nil, s)),
                    (s("name"), c.name.as_deref().map_or(Value::Nil, s)),
                    (s("args"), c.args.as_ref().map_or(Value::Nil, from_json)),
                ])
            })
            .collect();
        let map = Value::Map(vec![
            (s("v"), Value::from(1)),
            (s("checkpoint_id"), s(&self.checkpoint_id)),
            (
                s("message_id"),
                self.message_id.as_deref().map_or(Value::Nil, s),
            ),
            (
                s("format"),
                s(if self.msgpack { "msgpack" } else { "json" }),
            ),
            (s("message"), Value::Binary(self.message.clone())),
            (s("calls"), Value::Array(calls)),
            (s("recorded_at"), s(&self.recorded_at)),
        ]);
        Ok(TypedValue::new(ValueType::Msgpack, encode_msgpack(&map)?))
    }

    pub(crate) fn decode(value: &TypedValue) -> Option<Self> {
        let Value::Map(map) = value.to_dynamic_with(&DecodeLimits::default()).ok()? else {
            return None;
        };
        let Value::Array(calls) = get(&map, "calls")? else {
            return None;
        };
        let calls = calls
            .iter()
            .filter_map(|c| match c {
                Value::Map(c) => Some(ToolCall {
                    id: get_string(c, "id"),
                    name: get_string(c, "name"),
                    args: get(c, "args")
                        .filter(|a| !a.is_nil())
                        .and_then(|a| to_json(a).ok()),
                }),
                _ => None,
            })
            .collect();
        let message = match get(&map, "message")? {
            Value::Binary(b) => b.clone(),
            _ => return None,
        };
        Some(Self {
            checkpoint_id: get_string(&map, "checkpoint_id")?,
            message_id: get_string(&map, "message_id"),
            message,
            msgpack: get_string(&map, "format").as_deref() == Some("msgpack"),
            calls,
            recorded_at: get_string(&map, "recorded_at").unwrap_or_default(),
        })
    }
}

/// How a call was resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResolutionKind {
    /// A result was written (a replay, or one given by a human).
    Result,
    /// The call was discarded with a placeholder result.
    Discarded,
    /// The call waits for a human.
    AwaitingHuman,
}

impl ResolutionKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ResolutionKind::Result => "result",
            ResolutionKind::Discarded => "discarded",
            ResolutionKind::AwaitingHuman => "awaiting_human",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "result" => ResolutionKind::Result,
            "discarded" => ResolutionKind::Discarded,
            "awaiting_human" => ResolutionKind::AwaitingHuman,
            _ => return None,
        })
    }
}

/// A recorded resolution of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolutionRecord {
    pub(crate) call_id: String,
    pub(crate) kind: ResolutionKind,
    /// The checkpoint holding the result, when one was written.
    pub(crate) checkpoint_id: Option<String>,
}

impl ResolutionRecord {
    pub(crate) fn encode(&self) -> Result<TypedValue> {
        let map = Value::Map(vec![
            (s("v"), Value::from(1)),
            (s("call_id"), s(&self.call_id)),
            (s("resolution"), s(self.kind.as_str())),
            (
                s("checkpoint_id"),
                self.checkpoint_id.as_deref().map_or(Value::Nil, s),
            ),
            (s("recorded_at"), s(&now_iso8601())),
        ]);
        Ok(TypedValue::new(ValueType::Msgpack, encode_msgpack(&map)?))
    }

    pub(crate) fn decode(value: &TypedValue) -> Option<Self> {
        let Value::Map(map) = value.to_dynamic_with(&DecodeLimits::default()).ok()? else {
            return None;
        };
        Some(Self {
            call_id: get_string(&map, "call_id")?,
            kind: ResolutionKind::parse(get(&map, "resolution")?.as_str()?)?,
            checkpoint_id: get_string(&map, "checkpoint_id"),
        })
    }

    pub(crate) fn task_id(&self) -> String {
        format!(
            "{RESOLUTION_TASK_PREFIX}{}:{}",
            self.kind.as_str(),
            self.call_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip() {
        let m = Marker {
            checkpoint_id: "c1".into(),
            message_id: Some("ai-1".into()),
            message: vec![0x91, 0xc0],
            msgpack: true,
            calls: vec![ToolCall {
                id: Some("call_1".into()),
                name: Some("search".into()),
                args: Some(serde_json::json!({"q": "x", "n": [1, 2]})),
            }],
            recorded_at: "2026-01-01T00:00:00+00:00".into(),
        };
        assert_eq!(Marker::decode(&m.encode().unwrap()), Some(m));
        let r = ResolutionRecord {
            call_id: "call_1".into(),
            kind: ResolutionKind::AwaitingHuman,
            checkpoint_id: None,
        };
        assert_eq!(ResolutionRecord::decode(&r.encode().unwrap()), Some(r));
        assert_eq!(Marker::decode(&TypedValue::msgpack(&"junk").unwrap()), None);
        assert_eq!(
            ResolutionRecord::decode(&TypedValue::new(ValueType::Msgpack, vec![0xc1])),
            None
        );
    }
}
