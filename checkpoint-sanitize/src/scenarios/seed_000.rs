//! Seed 000: the interrupt checkpoint is durable, the process dies before the question is
//! presented; lazy recovery on read presents it exactly once, keyed by the checkpoint id.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    CheckpointConfig, CheckpointMetadata, Claim, PutOptions, PutWritesOptions, Saver, Source,
    TypedValue,
};
use serde_json::json;

use super::{ScenarioError, ScenarioResult, check, step, unique_thread, within};
use crate::messages::LangChainMessage;
use crate::{EffectKey, Idempotent, IdempotentConfig, Once, OnceError, Origin};

/// The conversation store of the report: messages shown to the user, with a unique index on
/// the idempotency key in their metadata (the report's option B).
#[derive(Debug, Default)]
struct Conversation {
    /// key → message text.
    messages: Mutex<BTreeMap<String, String>>,
    /// How many times the side effect's code ran (crashed runs included).
    runs: AtomicUsize,
}

impl Conversation {
    /// Inserts unless a message with `key` exists; returns the message id (the key).
    fn present(&self, key: &str, text: String) -> String {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_insert(text);
        key.to_owned()
    }

    fn count(&self) -> usize {
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// `ensureInterruptPresented` of the report: when the head is paused at an interrupt, present
/// its question once per checkpoint. With `die_after_writing`, the process "dies" right after
/// writing the message, before the outcome is recorded (the task never finishes).
async fn ensure_presented(
    idem: Idempotent<Arc<dyn Saver>>,
    thread: String,
    conversation: Arc<Conversation>,
    die_after_writing: bool,
) -> Result<Option<Once<String>>, ScenarioError> {
    let Some(head) = idem.get_tuple(&CheckpointConfig::new(thread)).await? else {
        return Ok(None);
    };
    let Some(interrupt) = head.pending_writes.iter().find(|w| w.channel == INTERRUPT) else {
        return Ok(None);
    };
    let question: serde_json::Value = interrupt.value.decode()?;
    let key = EffectKey::for_checkpoint(&head.config, "present_interrupt")?;
    let outcome = idem
        .once(&key, move |ctx| async move {
            let id = conversation.present(&ctx.key, format!("Please choose: {question}"));
            if die_after_writing {
                futures::future::pending::<()>().await;
            }
            Ok::<_, Infallible>(id)
        })
        .await;
    match outcome {
        Ok(once) => Ok(Some(once)),
        Err(OnceError::Saver(e)) => Err(e.into()),
        Err(other) => Err(ScenarioError::Failed(format!("presenting failed: {other}"))),
    }
}

/// Seed 000 (see the [module docs](super)).
///
/// A graph pauses at an interrupt: its checkpoint and the interrupt write are durable. Then
/// three processes die in turn: one after claiming the side effect but before writing the
/// message, two right after writing it but before recording the outcome. Then eight readers
/// load the thread concurrently and each runs the lazy recovery. Exactly one message exists
/// (the conversation store dedupes by the key, the checkpoint id), all readers get its id, a
/// later read replays the recorded outcome, and the crashed runs show the fine print: the
/// code ran more than once, the message was written once.
pub async fn seed_000_interrupt_presented_exactly_once(saver: Arc<dyn Saver>) -> ScenarioResult {
    if !saver.capabilities().ledger {
        return Err(ScenarioError::Unsupported("the idempotency ledger"));
    }
    let thread = unique_thread("seed000");
    let messages = LangChainMessage::message_list(&[LangChainMessage::human(
        "h-1",
        "Classify my portfolio, please.",
    )])?;
    let (checkpoint, versions) = step(None, vec![("messages", messages)]);
    let at = saver
        .put(
            &CheckpointConfig::new(&thread),
            checkpoint,
            CheckpointMetadata::for_step(Source::Loop, 1),
            versions,
            PutOptions::new(),
        )
        .await?;
    let question =
        json!({"type": "classification_options", "options": ["growth", "income", "balanced"]});
    saver
        .put_writes(
            &at,
            vec![(INTERRUPT.to_owned(), TypedValue::msgpack(&question)?)],
            "present_classification",
            PutWritesOptions::new(),
        )
        .await?;

    let conversation = Arc::new(Conversation::default());
    let short = Idempotent::new(
        Arc::clone(&saver),
        IdempotentConfig::default()
            .claim_ttl(Duration::from_millis(150))
            .poll_interval(Duration::from_millis(10)),
    );
    let key = EffectKey::for_checkpoint(&at, "present_interrupt")?;

    // Crash 1: the process claimed the effect and died before writing anything.
    let claim = saver
        .claim(&short.ledger_key(&key), Duration::from_millis(100))
        .await?;
    check!(
        matches!(claim, Claim::Acquired { .. }),
        "first claim: {claim:?}"
    );

    // Crashes 2 and 3: the message is written, the process dies before recording it.
    for crash in 2..=3 {
        let runs = conversation.runs.load(Ordering::SeqCst);
        let task = tokio::spawn(ensure_presented(
            short.clone(),
            thread.clone(),
            Arc::clone(&conversation),
            true,
        ));
        within(10, "a crashing run", async {
            while conversation.runs.load(Ordering::SeqCst) == runs {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await?;
        task.abort();
        check!(
            task.await.is_err_and(|e| e.is_cancelled()),
            "crash {crash}: the run was supposed to die"
        );
    }
    check!(
        conversation.count() == 1,
        "after the crashes the conversation holds {} messages",
        conversation.count()
    );

    // Concurrent reads, each running the lazy recovery.
    let idem = Idempotent::new(
        Arc::clone(&saver),
        IdempotentConfig::default().poll_interval(Duration::from_millis(10)),
    );
    let readers: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(ensure_presented(
                idem.clone(),
                thread.clone(),
                Arc::clone(&conversation),
                false,
            ))
        })
        .collect();
    let mut ids = Vec::new();
    let mut ran = 0;
    for reader in readers {
        let once = within(30, "a reader", reader)
            .await?
            .map_err(|e| ScenarioError::Failed(format!("reader panicked: {e}")))??
            .ok_or_else(|| ScenarioError::Failed("the head lost its interrupt".into()))?;
        if once.origin == Origin::Ran {
            ran += 1;
        }
        ids.push(once.value);
    }
    check!(ran == 1, "{ran} readers ran the effect; exactly one must");
    check!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "readers got different message ids: {ids:?}"
    );
    check!(
        conversation.count() == 1,
        "the question was written {} times",
        conversation.count()
    );
    let key_text = ids.first().cloned().unwrap_or_default();
    let checkpoint_id = at.checkpoint_id.clone().unwrap_or_default();
    check!(
        key_text.contains(&checkpoint_id),
        "the idempotency key {key_text:?} must contain the checkpoint id {checkpoint_id:?}"
    );
    // A later read replays the recorded outcome without running anything.
    let runs = conversation.runs.load(Ordering::SeqCst);
    let again = ensure_presented(
        idem.clone(),
        thread.clone(),
        Arc::clone(&conversation),
        false,
    )
    .await?
    .ok_or_else(|| ScenarioError::Failed("the head lost its interrupt".into()))?;
    check!(
        again.origin == Origin::Replayed,
        "a later read ran the effect again"
    );
    check!(
        conversation.runs.load(Ordering::SeqCst) == runs,
        "a replay must not run the effect"
    );
    // The fine print: the code ran in each crashed process that got the claim, and the
    // downstream key made it exactly once.
    check!(
        runs >= 3,
        "the crashed runs should have run the effect's code ({runs} runs)"
    );
    Ok(())
}
