//! A scenario for a backend's [`IntegrityScan`]: the scan of an intact thread is empty
//! (emptied channels, values stored in parts and pending writes included), writes recorded
//! for a checkpoint that is not stored are found, and so is a value lost from the store.
//!
//! Losing a value needs the backend's own client, so the backend's tests pass a closure
//! that deletes it (see [`integrity_scan_scenario`]).

use std::future::Future;

use checkpoint_core::{
    ChannelVersion, CheckpointConfig, CheckpointMetadata, IntegrityScan, PutOptions,
    PutWritesOptions, Saver, Source, StorageIssue, TypedValue,
};
use serde_json::json;

use crate::fixtures::{step, val};

/// The channel whose first version [`integrity_scan_scenario`] asks its closure to lose.
pub const LOST_CHANNEL: &str = "notes";

/// Runs the scenario on `thread` (which must be empty):
/// 1. three checkpoints: `notes` set at each step, `big` (a 256 KiB message list, stored in
///    parts where the backend splits large values) set at the first, `scratch` set at the
///    first and emptied at the third; pending writes on the last; the scan is empty;
/// 2. writes recorded for a checkpoint id that is never put: one
///    [`StorageIssue::WritesWithoutCheckpoint`];
/// 3. `lose(thread, version)` deletes, through the backend's client, the stored value of
///    [`LOST_CHANNEL`] at its first version (only the first checkpoint names it): one
///    [`StorageIssue::MissingValue`] for that checkpoint, channel and version, and reads of
///    the checkpoint still succeed.
///
/// Panics (with the scan's result) when the backend disagrees. Deletes the thread at the end.
pub async fn integrity_scan_scenario<S, F, Fut>(saver: &S, thread: &str, lose: F)
where
    S: Saver + IntegrityScan,
    F: FnOnce(String, ChannelVersion) -> Fut,
    Fut: Future<Output = ()>,
{
    saver.delete_thread(thread).await.expect("delete_thread");
    let big: Vec<serde_json::Value> = (0..256)
        .map(|i| json!({"type": "human", "id": format!("m{i}"), "content": "x".repeat(1000)}))
        .collect();
    let mut at = CheckpointConfig::new(thread);
    let mut prev = None;
    let mut ids = Vec::new();
    let mut first_notes_version = None;
    for n in 0..3 {
        let mut changes = vec![(LOST_CHANNEL, Some(val(json!(format!("note {n}")))))];
        if n == 0 {
            changes.push(("big", Some(val(json!(big)))));
            changes.push(("scratch", Some(val(json!("temporary")))));
        }
        if n == 2 {
            changes.push(("scratch", None));
        }
        let (c, versions) = step(prev.as_ref(), &changes);
        if n == 0 {
            first_notes_version = Some(versions[LOST_CHANNEL].clone());
        }
        at = saver
            .put(
                &at,
                c.clone(),
                CheckpointMetadata::for_step(Source::Loop, n),
                versions,
                PutOptions::new(),
            )
            .await
            .expect("put");
        ids.push(c.id.clone());
        prev = Some(c);
    }
    saver
        .put_writes(
            &at,
            vec![("notes".into(), val(json!("pending")))],
            "task-1",
            PutWritesOptions::new(),
        )
        .await
        .expect("put_writes");
    let scan = saver.scan_thread(thread).await.expect("scan");
    assert_eq!(scan, vec![], "an intact thread scans clean");
    assert_eq!(
        saver.scan_thread("no-such-thread").await.expect("scan"),
        vec![]
    );

    let never_put = "1ef00000-0000-6000-8000-0000000000ff";
    saver
        .put_writes(
            &CheckpointConfig::new(thread).with_checkpoint_id(never_put),
            vec![
                ("a".into(), TypedValue::null()),
                ("b".into(), val(json!(1))),
            ],
            "task-2",
            PutWritesOptions::new(),
        )
        .await
        .expect("put_writes");
    assert_eq!(
        saver.scan_thread(thread).await.expect("scan"),
        vec![StorageIssue::WritesWithoutCheckpoint {
            checkpoint_ns: String::new(),
            checkpoint_id: never_put.to_owned(),
            writes: 2,
        }]
    );

    let lost = first_notes_version.expect("set at the first step");
    lose(thread.to_owned(), lost.clone()).await;
    let scan = saver.scan_thread(thread).await.expect("scan");
    assert!(
        scan.contains(&StorageIssue::MissingValue {
            checkpoint_ns: String::new(),
            checkpoint_id: ids[0].clone(),
            channel: LOST_CHANNEL.to_owned(),
            version: lost.to_string(),
        }),
        "the lost value is found: {scan:#?}"
    );
    assert_eq!(scan.len(), 2, "nothing else: {scan:#?}");
    // Several threads at once: the same issues, only for the threads that have some.
    let together = saver
        .scan_threads(&[
            "no-such-thread".to_owned(),
            thread.to_owned(),
            "also-absent".to_owned(),
        ])
        .await
        .expect("scan_threads");
    assert_eq!(
        together.into_iter().collect::<Vec<_>>(),
        vec![(thread.to_owned(), scan.clone())]
    );
    let first = saver
        .get_tuple(&CheckpointConfig::new(thread).with_checkpoint_id(ids[0].clone()))
        .await
        .expect("a checkpoint with a lost value still reads")
        .expect("stored");
    assert!(!first.checkpoint.channel_values.contains_key(LOST_CHANNEL));
    saver.delete_thread(thread).await.expect("delete_thread");
}
