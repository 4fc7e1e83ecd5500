//! `PendingMarkers` behaviors beyond the seed 004 scenario: markers clear as results land,
//! decisions are checked, JSON (lc) lists get results in their own format.

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, InMemorySaver, PutOptions,
    PutWritesOptions, Saver, TypedValue, ValueType,
};
use checkpoint_sanitize::messages::{
    LangChainMessage, MessageFormat, MessageList, ToolCall, ToolOutput,
};
use checkpoint_sanitize::pending_markers::MARKER_CHANNEL;
use checkpoint_sanitize::{Decision, PendingMarkers, PendingMarkersConfig, Resolution};

fn calls() -> Vec<ToolCall> {
    ["call_a", "call_b"]
        .into_iter()
        .map(|id| ToolCall {
            id: Some(id.into()),
            name: Some("search".into()),
            args: Some(serde_json::json!({"q": id})),
        })
        .collect()
}

fn with_calls() -> TypedValue {
    LangChainMessage::message_list(&[
        LangChainMessage::human("h1", "find a and b"),
        LangChainMessage::ai("a1", "", calls()),
    ])
    .unwrap()
}

async fn put(
    saver: &dyn Saver,
    parent: &CheckpointConfig,
    prev: Option<&Checkpoint>,
    value: TypedValue,
) -> (CheckpointConfig, Checkpoint) {
    let mut cp = prev.map_or_else(Checkpoint::new, Checkpoint::successor);
    let v = cp.set_typed("messages", value);
    let at = saver
        .put(
            parent,
            cp.clone(),
            CheckpointMetadata::new(),
            [("messages".to_owned(), v)].into(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    (at, cp)
}

#[tokio::test]
async fn markers_are_written_with_the_put_and_clear_as_results_land() {
    let inner = InMemorySaver::new();
    let markers = PendingMarkers::new(inner.clone(), PendingMarkersConfig::default());
    let (at, cp) = put(&markers, &CheckpointConfig::new("t"), None, with_calls()).await;
    let stored = inner.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(stored.pending_writes.len(), 1);
    assert_eq!(stored.pending_writes[0].channel, MARKER_CHANNEL);
    let out = markers
        .outstanding(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.calls.len(), 2);

    // The tools task writes one result as a pending write: that call is no longer out.
    let result = LangChainMessage::message_list(&[LangChainMessage::tool(
        "t1",
        "call_a",
        Some("search"),
        "A",
        false,
    )])
    .unwrap();
    markers
        .put_writes(
            &at,
            vec![("messages".into(), result)],
            "tools",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    let out = markers
        .outstanding(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<_> = out
        .calls
        .iter()
        .map(|c| c.call.id.clone().unwrap())
        .collect();
    assert_eq!(ids, ["call_b"]);

    // The next checkpoint holds both results: nothing is outstanding.
    let done = LangChainMessage::message_list(&[
        LangChainMessage::human("h1", "find a and b"),
        LangChainMessage::ai("a1", "", calls()),
        LangChainMessage::tool("t1", "call_a", Some("search"), "A", false),
        LangChainMessage::tool("t2", "call_b", Some("search"), "B", false),
    ])
    .unwrap();
    let (next_at, _) = put(&markers, &at, Some(&cp), done).await;
    assert!(
        inner
            .get_tuple(&next_at)
            .await
            .unwrap()
            .unwrap()
            .pending_writes
            .is_empty()
    );
    assert!(
        markers
            .outstanding(&CheckpointConfig::new("t"))
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn decisions_must_name_outstanding_calls_once() {
    let markers = PendingMarkers::new(InMemorySaver::new(), PendingMarkersConfig::default());
    let (at, _) = put(&markers, &CheckpointConfig::new("t"), None, with_calls()).await;
    let unknown = markers
        .resolve(&at, vec![Decision::new("call_zzz", Resolution::Discard)])
        .await;
    assert!(
        matches!(unknown, Err(Error::InvalidInput { .. })),
        "{unknown:?}"
    );
    let twice = markers
        .resolve(
            &at,
            vec![
                Decision::new("call_a", Resolution::Discard),
                Decision::new("call_a", Resolution::HandToHuman),
            ],
        )
        .await;
    assert!(
        matches!(twice, Err(Error::InvalidInput { .. })),
        "{twice:?}"
    );
    let missing = markers
        .resolve(
            &CheckpointConfig::new("nobody").with_checkpoint_id("x"),
            vec![],
        )
        .await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
}

#[tokio::test]
async fn results_in_an_lc_json_list_are_written_in_lc_form() {
    let list = serde_json::json!([
        {"lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "HumanMessage"],
         "kwargs": {"content": "find a", "type": "human", "id": "h1"}},
        {"lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "AIMessage"],
         "kwargs": {"content": "", "type": "ai", "id": "a1",
                    "tool_calls": [{"name": "search", "args": {"q": "a"}, "id": "call_a", "type": "tool_call"}]}}
    ]);
    let value = TypedValue::new(ValueType::Json, serde_json::to_vec(&list).unwrap());
    let markers = PendingMarkers::new(InMemorySaver::new(), PendingMarkersConfig::default());
    let (at, _) = put(&markers, &CheckpointConfig::new("t"), None, value).await;
    let resolved = markers
        .resolve(
            &at,
            vec![Decision::new(
                "call_a",
                Resolution::Result(ToolOutput::ok("found a")),
            )],
        )
        .await
        .unwrap();
    let head = markers
        .get_tuple(resolved.checkpoint.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let value = &head.checkpoint.channel_values["messages"];
    assert_eq!(value.type_tag, ValueType::Json);
    let list = MessageList::decode(value).unwrap().unwrap();
    assert!(list.validate().is_valid());
    let result = &list.messages()[2];
    assert_eq!(result.format(), MessageFormat::LangChainLc);
    assert_eq!(result.tool_results(), ["call_a".to_owned()]);
    let json: serde_json::Value = serde_json::from_slice(&value.bytes).unwrap();
    assert_eq!(
        json[2]["id"],
        serde_json::json!(["langchain_core", "messages", "ToolMessage"])
    );
    assert_eq!(json[2]["kwargs"]["content"], "found a");
    assert_eq!(json[0], list_first(&list));
}

fn list_first(list: &MessageList) -> serde_json::Value {
    serde_json::from_slice(list.element_bytes(0).unwrap()).unwrap()
}
