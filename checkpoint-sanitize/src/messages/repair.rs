//! Making a message list acceptable to the providers without losing valid messages.

use std::collections::{BTreeMap, BTreeSet};

use checkpoint_core::{Error, Result, TypedValue};

use super::build::{
    ResultSpec, ToolOutput, result_elements, results_first, strip_results, strip_tool_calls,
};
use super::validate::{Validation, Violation, ViolationKind, validate};
use super::{Item, Message, MessageList, PLACEHOLDER_ID_PREFIX, PLACEHOLDER_TEXT, Part, Role};

/// What to do with a tool call that has no result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OrphanCallPolicy {
    /// Insert a placeholder result ([`RepairOptions::placeholder`], an error result) right
    /// after the call's message and the results it already has. The model sees that the
    /// call was made and did not run. The default.
    #[default]
    InsertPlaceholder,
    /// Remove the call from its message; a message left with neither content nor calls is
    /// removed.
    RemoveCalls,
}

/// How [`MessageList::repair`] repairs.
///
/// Whatever the options, a valid message is never removed and valid messages keep their
/// relative order. Repairs, in order:
/// 1. a user message with `tool_result` blocks after other content gets its results first;
/// 2. a result that answers a call of an earlier message but sits elsewhere (a user message
///    slipped in between, seed 004's concurrent messages) is moved right after that call's
///    results, when `relocate_misplaced_results` is on and the message holds only results for
///    that call's message;
/// 3. results answering no call (or answering one twice) are removed (the block, or the
///    whole message when nothing else is in it);
/// 4. calls without a result are handled per [`orphan_calls`](Self::orphan_calls), except
///    that calls of the last message whose results are in `pending_results` are left alone
///    (they are answered by pending writes the runtime will apply).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairOptions {
    /// Unanswered calls: placeholder (default) or removal.
    pub orphan_calls: OrphanCallPolicy,
    /// Move misplaced results next to their call (default `true`).
    pub relocate_misplaced_results: bool,
    /// The placeholder result (default: an error result saying [`PLACEHOLDER_TEXT`]).
    pub placeholder: ToolOutput,
    /// Ids of calls answered by pending writes not yet applied to the list.
    pub pending_results: BTreeSet<String>,
}

impl Default for RepairOptions {
    fn default() -> Self {
        Self {
            orphan_calls: OrphanCallPolicy::InsertPlaceholder,
            relocate_misplaced_results: true,
            placeholder: ToolOutput::error(PLACEHOLDER_TEXT),
            pending_results: BTreeSet::new(),
        }
    }
}

impl RepairOptions {
    /// Sets the policy for unanswered calls.
    pub fn orphan_calls(mut self, policy: OrphanCallPolicy) -> Self {
        self.orphan_calls = policy;
        self
    }

    /// Turns relocation of misplaced results on or off.
    pub fn relocate_misplaced_results(mut self, yes: bool) -> Self {
        self.relocate_misplaced_results = yes;
        self
    }

    /// Sets the placeholder result.
    pub fn placeholder(mut self, output: ToolOutput) -> Self {
        self.placeholder = output;
        self
    }

    /// Sets the ids answered by pending writes.
    pub fn pending_results(mut self, ids: BTreeSet<String>) -> Self {
        self.pending_results = ids;
        self
    }
}

/// Why a message was removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemovalReason {
    /// It held only tool results that answer no call.
    OrphanToolResult,
    /// It was an AI message whose only content were unanswered (removed) tool calls.
    OnlyOrphanedToolCalls,
}

