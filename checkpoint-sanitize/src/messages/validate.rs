//! The provider-agnostic validator: is a message list acceptable to OpenAI and to Anthropic?
//!
//! Both providers reject (HTTP 400) a conversation whose tool calls and tool results do not
//! pair up. The rules checked, as each provider states them:
//!
//! * **OpenAI** (chat completions): "An assistant message with `tool_calls` must be followed
//!   by tool messages responding to each `tool_call_id`", and a message with role `tool` must
//!   be a response to a preceding message with `tool_calls`. The tool messages answering an
//!   assistant message come right after it, before any other message.
//! * **Anthropic** (Messages API): "Each `tool_use` block must have a corresponding
//!   `tool_result` block in the next message"; a `tool_result` must refer to a `tool_use` of
//!   the previous assistant message; in a user message, `tool_result` blocks come before any
//!   other content. Consecutive messages of the same role form one turn (the API merges
//!   them, and LangChain's integration sends tool messages as user turns), and system
//!   messages are not turns.
//!
//! Both: every call and result needs an id, and a call is answered at most once. The lists
//! are checked as LangChain's integrations convert them, so a LangChain list is checked for
//! both providers and a provider-native list too (a native Anthropic list is checked against
//! OpenAI's rules as it would be converted). Rules unrelated to tool calls (content
//! non-empty, alternation of text turns) are out of scope.

use std::collections::{BTreeSet, HashSet};

use super::{Message, Part, Role};

/// A model provider whose rules the validator knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI chat completions (and compatible APIs).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// Every provider the validator knows.
    pub const ALL: [Provider; 2] = [Provider::OpenAi, Provider::Anthropic];
}

/// What is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ViolationKind {
    /// A tool call without a result right after its message.
    UnansweredToolCall,
    /// A tool result that does not answer a call of the message right before it.
    UnexpectedToolResult,
    /// A second result for the same call.
    DuplicateToolResult,
    /// A tool call or a tool result without an id.
    MissingId,
    /// Anthropic: a `tool_result` block after other content in its user turn.
    ToolResultAfterContent,
}

/// One rule a list breaks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    /// Whose rule.
    pub provider: Provider,
    /// Which rule.
    pub kind: ViolationKind,
    /// The message at fault: the AI message for an unanswered call, the result's message
    /// otherwise.
    pub message_index: usize,
    /// The tool call concerned, when it has an id.
    pub tool_call_id: Option<String>,
}

/// The outcome of [`validate`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validation {
    /// Every violation, OpenAI's first, each in list order.
    pub violations: Vec<Violation>,
}

impl Validation {
    /// Whether both providers accept the list.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether `provider` accepts the list.
    pub fn acceptable_to(&self, provider: Provider) -> bool {
        !self.violations.iter().any(|v| v.provider == provider)
    }

    /// The violations of one provider's rules.
    pub fn for_provider(&self, provider: Provider) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(move |v| v.provider == provider)
    }

    /// The ids of unanswered tool calls (any provider), deduplicated, in order.
    pub fn unanswered_calls(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.violations
            .iter()
            .filter(|v| v.kind == ViolationKind::UnansweredToolCall)
            .filter_map(|v| v.tool_call_id.clone())
            .filter(|id| seen.insert(id.clone()))
            .collect()
    }
}

/// Checks `messages` against every provider's tool-call rules.
pub fn validate(messages: &[Message]) -> Validation {
    let mut violations = openai(messages);
    violations.extend(anthropic(messages));
    Validation { violations }
}

fn violation(
    provider: Provider,
    kind: ViolationKind,
    message_index: usize,
    tool_call_id: Option<&str>,
) -> Violation {
    Violation {
        provider,
        kind,
        message_index,
        tool_call_id: tool_call_id.map(str::to_owned),
    }
}

/// An assistant message whose calls still wait for results.
struct Open<'a> {
    index: usize,
    calls: Vec<&'a str>,
    answered: HashSet<&'a str>,
}

impl<'a> Open<'a> {
    fn close(self, provider: Provider, out: &mut Vec<Violation>) {
        for id in self.calls {
            if !self.answered.contains(id) {
                out.push(violation(
                    provider,
                    ViolationKind::UnansweredToolCall,
                    self.index,
                    Some(id),
                ));
            }
        }
    }
}

