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

// -- migrate -----------------------------------------------------------------------------------

mod migrate {
    use super::*;

    use checkpoint_conformance::fixtures::{step, val};
    use checkpoint_conformance::{server_url, servers_required};
    use checkpoint_core::writes::{ERROR, INTERRUPT, RESUME, SCHEDULED};
    use checkpoint_core::{ListOptions, SaverExt, ValueType};

    /// The threads every migration test writes, with the edge cases the contract names:
    /// nested namespaces, special writes, null, raw bytes and foreign tags, a removed
    /// channel, a 1 MB value, unicode thread ids. Returns the thread ids and the number of
    /// checkpoints.
    pub(super) async fn write_edge_cases(saver: &dyn Saver, prefix: &str) -> (Vec<String>, u64) {
        let threads = vec![format!("{prefix}-edge"), format!("{prefix}-ünïcödé-😀")];
        let mut checkpoints = 0;
        for (t, thread) in threads.iter().enumerate() {
            for ns in ["", "child:1f1e", "child:1f1e|grand:x"] {
                let mut at = CheckpointConfig::new(thread.clone()).with_ns(ns);
                let mut prev: Option<Checkpoint> = None;
                for n in 0..3 {
                    let messages = val(json!([{"type": "human", "content": format!("step {n}")}]));
                    let mut changes = vec![("messages", Some(messages))];
                    if n == 0 {
                        changes.push(("nothing", Some(TypedValue::null())));
                        changes.push(("raw", Some(TypedValue::from_bytes(vec![0u8, 255, 7]))));
                        changes.push((
                            "foreign",
                            Some(TypedValue::new(
                                ValueType::Other("pickle".into()),
                                vec![128u8, 4],
                            )),
                        ));
                        if t == 0 && ns.is_empty() {
                            changes.push(("big", Some(TypedValue::from_bytes(vec![7u8; 1 << 20]))));
                        }
                    }
                    if n == 2 {
                        changes.push(("raw", None)); // removed
                    }
                    let (c, versions) = step(prev.as_ref(), &changes);
                    at = saver
                        .put(
                            &at,
                            c.clone(),
                            CheckpointMetadata::for_step(Source::Loop, n).with("run_id", "r-1"),
                            versions,
                            PutOptions::new(),
                        )
                        .await
                        .unwrap();
                    let writes = |pairs: &[(&str, TypedValue)]| {
                        pairs
                            .iter()
                            .map(|(c, v)| ((*c).to_owned(), v.clone()))
                            .collect()
                    };
                    saver
                        .put_writes(
                            &at,
                            writes(&[
                                ("messages", val(json!("w"))),
                                ("raw", TypedValue::from_bytes(vec![1u8])),
                            ]),
                            "task-1",
                            PutWritesOptions::new().task_path("~a"),
                        )
                        .await
                        .unwrap();
                    saver
                        .put_writes(
                            &at,
                            writes(&[
                                (ERROR, val(json!("boom"))),
                                (INTERRUPT, val(json!({"q": "?"}))),
                            ]),
                            "task-2",
                            PutWritesOptions::new(),
                        )
                        .await
                        .unwrap();
                    saver
                        .put_writes(
                            &at,
                            writes(&[(RESUME, val(json!("yes"))), (SCHEDULED, TypedValue::null())]),
                            "task-3",
                            PutWritesOptions::new().task_path("~b"),
                        )
                        .await
                        .unwrap();
                    prev = Some(c);
                    checkpoints += 1;
                }
            }
        }
        (threads, checkpoints)
    }

    /// Every tuple of the threads, as `list` returns them.
    pub(super) async fn dump(saver: &dyn Saver, threads: &[String]) -> Vec<CheckpointTuple> {
        let mut all = Vec::new();
        for t in threads {
            all.extend(
                saver
                    .list_all(ListOptions::thread(t.clone()))
                    .await
                    .unwrap(),
            );
        }
        all
    }

    use checkpoint_core::CheckpointTuple;