/// One change made by a repair. Message indexes refer to the list as loaded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RepairAction {
    /// A placeholder result was inserted after the results of message `after_message`.
    InsertedPlaceholder {
        /// The AI message whose call it answers.
        after_message: usize,
        /// The call.
        tool_call_id: String,
        /// The tool's name, when known.
        tool_name: Option<String>,
    },
    /// A tool call was removed from its message.
    RemovedToolCall {
        /// The AI message.
        message_index: usize,
        /// The call (`None`: a call without id).
        tool_call_id: Option<String>,
    },
    /// A `tool_result` block answering no call was removed from a message that is kept.
    RemovedToolResult {
        /// The message.
        message_index: usize,
        /// The id it claimed to answer.
        tool_call_id: Option<String>,
    },
    /// A whole message was removed.
    RemovedMessage {
        /// The message.
        message_index: usize,
        /// Why.
        reason: RemovalReason,
        /// The calls or results it carried.
        tool_call_ids: Vec<String>,
    },
    /// A misplaced result message was moved right after the results of its call's message.
    MovedToolResult {
        /// The moved message.
        message_index: usize,
        /// The AI message whose call it answers.
        after_message: usize,
        /// The calls it answers.
        tool_call_ids: Vec<String>,
    },
    /// A user message's `tool_result` blocks were put before its other content.
    ReorderedToolResults {
        /// The message.
        message_index: usize,
    },
    /// An unanswered call of the last message was left alone: a pending write answers it.
    DeferredToPendingWrite {
        /// The AI message.
        message_index: usize,
        /// The call.
        tool_call_id: String,
    },
}

/// The outcome of [`MessageList::repair`].
#[derive(Clone, Debug)]
pub struct Repaired {
    /// The repaired channel value, `None` when nothing had to change.
    pub value: Option<TypedValue>,
    /// What was changed, in the order it was done.
    pub actions: Vec<RepairAction>,
    /// The validation of the list as loaded.
    pub before: Validation,
    /// The validation of the repaired list.
    pub after: Validation,
    /// Calls left unanswered because pending writes answer them.
    pub deferred: Vec<String>,
}

impl Repaired {
    /// Whether the list was changed.
    pub fn changed(&self) -> bool {
        self.value.is_some()
    }

    /// Violations the repair could not fix, other than calls deferred to pending writes.
    /// Empty for every list this crate can read; anything else means the data is beyond
    /// repair.
    pub fn unresolved(&self) -> Vec<&Violation> {
        self.after
            .violations
            .iter()
            .filter(|v| {
                !(v.kind == ViolationKind::UnansweredToolCall
                    && v.tool_call_id
                        .as_ref()
                        .is_some_and(|id| self.deferred.contains(id)))
            })
            .collect()
    }
}

#[derive(Clone, Debug)]
struct Slot {
    /// Index in the loaded list (`None`: a new message).
    origin: Option<usize>,
    message: Message,
    edited: bool,
}

#[derive(Debug)]
struct Block {
    ai: usize,
    /// Slots after the AI message that continue its results.
    members: Vec<usize>,
    /// Where new results go: after the leading result-only members.
    insert_at: usize,
    missing: Vec<String>,
    idless: bool,
}

/// A result that answers nothing: `(slot, part index, id)`.
type Orphan = (usize, usize, Option<String>);

fn analyse(slots: &[Slot]) -> (Vec<Block>, Vec<Orphan>) {
    let n = slots.len();
    let mut in_block = vec![false; n];
    let mut blocks = Vec::new();
    let mut orphans = Vec::new();
    for (k, slot) in slots.iter().enumerate() {
        let ai = &slot.message;
        if ai.role() != Role::Ai || ai.tool_calls().is_empty() {
            continue;
        }
        let calls: Vec<&str> = ai
            .tool_calls()
            .iter()
            .filter_map(|c| c.id.as_deref())
            .collect();
        let mut members = Vec::new();
        let mut insert_at = k + 1;
        let mut leading = true;
        let mut j = k + 1;
        while let Some(next) = slots.get(j).map(|s| &s.message) {
            if !next.starts_with_result() {
                break;
            }
            members.push(j);
            in_block[j] = true;
            if leading && next.is_result_only() {
                insert_at = j + 1;
            } else {
                leading = false;
            }
            j += 1;
            if next.parts.iter().any(|p| matches!(p, Part::Content)) {
                break;
            }
        }
        let mut answered: BTreeSet<&str> = BTreeSet::new();
        for &m in &members {
            for (p, part) in slots[m].message.parts.iter().enumerate() {
                if let Part::Result(id) = part {
                    match id.as_deref() {
                        Some(id) if calls.contains(&id) && answered.insert(id) => {}
                        _ => orphans.push((m, p, id.clone())),
                    }
                }
            }
        }
        let mut missing: Vec<String> = Vec::new();
        for id in &calls {
            if !answered.contains(id) && !missing.iter().any(|m| m == id) {
                missing.push((*id).to_owned());
            }
        }
        blocks.push(Block {
            ai: k,
            members,
            insert_at,
            missing,
            idless: ai.tool_calls().iter().any(|c| c.id.is_none()),
        });
    }
    for (j, slot) in slots.iter().enumerate() {
        if in_block[j] || slot.message.role() == Role::Ai {
            continue;
        }
        for (p, part) in slot.message.parts.iter().enumerate() {
            if let Part::Result(id) = part {
                orphans.push((j, p, id.clone()));
            }
        }
    }
    (blocks, orphans)
}