/// OpenAI: the list as chat messages; a user message with `tool_result` blocks becomes tool
/// messages and user messages in block order.
fn openai(messages: &[Message]) -> Vec<Violation> {
    const P: Provider = Provider::OpenAi;
    let mut out = Vec::new();
    let mut open: Option<Open<'_>> = None;
    for (index, m) in messages.iter().enumerate() {
        if m.role() == Role::Ai {
            if let Some(o) = open.take() {
                o.close(P, &mut out);
            }
            let mut calls = Vec::new();
            for call in m.tool_calls() {
                match call.id.as_deref() {
                    Some(id) => calls.push(id),
                    None => out.push(violation(P, ViolationKind::MissingId, index, None)),
                }
            }
            if !calls.is_empty() {
                open = Some(Open {
                    index,
                    calls,
                    answered: HashSet::new(),
                });
            }
            continue;
        }
        let parts: Vec<&Part> = if m.parts.is_empty() {
            vec![&Part::Content]
        } else {
            m.parts.iter().collect()
        };
        for part in parts {
            match part {
                Part::Result(None) => out.push(violation(P, ViolationKind::MissingId, index, None)),
                Part::Result(Some(id)) => match open.as_mut() {
                    Some(o) if o.calls.contains(&id.as_str()) => {
                        if !o.answered.insert(id.as_str()) {
                            out.push(violation(
                                P,
                                ViolationKind::DuplicateToolResult,
                                index,
                                Some(id),
                            ));
                        }
                    }
                    _ => out.push(violation(
                        P,
                        ViolationKind::UnexpectedToolResult,
                        index,
                        Some(id),
                    )),
                },
                Part::Content | Part::Call(_) => {
                    if let Some(o) = open.take() {
                        o.close(P, &mut out);
                    }
                }
            }
        }
    }
    if let Some(o) = open.take() {
        o.close(P, &mut out);
    }
    out
}

/// One Anthropic turn: consecutive messages of one role, system messages left out.
struct Turn<'a> {
    assistant: bool,
    /// `(message index, part)` in order.
    items: Vec<(usize, &'a Part)>,
}

/// Anthropic: turns, each assistant turn's calls answered in the next user turn, results
/// first in their turn.
fn anthropic(messages: &[Message]) -> Vec<Violation> {
    const P: Provider = Provider::Anthropic;
    const CONTENT: Part = Part::Content;
    let mut turns: Vec<Turn<'_>> = Vec::new();
    for (index, m) in messages.iter().enumerate() {
        if m.role() == Role::System {
            continue;
        }
        let assistant = m.role() == Role::Ai;
        if turns.last().is_none_or(|t| t.assistant != assistant) {
            turns.push(Turn {
                assistant,
                items: Vec::new(),
            });
        }
        let Some(turn) = turns.last_mut() else {
            continue;
        };
        if m.parts.is_empty() {
            turn.items.push((index, &CONTENT));
        } else {
            turn.items.extend(m.parts.iter().map(|p| (index, p)));
        }
    }
    let mut out = Vec::new();
    for (t, turn) in turns.iter().enumerate() {
        if turn.assistant {
            let answered: HashSet<&str> = match turns.get(t + 1) {
                Some(next) => next
                    .items
                    .iter()
                    .filter_map(|(_, p)| match p {
                        Part::Result(Some(id)) => Some(id.as_str()),
                        _ => None,
                    })
                    .collect(),
                None => HashSet::new(),
            };
            for (index, part) in &turn.items {
                match part {
                    Part::Call(None) => {
                        out.push(violation(P, ViolationKind::MissingId, *index, None))
                    }
                    Part::Call(Some(id)) if !answered.contains(id.as_str()) => out.push(violation(
                        P,
                        ViolationKind::UnansweredToolCall,
                        *index,
                        Some(id),
                    )),
                    _ => {}
                }
            }
            continue;
        }
        let calls: HashSet<&str> = match t.checked_sub(1).and_then(|p| turns.get(p)) {
            Some(prev) => prev
                .items
                .iter()
                .filter_map(|(_, p)| match p {
                    Part::Call(Some(id)) => Some(id.as_str()),
                    _ => None,
                })
                .collect(),
            None => HashSet::new(),
        };
        let mut seen = HashSet::new();
        let mut content_seen = false;
        for (index, part) in &turn.items {
            match part {
                Part::Content | Part::Call(_) => content_seen = true,
                Part::Result(None) => {
                    out.push(violation(P, ViolationKind::MissingId, *index, None))
                }
                Part::Result(Some(id)) => {
                    if content_seen {
                        out.push(violation(
                            P,
                            ViolationKind::ToolResultAfterContent,
                            *index,
                            Some(id),
                        ));
                    }
                    if !calls.contains(id.as_str()) {
                        out.push(violation(
                            P,
                            ViolationKind::UnexpectedToolResult,
                            *index,
                            Some(id),
                        ));
                    } else if !seen.insert(id.as_str()) {
                        out.push(violation(
                            P,
                            ViolationKind::DuplicateToolResult,
                            *index,
                            Some(id),
                        ));
                    }
                }
            }
        }
    }
    out
}
