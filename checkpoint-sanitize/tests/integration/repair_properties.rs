//! Properties of decoding and repair over random conversations in every format, and over
//! hostile input.

use checkpoint_core::{TypedValue, ValueType};
use checkpoint_sanitize::messages::{
    LangChainMessage, MessageList, OrphanCallPolicy, RepairAction, RepairOptions, ToolCall,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One step of a generated conversation.
#[derive(Clone, Debug)]
enum Op {
    Human,
    System,
    /// An AI message with this many calls (0: plain text).
    Ai(usize),
    /// A tool result for the n-th call made so far (modulo), or for an unknown id.
    Result(Option<usize>),
    /// An Anthropic user turn with text then a result (wrong order), or a result then text.
    Mixed(Option<usize>, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Human),
        1 => Just(Op::System),
        3 => (0usize..3).prop_map(Op::Ai),
        4 => proptest::option::weighted(0.85, 0usize..8).prop_map(Op::Result),
        1 => (proptest::option::weighted(0.85, 0usize..8), any::<bool>()).prop_map(|(r, t)| Op::Mixed(r, t)),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Form {
    LangGraph,
    OpenAi,
    Anthropic,
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![
        Just(Form::LangGraph),
        Just(Form::OpenAi),
        Just(Form::Anthropic)
    ]
}

/// Builds the channel value for `ops` in `form`.
fn build(ops: &[Op], form: Form) -> TypedValue {
    let mut calls: Vec<String> = Vec::new();
    let mut lc: Vec<LangChainMessage> = Vec::new();
    let mut dicts: Vec<Value> = Vec::new();
    let pick = |calls: &Vec<String>, r: &Option<usize>| match r {
        Some(n) if !calls.is_empty() => calls[n % calls.len()].clone(),
        _ => "call_unknown".to_owned(),
    };
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Human => {
                lc.push(LangChainMessage::human(&format!("h{i}"), "hello"));
                dicts.push(json!({"role": "user", "content": "hello"}));
            }
            Op::System => {
                lc.push(LangChainMessage::system(&format!("s{i}"), "be brief"));
                dicts.push(json!({"role": "system", "content": "be brief"}));
            }
            Op::Ai(n) => {
                let ids: Vec<String> = (0..*n).map(|k| format!("call_{i}_{k}")).collect();
                calls.extend(ids.iter().cloned());
                let tc: Vec<ToolCall> = ids
                    .iter()
                    .map(|id| ToolCall {
                        id: Some(id.clone()),
                        name: Some("t".into()),
                        args: Some(json!({"x": 1})),
                    })
                    .collect();
                let text = if *n == 0 { "answer" } else { "" };
                lc.push(LangChainMessage::ai(&format!("a{i}"), text, tc));
                dicts.push(match form {
                    Form::Anthropic => {
                        let mut blocks = vec![json!({"type": "text", "text": "thinking"})];
                        blocks.extend(ids.iter().map(|id| json!({"type": "tool_use", "id": id, "name": "t", "input": {"x": 1}})));
                        json!({"role": "assistant", "content": blocks})
                    }
                    _ if ids.is_empty() => json!({"role": "assistant", "content": text}),
                    _ => json!({"role": "assistant", "content": "", "tool_calls": ids.iter().map(|id| json!({
                        "id": id, "type": "function", "function": {"name": "t", "arguments": "{\"x\": 1}"}})).collect::<Vec<_>>()}),
                });
            }
            Op::Result(r) => {
                let id = pick(&calls, r);
                lc.push(LangChainMessage::tool(
                    &format!("r{i}"),
                    &id,
                    Some("t"),
                    "ok",
                    false,
                ));
                dicts.push(match form {
                    Form::Anthropic => json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}),
                    _ => json!({"role": "tool", "tool_call_id": id, "content": "ok"}),
                });
            }
            Op::Mixed(r, text_first) => {
                let id = pick(&calls, r);
                lc.push(LangChainMessage::tool(
                    &format!("r{i}"),
                    &id,
                    Some("t"),
                    "ok",
                    false,
                ));
                let result = json!({"type": "tool_result", "tool_use_id": id, "content": "ok"});
                let text = json!({"type": "text", "text": "and also"});
                dicts.push(match form {
                    Form::Anthropic if *text_first => {
                        json!({"role": "user", "content": [text, result]})
                    }
                    Form::Anthropic => json!({"role": "user", "content": [result, text]}),
                    _ => json!({"role": "tool", "tool_call_id": id, "content": "ok"}),
                });
            }
        }
    }
    match form {
        Form::LangGraph => LangChainMessage::message_list(&lc).unwrap(),
        _ => TypedValue::new(ValueType::Json, serde_json::to_vec(&dicts).unwrap()),
    }
}

