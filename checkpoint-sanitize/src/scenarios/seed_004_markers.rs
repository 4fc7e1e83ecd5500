//! Seed 004, markers: in-flight tool calls recorded before the tools run, and resolved
//! after a crash.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use checkpoint_core::{BoxError, CheckpointConfig, Saver};
use serde_json::json;

use super::seed_004::{conversation_with_calls, list_of, put_messages};
use super::{ScenarioError, ScenarioResult, call, check, unique_thread};
use crate::messages::{LangChainMessage, ToolCall, ToolOutput};
use crate::{
    CallState, Decision, PendingMarkers, PendingMarkersConfig, Resolution, SkipUnsafePut,
    SkipUnsafePutConfig, ToolReplayer,
};

/// Replays lookups, counting them.
#[derive(Debug, Default)]
struct Tools {
    replays: Mutex<BTreeMap<String, usize>>,
    count: AtomicUsize,
}

#[async_trait]
impl ToolReplayer for Tools {
    async fn replay(&self, call: &ToolCall) -> Result<ToolOutput, BoxError> {
        self.count.fetch_add(1, Ordering::SeqCst);
        let id = call.id.clone().unwrap_or_default();
        *self
            .replays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id)
            .or_default() += 1;
        Ok(ToolOutput::ok(format!(
            "room {} is free",
            call.args
                .as_ref()
                .map_or(json!(null), |a| a["room"].clone())
        )))
    }
}

/// Seed 004, markers: in-flight calls are recorded before the tools run and resolved after
/// a crash.
///
/// Without the guard: the AI message is stored, its markers are written, the process dies.
/// The outstanding calls are both marked; recovery replays the idempotent lookup (once) and
/// discards the email with a placeholder; the new head is valid and nothing is outstanding.
/// A call handed to a human stays outstanding until the human's answer is written. With the
/// guard below the markers, the AI message is not stored, the marker keeps it, and recovery
/// restores it with the results.
pub async fn seed_004_markers_replay_or_resolve(saver: Arc<dyn Saver>) -> ScenarioResult {
    let config = PendingMarkersConfig::default().idempotent_tool("lookup_room");
    let markers = PendingMarkers::new(Arc::clone(&saver), config.clone());
    let thread = unique_thread("seed004-markers");
    let conversation = conversation_with_calls();
    let (first, cp0) = put_messages(
        &markers,
        &CheckpointConfig::new(&thread),
        None,
        &conversation[..2],
        vec![],
    )
    .await?;
    let (crashed, _) = put_messages(&markers, &first, Some(&cp0), &conversation, vec![]).await?;
    let outstanding = markers
        .outstanding(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        outstanding.checkpoint.checkpoint_id == crashed.checkpoint_id
            && outstanding.calls.len() == 2
            && outstanding
                .calls
                .iter()
                .all(|c| c.marked && c.message_in_state && c.state == CallState::InFlight),
        "both calls must be outstanding and marked: {outstanding:?}"
    );
    let tools = Tools::default();
    let recovery = markers
        .recover(&CheckpointConfig::new(&thread), &tools)
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        recovery.replayed == ["call_lookup"] && recovery.resolved.discarded == ["call_email"],
        "recovery: {recovery:?}"
    );
    check!(
        tools.count.load(Ordering::SeqCst) == 1,
        "the lookup must be replayed once"
    );
    let head = saver
        .get_tuple(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        list_of(&head)?.validate().is_valid(),
        "recovered list: {:?}",
        list_of(&head)?.validate()
    );
    let after = markers.outstanding(&CheckpointConfig::new(&thread)).await?;
    check!(
        after.is_some_and(|o| o.is_empty()),
        "calls are still outstanding after recovery"
    );
    let again = markers
        .recover(&CheckpointConfig::new(&thread), &tools)
        .await?;
    check!(
        again.is_some_and(|r| r.replayed.is_empty()) && tools.count.load(Ordering::SeqCst) == 1,
        "a second recovery must not replay anything"
    );

    // Handed to a human, then answered.
    let mut more = conversation.clone();
    more.push(LangChainMessage::tool(
        "t-1",
        "call_email",
        Some("send_email"),
        "sent",
        false,
    ));
    more.push(LangChainMessage::tool(
        "t-2",
        "call_lookup",
        Some("lookup_room"),
        "free",
        false,
    ));
    more.push(LangChainMessage::ai(
        "ai-2",
        "",
        vec![call("call_wire", "wire_money", json!({"eur": 500}))],
    ));
    let (wire_at, _) = put_messages(
        &markers,
        &head.config,
        Some(&head.checkpoint),
        &more,
        vec![],
    )
    .await?;
    markers
        .resolve(
            &wire_at,
            vec![Decision::new("call_wire", Resolution::HandToHuman)],
        )
        .await?;
    let waiting = markers
        .outstanding(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        waiting.calls.len() == 1 && waiting.calls[0].state == CallState::AwaitingHuman,
        "the wire must wait for a human: {waiting:?}"
    );
    let answered = markers
        .resolve(
            &waiting.checkpoint,
            vec![Decision::new(
                "call_wire",
                Resolution::Result(ToolOutput::ok("approved by Dana, sent")),
            )],
        )
        .await?;
    check!(
        answered.checkpoint.is_some(),
        "the human's answer must be written"
    );
    check!(
        markers
            .outstanding(&CheckpointConfig::new(&thread))
            .await?
            .is_some_and(|o| o.is_empty()),
        "the answered call is still outstanding"
    );

    // With the guard below: the AI message is never stored; the marker keeps it.
    let guarded = PendingMarkers::new(
        SkipUnsafePut::new(Arc::clone(&saver), SkipUnsafePutConfig::default()),
        config,
    );
    let thread = unique_thread("seed004-markers-guarded");
    let (first, cp0) = put_messages(
        &guarded,
        &CheckpointConfig::new(&thread),
        None,
        &conversation[..2],
        vec![],
    )
    .await?;
    let (returned, _) = put_messages(&guarded, &first, Some(&cp0), &conversation, vec![]).await?;
    check!(
        returned.checkpoint_id == first.checkpoint_id,
        "the guard must skip the unsafe put"
    );
    let outstanding = guarded
        .outstanding(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        outstanding.calls.len() == 2
            && outstanding
                .calls
                .iter()
                .all(|c| c.marked && !c.message_in_state),
        "the skipped calls must be known from their marker: {outstanding:?}"
    );
    let recovery = guarded
        .recover(&CheckpointConfig::new(&thread), &tools)
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    check!(
        recovery.replayed == ["call_lookup"],
        "recovery: {recovery:?}"
    );
    let head = saver
        .get_tuple(&CheckpointConfig::new(&thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("no head".into()))?;
    let list = list_of(&head)?;
    check!(
        list.validate().is_valid(),
        "recovered list: {:?}",
        list.validate()
    );
    check!(
        list.messages().iter().any(|m| m.id() == Some("ai-1")),
        "the AI message must be restored from its marker"
    );
    Ok(())
}
