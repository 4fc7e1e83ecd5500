//! Quickstart: an agent loop that checkpoints every step, is interrupted for a human, "crashes",
//! and resumes from storage; then a second writer racing on the same thread is stopped by
//! compare-and-set.
//!
//! Run: `cargo run -p checkpoint-core --example quickstart`

use std::sync::Arc;

use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, InMemorySaver, ListOptions,
    PutOptions, PutWritesOptions, Saver, SaverExt, Source, TypedValue, new_checkpoint_id,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Message {
    role: String,
    content: String,
}

fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
    }
}

/// One super-step: append a message, checkpoint it, return the new address.
async fn step(
    saver: &dyn Saver,
    parent: &CheckpointConfig,
    prev: Option<&Checkpoint>,
    message: Message,
    step: i64,
) -> Result<(CheckpointConfig, Checkpoint), Error> {
    let mut checkpoint = prev.map_or_else(Checkpoint::new, Checkpoint::successor);
    let mut messages: Vec<Message> = checkpoint.get("messages")?.unwrap_or_default();
    messages.push(message);
    let version = checkpoint.set("messages", &messages)?;
    let source = if step < 0 {
        Source::Input
    } else {
        Source::Loop
    };
    let metadata = CheckpointMetadata::for_step(source, step).with_run_id("run-1");
    // Only `messages` changed: only it is stored; unchanged channels are never re-stored.
    let new_versions = [("messages".to_owned(), version)].into();
    // Compare-and-set: succeeds only if `parent` is still the head of the thread.
    let config = saver
        .put(
            parent,
            checkpoint.clone(),
            metadata,
            new_versions,
            PutOptions::compare_and_set(),
        )
        .await?;
    Ok((config, checkpoint))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let saver: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    let thread = CheckpointConfig::new("support-chat-42");

    // The graph runs three steps, then asks a human for approval.
    let (c1, cp1) = step(
        &*saver,
        &thread,
        None,
        msg("user", "Refund order #1001, please."),
        -1,
    )
    .await?;
    let (c2, cp2) = step(
        &*saver,
        &c1,
        Some(&cp1),
        msg("ai", "I can refund it. Shall I proceed?"),
        0,
    )
    .await?;
    // The interrupt is recorded durably against the checkpoint *before* it is reported.
    saver
        .put_writes(
            &c2,
            vec![(
                INTERRUPT.into(),
                TypedValue::msgpack("approve refund of #1001?")?,
            )],
            &new_checkpoint_id(),
            PutWritesOptions::new(),
        )
        .await?;
    println!(
        "paused at {} waiting for a human",
        c2.checkpoint_id.as_deref().unwrap_or("?")
    );
    drop(cp2); // the process "crashes": nothing in memory survives but the saver.

    // A new process resumes from storage: latest checkpoint plus its pending interrupt.
    let resumed = saver
        .get_tuple(&thread)
        .await?
        .expect("the thread has a checkpoint");
    let question: String = resumed
        .pending_writes
        .iter()
        .find(|w| w.channel == INTERRUPT)
        .expect("pending interrupt")
        .value
        .decode()?;
    println!(
        "resumed {}: pending question {question:?}",
        resumed.config.thread_id
    );
    let (c3, _) = step(
        &*saver,
        &resumed.config,
        Some(&resumed.checkpoint),
        msg("ai", "Refund issued."),
        1,
    )
    .await?;

    // A second worker still holding the old head tries to write: compare-and-set refuses,
    // so the thread's history can never fork silently.
    match step(
        &*saver,
        &resumed.config,
        Some(&resumed.checkpoint),
        msg("ai", "Refund issued twice!"),
        1,
    )
    .await
    {
        Err(Error::Conflict {
            expected, found, ..
        }) => {
            println!("stale writer rejected: expected head {expected:?}, found {found:?}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }

    // History, newest first.
    println!("history of {}:", thread.thread_id);
    for t in saver
        .list_all(ListOptions::thread(&thread.thread_id))
        .await?
    {
        let messages: Vec<Message> = t.checkpoint.require("messages")?;
        println!(
            "  {} step={:?} messages={} last={:?}",
            t.checkpoint.id,
            t.metadata.step(),
            messages.len(),
            messages.last().map(|m| m.content.as_str())
        );
    }
    assert_eq!(saver.get_tuple(&thread).await?.map(|t| t.config), Some(c3));
    Ok(())
}
