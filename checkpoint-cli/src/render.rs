//! Stored values as JSON for people and scripts, and message lists as one line per message.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use checkpoint_core::{DecodeLimits, TypedValue, ValueType};
use checkpoint_sanitize::messages::{Message, MessageList, Role};
use rmpv::Value as Mp;
use serde_json::{Value, json};

/// A stored value as JSON: MessagePack and JSON values decoded with core's bounded decoder
/// (`DecodeLimits::default()`), bytes as `{"$bytes": base64}`, MessagePack extension types
/// (LangChain messages, LangGraph's snapshots, ...) as `{"$ext": code, "value": ...}`, and
/// what cannot be decoded as `{"$type", "$len", "$error"}`: a damaged value never stops a
/// listing.
pub fn value_json(value: &TypedValue) -> Value {
    match &value.type_tag {
        ValueType::Bytes | ValueType::Bytearray => json!({"$bytes": B64.encode(&value.bytes)}),
        ValueType::Null => Value::Null,
        _ => match value.to_dynamic_with(&DecodeLimits::default()) {
            Ok(v) => dynamic_json(&v),
            Err(e) => json!({
                "$type": value.type_tag.as_str(),
                "$len": value.bytes.len(),
                "$error": e.to_string(),
            }),
        },
    }
}

fn dynamic_json(v: &Mp) -> Value {
    match v {
        Mp::Nil => Value::Null,
        Mp::Boolean(b) => Value::Bool(*b),
        Mp::Integer(i) => i
            .as_i64()
            .map(Value::from)
            .or_else(|| i.as_u64().map(Value::from))
            .unwrap_or(Value::Null),
        Mp::F32(f) => finite(f64::from(*f)),
        Mp::F64(f) => finite(*f),
        Mp::String(s) => match s.as_str() {
            Some(s) => Value::String(s.to_owned()),
            None => json!({"$bytes": B64.encode(s.as_bytes())}),
        },
        Mp::Binary(b) => json!({"$bytes": B64.encode(b)}),
        Mp::Array(items) => Value::Array(items.iter().map(dynamic_json).collect()),
        Mp::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Mp::String(s) if s.as_str().is_some() => {
                            s.as_str().unwrap_or_default().to_owned()
                        }
                        other => dynamic_json(other).to_string(),
                    };
                    (key, dynamic_json(v))
                })
                .collect(),
        ),
        Mp::Ext(code, data) => {
            let inner = checkpoint_core::decode_msgpack(data, &DecodeLimits::default())
                .map(|v| dynamic_json(&v))
                .unwrap_or_else(|_| json!({"$bytes": B64.encode(data)}));
            json!({"$ext": code, "value": inner})
        }
    }
}

fn finite(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or_else(|| Value::String(f.to_string()), Value::Number)
}

/// One line per message when `value` is a message list LangGraph or a provider writes
/// (`None` otherwise): see [`message_line`].
pub fn message_lines(value: &TypedValue, width: usize) -> Option<Vec<String>> {
    let list = MessageList::decode(value).ok()??;
    if list.is_empty() {
        return None;
    }
    Some(
        list.messages()
            .iter()
            .enumerate()
            .map(|(i, m)| message_line(i, m, width))
            .collect(),
    )
}

/// Message `index` on one line: role, id, the text (shortened to `width` characters), the
/// tool calls it makes and the calls it answers.
pub fn message_line(index: usize, m: &Message, width: usize) -> String {
    let role = match m.role() {
        Role::Ai => "ai",
        Role::Tool => "tool",
        Role::Human => "human",
        Role::System => "system",
        _ => "other",
    };
    let mut line = format!("[{index}] {role}");
    if let Some(id) = m.id() {
        line.push_str(&format!(" {id}"));
    }
    let text = content_text(&dynamic_json(m.element()));
    if !text.is_empty() {
        line.push_str(": ");
        line.push_str(&shorten(&text, width));
    }
    for call in m.tool_calls() {
        line.push_str(&format!(
            "  -> {}({})",
            call.name.as_deref().unwrap_or("?"),
            call.id.as_deref().unwrap_or("no id")
        ));
    }
    for answered in m.tool_results() {
        line.push_str(&format!("  <- {answered}"));
    }
    line
}

/// The text of a message element in any of the shapes `checkpoint-sanitize` reads: its
/// `content` (a string, or the `text` of its content blocks).
fn content_text(element: &Value) -> String {
    let fields = match element {
        // LangChain msgpack: [module, class, kwargs, ...] inside an extension type.
        Value::Object(o) if o.contains_key("$ext") => o
            .get("value")
            .and_then(|v| v.get(2))
            .cloned()
            .unwrap_or(Value::Null),
        Value::Object(o) if o.contains_key("kwargs") => o["kwargs"].clone(),
        Value::Object(o) if o.contains_key("data") && o.contains_key("type") => o["data"].clone(),
        other => other.clone(),
    };
    match fields.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.clone()),
                b => b.get("text").and_then(Value::as_str).map(str::to_owned),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// `n` and a noun, plural unless `n` is 1 (`count(2, "thread")` is `2 threads`).
pub fn count(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `text` on one line, at most `width` characters (an ellipsis marks a cut).
pub fn shorten(text: &str, width: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= width {
        one_line
    } else {
        let cut: String = one_line.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_render_as_json_and_damage_is_shown_not_fatal() {
        let v = TypedValue::msgpack(&json!({"a": [1, "x", null]})).unwrap();
        assert_eq!(value_json(&v), json!({"a": [1, "x", null]}));
        let b = TypedValue::from_bytes(vec![0u8, 255]);
        assert_eq!(value_json(&b), json!({"$bytes": "AP8="}));
        let snapshot =
            checkpoint_core::delta::snapshot(&TypedValue::msgpack(&vec!["hi"]).unwrap()).unwrap();
        assert_eq!(value_json(&snapshot), json!({"$ext": 7, "value": ["hi"]}));
        let broken = TypedValue::new(ValueType::Msgpack, vec![0xc1]);
        assert_eq!(value_json(&broken)["$type"], "msgpack");
        let foreign = TypedValue::new(ValueType::Other("pickle".into()), vec![1, 2]);
        assert_eq!(value_json(&foreign)["$len"], 2);
    }

    #[test]
    fn message_lists_render_one_line_per_message() {
        let v = TypedValue::msgpack(&json!([
            {"type": "human", "id": "h1", "content": "Can I get a refund?"},
            {"type": "ai", "id": "a1", "content": "",
             "tool_calls": [{"id": "call_1", "name": "lookup", "args": {}}]},
            {"type": "tool", "id": "t1", "content": "30 days", "tool_call_id": "call_1"},
        ]))
        .unwrap();
        let lines = message_lines(&v, 80).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "[0] human h1: Can I get a refund?");
        assert!(lines[1].contains("-> lookup(call_1)"), "{}", lines[1]);
        assert!(lines[2].contains("<- call_1"), "{}", lines[2]);
        assert!(message_lines(&TypedValue::msgpack(&3).unwrap(), 80).is_none());
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("a\nb", 10), "a b");
    }
}
