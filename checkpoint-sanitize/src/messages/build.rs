//! Writing messages: tool results in the format of the list they go into, and edits of
//! existing messages (removing tool calls or tool results, putting results first).

use std::collections::BTreeSet;

use checkpoint_core::Result;
use rmpv::Value;

use super::raw::encode_msgpack;
use super::{Message, MessageFormat, Shape};

/// The output of a tool call, to be written as its tool result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// The result text.
    pub content: String,
    /// Whether the call failed (LangChain `status: "error"`, Anthropic `is_error: true`).
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    /// A failed result.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }
}

/// One tool result to write.
#[derive(Clone, Debug)]
pub(crate) struct ResultSpec<'a> {
    /// The call it answers.
    pub(crate) call_id: &'a str,
    /// The tool's name, when known.
    pub(crate) tool_name: Option<&'a str>,
    /// What it says.
    pub(crate) output: &'a ToolOutput,
    /// The message id to give it.
    pub(crate) message_id: String,
}

fn s(v: &str) -> Value {
    Value::from(v)
}

fn opt(v: Option<&str>) -> Value {
    v.map_or(Value::Nil, Value::from)
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

/// A `ToolMessage`'s fields as pydantic's `model_dump()` orders them.
fn model_dump(spec: &ResultSpec<'_>) -> Value {
    map(vec![
        ("content", s(&spec.output.content)),
        ("additional_kwargs", Value::Map(Vec::new())),
        ("response_metadata", Value::Map(Vec::new())),
        ("type", s("tool")),
        ("name", opt(spec.tool_name)),
        ("id", s(&spec.message_id)),
        ("tool_call_id", s(spec.call_id)),
        ("artifact", Value::Nil),
        (
            "status",
            s(if spec.output.is_error {
                "error"
            } else {
                "success"
            }),
        ),
    ])
}

/// The elements answering `specs`, written in the format of `ai` (the message whose calls
/// they answer), for a list whose elements are msgpack (`msgpack`) or JSON.
///
/// LangChain formats get one `ToolMessage` per result; OpenAI one `tool` message per result;
/// Anthropic one `user` message holding a `tool_result` block per result.
pub(crate) fn result_elements(
    ai: &Message,
    specs: &[ResultSpec<'_>],
    msgpack: bool,
) -> Result<Vec<Value>> {
    let format = match (ai.format(), msgpack) {
        // An extension type cannot live in a JSON list; the lc form is LangChain's JSON.
        (MessageFormat::LangChainMsgpack, false) => MessageFormat::LangChainLc,
        (f, _) => f,
    };
    if format == MessageFormat::Anthropic {
        let blocks = specs
            .iter()
            .map(|spec| {
                map(vec![
                    ("type", s("tool_result")),
                    ("content", s(&spec.output.content)),
                    ("tool_use_id", s(spec.call_id)),
                    ("is_error", Value::Boolean(spec.output.is_error)),
                ])
            })
            .collect();
        return Ok(vec![map(vec![
            ("role", s("user")),
            ("content", Value::Array(blocks)),
        ])]);
    }
    specs
        .iter()
        .map(|spec| {
            Ok(match format {
                MessageFormat::LangChainMsgpack => {
                    let code = match &ai.shape {
                        Shape::Ext { code: 4, .. } => 4,
                        _ => 5,
                    };
                    let mut payload = vec![
                        s("langchain_core.messages.tool"),
                        s("ToolMessage"),
                        model_dump(spec),
                    ];
                    if code == 5 {
                        payload.push(s("model_validate_json"));
                    }
                    Value::Ext(code, encode_msgpack(&Value::Array(payload))?)
                }
                MessageFormat::LangChainLc => {
                    let mut id_path: Vec<Value> = match &ai.shape {
                        Shape::Lc { id_path } if id_path.len() > 1 => {
                            id_path[..id_path.len() - 1].iter().map(|p| s(p)).collect()
                        }
                        _ => vec![s("langchain"), s("schema"), s("messages")],
                    };
                    id_path.push(s("ToolMessage"));
                    let mut kwargs =
                        vec![("content", s(&spec.output.content)), ("type", s("tool"))];
                    if let Some(name) = spec.tool_name {
                        kwargs.push(("name", s(name)));
                    }
                    kwargs.push(("id", s(&spec.message_id)));
                    kwargs.push(("tool_call_id", s(spec.call_id)));
                    if spec.output.is_error {
                        kwargs.push(("status", s("error")));
                    }
                    map(vec![
                        ("lc", Value::from(1)),
                        ("type", s("constructor")),
                        ("id", Value::Array(id_path)),
                        ("kwargs", map(kwargs)),
                    ])
                }
                MessageFormat::LangChainMessageToDict => {
                    map(vec![("type", s("tool")), ("data", model_dump(spec))])
                }
                MessageFormat::LangChainDict => model_dump(spec),
                MessageFormat::OpenAi | MessageFormat::Anthropic => map(vec![
                    ("role", s("tool")),
                    ("tool_call_id", s(spec.call_id)),
                    ("content", s(&spec.output.content)),
                ]),
            })
        })
        .collect()
}

fn find_mut<'a>(map: &'a mut [(Value, Value)], key: &str) -> Option<&'a mut Value> {
    map.iter_mut()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn remove_key(map: &mut Vec<(Value, Value)>, key: &str) {
    map.retain(|(k, _)| k.as_str() != Some(key));
}

fn id_of(item: &Value, key: &str) -> Option<String> {
    match item {
        Value::Map(m) => super::parse::get_str(m, key).map(str::to_owned),
        _ => None,
    }
}

fn block_type(item: &Value) -> Option<&str> {
    match item {
        Value::Map(m) => super::parse::get_str(m, "type"),
        _ => None,
    }
}

/// `ai` without the tool calls whose id is in `ids` (and without id-less calls when
/// `idless`), from every place a call can be written.
pub(crate) fn strip_tool_calls(
    ai: &Message,
    ids: &BTreeSet<String>,
    idless: bool,
) -> Result<Message> {
    let Some(kwargs) = ai.kwargs() else {
        return Ok(ai.clone());
    };
    let mut kwargs = kwargs.clone();
    let doomed = |item: &Value, idless_too: bool| match id_of(item, "id") {
        Some(id) => ids.contains(&id),
        None => idless_too,
    };
    for key in ["tool_calls", "invalid_tool_calls", "tool_call_chunks"] {
        let mut now_empty = false;
        if let Some(Value::Array(items)) = find_mut(&mut kwargs, key) {
            items.retain(|item| !doomed(item, idless && key != "tool_call_chunks"));
            now_empty = items.is_empty();
        }
        // OpenAI rejects an empty `tool_calls` array.
        if now_empty && key == "tool_calls" && ai.format() == MessageFormat::OpenAi {
            remove_key(&mut kwargs, key);
        }
    }
    if let Some(Value::Map(extra)) = find_mut(&mut kwargs, "additional_kwargs") {
        let mut now_empty = false;
        if let Some(Value::Array(items)) = find_mut(extra, "tool_calls") {
            items.retain(|item| !doomed(item, false));
            now_empty = items.is_empty();
        }
        if now_empty {
            remove_key(extra, "tool_calls");
        }
    }
    if let Some(Value::Array(blocks)) = find_mut(&mut kwargs, "content") {
        blocks.retain(|b| {
            !(matches!(block_type(b), Some("tool_use" | "tool_call")) && doomed(b, false))
        });
    }
    ai.with_kwargs(kwargs)
}

/// `message` without the `tool_result` content blocks at `positions` (indexes into its
/// content list, which are its part indexes).
pub(crate) fn strip_results(message: &Message, positions: &BTreeSet<usize>) -> Result<Message> {
    let Some(kwargs) = message.kwargs() else {
        return Ok(message.clone());
    };
    let mut kwargs = kwargs.clone();
    if let Some(Value::Array(blocks)) = find_mut(&mut kwargs, "content") {
        let mut i = 0;
        blocks.retain(|b| {
            let keep = !(positions.contains(&i) && block_type(b) == Some("tool_result"));
            i += 1;
            keep
        });
    }
    message.with_kwargs(kwargs)
}

/// `message` with its `tool_result` blocks moved before its other content (order within
/// each group kept), as Anthropic requires.
pub(crate) fn results_first(message: &Message) -> Result<Message> {
    let Some(kwargs) = message.kwargs() else {
        return Ok(message.clone());
    };
    let mut kwargs = kwargs.clone();
    if let Some(Value::Array(blocks)) = find_mut(&mut kwargs, "content") {
        let (results, rest): (Vec<Value>, Vec<Value>) = std::mem::take(blocks)
            .into_iter()
            .partition(|b| block_type(b) == Some("tool_result"));
        blocks.extend(results);
        blocks.extend(rest);
    }
    message.with_kwargs(kwargs)
}
