//! `SanitizeOnLoad` behaviors beyond the conformance suite: repairs on every read path,
//! reports (method, hook; tracing lives in `sanitize_on_load_tracing.rs`), pending writes, undecodable values, write-back rules.

use std::sync::{Arc, Mutex};

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, InMemorySaver, ListOptions, PutOptions,
    PutWritesOptions, Saver, SaverExt, TypedValue, ValueType,
};
use checkpoint_sanitize::messages::{LangChainMessage, MessageList, ToolCall};
use checkpoint_sanitize::{
    ChannelState, ReportHook, SanitizeConfig, SanitizeOnLoad, SanitizeOnLoadLayer,
    UndecodablePolicy, WriteBack,
};
use tower_layer::Layer;

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: Some(id.into()),
        name: Some("search".into()),
        args: Some(serde_json::json!({"q": id})),
    }
}

fn crashed_list() -> TypedValue {
    LangChainMessage::message_list(&[
        LangChainMessage::human("h1", "look it up"),
        LangChainMessage::ai("a1", "", vec![call("call_1")]),
    ])
    .unwrap()
}

async fn put(saver: &dyn Saver, thread: &str, value: TypedValue) -> CheckpointConfig {
    let mut cp = Checkpoint::new();
    let v = cp.set_typed("messages", value);
    saver
        .put(
            &CheckpointConfig::new(thread),
            cp,
            CheckpointMetadata::new(),
            [("messages".to_owned(), v)].into(),
            PutOptions::new(),
        )
        .await
        .unwrap()
}

fn valid(t: &checkpoint_core::CheckpointTuple) -> bool {
    MessageList::decode(&t.checkpoint.channel_values["messages"])
        .unwrap()
        .unwrap()
        .validate()
        .is_valid()
}