fn origin(slots: &[Slot], k: usize) -> usize {
    slots.get(k).and_then(|s| s.origin).unwrap_or(usize::MAX)
}

fn internal(reason: &str) -> Error {
    Error::Serialization {
        reason: format!("message repair: {reason}"),
        source: None,
    }
}

pub(super) fn repair(list: &MessageList, options: &RepairOptions) -> Result<Repaired> {
    let before = list.validate();
    let mut slots: Vec<Slot> = list
        .messages()
        .iter()
        .enumerate()
        .map(|(i, m)| Slot {
            origin: Some(i),
            message: m.clone(),
            edited: false,
        })
        .collect();
    let mut actions = Vec::new();
    let mut deferred = Vec::new();
    if before.is_valid() {
        return Ok(Repaired {
            value: None,
            actions,
            after: before.clone(),
            before,
            deferred,
        });
    }

    // 1. Results first inside user messages.
    for slot in &mut slots {
        let m = &slot.message;
        let first_result = m.parts.iter().position(|p| matches!(p, Part::Result(_)));
        let first_content = m.parts.iter().position(|p| matches!(p, Part::Content));
        if let (Some(r), Some(c)) = (first_result, first_content)
            && c < r
            && m.role() != Role::Ai
            && m.role() != Role::Tool
        {
            slot.message = results_first(m)?;
            slot.edited = true;
            actions.push(RepairAction::ReorderedToolResults {
                message_index: slot.origin.unwrap_or(usize::MAX),
            });
        }
    }

    // 2. Misplaced results moved next to their call.
    if options.relocate_misplaced_results {
        for _ in 0..slots.len() {
            let (blocks, orphans) = analyse(&slots);
            let orphan_slots: BTreeSet<usize> = orphans.iter().map(|o| o.0).collect();
            let mut moved = false;
            for j in orphan_slots {
                let m = &slots[j].message;
                if !m.is_result_only() || m.role() == Role::Ai {
                    continue;
                }
                let ids: Vec<String> = m.tool_results().to_vec();
                if ids.is_empty() || ids.len() != m.parts.len() {
                    continue;
                }
                let unique: BTreeSet<&String> = ids.iter().collect();
                if unique.len() != ids.len() {
                    continue;
                }
                let Some(block) = blocks
                    .iter()
                    .filter(|b| b.ai < j && b.missing.contains(&ids[0]))
                    .max_by_key(|b| b.ai)
                else {
                    continue;
                };
                if !ids.iter().all(|id| block.missing.contains(id)) || block.insert_at >= j {
                    continue;
                }
                let slot = slots.remove(j);
                actions.push(RepairAction::MovedToolResult {
                    message_index: slot.origin.unwrap_or(usize::MAX),
                    after_message: origin(&slots, block.ai),
                    tool_call_ids: ids,
                });
                slots.insert(block.insert_at, slot);
                moved = true;
                break;
            }
            if !moved {
                break;
            }
        }
    }

    // 3. Results that answer nothing.
    let (_, orphans) = analyse(&slots);
    let mut by_slot: BTreeMap<usize, Vec<(usize, Option<String>)>> = BTreeMap::new();
    for (slot, part, id) in orphans {
        by_slot.entry(slot).or_default().push((part, id));
    }
    for (j, dead) in by_slot.into_iter().rev() {
        let m = &slots[j].message;
        let results = m
            .parts
            .iter()
            .filter(|p| matches!(p, Part::Result(_)))
            .count();
        if m.is_result_only() && dead.len() == results {
            let slot = slots.remove(j);
            actions.push(RepairAction::RemovedMessage {
                message_index: slot.origin.unwrap_or(usize::MAX),
                reason: RemovalReason::OrphanToolResult,
                tool_call_ids: dead.into_iter().filter_map(|(_, id)| id).collect(),
            });
        } else {
            let positions: BTreeSet<usize> = dead.iter().map(|(p, _)| *p).collect();
            slots[j].message = strip_results(m, &positions)?;
            slots[j].edited = true;
            for (_, id) in dead {
                actions.push(RepairAction::RemovedToolResult {
                    message_index: slots[j].origin.unwrap_or(usize::MAX),
                    tool_call_id: id,
                });
            }
        }
    }

    // 4. Calls without results, last message first so earlier positions stay put.
    let (blocks, _) = analyse(&slots);
    let n = slots.len();
    for block in blocks.into_iter().rev() {
        let trailing = block.members.last().map_or(block.ai, |&m| m) + 1 == n;
        let mut missing = Vec::new();
        for id in block.missing {
            if trailing && options.pending_results.contains(&id) {
                actions.push(RepairAction::DeferredToPendingWrite {
                    message_index: origin(&slots, block.ai),
                    tool_call_id: id.clone(),
                });
                deferred.push(id);
            } else {
                missing.push(id);
            }
        }
        if missing.is_empty() && !block.idless {
            continue;
        }
        let ai_origin = origin(&slots, block.ai);
        let ai = slots[block.ai].message.clone();
        let remove: BTreeSet<String> = match options.orphan_calls {
            OrphanCallPolicy::RemoveCalls => missing.iter().cloned().collect(),
            OrphanCallPolicy::InsertPlaceholder => BTreeSet::new(),
        };
        if options.orphan_calls == OrphanCallPolicy::InsertPlaceholder && !missing.is_empty() {
            let specs: Vec<ResultSpec<'_>> = missing
                .iter()
                .map(|id| ResultSpec {
                    call_id: id,
                    tool_name: ai
                        .tool_calls()
                        .iter()
                        .find(|c| c.id.as_deref() == Some(id))
                        .and_then(|c| c.name.as_deref()),
                    output: &options.placeholder,
                    message_id: format!("{PLACEHOLDER_ID_PREFIX}{id}"),
                })
                .collect();
            let elements = result_elements(&ai, &specs, list.is_msgpack())?;
            let new_slots = elements
                .iter()
                .map(|e| {
                    Message::from_value(e)
                        .map(|message| Slot {
                            origin: None,
                            message,
                            edited: true,
                        })
                        .ok_or_else(|| internal("a placeholder is not recognizable"))
                })
                .collect::<Result<Vec<_>>>()?;
            for spec in &specs {
                actions.push(RepairAction::InsertedPlaceholder {
                    after_message: ai_origin,
                    tool_call_id: spec.call_id.to_owned(),
                    tool_name: spec.tool_name.map(str::to_owned),
                });
            }
            slots.splice(block.insert_at..block.insert_at, new_slots);
        }
        if remove.is_empty() && !block.idless {
            continue;
        }
        let stripped = strip_tool_calls(&ai, &remove, block.idless)?;
        for id in &remove {
            actions.push(RepairAction::RemovedToolCall {
                message_index: ai_origin,
                tool_call_id: Some(id.clone()),
            });
        }
        if block.idless {
            actions.push(RepairAction::RemovedToolCall {
                message_index: ai_origin,
                tool_call_id: None,
            });
        }
        if stripped.tool_calls().is_empty() && !stripped.has_content() {
            slots.remove(block.ai);
            actions.push(RepairAction::RemovedMessage {
                message_index: ai_origin,
                reason: RemovalReason::OnlyOrphanedToolCalls,
                tool_call_ids: remove.into_iter().collect(),
            });
        } else {
            slots[block.ai].message = stripped;
            slots[block.ai].edited = true;
        }
    }

    let changed = slots.len() != list.len()
        || slots
            .iter()
            .enumerate()
            .any(|(i, s)| s.edited || s.origin != Some(i));
    let value = if changed {
        let items: Vec<Item> = slots
            .iter()
            .map(|s| match (s.origin, s.edited) {
                (Some(i), false) => Item::Keep(i),
                _ => Item::New(s.message.value.clone()),
            })
            .collect();
        Some(list.render(&items)?)
    } else {
        None
    };
    let messages: Vec<Message> = slots.into_iter().map(|s| s.message).collect();
    Ok(Repaired {
        value,
        actions,
        before,
        after: validate(&messages),
        deferred,
    })
}
