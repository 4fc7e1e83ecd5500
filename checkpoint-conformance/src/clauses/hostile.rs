//! Hostile input: identifiers, metadata filter keys and values that look like syntax of some
//! store (SQL, Redis keys and globs, MongoDB operators and paths, JSON paths) are data.

use checkpoint_core::{
    CheckpointMetadata, Error, ListOptions, PutOptions, PutWritesOptions, Saver,
};
use serde_json::{Value, json};

use crate::fixtures::{cfg, ids, list, step, val};
use crate::{SaverFactory, build};

/// Identifiers that look like syntax (quotes, NUL, glob and key characters, `$`, `|`,
/// SQL) or are huge or empty are stored and matched exactly, or rejected with
/// `InvalidInput`, never misinterpreted.
pub async fn hostile_identifiers_are_exact_or_rejected(f: &dyn SaverFactory) {
    let s = build(f).await;
    let mut hostile: Vec<String> = [
        "'",
        "\"",
        "`",
        "'); DROP TABLE checkpoints;--",
        "\0",
        "nul\0inside",
        "*",
        "?",
        "[a]",
        "[!a]",
        "{t}",
        "{",
        "}",
        ":",
        "a:b",
        "$",
        "$1",
        "$where",
        "|",
        "a|b:c",
        "\\",
        "\\0",
        "%",
        "_",
        "a%",
        " ",
        " lead",
        "trail ",
        "\n\t",
        "ünïcødé 🙂",
        "a*",
        "ab",
        "a",
        "a.b",
        "NULL",
        "null",
        "-1",
        "0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    hostile.push("x".repeat(64 * 1024));
    hostile.push(String::new());

    let mut stored_threads = Vec::new();
    for h in &hostile {
        // As thread id.
        let (c, v) = step(None, &[("ch", Some(val(json!(h))))]);
        match s
            .put(
                &cfg(h, ""),
                c.clone(),
                CheckpointMetadata::new().with("who", h.clone()),
                v,
                PutOptions::new(),
            )
            .await
        {
            Ok(config) => {
                assert_eq!(config.thread_id, *h);
                let t = s.get_tuple(&cfg(h, "")).await.unwrap().unwrap();
                assert_eq!(t.checkpoint, c, "thread {h:?}");
                stored_threads.push((h.clone(), c.id.clone()));
            }
            Err(Error::InvalidInput { .. }) => {
                if !h.is_empty() {
                    let r = s.get_tuple(&cfg(h, "")).await;
                    assert!(
                        matches!(r, Ok(None) | Err(Error::InvalidInput { .. })),
                        "rejected thread {h:?} stored: {r:?}"
                    );
                }
            }
            Err(e) => panic!("thread id {h:?}: expected success or InvalidInput, got {e:?}"),
        }
        // As namespace, channel name, task id, task path, metadata key and value.
        let (c, v) = step(None, &[(h.as_str(), Some(val(json!(h))))]);
        let meta = CheckpointMetadata::new().with(h.clone(), h.clone());
        match s
            .put(
                &cfg("ns-thread", h),
                c.clone(),
                meta.clone(),
                v,
                PutOptions::new(),
            )
            .await
        {
            Ok(config) => {
                let t = s.get_tuple(&cfg("ns-thread", h)).await.unwrap().unwrap();
                assert_eq!(t.checkpoint, c, "namespace/channel {h:?}");
                assert_eq!(t.metadata, meta);
                assert_eq!(t.config.checkpoint_ns, *h);
                match s
                    .put_writes(
                        &config,
                        vec![(h.clone(), val(json!(1)))],
                        h,
                        PutWritesOptions::new().task_path(h.clone()),
                    )
                    .await
                {
                    Ok(()) => {
                        let t = s.get_tuple(&config).await.unwrap().unwrap();
                        assert_eq!(t.pending_writes.len(), 1);
                        assert_eq!(t.pending_writes[0].task_id, *h);
                        assert_eq!(t.pending_writes[0].channel, *h);
                        assert_eq!(t.pending_writes[0].task_path, *h);
                    }
                    Err(Error::InvalidInput { .. }) => {}
                    Err(e) => panic!("write with {h:?}: {e:?}"),
                }
                let got = list(&*s, ListOptions::thread("ns-thread").namespace(h.clone())).await;
                assert_eq!(
                    ids(&got),
                    vec![c.id.clone()],
                    "namespace {h:?} must match exactly"
                );
                let got = list(
                    &*s,
                    ListOptions::thread("ns-thread").filter(h.clone(), h.clone()),
                )
                .await;
                assert_eq!(
                    ids(&got),
                    vec![c.id.clone()],
                    "metadata key {h:?} must match exactly"
                );
            }
            Err(Error::InvalidInput { .. }) => {}
            Err(e) => panic!("namespace {h:?}: expected success or InvalidInput, got {e:?}"),
        }
    }
    // Each stored thread lists exactly its own checkpoint: no globbing, prefixing or folding.
    for (h, id) in &stored_threads {
        let got = list(&*s, ListOptions::thread(h.clone())).await;
        assert_eq!(ids(&got), vec![id.clone()], "thread {h:?}");
        assert_eq!(got[0].metadata.get("who"), Some(&json!(h)));
    }
    // Deleting one of them deletes nothing else.
    if let Some((h, _)) = stored_threads.iter().find(|(h, _)| h == "a*") {
        s.delete_thread(h).await.unwrap();
        for (other, id) in stored_threads.iter().filter(|(o, _)| o != h) {
            assert_eq!(
                ids(&list(&*s, ListOptions::thread(other.clone())).await),
                vec![id.clone()]
            );
        }
    }
}

/// Filter keys and values that look like operators, paths or SQL are plain data.
pub async fn hostile_filter_keys_and_values_are_data(f: &dyn SaverFactory) {
    let s = build(f).await;
    let literal = json!({
        "$ne": 1,
        "a.b": "dotted",
        "$where": "1 == 1",
        "'; DROP TABLE checkpoints;--": "sql",
        "step": "5 OR 1=1",
        "op": {"$gt": 0},
        "arr": ["$in", 1],
        "*": "?",
        "back\\slash": "\\"
    });
    let meta = CheckpointMetadata::from(literal.as_object().unwrap().clone());
    let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
    s.put(
        &cfg("t1", ""),
        c.clone(),
        meta.clone(),
        v,
        PutOptions::new(),
    )
    .await
    .unwrap();
    let (c2, v2) = step(None, &[("a", Some(val(json!(2))))]);
    s.put(
        &cfg("t2", ""),
        c2,
        CheckpointMetadata::new()
            .with("step", 5)
            .with("a", json!({"b": "dotted"})),
        v2,
        PutOptions::new(),
    )
    .await
    .unwrap();
    // Each literal key/value matches the literal checkpoint only.
    for (k, v) in literal.as_object().unwrap() {
        let got = list(&*s, ListOptions::new().filter(k.clone(), v.clone())).await;
        assert_eq!(ids(&got), vec![c.id.clone()], "filter {k:?}: {v}");
    }
    // Operator-looking filters are not operators.
    let no_match: Vec<(&str, Value)> = vec![
        ("step", json!({"$gt": 0})),
        ("step", json!({"$ne": null})),
        ("$or", json!([{"step": 5}])),
        ("a.b", json!({"$exists": true})),
        ("$ne", json!({"$ne": 1})),
        ("step", json!("5")),
        ("op", json!({"$gt": 1})),
        ("arr", json!(["$in"])),
    ];
    for (k, v) in no_match {
        let got = list(&*s, ListOptions::new().filter(k, v.clone())).await;
        assert!(
            got.is_empty(),
            "filter {k:?}: {v} must match nothing, got {:?}",
            ids(&got)
        );
    }
    // The dotted key does not reach into nested objects.
    let got = list(&*s, ListOptions::new().filter("a.b", "dotted")).await;
    assert_eq!(ids(&got), vec![c.id.clone()]);
    assert_eq!(
        list(&*s, ListOptions::new()).await.len(),
        2,
        "nothing else changed"
    );
}
