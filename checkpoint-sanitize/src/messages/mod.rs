//! Understanding the message lists agents store in their checkpoints, as data only.
//!
//! A [`MessageList`] is decoded from a channel value ([`TypedValue`]) with the closed, bounded
//! decoder of `checkpoint-core` ([`TypedValue::to_dynamic_with`]): nothing is instantiated or
//! executed, extension types are read as data, limits apply. Each element is recognized as a
//! [`Message`] in one of these [`MessageFormat`]s:
//!
//! | format | what writes it | shape |
//! |---|---|---|
//! | [`LangChainMsgpack`](MessageFormat::LangChainMsgpack) | LangGraph's `JsonPlusSerializer` (Python) | msgpack ext 0–5 with payload `[module, class, kwargs, method?]` (pydantic v2 messages: ext 5) |
//! | [`LangChainLc`](MessageFormat::LangChainLc) | `langchain_core.load.dumpd`, LangGraph's JSON serializer, LangGraph.js | `{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}` |
//! | [`LangChainDict`](MessageFormat::LangChainDict) | `BaseMessage.model_dump()` | `{"type": "ai", "content": ..., "tool_calls": [...]}` |
//! | [`LangChainMessageToDict`](MessageFormat::LangChainMessageToDict) | `messages_to_dict` | `{"type": "ai", "data": {...}}` |
//! | [`OpenAi`](MessageFormat::OpenAi) | OpenAI chat completions | `{"role": "assistant", "tool_calls": [{"id", "type": "function", "function": {...}}]}`, `{"role": "tool", "tool_call_id"}` |
//! | [`Anthropic`](MessageFormat::Anthropic) | Anthropic Messages | `tool_use` blocks in assistant content, `tool_result` blocks in user content |
//!
//! A value is a message list when it is a list (msgpack or JSON, optionally wrapped in
//! LangGraph's delta-channel snapshot extension) whose every element is a recognized message;
//! anything else is not touched by the wrappers of this crate.
//!
//! [`MessageList::validate`] checks the list against OpenAI's and Anthropic's tool-call rules
//! ([`Validation`]); [`MessageList::repair`] makes it acceptable ([`Repaired`]) without
//! dropping or reordering valid messages, writing new elements in the format of the list they
//! go into, and copying every untouched element byte for byte.

mod build;
mod edit;
mod langchain;
mod parse;
pub(crate) mod raw;
mod repair;
mod validate;

use std::collections::BTreeSet;
use std::ops::Range;

use checkpoint_core::{
    CheckpointTuple, DecodeLimits, Result, TypedValue, ValueType, decode_msgpack,
};
use rmpv::Value;

pub use build::ToolOutput;
pub use edit::{Answer, PendingToolCalls, message_from_bytes};
pub use langchain::{EXT_PYDANTIC_V2, LangChainMessage};
pub use repair::{OrphanCallPolicy, RemovalReason, RepairAction, RepairOptions, Repaired};
pub use validate::{Provider, Validation, Violation, ViolationKind, validate};

use raw::{Container, Piece};

/// The text of a placeholder tool result.
pub const PLACEHOLDER_TEXT: &str = "tool call was interrupted; not executed";

/// The id prefix of placeholder tool results (followed by the tool call id), so repeated
/// repairs produce identical bytes.
pub const PLACEHOLDER_ID_PREFIX: &str = "checkpoint-sanitize:placeholder:";

/// Who authored a message, as far as tool calls are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// The model (`ai`, `assistant`): may carry tool calls.
    Ai,
    /// A tool result (`tool`).
    Tool,
    /// The user (`human`, `user`): may carry Anthropic `tool_result` blocks.
    Human,
    /// A system or developer message.
    System,
    /// Anything else a list may hold (`function`, `remove`, a chat message of unknown role).
    Other,
}

/// How one message is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageFormat {
    /// A LangChain message as LangGraph's msgpack serializer writes it (an extension type).
    LangChainMsgpack,
    /// LangChain's JSON constructor form (`"lc": 1`).
    LangChainLc,
    /// A LangChain message as a plain dict (`model_dump()`), keyed by `type`.
    LangChainDict,
    /// LangChain's `messages_to_dict` form (`{"type", "data"}`).
    LangChainMessageToDict,
    /// An OpenAI chat message (or any `role`-keyed dict without Anthropic blocks).
    OpenAi,
    /// An Anthropic Messages API message (`tool_use` / `tool_result` content blocks).
    Anthropic,
}

/// A tool call an AI message makes.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The call id results refer to (`None` when the writer gave none).
    pub id: Option<String>,
    /// The tool's name.
    pub name: Option<String>,
    /// The arguments, as JSON (OpenAI's argument string parsed when it is JSON).
    pub args: Option<serde_json::Value>,
}

/// A piece of a message as a provider sees it, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// Text or any other non-tool content.
    Content,
    /// A tool call (by id).
    Call(Option<String>),
    /// A tool result (by the id of the call it answers).
    Result(Option<String>),
}