#[tokio::test]
async fn get_tuple_and_list_both_return_repaired_lists_and_the_hook_sees_each_repair() {
    let inner = InMemorySaver::new();
    let at = put(&inner, "t", crashed_list()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook = {
        let seen = Arc::clone(&seen);
        ReportHook::new(move |r| seen.lock().unwrap().push(r.clone()))
    };
    let s =
        SanitizeOnLoadLayer::new(SanitizeConfig::default().on_report(hook)).layer(inner.clone());
    let t = s
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert!(valid(&t));
    assert_eq!(t.config, at, "the view keeps the loaded address");
    let listed = s.list_all(ListOptions::thread("t")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(valid(&listed[0]));
    let reports = seen.lock().unwrap().clone();
    assert_eq!(reports.len(), 2);
    assert!(
        reports
            .iter()
            .all(|r| r.state == ChannelState::Repaired && r.actions.len() == 1)
    );
    assert_eq!(reports[0].violations.len(), 2, "one per provider");
    // The store is untouched.
    let raw = inner.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(raw.checkpoint.channel_values["messages"], crashed_list());
}

#[tokio::test]
async fn calls_answered_by_pending_writes_are_left_for_the_runtime() {
    let inner = InMemorySaver::new();
    let at = put(&inner, "t", crashed_list()).await;
    let result = LangChainMessage::message_list(&[LangChainMessage::tool(
        "tm1",
        "call_1",
        Some("search"),
        "found",
        false,
    )])
    .unwrap();
    inner
        .put_writes(
            &at,
            vec![("messages".into(), result)],
            "tools",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    let s = SanitizeOnLoad::new(inner, SanitizeConfig::default().write_back(true));
    let (t, report) = s.get_tuple_with_report(&at).await.unwrap().unwrap();
    assert_eq!(report.state, ChannelState::Valid, "{report:?}");
    assert_eq!(report.deferred, ["call_1"]);
    assert_eq!(report.write_back, WriteBack::NotRequested);
    assert_eq!(t.checkpoint.channel_values["messages"], crashed_list());
}

#[tokio::test]
async fn write_back_is_skipped_when_the_checkpoint_has_pending_writes() {
    let inner = InMemorySaver::new();
    let at = put(&inner, "t", crashed_list()).await;
    inner
        .put_writes(
            &at,
            vec![("other".into(), TypedValue::msgpack(&1).unwrap())],
            "task",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    let s = SanitizeOnLoad::new(inner.clone(), SanitizeConfig::default().write_back(true));
    let (t, report) = s
        .get_tuple_with_report(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert!(valid(&t));
    assert!(
        matches!(report.write_back, WriteBack::Skipped { .. }),
        "{report:?}"
    );
    assert_eq!(
        inner
            .list_all(ListOptions::thread("t"))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn write_back_stores_a_child_with_update_metadata() {
    let inner = InMemorySaver::new();
    let at = put(&inner, "t", crashed_list()).await;
    let s = SanitizeOnLoad::new(inner.clone(), SanitizeConfig::default().write_back(true));
    let (t, report) = s
        .get_tuple_with_report(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    let WriteBack::Written(new) = &report.write_back else {
        panic!("{report:?}")
    };
    assert_eq!(&t.config, new);
    assert_eq!(t.parent_config.as_ref(), Some(&at));
    assert_eq!(t.metadata.source(), Some(checkpoint_core::Source::Update));
    assert!(t.metadata.get(checkpoint_sanitize::METADATA_KEY).is_some());
    assert!(valid(&inner.get_tuple(new).await.unwrap().unwrap()));
    // An older checkpoint addressed explicitly is repaired in view; its write-back loses the
    // compare-and-set against the new head.
    let (old, report) = s.get_tuple_with_report(&at).await.unwrap().unwrap();
    assert!(valid(&old));
    assert!(
        matches!(report.write_back, WriteBack::Skipped { .. }),
        "{report:?}"
    );
}

#[tokio::test]
async fn values_that_are_not_message_lists_are_returned_byte_for_byte() {
    let inner = InMemorySaver::new();
    let s = SanitizeOnLoad::new(inner.clone(), SanitizeConfig::default());
    for (i, value) in [
        TypedValue::msgpack(&vec!["hello", "world"]).unwrap(),
        TypedValue::json(&serde_json::json!([{"a": 1}])).unwrap(),
        TypedValue::from_bytes(vec![0, 1, 2]),
        TypedValue::new(ValueType::from("pickle"), vec![0x80, 0x04]),
        TypedValue::msgpack(&serde_json::json!({"role": "assistant"})).unwrap(),
    ]
    .into_iter()
    .enumerate()
    {
        let thread = format!("t{i}");
        put(&inner, &thread, value.clone()).await;
        let (t, report) = s
            .get_tuple_with_report(&CheckpointConfig::new(&thread))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t.checkpoint.channel_values["messages"], value);
        assert_eq!(report.state, ChannelState::NotMessages, "{value:?}");
    }
}

#[tokio::test]
async fn undecodable_values_pass_through_or_fail_by_policy() {
    let inner = InMemorySaver::new();
    let broken = TypedValue::new(ValueType::Msgpack, vec![0x92, 0xc1]);
    put(&inner, "t", broken.clone()).await;
    let s = SanitizeOnLoad::new(inner.clone(), SanitizeConfig::default());
    let (t, report) = s
        .get_tuple_with_report(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.checkpoint.channel_values["messages"], broken);
    assert!(matches!(report.state, ChannelState::Undecodable { .. }));
    let strict = SanitizeOnLoad::new(
        inner,
        SanitizeConfig::default().undecodable(UndecodablePolicy::Fail),
    );
    assert!(strict.get_tuple(&CheckpointConfig::new("t")).await.is_err());
}

#[tokio::test]
async fn a_custom_channel_name_is_honored() {
    let inner = InMemorySaver::new();
    let mut cp = Checkpoint::new();
    let v = cp.set_typed("chat", crashed_list());
    inner
        .put(
            &CheckpointConfig::new("t"),
            cp,
            CheckpointMetadata::new(),
            [("chat".to_owned(), v)].into(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    let default = SanitizeOnLoad::new(inner.clone(), SanitizeConfig::default());
    let (_, report) = default
        .get_tuple_with_report(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.state, ChannelState::Absent);
    let custom = SanitizeOnLoad::new(inner, SanitizeConfig::default().channel("chat"));
    let (t, report) = custom
        .get_tuple_with_report(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.state, ChannelState::Repaired);
    assert!(
        MessageList::decode(&t.checkpoint.channel_values["chat"])
            .unwrap()
            .unwrap()
            .validate()
            .is_valid()
    );
}
