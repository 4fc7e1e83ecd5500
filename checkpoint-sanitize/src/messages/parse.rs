//! Reading one list element as a message: data only, nothing is instantiated or executed.

use checkpoint_core::{DecodeLimits, decode_msgpack};
use rmpv::Value;

use super::raw::to_json;
use super::{Message, MessageFormat, Part, Role, Shape, ToolCall};

/// Ext codes of LangGraph's serializer that carry `[module, class, kwargs, ...]`:
/// `EXT_CONSTRUCTOR_SINGLE_ARG` (0) through `EXT_PYDANTIC_V2` (5).
const CONSTRUCTOR_EXT_CODES: std::ops::RangeInclusive<i8> = 0..=5;

/// A map entry by string key.
pub(crate) fn get<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// A string entry by key.
pub(crate) fn get_str<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a str> {
    get(map, key).and_then(Value::as_str)
}

fn as_map(v: &Value) -> Option<&[(Value, Value)]> {
    match v {
        Value::Map(m) => Some(m),
        _ => None,
    }
}

/// The role a LangChain `type` value (or a dict's `type`/`role`) names.
fn role_from_type(t: &str, kwargs: &[(Value, Value)]) -> Option<Role> {
    Some(match t {
        "ai" | "AIMessageChunk" | "assistant" => Role::Ai,
        "human" | "HumanMessageChunk" | "user" => Role::Human,
        "system" | "SystemMessageChunk" | "developer" => Role::System,
        "tool" | "ToolMessageChunk" => Role::Tool,
        "chat" | "ChatMessageChunk" => chat_role(kwargs),
        "function" | "FunctionMessageChunk" | "remove" => Role::Other,
        _ => return None,
    })
}

/// The role a LangChain message class name names.
fn role_from_class(class: &str, kwargs: &[(Value, Value)]) -> Option<Role> {
    Some(match class {
        "AIMessage" | "AIMessageChunk" => Role::Ai,
        "HumanMessage" | "HumanMessageChunk" => Role::Human,
        "SystemMessage" | "SystemMessageChunk" => Role::System,
        "ToolMessage" | "ToolMessageChunk" => Role::Tool,
        "ChatMessage" | "ChatMessageChunk" => chat_role(kwargs),
        "FunctionMessage" | "FunctionMessageChunk" | "RemoveMessage" => Role::Other,
        _ => return None,
    })
}

/// A `ChatMessage`'s free-form `role`.
fn chat_role(kwargs: &[(Value, Value)]) -> Role {
    match get_str(kwargs, "role") {
        Some("assistant" | "ai") => Role::Ai,
        Some("user" | "human") => Role::Human,
        Some("system" | "developer") => Role::System,
        Some("tool") => Role::Tool,
        _ => Role::Other,
    }
}

/// A LangChain message's role: its `type` field first (subclasses keep it), then its class.
fn langchain_role(class: Option<&str>, kwargs: &[(Value, Value)]) -> Option<Role> {
    get_str(kwargs, "type")
        .and_then(|t| role_from_type(t, kwargs))
        .or_else(|| class.and_then(|c| role_from_class(c, kwargs)))
}

/// Reads one element of a stored list as a message, or `None` when it is not one.
pub(crate) fn parse_element(element: &Value, limits: &DecodeLimits) -> Option<Message> {
    match element {
        Value::Ext(code, data) if CONSTRUCTOR_EXT_CODES.contains(code) => {
            let Ok(Value::Array(payload)) = decode_msgpack(data, limits) else {
                return None;
            };
            let class = payload.get(1)?.as_str()?.to_owned();
            payload.first()?.as_str()?;
            let kwargs = as_map(payload.get(2)?)?;
            let role = langchain_role(Some(&class), kwargs)?;
            let shape = Shape::Ext {
                code: *code,
                payload: payload.clone(),
            };
            Some(build(
                element.clone(),
                shape,
                role,
                MessageFormat::LangChainMsgpack,
            ))
        }
        Value::Map(map) => parse_map(element, map),
        _ => None,
    }
}