/// How the fields of a message are reached inside its element.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Shape {
    /// Extension type `code` whose payload is `[module, class, kwargs, ...]`.
    Ext { code: i8, payload: Vec<Value> },
    /// `{"lc", "type", "id": id_path, "kwargs"}`.
    Lc { id_path: Vec<String> },
    /// `{"type", "data": kwargs}`.
    MessageToDict,
    /// The element is the kwargs map.
    Dict,
}

/// One message of a list: what it says about tool calls, and its element.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    role: Role,
    format: MessageFormat,
    id: Option<String>,
    name: Option<String>,
    tool_calls: Vec<ToolCall>,
    tool_results: Vec<String>,
    pub(crate) parts: Vec<Part>,
    has_content: bool,
    pub(crate) shape: Shape,
    pub(crate) value: Value,
}

impl Message {
    /// Reads one list element (or one pending-write value) as a message; `None` when it is
    /// not one.
    pub fn from_value(element: &Value) -> Option<Self> {
        parse::parse_element(element, &DecodeLimits::default())
    }

    /// The role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The format.
    pub fn format(&self) -> MessageFormat {
        self.format
    }

    /// The message id, when it has one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The `name` field (for a tool result: the tool's name).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The tool calls of an AI message (empty for other roles).
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// The ids of the calls this message answers (a tool message's `tool_call_id`, a user
    /// message's `tool_result` blocks).
    pub fn tool_results(&self) -> &[String] {
        &self.tool_results
    }

    /// Whether the message has content besides tool calls and tool results.
    pub fn has_content(&self) -> bool {
        self.has_content
    }

    /// The element as stored in the list (a LangChain message stays an extension type).
    pub fn element(&self) -> &Value {
        &self.value
    }

