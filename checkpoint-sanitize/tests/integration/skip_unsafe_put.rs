//! `SkipUnsafePut` behaviors beyond the conformance suite and the seed 004 scenario:
//! compare-and-set on skipped puts, interrupts that make a skipped state durable, parents
//! naming a skipped id, puts without parent, imports over skipped state.

use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, InMemorySaver, ListOptions,
    PutOptions, PutWritesOptions, Saver, SaverExt, TypedValue,
};
use checkpoint_sanitize::messages::{LangChainMessage, ToolCall};
use checkpoint_sanitize::{
    SKIPPED_KEY, SkipUnsafePut, SkipUnsafePutConfig, UnsafeCheck, is_unsafe_put_rejection,
};

fn safe() -> TypedValue {
    LangChainMessage::message_list(&[LangChainMessage::human("h1", "hi")]).unwrap()
}

fn unsafe_list() -> TypedValue {
    LangChainMessage::message_list(&[
        LangChainMessage::human("h1", "hi"),
        LangChainMessage::ai(
            "a1",
            "",
            vec![ToolCall {
                id: Some("call_1".into()),
                name: Some("approve".into()),
                args: None,
            }],
        ),
    ])
    .unwrap()
}

fn next(
    prev: Option<&Checkpoint>,
    value: TypedValue,
) -> (Checkpoint, checkpoint_core::ChannelVersions) {
    let mut cp = prev.map_or_else(Checkpoint::new, Checkpoint::successor);
    let v = cp.set_typed("messages", value);
    (cp, [("messages".to_owned(), v)].into())
}

