//! The `checkpoint` binary run as a user runs it, on a SQLite file this test writes.

use std::path::PathBuf;
use std::process::{Command, Output};

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, PutOptions, PutWritesOptions, Saver, Source,
    TypedValue,
};
use checkpoint_sqlite::SqliteSaver;
use serde_json::{Value, json};

fn temp_file(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "checkpoint-cli-{name}-{}-{nanos}.db",
        std::process::id()
    ))
}

fn checkpoint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_checkpoint"))
        .args(args)
        .output()
        .expect("run checkpoint")
}

fn ok(args: &[&str]) -> String {
    let out = checkpoint(args);
    assert!(
        out.status.success(),
        "checkpoint {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).unwrap()
}

/// Thread `support` (3 checkpoints: a conversation with a tool call, pending writes on the
/// last) and thread `other` (1 checkpoint).
async fn write_store(path: &PathBuf) -> Vec<String> {
    let saver = SqliteSaver::open(path).await.unwrap();
    let conversation = [
        json!([{"type": "human", "id": "h1", "content": "Can I get a refund?"}]),
        json!([{"type": "human", "id": "h1", "content": "Can I get a refund?"},
               {"type": "ai", "id": "a1", "content": "",
                "tool_calls": [{"id": "call_1", "name": "lookup", "args": {"q": "refunds"}}]}]),
        json!([{"type": "human", "id": "h1", "content": "Can I get a refund?"},
               {"type": "ai", "id": "a1", "content": "",
                "tool_calls": [{"id": "call_1", "name": "lookup", "args": {"q": "refunds"}}]},
               {"type": "tool", "id": "t1", "content": "30 days", "tool_call_id": "call_1"}]),
    ];
    let mut at = CheckpointConfig::new("support");
    let mut c = Checkpoint::new();
    let mut ids = Vec::new();
    for (step, messages) in conversation.iter().enumerate() {
        if step > 0 {
            c = c.successor();
        }
        let v = c.set("messages", messages).unwrap();
        let mut versions = std::collections::BTreeMap::from([("messages".to_owned(), v)]);
        if step == 0 {
            versions.insert(
                "payload".into(),
                c.set_typed("payload", TypedValue::from_bytes(vec![0u8, 1, 254])),
            );
        }
        c.updated_channels = Some(versions.keys().cloned().collect());
        at = saver
            .put(
                &at,
                c.clone(),
                CheckpointMetadata::for_step(Source::Loop, step as i64),
                versions,
                PutOptions::new(),
            )
            .await
            .unwrap();
        ids.push(c.id.clone());
    }
    saver
        .put_writes(
            &at,
            vec![(
                "note".into(),
                TypedValue::msgpack(&"written, not applied").unwrap(),
            )],
            "task-9",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    saver
        .put(
            &CheckpointConfig::new("other"),
            Checkpoint::new(),
            CheckpointMetadata::for_step(Source::Input, -1),
            Default::default(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    ids
}

#[tokio::test]
async fn threads_history_and_show_on_a_sqlite_file() {
    let path = temp_file("inspect");
    let ids = write_store(&path).await;
    let url = format!("sqlite://{}", path.display());

    let threads = json_of(&["threads", &url, "--json"]);
    assert_eq!(threads["threads"], 2);
    assert_eq!(threads["shown"][0]["thread_id"], "other"); // written last
    assert_eq!(threads["shown"][1]["thread_id"], "support");
    assert_eq!(threads["shown"][1]["checkpoints"], 3);
    assert_eq!(threads["shown"][1]["latest_checkpoint_id"], ids[2].as_str());
    let limited = json_of(&["threads", &url, "--limit", "1", "--json"]);
    assert_eq!(limited["shown"].as_array().unwrap().len(), 1);
    let text = ok(&["threads", &url]);
    assert!(text.starts_with("THREAD"), "{text}");
    assert!(
        text.contains("support") && text.ends_with("2 of 2 threads\n"),
        "{text}"
    );

    let history = json_of(&["history", &url, "support", "--json"]);
    let chain: Vec<&str> = history["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["checkpoint_id"].as_str().unwrap())
        .collect();
    assert_eq!(chain, [ids[2].as_str(), ids[1].as_str(), ids[0].as_str()]);
    assert_eq!(history["chain"][0]["pending_writes"], 1);
    assert_eq!(history["chain"][2]["step"], 0);
    assert!(history["broken_at"].is_null());
    let from_middle = json_of(&["history", &url, "support", "--id", &ids[1], "--json"]);
    assert_eq!(from_middle["chain"].as_array().unwrap().len(), 2);
    assert!(ok(&["history", &url, "support"]).contains(&ids[0]));

    let shown = json_of(&["show", &url, "support", "--json"]);
    assert_eq!(shown["checkpoint_id"], ids[2].as_str());
    assert_eq!(shown["parent_checkpoint_id"], ids[1].as_str());
    assert_eq!(
        shown["values"]["messages"]["value"][2]["content"],
        "30 days"
    );
    assert_eq!(
        shown["values"]["payload"]["value"],
        json!({"$bytes": "AAH+"})
    );
    assert_eq!(shown["pending_writes"][0]["value"], "written, not applied");
    let text = ok(&["show", &url, "support"]);
    assert!(text.contains("messages: 3 messages"), "{text}");
    assert!(text.contains("[0] human h1: Can I get a refund?"), "{text}");
    assert!(text.contains("-> lookup(call_1)"), "{text}");
    assert!(text.contains("[2] tool t1: 30 days  <- call_1"), "{text}");
    let first = json_of(&["show", &url, "support", "--id", &ids[0], "--json"]);
    assert_eq!(
        first["values"]["messages"]["value"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_creates_nothing() {
    let path = temp_file("errors");
    write_store(&path).await;
    let url = format!("sqlite://{}", path.display());
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    let out = checkpoint(&["threads", "mysql://h/db"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown scheme \"mysql\""),
        "{}",
        stderr(&out)
    );

    let missing = temp_file("missing");
    let out = checkpoint(&["threads", &format!("sqlite://{}", missing.display())]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no SQLite file"), "{}", stderr(&out));
    assert!(!missing.exists(), "inspecting must not create a database");

    let out = checkpoint(&["show", &url, "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no checkpoint in thread \"nobody\""),
        "{}",
        stderr(&out)
    );
    let out = checkpoint(&["history", &url, "support", "--id", "not-an-id"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no checkpoint \"not-an-id\""),
        "{}",
        stderr(&out)
    );

    let out = checkpoint(&["show", &url]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap rejects a missing argument"
    );
    let _ = std::fs::remove_file(&path);
}