    /// The message's fields: the kwargs of a LangChain message, the dict itself otherwise.
    pub(crate) fn kwargs(&self) -> Option<&Vec<(Value, Value)>> {
        let map = match &self.shape {
            Shape::Ext { payload, .. } => payload.get(2)?,
            Shape::Lc { .. } => match &self.value {
                Value::Map(m) => parse::get(m, "kwargs")?,
                _ => return None,
            },
            Shape::MessageToDict => match &self.value {
                Value::Map(m) => parse::get(m, "data")?,
                _ => return None,
            },
            Shape::Dict => &self.value,
        };
        match map {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The element with its fields replaced by `kwargs`, re-read as a message.
    pub(crate) fn with_kwargs(&self, kwargs: Vec<(Value, Value)>) -> Result<Message> {
        let map = Value::Map(kwargs);
        let element = match &self.shape {
            Shape::Ext { code, payload } => {
                let mut payload = payload.clone();
                if let Some(slot) = payload.get_mut(2) {
                    *slot = map;
                }
                Value::Ext(*code, raw::encode_msgpack(&Value::Array(payload))?)
            }
            Shape::Lc { .. } | Shape::MessageToDict => {
                let key = if matches!(self.shape, Shape::Lc { .. }) {
                    "kwargs"
                } else {
                    "data"
                };
                let Value::Map(outer) = &self.value else {
                    return Err(not_a_message());
                };
                let mut outer = outer.clone();
                match outer.iter_mut().find(|(k, _)| k.as_str() == Some(key)) {
                    Some((_, v)) => *v = map,
                    None => outer.push((Value::from(key), map)),
                }
                Value::Map(outer)
            }
            Shape::Dict => map,
        };
        Message::from_value(&element).ok_or_else(not_a_message)
    }

    /// Whether every part is a tool result (a tool message, or a user message made only of
    /// `tool_result` blocks).
    pub(crate) fn is_result_only(&self) -> bool {
        self.role != Role::Ai
            && !self.parts.is_empty()
            && self.parts.iter().all(|p| matches!(p, Part::Result(_)))
    }

    /// Whether the message starts with a tool result (so it can continue a result block).
    pub(crate) fn starts_with_result(&self) -> bool {
        self.role != Role::Ai
            && self.role != Role::System
            && matches!(self.parts.first(), Some(Part::Result(_)))
    }
}

fn not_a_message() -> checkpoint_core::Error {
    checkpoint_core::Error::Serialization {
        reason: "an edited message is no longer recognizable".to_owned(),
        source: None,
    }
}

/// A message list decoded from a channel value, with the exact bytes of each element.
#[derive(Clone, Debug)]
pub struct MessageList {
    type_tag: ValueType,
    container: Container,
    /// The list's own bytes (inside the delta-snapshot wrapper, if any).
    body: Vec<u8>,
    ranges: Vec<Range<usize>>,
    messages: Vec<Message>,
}

impl MessageList {
    /// Decodes a channel value with the default [`DecodeLimits`].
    ///
    /// `Ok(None)`: the value is not a message list (not a list, or an element that is not a
    /// recognizable message, or a type tag that is not decoded such as `pickle`).
    /// `Err`: the value claims a decodable type but is malformed or exceeds the limits.
    pub fn decode(value: &TypedValue) -> Result<Option<Self>> {
        Self::decode_with(value, &DecodeLimits::default())
    }

    /// Decodes a channel value under `limits` (see [`decode`](Self::decode)).
    pub fn decode_with(value: &TypedValue, limits: &DecodeLimits) -> Result<Option<Self>> {
        let (container, body, items, ranges) = match &value.type_tag {
            ValueType::Msgpack => {
                let (delta, body, items) = match value.to_dynamic_with(limits)? {
                    Value::Array(items) => (false, value.bytes.to_vec(), items),
                    Value::Ext(raw::EXT_DELTA_SNAPSHOT, data) => {
                        match decode_msgpack(&data, limits)? {
                            Value::Array(items) => (true, data, items),
                            _ => return Ok(None),
                        }
                    }
                    _ => return Ok(None),
                };
                let Some(ranges) = checkpoint_core::msgpack::array_elements(&body)? else {
                    return Ok(None);
                };
                (Container::Msgpack { delta }, body, items, ranges)
            }
            ValueType::Json => {
                let Value::Array(items) = value.to_dynamic_with(limits)? else {
                    return Ok(None);
                };
                let body = value.bytes.to_vec();
                let Some((container, ranges)) = raw::json_array_elements(&body)? else {
                    return Ok(None);
                };
                (container, body, items, ranges)
            }
            _ => return Ok(None),
        };
        if items.len() != ranges.len() {
            return Err(checkpoint_core::Error::Serialization {
                reason: "message list elements could not be delimited".to_owned(),
                source: None,
            });
        }
        let mut messages = Vec::with_capacity(items.len());
        for item in &items {
            match parse::parse_element(item, limits) {
                Some(m) => messages.push(m),
                None => return Ok(None),
            }
        }
        Ok(Some(Self {
            type_tag: value.type_tag.clone(),
            container,
            body,
            ranges,
            messages,
        }))
    }

    /// The messages, in order.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The type tag of the value the list was decoded from.
    pub fn type_tag(&self) -> &ValueType {
        &self.type_tag
    }

    /// Checks the list against OpenAI's and Anthropic's tool-call rules.
    pub fn validate(&self) -> Validation {
        validate(&self.messages)
    }

    /// Makes the list acceptable to both providers (see [`RepairOptions`]).
    pub fn repair(&self, options: &RepairOptions) -> Result<Repaired> {
        repair::repair(self, options)
    }

    /// The stored bytes of message `index`.
    pub fn element_bytes(&self, index: usize) -> Option<&[u8]> {
        self.ranges.get(index).map(|r| &self.body[r.clone()])
    }

    /// Whether elements are msgpack (`true`) or JSON (`false`).
    pub fn is_msgpack(&self) -> bool {
        matches!(self.container, Container::Msgpack { .. })
    }

    /// Encodes a list made of kept elements (by index) and new elements, in this list's
    /// container format and type tag.
    pub(crate) fn render(&self, items: &[Item]) -> Result<TypedValue> {
        let pieces: Vec<Piece<'_>> = items
            .iter()
            .map(|item| match item {
                Item::Keep(i) => self
                    .element_bytes(*i)
                    .map(Piece::Raw)
                    .ok_or_else(|| checkpoint_core::Error::invalid("element index out of range")),
                Item::New(v) => Ok(Piece::Value(v.clone())),
                Item::Bytes(b) => Ok(Piece::Raw(b)),
            })
            .collect::<Result<_>>()?;
        let bytes = raw::encode_list(&self.container, &pieces)?;
        Ok(TypedValue::new(self.type_tag.clone(), bytes))
    }
}

/// One element of a list being rebuilt.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    /// Element `i` of the original list, bytes unchanged.
    Keep(usize),
    /// A new or edited element.
    New(Value),
    /// An element given as encoded bytes (in the list's encoding), copied as they are.
    Bytes(Vec<u8>),
}

/// Ids of the tool calls answered by the pending writes of `channel` recorded against
/// `tuple`: results a runtime applies to the list on its next step.
pub fn pending_results(tuple: &CheckpointTuple, channel: &str) -> BTreeSet<String> {
    tuple
        .pending_writes
        .iter()
        .filter(|w| w.channel == channel)
        .filter_map(|w| decode_update(&w.value).ok().flatten())
        .flatten()
        .flat_map(|m| m.tool_results().to_vec())
        .collect()
}

/// The messages a pending write of the message channel adds: the write's value is one
/// message or a list of messages. `None` when it is neither.
pub fn decode_update(value: &TypedValue) -> Result<Option<Vec<Message>>> {
    if !matches!(value.type_tag, ValueType::Msgpack | ValueType::Json) {
        return Ok(None);
    }
    let limits = DecodeLimits::default();
    let dynamic = value.to_dynamic_with(&limits)?;
    let items = match dynamic {
        Value::Array(items) => items,
        Value::Ext(raw::EXT_DELTA_SNAPSHOT, data) => match decode_msgpack(&data, &limits)? {
            Value::Array(items) => items,
            _ => return Ok(None),
        },
        single => vec![single],
    };
    Ok(items
        .iter()
        .map(|i| parse::parse_element(i, &limits))
        .collect())
}
