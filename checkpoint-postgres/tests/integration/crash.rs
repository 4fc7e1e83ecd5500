//! Crash atomicity: a writer process is killed with SIGKILL at random moments, many times;
//! afterwards every acknowledged put and put_writes is present, and every checkpoint that
//! loads is complete (all its values, and whole put_writes calls only).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, ListOptions, PutOptions, PutWritesOptions,
    Saver, SaverExt, TypedValue,
};
use checkpoint_postgres::PostgresSaver;

const THREAD: &str = "crash-thread";
const WRITES_PER_CALL: usize = 3;

/// The writer, run in a child process by `killed_writers_leave_only_complete_checkpoints`.
#[tokio::test]
#[ignore = "entry point of the child process of the crash test"]
async fn crash_child_writer() {
    let url = std::env::var("CRASH_URL").expect("run by the crash test");
    let schema = std::env::var("CRASH_SCHEMA").unwrap();
    let saver = PostgresSaver::builder(&url)
        .unwrap()
        .schema(&schema)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    let mut out = std::io::stdout();
    let mut head = saver
        .get_tuple(&CheckpointConfig::new(THREAD))
        .await
        .unwrap();
    loop {
        let (parent_cfg, mut next) = match &head {
            Some(t) => (t.config.clone(), t.checkpoint.successor()),
            None => (CheckpointConfig::new(THREAD), Checkpoint::new()),
        };
        let step = next.get::<u64>("step").unwrap().map_or(0, |s| s + 1);
        // Every value names the step it belongs to, so a mix of steps would show.
        let version = next.set("step", &step).unwrap();
        let big_v = next.set_typed(
            "big",
            TypedValue::from_bytes(vec![(step % 251) as u8; 64 * 1024]),
        );
        let label_v = next.set("label", &format!("step-{step}")).unwrap();
        let versions = [
            ("step".to_owned(), version),
            ("big".to_owned(), big_v),
            ("label".to_owned(), label_v),
        ]
        .into();
        let meta = CheckpointMetadata::new().with("step", step);
        let cfg = saver
            .put(&parent_cfg, next, meta, versions, PutOptions::new())
            .await
            .unwrap();
        writeln!(out, "put {}", cfg.checkpoint_id.as_deref().unwrap()).unwrap();
        out.flush().unwrap();
        let writes = (0..WRITES_PER_CALL)
            .map(|i| (format!("w{i}"), TypedValue::msgpack(&step).unwrap()))
            .collect();
        saver
            .put_writes(&cfg, writes, "task", PutWritesOptions::new())
            .await
            .unwrap();
        writeln!(out, "writes {}", cfg.checkpoint_id.as_deref().unwrap()).unwrap();
        out.flush().unwrap();
        head = saver.get_tuple(&cfg).await.unwrap();
    }
}

#[tokio::test]
async fn killed_writers_leave_only_complete_checkpoints() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let (saver, schema) = common::fresh_saver(&url).await.unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked_puts = Vec::new();
    let mut acked_writes = Vec::new();
    let rounds = 12;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash::crash_child_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("CRASH_URL", &url)
            .env("CRASH_SCHEMA", &schema)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        // Kill at a varying moment: early rounds before much is written, later ones mid-stream.
        tokio::time::sleep(Duration::from_millis(150 + (round * 97 % 600) as u64)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for line in reader.join().unwrap() {
            match line.split_once(' ') {
                Some(("put", id)) => acked_puts.push(id.to_owned()),
                Some(("writes", id)) => acked_writes.push(id.to_owned()),
                _ => {}
            }
        }
    }
    assert!(
        acked_puts.len() >= rounds,
        "the writer made too little progress: {}",
        acked_puts.len()
    );
    for id in &acked_puts {
        let cfg = CheckpointConfig::new(THREAD).with_checkpoint_id(id);
        assert!(
            saver.get_tuple(&cfg).await.unwrap().is_some(),
            "acknowledged put {id} is missing"
        );
    }
    for id in &acked_writes {
        let cfg = CheckpointConfig::new(THREAD).with_checkpoint_id(id);
        let t = saver.get_tuple(&cfg).await.unwrap().unwrap();
        assert_eq!(
            t.pending_writes.len(),
            WRITES_PER_CALL,
            "acknowledged writes of {id}"
        );
    }
    let all = saver.list_all(ListOptions::thread(THREAD)).await.unwrap();
    assert!(all.len() >= acked_puts.len());
    for t in &all {
        let step: u64 = t.checkpoint.require("step").unwrap();
        assert_eq!(
            t.checkpoint.require::<String>("label").unwrap(),
            format!("step-{step}")
        );
        let big = &t.checkpoint.channel_values["big"];
        assert_eq!(big.len(), 64 * 1024);
        assert!(
            big.bytes.iter().all(|b| u64::from(*b) == step % 251),
            "big value of another step"
        );
        assert!(
            t.pending_writes.is_empty() || t.pending_writes.len() == WRITES_PER_CALL,
            "a put_writes call was half-applied: {}",
            t.pending_writes.len()
        );
        assert_eq!(t.metadata.get("step"), Some(&serde_json::json!(step)));
    }
    // The chain is linear and unbroken back to the first checkpoint.
    for w in all.windows(2) {
        assert_eq!(
            w[0].parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.as_deref()),
            Some(w[1].checkpoint.id.as_str())
        );
    }
    eprintln!(
        "crash test: {rounds} kills, {} acknowledged puts, {} checkpoints verified",
        acked_puts.len(),
        all.len()
    );
    common::drop_schemas(&url, &[schema]).await;
}