fn parse_map(element: &Value, map: &[(Value, Value)]) -> Option<Message> {
    // The "lc" constructor form.
    if let Some(lc) = get(map, "lc") {
        let lc = lc.as_u64()?;
        if !(lc == 1 || lc == 2) || get_str(map, "type") != Some("constructor") {
            return None;
        }
        let Value::Array(id) = get(map, "id")? else {
            return None;
        };
        let id_path: Vec<String> = id
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect::<Option<_>>()?;
        let class = id_path.last()?.clone();
        let empty = Vec::new();
        let kwargs = match get(map, "kwargs") {
            Some(Value::Map(k)) => k.as_slice(),
            None | Some(Value::Nil) => empty.as_slice(),
            Some(_) => return None,
        };
        let role = langchain_role(Some(&class), kwargs)?;
        return Some(build(
            element.clone(),
            Shape::Lc { id_path },
            role,
            MessageFormat::LangChainLc,
        ));
    }
    // `messages_to_dict`: {"type": ..., "data": {...}}.
    if let (Some(t), Some(Value::Map(data)), None, None) = (
        get_str(map, "type"),
        get(map, "data"),
        get(map, "role"),
        get(map, "content"),
    ) {
        let role = role_from_type(t, data)?;
        return Some(build(
            element.clone(),
            Shape::MessageToDict,
            role,
            MessageFormat::LangChainMessageToDict,
        ));
    }
    // Provider dicts: keyed by "role".
    if let Some(r) = get(map, "role") {
        let role = match r.as_str()? {
            "assistant" | "ai" => Role::Ai,
            "user" | "human" => Role::Human,
            "system" | "developer" => Role::System,
            "tool" => Role::Tool,
            "function" => Role::Other,
            _ => return None,
        };
        let format = if has_openai_tool_calls(map) {
            MessageFormat::OpenAi
        } else if has_anthropic_blocks(map) {
            MessageFormat::Anthropic
        } else {
            MessageFormat::OpenAi
        };
        return Some(build(element.clone(), Shape::Dict, role, format));
    }
    // LangChain dicts (`model_dump()`): keyed by "type".
    let role = role_from_type(get_str(map, "type")?, map)?;
    Some(build(
        element.clone(),
        Shape::Dict,
        role,
        MessageFormat::LangChainDict,
    ))
}

fn has_openai_tool_calls(map: &[(Value, Value)]) -> bool {
    matches!(get(map, "tool_calls"), Some(Value::Array(calls))
        if calls.iter().any(|c| as_map(c).is_some_and(|c| get(c, "function").is_some())))
}

fn has_anthropic_blocks(map: &[(Value, Value)]) -> bool {
    matches!(get(map, "content"), Some(Value::Array(blocks))
    if blocks.iter().any(|b| {
        as_map(b).is_some_and(|b| matches!(get_str(b, "type"), Some("tool_use" | "tool_result")))
    }))
}

/// Finishes a message from its element, shape and role.
fn build(value: Value, shape: Shape, role: Role, format: MessageFormat) -> Message {
    let mut message = Message {
        role,
        format,
        id: None,
        name: None,
        tool_calls: Vec::new(),
        tool_results: Vec::new(),
        parts: Vec::new(),
        has_content: false,
        shape,
        value,
    };
    let empty = Vec::new();
    let kwargs = message.kwargs().unwrap_or(&empty);
    let id = get_str(kwargs, "id").map(str::to_owned);
    let name = get_str(kwargs, "name").map(str::to_owned);
    let (tool_calls, has_content) = if role == Role::Ai {
        (tool_calls_of(kwargs), ai_has_content(kwargs))
    } else {
        (Vec::new(), false)
    };
    let parts = parts_of(role, kwargs, &tool_calls, has_content);
    message.id = id;
    message.name = name;
    message.tool_results = parts
        .iter()
        .filter_map(|p| match p {
            Part::Result(Some(id)) => Some(id.clone()),
            _ => None,
        })
        .collect();
    message.tool_calls = tool_calls;
    message.has_content =
        has_content || (role != Role::Ai && parts.iter().any(|p| matches!(p, Part::Content)));
    message.parts = parts;
    message
}