async fn setup() -> (
    InMemorySaver,
    SkipUnsafePut<InMemorySaver>,
    CheckpointConfig,
    Checkpoint,
) {
    let inner = InMemorySaver::new();
    let guard = SkipUnsafePut::new(inner.clone(), SkipUnsafePutConfig::default());
    let (cp, v) = next(None, safe());
    let at = guard
        .put(
            &CheckpointConfig::new("t"),
            cp.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    (inner, guard, at, cp)
}

/// Puts a child of `cp` (stored at `at`) that ends with an unanswered tool call: the
/// wrapper skips it. Returns the skipped checkpoint.
async fn skip_one(
    guard: &SkipUnsafePut<InMemorySaver>,
    at: &CheckpointConfig,
    cp: &Checkpoint,
) -> Checkpoint {
    let (skipped, v) = next(Some(cp), unsafe_list());
    guard
        .put(
            at,
            skipped.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    skipped
}

#[tokio::test]
async fn a_put_without_parent_cannot_be_skipped_and_is_rejected() {
    let guard = SkipUnsafePut::new(InMemorySaver::new(), SkipUnsafePutConfig::default());
    let (cp, v) = next(None, unsafe_list());
    let err = guard
        .put(
            &CheckpointConfig::new("t"),
            cp.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap_err();
    assert!(is_unsafe_put_rejection(&err), "{err}");
    assert_eq!(guard.unsafe_calls(&cp), Some(vec!["call_1".to_owned()]));
}

#[tokio::test]
async fn a_skipped_compare_and_set_put_still_detects_a_moved_head() {
    let (inner, guard, at, cp) = setup().await;
    // Someone else moves the head.
    let (other, v) = next(Some(&cp), safe());
    inner
        .put(&at, other, CheckpointMetadata::new(), v, PutOptions::new())
        .await
        .unwrap();
    let (mine, v) = next(Some(&cp), unsafe_list());
    let err = guard
        .put(
            &at,
            mine,
            CheckpointMetadata::new(),
            v,
            PutOptions::compare_and_set(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
}

#[tokio::test]
async fn an_interrupt_on_a_skipped_checkpoint_stores_it_after_all() {
    let (inner, guard, at, cp) = setup().await;
    let (paused, v) = next(Some(&cp), unsafe_list());
    let returned = guard
        .put(
            &at,
            paused.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(returned.checkpoint_id, at.checkpoint_id);
    assert_eq!(returned.extra[SKIPPED_KEY], paused.id.as_str());
    // The approval node interrupts before running the tool: a deliberate pause.
    guard
        .put_writes(
            &returned,
            vec![(
                INTERRUPT.into(),
                TypedValue::msgpack(&"approve call_1?").unwrap(),
            )],
            "human_review",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    let head = inner
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.checkpoint.id, paused.id, "the paused state is durable");
    assert_eq!(head.parent_config.unwrap().checkpoint_id, at.checkpoint_id);
    assert_eq!(head.pending_writes.len(), 1);
    assert_eq!(head.pending_writes[0].channel, INTERRUPT);
    // A put naming the returned config now continues from the stored pause.
    let (resumed, v) = next(Some(&paused), safe());
    let stored = guard
        .put(
            &returned,
            resumed,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t = inner.get_tuple(&stored).await.unwrap().unwrap();
    assert_eq!(
        t.parent_config.unwrap().checkpoint_id.as_deref(),
        Some(paused.id.as_str())
    );
}

#[tokio::test]
async fn a_parent_naming_a_skipped_id_maps_to_the_stored_ancestor() {
    let (inner, guard, at, cp) = setup().await;
    let skipped = skip_one(&guard, &at, &cp).await;
    // A runtime that ignores the returned config names the skipped id as parent.
    let (done, v) = next(Some(&skipped), safe());
    let stored = guard
        .put(
            &CheckpointConfig::new("t").with_checkpoint_id(skipped.id.clone()),
            done,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t = inner.get_tuple(&stored).await.unwrap().unwrap();
    assert_eq!(t.parent_config.unwrap().checkpoint_id, at.checkpoint_id);
    // Writes addressed to the skipped id directly are dropped too.
    guard
        .put_writes(
            &CheckpointConfig::new("t").with_checkpoint_id(skipped.id.clone()),
            vec![("messages".into(), safe())],
            "tools",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    let all = inner.list_all(ListOptions::thread("t")).await.unwrap();
    assert!(all.iter().all(|t| t.pending_writes.is_empty()));
    assert_eq!(all.len(), 2);
}

#[tokio::test]
async fn the_strict_check_refuses_any_violation_not_only_trailing_calls() {
    let inner = InMemorySaver::new();
    let strict = SkipUnsafePut::new(
        inner,
        SkipUnsafePutConfig::default().check(UnsafeCheck::AnyViolation),
    );
    let orphan_result = LangChainMessage::message_list(&[
        LangChainMessage::tool("t1", "call_gone", None, "stale", false),
        LangChainMessage::human("h1", "hi"),
    ])
    .unwrap();
    let (cp, _) = next(None, orphan_result);
    assert!(strict.unsafe_calls(&cp).is_some());
    let lenient = SkipUnsafePut::new(InMemorySaver::new(), SkipUnsafePutConfig::default());
    assert!(lenient.unsafe_calls(&cp).is_none());
}

#[tokio::test]
async fn an_import_makes_the_wrapper_forget_what_it_skipped_in_those_threads() {
    let (inner, guard, at, cp) = setup().await;
    let skipped = skip_one(&guard, &at, &cp).await;
    // A migration brings the skipped id in as a stored checkpoint (say, from a store
    // written without the wrapper): from now on it is a real parent, not a skipped one.
    let address = CheckpointConfig::new("t").with_checkpoint_id(skipped.id.clone());
    guard
        .import(vec![checkpoint_core::CheckpointTuple {
            config: address.clone(),
            checkpoint: skipped.clone(),
            metadata: CheckpointMetadata::new(),
            parent_config: Some(at.clone()),
            pending_writes: Vec::new(),
        }])
        .await
        .unwrap();
    let (done, v) = next(Some(&skipped), safe());
    let stored = guard
        .put(
            &address,
            done,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    let t = inner.get_tuple(&stored).await.unwrap().unwrap();
    assert_eq!(
        t.parent_config.unwrap().checkpoint_id,
        Some(skipped.id.clone()),
        "the imported checkpoint is the parent, not the ancestor the skip mapped it to"
    );
    // Writes addressed to it are stored, not dropped as writes of a skipped step.
    guard
        .put_writes(
            &address,
            vec![("messages".into(), safe())],
            "tools",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    let imported = inner.get_tuple(&address).await.unwrap().unwrap();
    assert_eq!(imported.pending_writes.len(), 1);
}
