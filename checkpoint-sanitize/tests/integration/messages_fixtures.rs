//! The message decoder, validator and repair against lists written by the real Python
//! libraries (`fixtures/generate.py`: LangGraph's serializer, LangChain's lc and dict forms,
//! the OpenAI and Anthropic formats as the LangChain integrations send them).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use checkpoint_core::{TypedValue, ValueType};
use checkpoint_sanitize::messages::{
    MessageFormat, MessageList, OrphanCallPolicy, PLACEHOLDER_TEXT, Provider, RepairAction,
    RepairOptions, Role,
};
use serde_json::Value as Json;

struct Case {
    file: String,
    name: String,
    form: String,
    value: TypedValue,
    expected: Json,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn load(path: &Path) -> (Json, TypedValue) {
    let doc: Json = serde_json::from_slice(&std::fs::read(path).expect("read fixture")).unwrap();
    let tag = ValueType::from(doc["type"].as_str().unwrap());
    let value = TypedValue::new(tag, hex(doc["hex"].as_str().unwrap()));
    (doc, value)
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures().join("cases"))
        .expect("fixtures/cases exists (run fixtures/generate.py)")
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        let (doc, value) = load(&path);
        out.push(Case {
            file: path.file_name().unwrap().to_string_lossy().into_owned(),
            name: doc["name"].as_str().unwrap().to_owned(),
            form: doc["form"].as_str().unwrap().to_owned(),
            value,
            expected: doc["expected"].clone(),
        });
    }
    assert!(
        out.len() >= 60,
        "expected the generated cases, found {}",
        out.len()
    );
    out
}

fn case(name: &str, form: &str) -> Case {
    cases()
        .into_iter()
        .find(|c| c.name == name && c.form == form)
        .unwrap_or_else(|| panic!("no fixture {name}.{form}"))
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Ai => "ai",
        Role::Tool => "tool",
        Role::Human => "human",
        Role::System => "system",
        _ => "other",
    }
}

fn decode(c: &Case) -> MessageList {
    MessageList::decode(&c.value)
        .unwrap_or_else(|e| panic!("{}: {e}", c.file))
        .unwrap_or_else(|| panic!("{}: not recognized as a message list", c.file))
}