fn elements(list: &MessageList) -> Vec<Vec<u8>> {
    (0..list.len())
        .map(|i| list.element_bytes(i).unwrap().to_vec())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn repair_always_yields_a_valid_list_that_keeps_untouched_messages(
        ops in proptest::collection::vec(op(), 0..14),
        form in form(),
        remove in any::<bool>(),
        relocate in any::<bool>(),
    ) {
        let value = build(&ops, form);
        let list = MessageList::decode(&value).unwrap().expect("a message list");
        prop_assert_eq!(list.len(), ops.len());
        let options = RepairOptions::default()
            .orphan_calls(if remove { OrphanCallPolicy::RemoveCalls } else { OrphanCallPolicy::InsertPlaceholder })
            .relocate_misplaced_results(relocate);
        let repaired = list.repair(&options).unwrap();
        prop_assert!(repaired.after.is_valid(), "{:?}\n{:?}", repaired.after, repaired.actions);
        prop_assert!(repaired.unresolved().is_empty());
        prop_assert_eq!(repaired.changed(), !list.validate().is_valid());
        let Some(out) = &repaired.value else { return Ok(()); };
        let again = MessageList::decode(out).unwrap().expect("still a message list");
        prop_assert!(again.validate().is_valid());
        // Untouched messages: same bytes, same relative order.
        let touched: Vec<usize> = repaired.actions.iter().filter_map(|a| match a {
            RepairAction::RemovedToolCall { message_index, .. }
            | RepairAction::RemovedToolResult { message_index, .. }
            | RepairAction::RemovedMessage { message_index, .. }
            | RepairAction::MovedToolResult { message_index, .. }
            | RepairAction::ReorderedToolResults { message_index } => Some(*message_index),
            _ => None,
        }).collect();
        let kept: Vec<Vec<u8>> = elements(&list).into_iter().enumerate()
            .filter(|(i, _)| !touched.contains(i)).map(|(_, b)| b).collect();
        let now = elements(&again);
        let mut it = now.iter();
        prop_assert!(kept.iter().all(|k| it.any(|n| n == k)), "untouched messages lost or reordered");
        // Removals only ever concern invalid messages: with placeholders, no AI message goes.
        if !remove {
            let removed_ai = repaired.actions.iter().any(|a| matches!(a,
                RepairAction::RemovedMessage { reason: checkpoint_sanitize::messages::RemovalReason::OnlyOrphanedToolCalls, .. }));
            prop_assert!(!removed_ai);
        }
        let twice = again.repair(&options).unwrap();
        prop_assert!(!twice.changed(), "repair is idempotent: {:?}", twice.actions);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), json in any::<bool>()) {
        let tag = if json { ValueType::Json } else { ValueType::Msgpack };
        let value = TypedValue::new(tag, bytes);
        if let Ok(Some(list)) = MessageList::decode(&value) {
            let _ = list.validate();
            let _ = list.repair(&RepairOptions::default());
        }
    }

    #[test]
    fn arbitrary_message_shaped_lists_are_always_repairable(v in message_like()) {
        let list = Value::Array(vec![v.clone(), json!({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}), v]);
        for value in [
            TypedValue::json(&list).unwrap(),
            TypedValue::msgpack(&list).unwrap(),
        ] {
            if let Ok(Some(decoded)) = MessageList::decode(&value) {
                // Whatever is recognized as a message list can be repaired.
                let repaired = decoded.repair(&RepairOptions::default()).unwrap();
                prop_assert!(repaired.unresolved().is_empty(), "{:?}", repaired.after);
            }
        }
    }
}

/// JSON values built from the keys and values messages use, nested a little.
fn message_like() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("role"),
        Just("type"),
        Just("content"),
        Just("tool_calls"),
        Just("tool_call_id"),
        Just("id"),
        Just("lc"),
        Just("kwargs"),
        Just("data"),
        Just("tool_use_id"),
        Just("function"),
        Just("additional_kwargs"),
        Just("invalid_tool_calls"),
    ];
    let leaf = prop_oneof![
        Just(json!("assistant")),
        Just(json!("user")),
        Just(json!("tool")),
        Just(json!("ai")),
        Just(json!("tool_use")),
        Just(json!("tool_result")),
        Just(json!("constructor")),
        Just(json!(1)),
        Just(json!(null)),
        Just(json!("c")),
        Just(json!(["langchain", "AIMessage"])),
    ];
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..5).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}