/// The message's parts in the order a provider sees them.
fn parts_of(
    role: Role,
    kwargs: &[(Value, Value)],
    calls: &[ToolCall],
    has_content: bool,
) -> Vec<Part> {
    match role {
        Role::Ai => {
            let mut parts = Vec::with_capacity(calls.len() + 1);
            if has_content {
                parts.push(Part::Content);
            }
            parts.extend(calls.iter().map(|c| Part::Call(c.id.clone())));
            parts
        }
        Role::Tool => vec![Part::Result(
            get_str(kwargs, "tool_call_id").map(str::to_owned),
        )],
        Role::Human | Role::System | Role::Other => match get(kwargs, "content") {
            Some(Value::Array(blocks)) => blocks
                .iter()
                .map(|b| match as_map(b) {
                    Some(b) if get_str(b, "type") == Some("tool_result") => {
                        Part::Result(get_str(b, "tool_use_id").map(str::to_owned))
                    }
                    _ => Part::Content,
                })
                .collect(),
            None | Some(Value::Nil) => Vec::new(),
            Some(_) => vec![Part::Content],
        },
    }
}

/// Whether an AI message says anything besides its tool calls.
fn ai_has_content(kwargs: &[(Value, Value)]) -> bool {
    match get(kwargs, "content") {
        Some(Value::String(s)) => s.as_str().is_some_and(|s| !s.trim().is_empty()),
        Some(Value::Array(blocks)) => blocks.iter().any(|b| match as_map(b) {
            Some(b) => match get_str(b, "type") {
                Some("tool_use" | "tool_call" | "server_tool_use") => false,
                Some("text") => get_str(b, "text").is_some_and(|t| !t.trim().is_empty()),
                _ => true,
            },
            None => b.as_str().is_some_and(|t| !t.trim().is_empty()),
        }),
        _ => false,
    }
}

/// Every tool call an AI message carries, in first-seen order, deduplicated by id:
/// `tool_calls`, `invalid_tool_calls` (providers receive those too), `tool_call_chunks`,
/// `additional_kwargs.tool_calls` (the OpenAI wire form) and `tool_use` / `tool_call` content
/// blocks.
fn tool_calls_of(kwargs: &[(Value, Value)]) -> Vec<ToolCall> {
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut add = |call: ToolCall, idless_allowed: bool| match &call.id {
        Some(id) => match calls.iter_mut().find(|c| c.id.as_deref() == Some(id)) {
            Some(existing) => {
                if existing.name.is_none() {
                    existing.name = call.name;
                }
                if existing.args.is_none() {
                    existing.args = call.args;
                }
            }
            None => calls.push(call),
        },
        None if idless_allowed => calls.push(call),
        None => {}
    };
    for key in ["tool_calls", "invalid_tool_calls"] {
        if let Some(Value::Array(items)) = get(kwargs, key) {
            for item in items.iter().filter_map(as_map) {
                add(call_from_map(item), true);
            }
        }
    }
    if let Some(Value::Array(items)) = get(kwargs, "tool_call_chunks") {
        for item in items.iter().filter_map(as_map) {
            add(call_from_map(item), false);
        }
    }
    if let Some(Value::Map(extra)) = get(kwargs, "additional_kwargs")
        && let Some(Value::Array(items)) = get(extra, "tool_calls")
    {
        for item in items.iter().filter_map(as_map) {
            add(call_from_map(item), false);
        }
    }
    if let Some(Value::Array(blocks)) = get(kwargs, "content") {
        for block in blocks.iter().filter_map(as_map) {
            if matches!(get_str(block, "type"), Some("tool_use" | "tool_call")) {
                add(call_from_map(block), false);
            }
        }
    }
    calls
}

/// A tool call from any of its shapes: LangChain `{id, name, args}`, OpenAI
/// `{id, function: {name, arguments}}`, Anthropic `{id, name, input}`.
fn call_from_map(map: &[(Value, Value)]) -> ToolCall {
    let function = match get(map, "function") {
        Some(Value::Map(f)) => Some(f.as_slice()),
        _ => None,
    };
    let name = get_str(map, "name")
        .or_else(|| function.and_then(|f| get_str(f, "name")))
        .map(str::to_owned);
    let args = get(map, "args")
        .or_else(|| get(map, "input"))
        .or_else(|| function.and_then(|f| get(f, "arguments")))
        .and_then(|a| match a {
            Value::String(s) => s.as_str().map(|s| {
                serde_json::from_str(s).unwrap_or_else(|_| serde_json::Value::String(s.to_owned()))
            }),
            other => to_json(other).ok(),
        });
    ToolCall {
        id: get_str(map, "id").map(str::to_owned),
        name,
        args,
    }
}
