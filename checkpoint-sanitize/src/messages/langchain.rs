//! Writing LangChain messages the way LangGraph's Python serializer stores them, so a Rust
//! runtime (or a test) can produce state a Python LangGraph service reads, and vice versa.

use checkpoint_core::{Result, TypedValue, ValueType};
use rmpv::Value;

use super::ToolCall;
use super::raw::{Container, Piece, encode_list, encode_msgpack, from_json};

/// LangGraph's `EXT_PYDANTIC_V2`: a pydantic v2 model as `[module, class, fields, method]`.
pub const EXT_PYDANTIC_V2: i8 = 5;

/// A LangChain message to encode as LangGraph's msgpack serializer does (an
/// [`EXT_PYDANTIC_V2`] extension holding the model's `model_dump()`).
///
/// ```
/// use checkpoint_sanitize::messages::{LangChainMessage, MessageList, ToolCall};
/// let list = LangChainMessage::message_list(&[
///     LangChainMessage::human("h1", "weather in Paris?"),
///     LangChainMessage::ai("a1", "", vec![ToolCall {
///         id: Some("call_1".into()),
///         name: Some("weather".into()),
///         args: Some(serde_json::json!({"city": "Paris"})),
///     }]),
/// ])?;
/// let decoded = MessageList::decode(&list)?.expect("a message list");
/// assert_eq!(decoded.pending_tool_calls().unwrap().calls.len(), 1);
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LangChainMessage {
    module: &'static str,
    class: &'static str,
    fields: Vec<(&'static str, Value)>,
}

fn s(v: &str) -> Value {
    Value::from(v)
}

fn empty_map() -> Value {
    Value::Map(Vec::new())
}

fn base(content: &str, kind: &str, id: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("content", s(content)),
        ("additional_kwargs", empty_map()),
        ("response_metadata", empty_map()),
        ("type", s(kind)),
        ("name", Value::Nil),
        ("id", s(id)),
    ]
}

impl LangChainMessage {
    /// A `HumanMessage`.
    pub fn human(id: &str, content: &str) -> Self {
        Self {
            module: "langchain_core.messages.human",
            class: "HumanMessage",
            fields: base(content, "human", id),
        }
    }

    /// A `SystemMessage`.
    pub fn system(id: &str, content: &str) -> Self {
        Self {
            module: "langchain_core.messages.system",
            class: "SystemMessage",
            fields: base(content, "system", id),
        }
    }

    /// An `AIMessage` with tool calls (`type: "tool_call"` entries, as LangChain writes them).
    pub fn ai(id: &str, content: &str, tool_calls: Vec<ToolCall>) -> Self {
        let calls = tool_calls
            .iter()
            .map(|c| {
                Value::Map(vec![
                    (s("name"), c.name.as_deref().map_or(Value::Nil, s)),
                    (s("args"), c.args.as_ref().map_or_else(empty_map, from_json)),
                    (s("id"), c.id.as_deref().map_or(Value::Nil, s)),
                    (s("type"), s("tool_call")),
                ])
            })
            .collect();
        let mut fields = base(content, "ai", id);
        fields.push(("tool_calls", Value::Array(calls)));
        fields.push(("invalid_tool_calls", Value::Array(Vec::new())));
        fields.push(("usage_metadata", Value::Nil));
        Self {
            module: "langchain_core.messages.ai",
            class: "AIMessage",
            fields,
        }
    }

    /// A `ToolMessage` answering `tool_call_id`.
    pub fn tool(
        id: &str,
        tool_call_id: &str,
        name: Option<&str>,
        content: &str,
        is_error: bool,
    ) -> Self {
        let mut fields = base(content, "tool", id);
        if let Some(name) = name {
            fields[4].1 = s(name);
        }
        fields.push(("tool_call_id", s(tool_call_id)));
        fields.push(("artifact", Value::Nil));
        fields.push(("status", s(if is_error { "error" } else { "success" })));
        Self {
            module: "langchain_core.messages.tool",
            class: "ToolMessage",
            fields,
        }
    }

    /// The list element: the extension type LangGraph writes.
    pub fn to_value(&self) -> Result<Value> {
        let fields = Value::Map(self.fields.iter().map(|(k, v)| (s(k), v.clone())).collect());
        let payload = Value::Array(vec![
            s(self.module),
            s(self.class),
            fields,
            s("model_validate_json"),
        ]);
        Ok(Value::Ext(EXT_PYDANTIC_V2, encode_msgpack(&payload)?))
    }

    /// A `messages` channel value holding `messages`, as `JsonPlusSerializer().dumps_typed`
    /// writes a list of messages.
    pub fn message_list(messages: &[LangChainMessage]) -> Result<TypedValue> {
        let values = messages
            .iter()
            .map(LangChainMessage::to_value)
            .collect::<Result<Vec<_>>>()?;
        let pieces: Vec<Piece<'_>> = values.into_iter().map(Piece::Value).collect();
        let bytes = encode_list(&Container::Msgpack { delta: false }, &pieces)?;
        Ok(TypedValue::new(ValueType::Msgpack, bytes))
    }
}