    #[tokio::test]
    async fn migrate_copies_every_edge_case_exactly() {
        let (from, to) = (temp_file("mig-from"), temp_file("mig-to"));
        let source = SqliteSaver::open(&from).await.unwrap();
        let (threads, checkpoints) = write_edge_cases(&source, "m").await;
        let (from_url, to_url) = (
            format!("sqlite://{}", from.display()),
            format!("sqlite://{}", to.display()),
        );

        let dry = json_of(&[
            "migrate",
            "--from",
            &from_url,
            "--to",
            &to_url,
            "--dry-run",
            "--json",
        ]);
        assert_eq!(
            (dry["threads"].as_u64(), dry["checkpoints"].as_u64()),
            (Some(2), Some(checkpoints))
        );
        assert!(!to.exists(), "a dry run must not create the target");

        let report = json_of(&[
            "migrate", "--from", &from_url, "--to", &to_url, "--verify", "--json",
        ]);
        assert_eq!(report["threads"], 2);
        assert_eq!(report["checkpoints"].as_u64(), Some(checkpoints));
        assert_eq!(report["pending_writes"].as_u64(), Some(checkpoints * 6));
        assert_eq!(report["verified"], true);
        assert_eq!(report["differences"], json!([]));
        let target = SqliteSaver::open(&to).await.unwrap();
        assert_eq!(dump(&target, &threads).await, dump(&source, &threads).await);

        // Again: nothing changes (idempotent), and the text report says so.
        let text = ok(&["migrate", "--from", &from_url, "--to", &to_url, "--verify"]);
        assert!(text.contains("copied 2 threads"), "{text}");
        assert!(
            text.contains("verified: source and target hold the same checkpoints"),
            "{text}"
        );
        assert_eq!(dump(&target, &threads).await, dump(&source, &threads).await);

        // A write the source does not have is a difference: exit status 1.
        let latest = target
            .get_tuple(&CheckpointConfig::new(threads[0].clone()))
            .await
            .unwrap()
            .unwrap();
        target
            .put_writes(
                &latest.config,
                vec![("extra".into(), val(json!(1)))],
                "task-x",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        let out = checkpoint(&[
            "migrate", "--from", &from_url, "--to", &to_url, "--verify", "--json",
        ]);
        assert_eq!(out.status.code(), Some(1));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["differences"].as_array().unwrap().len(),
            1,
            "{report}"
        );
        assert_eq!(
            report["differences"][0]["what"],
            "differs in pending writes"
        );

        let bad = checkpoint(&["migrate", "--from", &from_url, "--to", &from_url]);
        assert_eq!(bad.status.code(), Some(2));
    }

