//! Seed 004: an AI message with tool calls persisted without its tool results.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple, ListOptions, PutOptions,
    PutWritesOptions, Saver, SaverExt, Source, TypedValue,
};
use serde_json::json;

use super::{ScenarioError, ScenarioResult, call, check, step, unique_thread, within};
use crate::messages::{LangChainMessage, MessageList, Provider, RepairAction};
use crate::{
    ChannelState, Idempotent, IdempotentConfig, SanitizeConfig, SanitizeOnLoad, SkipUnsafePut,
    SkipUnsafePutConfig, UnsafePutPolicy, WriteBack, is_unsafe_put_rejection,
};

pub(super) const MESSAGES: &str = "messages";

pub(super) fn list_of(tuple: &CheckpointTuple) -> Result<MessageList, ScenarioError> {
    let value = tuple
        .checkpoint
        .channel_values
        .get(MESSAGES)
        .ok_or_else(|| ScenarioError::Failed("the checkpoint has no messages".into()))?;
    MessageList::decode(value)?
        .ok_or_else(|| ScenarioError::Failed("the messages channel is not a message list".into()))
}

pub(super) fn element_bytes(list: &MessageList) -> Vec<Vec<u8>> {
    (0..list.len())
        .filter_map(|i| list.element_bytes(i).map(<[u8]>::to_vec))
        .collect()
}

/// Puts `messages` as the next checkpoint after `parent` through `saver`.
pub(super) async fn put_messages(
    saver: &dyn Saver,
    parent: &CheckpointConfig,
    prev: Option<&Checkpoint>,
    messages: &[LangChainMessage],
    extra: Vec<(&str, TypedValue)>,
) -> Result<(CheckpointConfig, Checkpoint), ScenarioError> {
    let mut changes = vec![(MESSAGES, LangChainMessage::message_list(messages)?)];
    changes.extend(extra);
    let (checkpoint, versions) = step(prev, changes);
    let step_no = prev.map_or(0, |_| 1);
    let at = saver
        .put(
            parent,
            checkpoint.clone(),
            CheckpointMetadata::for_step(Source::Loop, step_no),
            versions,
            PutOptions::new(),
        )
        .await?;
    Ok((at, checkpoint))
}

pub(super) fn conversation_with_calls() -> Vec<LangChainMessage> {
    vec![
        LangChainMessage::system("sys", "You are the assistant of a small team."),
        LangChainMessage::human("h-1", "Send the report to Ann and look up room 4B."),
        LangChainMessage::ai(
            "ai-1",
            "On it.",
            vec![
                call("call_email", "send_email", json!({"to": "ann@example.com"})),
                call("call_lookup", "lookup_room", json!({"room": "4B"})),
            ],
        ),
    ]
}