#[test]
fn every_fixture_decodes_to_the_messages_python_wrote() {
    for c in cases() {
        let list = decode(&c);
        let expected = c.expected["messages"].as_array().unwrap();
        assert_eq!(list.len(), expected.len(), "{}", c.file);
        for (i, (m, e)) in list.messages().iter().zip(expected).enumerate() {
            assert_eq!(role_name(m.role()), e["role"], "{} message {i}", c.file);
            let calls: Vec<&str> = m
                .tool_calls()
                .iter()
                .filter_map(|t| t.id.as_deref())
                .collect();
            let want: Vec<&str> = e["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(calls, want, "{} message {i} tool calls", c.file);
            let results: Vec<&str> = m.tool_results().iter().map(String::as_str).collect();
            let want: Vec<&str> = e["tool_results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(results, want, "{} message {i} tool results", c.file);
        }
    }
}

#[test]
fn validator_agrees_with_the_provider_rules_each_case_was_built_for() {
    for c in cases() {
        let v = decode(&c).validate();
        let valid = c.expected["valid"].as_bool().unwrap();
        assert_eq!(v.is_valid(), valid, "{}: {:?}", c.file, v.violations);
        for p in Provider::ALL {
            assert_eq!(
                v.acceptable_to(p),
                valid,
                "{} for {p:?}: {:?}",
                c.file,
                v.violations
            );
        }
    }
}

/// The element bytes of a list, in order.
fn elements(list: &MessageList) -> Vec<Vec<u8>> {
    (0..list.len())
        .map(|i| list.element_bytes(i).unwrap().to_vec())
        .collect()
}

/// Indexes of loaded messages a repair changed, moved or removed.
fn touched(actions: &[RepairAction]) -> BTreeSet<usize> {
    actions
        .iter()
        .filter_map(|a| match a {
            RepairAction::RemovedToolCall { message_index, .. }
            | RepairAction::RemovedToolResult { message_index, .. }
            | RepairAction::RemovedMessage { message_index, .. }
            | RepairAction::MovedToolResult { message_index, .. }
            | RepairAction::ReorderedToolResults { message_index } => Some(*message_index),
            _ => None,
        })
        .collect()
}

fn is_subsequence(needles: &[Vec<u8>], haystack: &[Vec<u8>]) -> bool {
    let mut it = haystack.iter();
    needles.iter().all(|n| it.any(|h| h == n))
}

#[test]
fn repair_makes_every_list_valid_and_keeps_untouched_messages_byte_for_byte() {
    for policy in [
        OrphanCallPolicy::InsertPlaceholder,
        OrphanCallPolicy::RemoveCalls,
    ] {
        for c in cases() {
            let list = decode(&c);
            let repaired = list
                .repair(&RepairOptions::default().orphan_calls(policy))
                .unwrap();
            let valid = c.expected["valid"].as_bool().unwrap();
            assert_eq!(repaired.changed(), !valid, "{} {policy:?}", c.file);
            assert!(
                repaired.after.is_valid(),
                "{} {policy:?}: {:?}",
                c.file,
                repaired.after
            );
            assert!(repaired.unresolved().is_empty());
            let Some(value) = &repaired.value else {
                assert!(repaired.actions.is_empty());
                continue;
            };
            assert_eq!(value.type_tag, c.value.type_tag, "{}", c.file);
            let again = MessageList::decode(value)
                .unwrap()
                .unwrap_or_else(|| panic!("{}: repaired list not recognized", c.file));
            assert!(again.validate().is_valid(), "{} {policy:?}", c.file);
            // Untouched messages are all there, in order, with their exact bytes.
            let touched = touched(&repaired.actions);
            let kept: Vec<Vec<u8>> = elements(&list)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !touched.contains(i))
                .map(|(_, b)| b)
                .collect();
            assert!(
                is_subsequence(&kept, &elements(&again)),
                "{} {policy:?}: untouched messages changed or reordered: {:?}",
                c.file,
                repaired.actions
            );
            // Repairing is idempotent.
            let twice = again
                .repair(&RepairOptions::default().orphan_calls(policy))
                .unwrap();
            assert!(!twice.changed(), "{} {policy:?}", c.file);
        }
    }
}

#[test]
fn placeholders_are_the_elements_langgraph_itself_writes() {
    let c = case("crash_after_tool_calls", "langgraph_msgpack");
    let list = decode(&c);
    let repaired = list.repair(&RepairOptions::default()).unwrap();
    let again = MessageList::decode(repaired.value.as_ref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(again.len(), list.len() + 2);
    // [system, human, ai, placeholder(call_email), placeholder(call_room)]
    for (i, call) in [(3, "call_email"), (4, "call_room")] {
        let (doc, expected) =
            load(&fixtures().join(format!("placeholders/{call}.langgraph_msgpack.json")));
        assert_eq!(
            again.element_bytes(i).unwrap(),
            &expected.bytes[..],
            "placeholder for {call} differs from LangGraph's ToolMessage"
        );
        let m = &again.messages()[i];
        assert_eq!(m.role(), Role::Tool);
        assert_eq!(m.tool_results(), [call.to_owned()]);
        // The same placeholder in the lc JSON form equals LangChain's dumpd output.
        let lc_case = case("crash_after_tool_calls", "lc_json");
        let lc_list = decode(&lc_case);
        let lc_repaired = lc_list.repair(&RepairOptions::default()).unwrap();
        let lc_json: Json = serde_json::from_slice(&lc_repaired.value.unwrap().bytes).unwrap();
        assert_eq!(lc_json[i], doc["lc"], "lc placeholder for {call}");
    }
    assert_eq!(
        repaired.actions,
        vec![
            RepairAction::InsertedPlaceholder {
                after_message: 2,
                tool_call_id: "call_email".into(),
                tool_name: Some("send_email".into()),
            },
            RepairAction::InsertedPlaceholder {
                after_message: 2,
                tool_call_id: "call_room".into(),
                tool_name: Some("book_room".into()),
            },
        ]
    );
}

#[test]
fn placeholders_follow_the_format_of_each_list() {
    for form in [
        "langchain_dict_msgpack",
        "message_to_dict_msgpack",
        "openai_msgpack",
        "openai_json",
        "anthropic_json",
        "delta_snapshot_msgpack",
    ] {
        let c = case("crash_after_tool_calls", form);
        let list = decode(&c);
        let repaired = list.repair(&RepairOptions::default()).unwrap();
        let value = repaired.value.unwrap();
        let again = MessageList::decode(&value).unwrap().unwrap();
        let dynamic = value.to_dynamic().unwrap();
        let ai = again
            .messages()
            .iter()
            .position(|m| m.role() == Role::Ai)
            .unwrap();
        match form {
            "anthropic_json" => {
                // One user message with both tool_result blocks, errors flagged.
                assert_eq!(again.len(), list.len() + 1, "{form}");
                let json: Json = serde_json::from_slice(&value.bytes).unwrap();
                assert_eq!(json[ai + 1]["role"], "user");
                let blocks = json[ai + 1]["content"].as_array().unwrap();
                assert_eq!(blocks.len(), 2);
                for (b, id) in blocks.iter().zip(["call_email", "call_room"]) {
                    assert_eq!(b["type"], "tool_result");
                    assert_eq!(b["tool_use_id"], id);
                    assert_eq!(b["is_error"], true);
                    assert_eq!(b["content"], PLACEHOLDER_TEXT);
                }
            }
            "openai_msgpack" | "openai_json" => {
                assert_eq!(again.len(), list.len() + 2, "{form}");
                for (i, id) in [(ai + 1, "call_email"), (ai + 2, "call_room")] {
                    let m = &again.messages()[i];
                    assert_eq!(m.role(), Role::Tool, "{form}");
                    assert_eq!(m.tool_results(), [id.to_owned()]);
                    assert_eq!(m.format(), MessageFormat::OpenAi, "{form}");
                }
            }
            "delta_snapshot_msgpack" => {
                assert!(
                    matches!(dynamic, rmpv::Value::Ext(7, _)),
                    "stays a delta snapshot"
                );
                assert_eq!(again.len(), list.len() + 2);
            }
            _ => {
                assert_eq!(again.len(), list.len() + 2, "{form}");
                for i in [ai + 1, ai + 2] {
                    let m = &again.messages()[i];
                    assert_eq!(m.role(), Role::Tool, "{form}");
                    assert_eq!(m.format(), list.messages()[ai].format(), "{form}");
                }
            }
        }
    }
}

#[test]
fn interleaved_user_message_is_repaired_by_moving_the_real_result() {
    for form in ["langgraph_msgpack", "lc_json", "openai_json"] {
        let c = case("interleaved_user_message", form);
        let list = decode(&c);
        let repaired = list.repair(&RepairOptions::default()).unwrap();
        assert_eq!(
            repaired.actions,
            vec![RepairAction::MovedToolResult {
                message_index: 3,
                after_message: 1,
                tool_call_ids: vec!["call_time".into()],
            }],
            "{form}"
        );
        let again = MessageList::decode(repaired.value.as_ref().unwrap())
            .unwrap()
            .unwrap();
        // The real result (not a placeholder) now answers the call; nothing was lost.
        let order: Vec<Vec<u8>> = elements(&again);
        let original = elements(&list);
        assert_eq!(
            order,
            vec![
                original[0].clone(),
                original[1].clone(),
                original[3].clone(),
                original[2].clone()
            ]
        );
    }
    // Anthropic's form has the result inside the user message, after its text.
    let c = case("interleaved_user_message", "anthropic_json");
    let repaired = decode(&c).repair(&RepairOptions::default()).unwrap();
    assert_eq!(
        repaired.actions,
        vec![RepairAction::ReorderedToolResults { message_index: 2 }]
    );
}

#[test]
fn remove_policy_keeps_the_ai_text_and_drops_only_the_calls() {
    let c = case("crash_after_tool_calls", "langgraph_msgpack");
    let list = decode(&c);
    let repaired = list
        .repair(&RepairOptions::default().orphan_calls(OrphanCallPolicy::RemoveCalls))
        .unwrap();
    let again = MessageList::decode(repaired.value.as_ref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(again.len(), list.len());
    let ai = &again.messages()[2];
    assert_eq!(ai.role(), Role::Ai);
    assert!(ai.tool_calls().is_empty());
    assert!(ai.has_content(), "\"On it.\" is kept");
    // A message that had only the orphaned calls is removed whole.
    let c = case("invalid_tool_call_unanswered", "langgraph_msgpack");
    let list = decode(&c);
    let repaired = list
        .repair(&RepairOptions::default().orphan_calls(OrphanCallPolicy::RemoveCalls))
        .unwrap();
    let again = MessageList::decode(repaired.value.as_ref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(again.len(), 1);
    assert!(repaired.actions.iter().any(|a| matches!(
        a,
        RepairAction::RemovedMessage {
            message_index: 1,
            ..
        }
    )));
}

#[test]
fn calls_answered_by_pending_writes_are_deferred_not_patched() {
    let c = case("crash_after_tool_calls", "langgraph_msgpack");
    let list = decode(&c);
    let options = RepairOptions::default().pending_results(["call_email".to_owned()].into());
    let repaired = list.repair(&options).unwrap();
    assert_eq!(repaired.deferred, ["call_email"]);
    assert!(repaired.unresolved().is_empty());
    let again = MessageList::decode(repaired.value.as_ref().unwrap())
        .unwrap()
        .unwrap();
    let answered: Vec<&str> = again
        .messages()
        .iter()
        .flat_map(|m| m.tool_results())
        .map(String::as_str)
        .collect();
    assert_eq!(answered, ["call_room"]);
}
