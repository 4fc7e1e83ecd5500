//! Questions and edits about the end of a conversation: which calls are in flight, and
//! adding their results.

use checkpoint_core::{DecodeLimits, Error, Result, TypedValue, decode_json, decode_msgpack};
use rmpv::Value;

use super::build::{ResultSpec, ToolOutput, result_elements};
use super::{Item, Message, MessageList, Role, ToolCall, raw};

/// The tool calls a conversation is waiting for: the calls of its last AI message that no
/// result after it answers, when nothing but results follows that message.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingToolCalls {
    /// The AI message.
    pub message_index: usize,
    /// Its unanswered calls, in order.
    pub calls: Vec<ToolCall>,
}

/// A result to add for a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The call it answers.
    pub call_id: String,
    /// The tool's name, when known.
    pub tool_name: Option<String>,
    /// What it says.
    pub output: ToolOutput,
    /// The id of the result message.
    pub message_id: String,
}

impl MessageList {
    /// The calls the conversation ends waiting for (see [`PendingToolCalls`]), or `None`.
    pub fn pending_tool_calls(&self) -> Option<PendingToolCalls> {
        let messages = self.messages();
        let index = messages
            .iter()
            .rposition(|m| m.role() == Role::Ai && !m.tool_calls().is_empty())?;
        let after = &messages[index + 1..];
        if !after.iter().all(Message::starts_with_result) {
            return None;
        }
        let answered: Vec<&String> = after.iter().flat_map(|m| m.tool_results()).collect();
        let calls: Vec<ToolCall> = messages[index]
            .tool_calls()
            .iter()
            .filter(|c| c.id.as_ref().is_none_or(|id| !answered.contains(&id)))
            .cloned()
            .collect();
        (!calls.is_empty()).then_some(PendingToolCalls {
            message_index: index,
            calls,
        })
    }

    /// The list with `appended` AI messages (element bytes in this list's encoding, e.g. from a
    /// pending-call marker) added at the end, and `answers` inserted right after the results
    /// their call's message already has, in the format of that message.
    pub fn answer_calls(&self, appended: &[Vec<u8>], answers: &[Answer]) -> Result<TypedValue> {
        let limits = DecodeLimits::default();
        let mut slots: Vec<(Item, Message)> = self
            .messages()
            .iter()
            .enumerate()
            .map(|(i, m)| (Item::Keep(i), m.clone()))
            .collect();
        for bytes in appended {
            let value = if self.is_msgpack() {
                decode_msgpack(bytes, &limits)?
            } else {
                raw::from_json(&decode_json(bytes, &limits)?)
            };
            let message = Message::from_value(&value)
                .ok_or_else(|| Error::invalid("a marked message is not a recognizable message"))?;
            slots.push((Item::Bytes(bytes.clone()), message));
        }
        // Group answers by the last AI message that made the call.
        let mut groups: Vec<(usize, Vec<&Answer>)> = Vec::new();
        for answer in answers {
            let Some(ai) = slots.iter().rposition(|(_, m)| {
                m.role() == Role::Ai
                    && m.tool_calls()
                        .iter()
                        .any(|c| c.id.as_deref() == Some(answer.call_id.as_str()))
            }) else {
                return Err(Error::invalid(format!(
                    "no message makes tool call {:?}",
                    answer.call_id
                )));
            };
            match groups.iter_mut().find(|(i, _)| *i == ai) {
                Some((_, list)) => list.push(answer),
                None => groups.push((ai, vec![answer])),
            }
        }
        groups.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (ai, group) in groups {
            let message = slots[ai].1.clone();
            let mut at = ai + 1;
            while slots.get(at).is_some_and(|(_, m)| m.is_result_only()) {
                at += 1;
            }
            let specs: Vec<ResultSpec<'_>> = group
                .iter()
                .map(|a| ResultSpec {
                    call_id: &a.call_id,
                    tool_name: a.tool_name.as_deref(),
                    output: &a.output,
                    message_id: a.message_id.clone(),
                })
                .collect();
            let elements = result_elements(&message, &specs, self.is_msgpack())?;
            let new: Vec<(Item, Message)> = elements
                .into_iter()
                .map(|e| {
                    Message::from_value(&e)
                        .map(|m| (Item::New(e), m))
                        .ok_or_else(|| Error::invalid("a tool result is not recognizable"))
                })
                .collect::<Result<_>>()?;
            slots.splice(at..at, new);
        }
        let items: Vec<Item> = slots.into_iter().map(|(item, _)| item).collect();
        self.render(&items)
    }
}

/// Decodes one element's bytes (msgpack or JSON text) as a message.
pub fn message_from_bytes(bytes: &[u8], msgpack: bool) -> Option<Message> {
    let value: Value = if msgpack {
        decode_msgpack(bytes, &DecodeLimits::default()).ok()?
    } else {
        raw::from_json(&decode_json(bytes, &DecodeLimits::default()).ok()?)
    };
    Message::from_value(&value)
}