/// Seed 004, the crash: the AI message with tool calls is stored, the tools never ran.
///
/// Reading through [`SanitizeOnLoad`] gives a list both providers accept, with every
/// stored message still there, byte for byte, in order, and a placeholder result after each
/// call; the report says so. Nothing is reset: the stored checkpoint is unchanged. With
/// write-back, the repaired state becomes the new head and the next read needs no repair.
pub async fn seed_004_crash_between_tool_calls_and_results(
    saver: Arc<dyn Saver>,
) -> ScenarioResult {
    let thread = unique_thread("seed004-crash");
    let (first, cp) = put_messages(
        &*saver,
        &CheckpointConfig::new(&thread),
        None,
        &conversation_with_calls()[..2],
        vec![],
    )
    .await?;
    let (crashed_at, _) = put_messages(
        &*saver,
        &first,
        Some(&cp),
        &conversation_with_calls(),
        vec![],
    )
    .await?;
    let stored = saver
        .get_tuple(&crashed_at)
        .await?
        .ok_or_else(|| ScenarioError::Failed("the crashed checkpoint is missing".into()))?;
    let stored_list = list_of(&stored)?;
    check!(
        !stored_list.validate().acceptable_to(Provider::OpenAi),
        "the stored list should be the one OpenAI rejects"
    );

    let sanitizing = SanitizeOnLoad::new(Arc::clone(&saver), SanitizeConfig::default());
    let (tuple, report) = sanitizing
        .get_tuple_with_report(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    let list = list_of(&tuple)?;
    let validation = list.validate();
    check!(
        validation.is_valid(),
        "the loaded list is not valid: {validation:?}"
    );
    check!(report.state == ChannelState::Repaired, "report: {report:?}");
    let placeholders = report
        .actions
        .iter()
        .filter(|a| matches!(a, RepairAction::InsertedPlaceholder { .. }))
        .count();
    check!(
        placeholders == 2,
        "expected two placeholders: {:?}",
        report.actions
    );
    let kept = element_bytes(&stored_list);
    let now = element_bytes(&list);
    check!(
        now.len() == kept.len() + 2 && now[..kept.len()] == kept[..],
        "every stored message must be kept, in order, byte for byte"
    );
    check!(
        saver.get_tuple(&crashed_at).await?.as_ref() == Some(&stored),
        "loading must not change what is stored"
    );

    let writing = SanitizeOnLoad::new(
        Arc::clone(&saver),
        SanitizeConfig::default().write_back(true),
    );
    let (head, report) = writing
        .get_tuple_with_report(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    let WriteBack::Written(at) = &report.write_back else {
        return Err(ScenarioError::Failed(format!(
            "no write-back: {:?}",
            report.write_back
        )));
    };
    check!(
        head.config.checkpoint_id == at.checkpoint_id
            && head
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.clone())
                == crashed_at.checkpoint_id,
        "the repaired state must be a child of the crashed checkpoint"
    );
    let (_, second) = writing
        .get_tuple_with_report(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        second.state == ChannelState::Valid,
        "second read: {second:?}"
    );
    Ok(())
}

/// Seed 004, concurrency: several messages arrive on one thread at once. Each turn (user
/// message, AI tool call, tool result, answer) runs under
/// [`Idempotent::lock_thread`]; the final conversation is valid and no turn's tool call is
/// interleaved with another turn's messages.
pub async fn seed_004_concurrent_messages_do_not_interleave(
    saver: Arc<dyn Saver>,
) -> ScenarioResult {
    let thread = unique_thread("seed004-concurrent");
    let idem = Idempotent::new(
        Arc::clone(&saver),
        IdempotentConfig::default()
            .poll_interval(Duration::from_millis(5))
            .lease_ttl(Duration::from_secs(5)),
    );
    // The thread starts as LangGraph starts one: an input checkpoint.
    put_messages(
        &idem,
        &CheckpointConfig::new(&thread),
        None,
        &[LangChainMessage::system(
            "sys",
            "Answer each question with the lookup tool.",
        )],
        vec![],
    )
    .await?;
    let turns = 6;
    let tasks: Vec<_> = (0..turns)
        .map(|i| {
            let idem = idem.clone();
            let thread = thread.clone();
            tokio::spawn(async move { turn(idem, thread, i).await })
        })
        .collect();
    for task in tasks {
        within(60, "a turn", task)
            .await?
            .map_err(|e| ScenarioError::Failed(format!("a turn panicked: {e}")))??;
    }
    let head = saver
        .get_tuple(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    let list = list_of(&head)?;
    check!(
        list.validate().is_valid(),
        "final list: {:?}",
        list.validate()
    );
    check!(
        list.len() == 1 + turns * 4,
        "expected {} messages, got {}",
        1 + turns * 4,
        list.len()
    );
    for chunk in list.messages()[1..].chunks(4) {
        let turn_of = |id: Option<&str>| id.and_then(|s| s.rsplit('-').next()).map(str::to_owned);
        let ids: Vec<Option<String>> = chunk.iter().map(|m| turn_of(m.id())).collect();
        check!(
            ids.windows(2).all(|w| w[0] == w[1]),
            "a turn was interleaved with another: {ids:?}"
        );
    }
    check!(idem.locked_threads() == 0, "the lock map kept an entry");
    Ok(())
}

/// One chat turn under the thread's lock.
async fn turn(
    idem: Idempotent<Arc<dyn Saver>>,
    thread: String,
    i: usize,
) -> Result<(), ScenarioError> {
    let guard = idem.lock_thread(&thread).await?;
    let head = idem.get_tuple(&CheckpointConfig::new(&thread)).await?;
    let mut messages: Vec<LangChainMessage> = Vec::new();
    let (parent, prev) = match &head {
        Some(t) => (t.config.clone(), Some(t.checkpoint.clone())),
        None => (CheckpointConfig::new(&thread), None),
    };
    let history: Vec<Vec<u8>> = match &head {
        Some(t) => element_bytes(&list_of(t)?),
        None => Vec::new(),
    };
    messages.push(LangChainMessage::human(
        &format!("h-{i}"),
        &format!("question {i}"),
    ));
    let call_id = format!("call-{i}");
    messages.push(LangChainMessage::ai(
        &format!("ai-{i}"),
        "",
        vec![call(&call_id, "lookup", json!({"n": i}))],
    ));
    let with_call = append(&history, &messages)?;
    let (checkpoint, versions) = step(prev.as_ref(), vec![(MESSAGES, with_call)]);
    let at = idem
        .put(
            &parent,
            checkpoint.clone(),
            CheckpointMetadata::for_step(Source::Loop, 1),
            versions,
            PutOptions::new(),
        )
        .await?;
    // The tool takes a while: other messages arrive meanwhile and wait for the lock.
    tokio::time::sleep(Duration::from_millis(10)).await;
    messages.push(LangChainMessage::tool(
        &format!("tool-{i}"),
        &call_id,
        Some("lookup"),
        &format!("result {i}"),
        false,
    ));
    messages.push(LangChainMessage::ai(
        &format!("answer-{i}"),
        &format!("answer {i}"),
        vec![],
    ));
    let done = append(&history, &messages)?;
    let (next, versions) = step(Some(&checkpoint), vec![(MESSAGES, done)]);
    idem.put(
        &at,
        next,
        CheckpointMetadata::for_step(Source::Loop, 2),
        versions,
        PutOptions::new(),
    )
    .await?;
    guard.release().await;
    Ok(())
}

/// A msgpack list: the stored elements (bytes) followed by new messages.
pub(super) fn append(
    history: &[Vec<u8>],
    messages: &[LangChainMessage],
) -> Result<TypedValue, ScenarioError> {
    let new = LangChainMessage::message_list(messages)?;
    let Some(list) = MessageList::decode(&new)? else {
        return Err(ScenarioError::Failed(
            "built messages are not a list".into(),
        ));
    };
    let mut out = Vec::new();
    let n = u32::try_from(history.len() + list.len()).unwrap_or(u32::MAX);
    rmp::encode::write_array_len(&mut out, n)
        .map_err(|e| ScenarioError::Failed(format!("encoding: {e}")))?;
    for element in history {
        out.extend_from_slice(element);
    }
    for i in 0..list.len() {
        out.extend_from_slice(list.element_bytes(i).unwrap_or_default());
    }
    Ok(TypedValue::new(checkpoint_core::ValueType::Msgpack, out))
}

/// Seed 004, the guard: with [`SkipUnsafePut`], the state that ends with unanswered calls is
/// never stored.
///
/// A turn puts the AI message with its calls (skipped: the previous head's config comes
/// back), the tools write their results as pending writes (dropped with the skipped step),
/// then the finished turn is put and stored as a child of the previous head, with a channel
/// changed only in the skipped step carried over. A second turn "crashes" after its AI
/// message. No stored checkpoint ends with unanswered calls, and every parent exists. With
/// the reject policy the put fails with a recognizable error.
pub async fn seed_004_guard_never_persists_unsafe_state(saver: Arc<dyn Saver>) -> ScenarioResult {
    let thread = unique_thread("seed004-guard");
    let guard = SkipUnsafePut::new(Arc::clone(&saver), SkipUnsafePutConfig::default());
    let conversation = conversation_with_calls();
    let (first, cp0) = put_messages(
        &guard,
        &CheckpointConfig::new(&thread),
        None,
        &conversation[..2],
        vec![],
    )
    .await?;
    let (returned, cp1) = put_messages(
        &guard,
        &first,
        Some(&cp0),
        &conversation,
        vec![(
            "scratch",
            TypedValue::msgpack(&json!({"planned": ["send_email", "lookup_room"]}))?,
        )],
    )
    .await?;
    check!(
        returned.checkpoint_id == first.checkpoint_id
            && returned.extra.contains_key(crate::SKIPPED_KEY),
        "the unsafe put must return the previous head's config: {returned:?}"
    );
    check!(
        saver
            .get_tuple(&CheckpointConfig::new(&thread).with_checkpoint_id(cp1.id.clone()))
            .await?
            .is_none(),
        "the unsafe checkpoint must not be stored"
    );
    // The tools node writes its results against the config it was given: dropped.
    guard
        .put_writes(
            &returned,
            vec![(
                MESSAGES.to_owned(),
                LangChainMessage::message_list(&[LangChainMessage::tool(
                    "t-1",
                    "call_email",
                    Some("send_email"),
                    "sent",
                    false,
                )])?,
            )],
            "tools",
            PutWritesOptions::new(),
        )
        .await?;
    check!(
        saver
            .get_tuple(&first)
            .await?
            .is_some_and(|t| t.pending_writes.is_empty()),
        "writes of the skipped step must not land on the previous head"
    );
    let mut finished = conversation.clone();
    finished.push(LangChainMessage::tool(
        "t-1",
        "call_email",
        Some("send_email"),
        "sent",
        false,
    ));
    finished.push(LangChainMessage::tool(
        "t-2",
        "call_lookup",
        Some("lookup_room"),
        "free",
        false,
    ));
    finished.push(LangChainMessage::ai(
        "ai-2",
        "Done: sent, and 4B is free.",
        vec![],
    ));
    let (stored, cp2) = put_messages(&guard, &returned, Some(&cp1), &finished, vec![]).await?;
    let tuple = saver
        .get_tuple(&stored)
        .await?
        .ok_or_else(|| ScenarioError::Failed("the finished turn was not stored".into()))?;
    check!(
        tuple
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone())
            == first.checkpoint_id,
        "the finished turn must descend from the last stored checkpoint"
    );
    check!(
        tuple.checkpoint.channel_values.get("scratch") == cp1.channel_values.get("scratch"),
        "a channel written only in the skipped step must be carried over"
    );
    // Second turn crashes after the AI message.
    let mut second = finished.clone();
    second.push(LangChainMessage::human("h-2", "And book it."));
    second.push(LangChainMessage::ai(
        "ai-3",
        "",
        vec![call("call_book", "book_room", json!({"room": "4B"}))],
    ));
    put_messages(&guard, &stored, Some(&cp2), &second, vec![]).await?;

    let all = saver.list_all(ListOptions::thread(&thread)).await?;
    let ids: HashSet<String> = all.iter().map(|t| t.checkpoint.id.clone()).collect();
    check!(
        all.len() == 2,
        "expected the two safe checkpoints, found {}",
        all.len()
    );
    for t in &all {
        check!(
            list_of(t)?.pending_tool_calls().is_none(),
            "checkpoint {} was stored with unanswered calls",
            t.checkpoint.id
        );
        if let Some(parent) = t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.as_ref())
        {
            check!(
                ids.contains(parent),
                "checkpoint {} names a missing parent",
                t.checkpoint.id
            );
        }
    }

    let rejecting = SkipUnsafePut::new(
        Arc::clone(&saver),
        SkipUnsafePutConfig::default().policy(UnsafePutPolicy::Reject),
    );
    let refused = put_messages(&rejecting, &stored, Some(&cp2), &second, vec![]).await;
    check!(
        matches!(&refused, Err(ScenarioError::Saver(e)) if is_unsafe_put_rejection(e)),
        "the reject policy must refuse the put: {refused:?}"
    );
    Ok(())
}