    #[tokio::test]
    async fn a_migration_killed_at_random_points_ends_like_a_clean_one() {
        let (from, to, clean) = (
            temp_file("kill-from"),
            temp_file("kill-to"),
            temp_file("kill-clean"),
        );
        let source = SqliteSaver::open(&from).await.unwrap();
        let mut threads = Vec::new();
        for i in 0..12 {
            threads.extend(write_edge_cases(&source, &format!("k{i:02}")).await.0);
        }
        let from_url = format!("sqlite://{}", from.display());
        let url = |p: &PathBuf| format!("sqlite://{}", p.display());
        let migrate_clean = || {
            ok(&[
                "migrate",
                "--from",
                &from_url,
                "--to",
                &url(&clean),
                "--jobs",
                "2",
            ])
        };
        migrate_clean();
        // The shortest a run can take: one over a target that already holds everything
        // (nothing but idempotent re-writes). Every kill below comes before that.
        let started = std::time::Instant::now();
        migrate_clean();
        let shortest = started.elapsed();

        // Kill 20 migrations at spread-out moments, each resuming the one before.
        let mut killed = 0;
        for i in 0..20u32 {
            let mut child = Command::new(env!("CARGO_BIN_EXE_checkpoint"))
                .args([
                    "migrate",
                    "--from",
                    &from_url,
                    "--to",
                    &url(&to),
                    "--jobs",
                    "2",
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(shortest.mul_f64(0.9 * f64::from((i * 7) % 20 + 1) / 21.0));
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL
                killed += 1;
            }
            child.wait().unwrap();
        }
        eprintln!("{killed} of 20 migrations were killed before they finished");
        assert!(
            killed >= 12,
            "only {killed} of 20 runs were still running when killed"
        );
        let report = json_of(&[
            "migrate",
            "--from",
            &from_url,
            "--to",
            &url(&to),
            "--verify",
            "--json",
        ]);
        assert_eq!(report["differences"], json!([]));
        let (target, clean) = (
            SqliteSaver::open(&to).await.unwrap(),
            SqliteSaver::open(&clean).await.unwrap(),
        );
        assert_eq!(dump(&target, &threads).await, dump(&clean, &threads).await);
        assert_eq!(dump(&target, &threads).await, dump(&source, &threads).await);
    }

    #[tokio::test]
    async fn migrate_draws_a_progress_bar_on_a_terminal() {
        let (from, to) = (temp_file("pty-from"), temp_file("pty-to"));
        let source = SqliteSaver::open(&from).await.unwrap();
        for i in 0..6 {
            write_edge_cases(&source, &format!("p{i}")).await;
        }
        // util-linux `script` runs the command on a pseudo-terminal and copies what it draws.
        let command = format!(
            "{} migrate --from sqlite://{} --to sqlite://{} --jobs 1",
            env!("CARGO_BIN_EXE_checkpoint"),
            from.display(),
            to.display()
        );
        let out = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .output()
            .expect("run script(1)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let screen = String::from_utf8_lossy(&out.stdout);
        assert!(
            screen.contains("/12 threads, "),
            "no progress bar drawn: {screen:?}"
        );
        assert!(
            screen.contains("checkpoints, ") && screen.contains("/s (ETA"),
            "{screen:?}"
        );
        assert!(
            screen.contains("\u{1b}["),
            "no terminal control sequences: {screen:?}"
        );
        assert!(
            screen.contains("copied 12 threads, 108 checkpoints"),
            "{screen:?}"
        );

        // Not on a terminal: no bar, no control sequences on stderr.
        let plain = checkpoint(&[
            "migrate",
            "--from",
            &format!("sqlite://{}", from.display()),
            "--to",
            &format!("sqlite://{}", to.display()),
        ]);
        assert!(plain.status.success());
        assert!(!String::from_utf8_lossy(&plain.stderr).contains('\u{1b}'));
    }

    /// The store URLs of the server backends (each test's threads are its own).
    fn server_stores() -> Vec<(String, String)> {
        let mut stores = Vec::new();
        for (backend, url) in [
            ("postgres", server_url("postgres")),
            ("redis", server_url("redis")),
            (
                "mongo",
                server_url("mongo")
                    .map(|u| format!("{}/checkpoint_cli_migrate", u.trim_end_matches('/'))),
            ),
        ] {
            match url {
                Some(url) => stores.push((backend.to_owned(), url)),
                None if servers_required() => {
                    panic!("CHECKPOINT_TEST_{}_URL is required", backend.to_uppercase())
                }
                None => eprintln!(
                    "skipping {backend}: CHECKPOINT_TEST_{}_URL not set",
                    backend.to_uppercase()
                ),
            }
        }
        stores
    }

    #[tokio::test]
    async fn migrate_through_every_server_backend_and_back() {
        let from = temp_file("hops-from");
        let back = temp_file("hops-back");
        let source = SqliteSaver::open(&from).await.unwrap();
        let prefix = format!("hop{}", std::process::id());
        let (threads, checkpoints) = write_edge_cases(&source, &prefix).await;
        let mut hops = vec![format!("sqlite://{}", from.display())];
        hops.extend(server_stores().into_iter().map(|(_, url)| url));
        hops.push(format!("sqlite://{}", back.display()));
        let only: Vec<&str> = threads
            .iter()
            .flat_map(|t| ["--thread", t.as_str()])
            .collect();
        for pair in hops.windows(2) {
            let mut args = vec![
                "migrate", "--from", &pair[0], "--to", &pair[1], "--verify", "--json",
            ];
            args.extend(&only);
            let report = json_of(&args);
            assert_eq!(
                report["checkpoints"].as_u64(),
                Some(checkpoints),
                "{} -> {}",
                pair[0],
                pair[1]
            );
            assert_eq!(
                report["differences"],
                json!([]),
                "{} -> {}",
                pair[0],
                pair[1]
            );
        }
        let returned = SqliteSaver::open(&back).await.unwrap();
        assert_eq!(
            dump(&returned, &threads).await,
            dump(&source, &threads).await
        );
        for url in &hops[1..hops.len() - 1] {
            let store = checkpoint_cli::store::Store::parse(url)
                .unwrap()
                .open()
                .await
                .unwrap();
            for t in &threads {
                store.delete_thread(t).await.unwrap();
            }
        }
    }
}
