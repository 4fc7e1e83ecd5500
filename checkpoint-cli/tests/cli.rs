//! The `checkpoint` binary run as a user runs it, on a SQLite file this test writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use checkpoint_conformance::langgraph;

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

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
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

    // A server that is not there: the reason, once, under the saver's error.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let out = checkpoint(&["threads", &format!("redis://127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(text.starts_with("error: redis is unavailable\n"), "{text}");
    assert_eq!(text.matches("Connection refused").count(), 1, "{text}");
    let _ = std::fs::remove_file(&path);
}

/// A child process, killed when dropped (a failed assertion must not leave it running).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_that_evicts_keys_is_read_but_not_written() {
    let Some(server) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("redis-server"))
            .find(|p| p.is_file())
    }) else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "redis-server is required under CI=true or CHECKPOINT_TEST_REQUIRE=1"
        );
        eprintln!("SKIPPED: no redis-server");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let dir = temp_file("evicting-redis");
    std::fs::create_dir_all(&dir).unwrap();
    let _server = Killed(
        Command::new(server)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&dir)
            .args(["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed().as_secs() < 15,
            "redis-server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let url = format!("redis://127.0.0.1:{port}");
    // Reading: accepted (it is how threads are rescued from such a server).
    ok(&["threads", &url]);
    ok(&["prune", &url, "--keep-last", "1", "--dry-run"]);
    // Writing: refused, with the reason and the fix.
    let out = checkpoint(&["prune", &url, "--keep-last", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        text.contains("allkeys-lru") && text.contains("noeviction"),
        "{text}"
    );
    let source = temp_file("evicting-source");
    write_store(&source).await;
    let from = format!("sqlite://{}", source.display());
    let out = checkpoint(&["migrate", "--from", &from, "--to", &url]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("allkeys-lru"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&source);
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
            // Every store holds the edge cases intact, records included (emptied channels,
            // special writes, a 1 MB value, nested namespaces are not damage).
            let mut args = vec!["verify", &pair[1], "--json"];
            args.extend(threads.iter().map(String::as_str));
            let verified = checkpoint(&args);
            let doc: Value = serde_json::from_slice(&verified.stdout).unwrap();
            assert_eq!(
                (doc["intact"].clone(), doc["records_scanned"].clone()),
                (json!(true), json!(true)),
                "{}: {doc:#}",
                pair[1]
            );
            assert_eq!(doc["checkpoints"].as_u64(), Some(checkpoints));
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

// -- verify, diff, repair, prune, thread selection ------------------------------------------

mod maintain {
    use super::*;

    use checkpoint_core::{ListOptions, SaverExt, ValueType};

    fn code(out: &Output) -> Option<i32> {
        out.status.code()
    }

    /// Puts one checkpoint of `thread` after `parent` holding `messages`.
    async fn put_messages(
        saver: &dyn Saver,
        at: &CheckpointConfig,
        prev: Option<&Checkpoint>,
        messages: Value,
    ) -> (CheckpointConfig, Checkpoint) {
        let mut c = prev.map_or_else(Checkpoint::new, Checkpoint::successor);
        let v = c.set("messages", &messages).unwrap();
        let stored = saver
            .put(
                at,
                c.clone(),
                CheckpointMetadata::for_step(Source::Loop, 0),
                std::collections::BTreeMap::from([("messages".to_owned(), v)]),
                PutOptions::new(),
            )
            .await
            .unwrap();
        (stored, c)
    }

    /// Seed 004's thread: a tool call left unanswered by a crash, then a new user message.
    async fn write_orphan(saver: &dyn Saver, thread: &str) -> String {
        let (at, c) = put_messages(
            saver,
            &CheckpointConfig::new(thread),
            None,
            json!([{"type": "human", "id": "h1", "content": "Refund order 7"}]),
        )
        .await;
        let (_, c) = put_messages(
            saver,
            &at,
            Some(&c),
            json!([{"type": "human", "id": "h1", "content": "Refund order 7"},
                   {"type": "ai", "id": "a1", "content": "",
                    "tool_calls": [{"id": "call_9", "name": "refund", "args": {"order": 7}}]},
                   {"type": "human", "id": "h2", "content": "Hello? Any news?"}]),
        )
        .await;
        c.id
    }

    #[tokio::test]
    async fn verify_finds_each_planted_corruption_and_nothing_else() {
        let path = temp_file("verify");
        let ids = write_store(&path).await;
        let url = format!("sqlite://{}", path.display());
        let saver = SqliteSaver::open(&path).await.unwrap();

        // Intact: the sample store, including a head whose last message's call is in flight.
        let (at, c) = put_messages(
            &saver,
            &CheckpointConfig::new("in-flight"),
            None,
            json!([{"type": "human", "id": "h1", "content": "Weather?"},
                   {"type": "ai", "id": "a1", "content": "",
                    "tool_calls": [{"id": "call_1", "name": "weather", "args": {}}]}]),
        )
        .await;
        drop((at, c));
        let clean = json_of(&["verify", &url, "--json"]);
        assert_eq!(clean["intact"], true, "{clean:#}");
        assert_eq!(clean["threads"], 3);
        assert_eq!(clean["checkpoints"], 5);
        assert_eq!(
            ok(&["verify", &url]).lines().last(),
            Some("no issues found")
        );

        // A checkpoint whose parent is not stored.
        // (A parent older than every stored checkpoint is pruned history, not damage: the
        // missing one is newer than the thread's first checkpoint.)
        let missing_parent = checkpoint_core::new_checkpoint_id();
        let orphan_parent =
            CheckpointConfig::new("support").with_checkpoint_id(missing_parent.clone());
        let broken = Checkpoint::new();
        saver
            .put(
                &orphan_parent,
                broken.clone(),
                CheckpointMetadata::for_step(Source::Loop, 9),
                Default::default(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        // A value that claims to be MessagePack and is not, and a damaged pending write.
        let mut bad = Checkpoint::new();
        let v = bad.set_typed(
            "payload",
            TypedValue::new(ValueType::Msgpack, vec![0xc1, 0x00]),
        );
        let bad_at = saver
            .put(
                &CheckpointConfig::new("damaged"),
                bad,
                CheckpointMetadata::for_step(Source::Input, -1),
                std::collections::BTreeMap::from([("payload".to_owned(), v)]),
                PutOptions::new(),
            )
            .await
            .unwrap();
        saver
            .put_writes(
                &bad_at,
                vec![(
                    "x".into(),
                    TypedValue::new(ValueType::Json, b"{\"a\":".to_vec()),
                )],
                "task-1",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        // An orphan tool call in a thread's latest state.
        let orphan_head = write_orphan(&saver, "seed-004").await;
        // A value lost from the file (reads then show the checkpoint without the channel),
        // and pending writes of a checkpoint that is not stored.
        let lost = checkpoint_sqlite::sqlx::query(
            "DELETE FROM checkpoint_blobs WHERE thread_id = 'support' AND channel = 'payload'",
        )
        .execute(saver.pool())
        .await
        .unwrap();
        assert_eq!(lost.rows_affected(), 1);
        saver
            .put_writes(
                &CheckpointConfig::new("other")
                    .with_checkpoint_id("1ef00000-0000-6000-8000-0000000000aa"),
                vec![("x".into(), TypedValue::null())],
                "task-1",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();

        let out = checkpoint(&["verify", &url, "--json"]);
        assert_eq!(code(&out), Some(1), "issues make the exit status 1");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["intact"], false);
        assert_eq!(
            report["issue_counts"],
            json!({
                "broken_parent": 1,
                "undecodable_value": 2,
                "orphan_tool_call": 1,
                // support's three checkpoints all name the lost version of `payload`.
                "missing_value": 3,
                "writes_without_checkpoint": 1,
            }),
            "{report:#}"
        );
        let issues = report["issues"].as_array().unwrap();
        let find = |kind: &str| issues.iter().find(|i| i["kind"] == kind).unwrap();
        assert_eq!(find("broken_parent")["checkpoint_id"], broken.id.as_str());
        assert!(
            find("broken_parent")["detail"]
                .as_str()
                .unwrap()
                .contains(&missing_parent)
        );
        assert_eq!(
            find("orphan_tool_call")["checkpoint_id"],
            orphan_head.as_str()
        );
        assert!(
            find("orphan_tool_call")["detail"]
                .as_str()
                .unwrap()
                .contains("call_9"),
            "{issues:#?}"
        );
        let text = String::from_utf8(checkpoint(&["verify", &url]).stdout).unwrap();
        assert!(
            text.contains(
                "issues: 1 broken_parent, 3 missing_value, 1 orphan_tool_call, 2 undecodable_value, 1 writes_without_checkpoint"
            ),
            "{text}"
        );
        // Naming threads scans only those.
        let one = checkpoint(&["verify", &url, "in-flight", "--json"]);
        assert_eq!(code(&one), Some(0));
        let some = checkpoint(&["verify", &url, "--threads", "seed-*", "--json"]);
        let some: Value = serde_json::from_slice(&some.stdout).unwrap();
        assert_eq!(
            (some["threads"].as_u64(), some["issue_counts"].clone()),
            (Some(1), json!({"orphan_tool_call": 1}))
        );
        assert_eq!(ids.len(), 3);

        // repair --apply writes a new head; verify then passes for that thread.
        let repaired = json_of(&["repair", &url, "seed-004", "--apply", "--json"]);
        assert_eq!(repaired["applied"], true, "{repaired:#}");
        let after = checkpoint(&["verify", &url, "seed-004"]);
        assert_eq!(
            code(&after),
            Some(0),
            "{}",
            String::from_utf8_lossy(&after.stdout)
        );
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn diff_shows_the_messages_a_step_added() {
        let path = temp_file("diff");
        let ids = write_store(&path).await;
        let url = format!("sqlite://{}", path.display());
        let doc = json_of(&["diff", &url, "support", &ids[0], &ids[2], "--json"]);
        let changed = doc["changed"].as_array().unwrap();
        assert_eq!(changed.len(), 1, "{doc:#}");
        assert_eq!(changed[0]["channel"], "messages");
        assert_eq!(changed[0]["change"], "changed");
        let added: Vec<&str> = changed[0]["messages"]["added"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(added, ["a1", "t1"]);
        assert_eq!(changed[0]["messages"]["removed"], json!([]));
        assert_eq!(doc["unchanged"], json!(["payload"]));
        let text = ok(&["diff", &url, "support", &ids[0], &ids[2]]);
        assert!(text.contains("changed messages (version "), "{text}");
        assert!(text.contains("  1 -> 3 messages\n"), "{text}");
        assert!(text.contains("+ [1] ai a1  -> lookup(call_1)"), "{text}");
        assert!(text.contains("+ [2] tool t1: 30 days  <- call_1"), "{text}");
        // Backwards, the same messages are removed.
        let back = json_of(&["diff", &url, "support", &ids[2], &ids[0], "--json"]);
        assert_eq!(
            back["changed"][0]["messages"]["removed"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let same = ok(&["diff", &url, "support", &ids[1], &ids[1]]);
        assert!(same.contains("no channel changed"), "{same}");
        let missing = checkpoint(&["diff", &url, "support", &ids[0], "nope"]);
        assert_eq!(code(&missing), Some(1));
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn repair_shows_the_change_and_applies_it_as_a_new_checkpoint() {
        let path = temp_file("repair");
        let saver = SqliteSaver::open(&path).await.unwrap();
        let head = write_orphan(&saver, "t").await;
        let url = format!("sqlite://{}", path.display());

        let text = ok(&["repair", &url, "t"]);
        assert!(text.contains("needs repairs"), "{text}");
        assert!(
            text.contains("+ [2] tool"),
            "a placeholder result after the call: {text}"
        );
        assert!(text.contains("run again with --apply"), "{text}");
        let still = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            still.checkpoint.id, head,
            "without --apply nothing is written"
        );

        let doc = json_of(&["repair", &url, "t", "--apply", "--json"]);
        assert_eq!(doc["applied"], true);
        let new_head = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            Some(new_head.checkpoint.id.clone()),
            doc["new_checkpoint_id"].as_str().map(str::to_owned)
        );
        assert_eq!(
            new_head.parent_config.unwrap().checkpoint_id.as_deref(),
            Some(head.as_str()),
            "history is kept: the repair is a child of the damaged head"
        );
        let lines = checkpoint_cli::render::message_lines(
            &new_head.checkpoint.channel_values["messages"],
            80,
        )
        .unwrap();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[2].contains("<- call_9"), "{lines:?}");
        assert_eq!(
            saver
                .list_all(ListOptions::thread("t"))
                .await
                .unwrap()
                .len(),
            3
        );
        let again = ok(&["repair", &url, "t"]);
        assert!(again.contains("nothing to repair"), "{again}");
        let none = checkpoint(&["repair", &url, "nobody"]);
        assert_eq!(code(&none), Some(1));
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn prune_and_thread_selection() {
        let path = temp_file("prune");
        let ids = write_store(&path).await;
        let url = format!("sqlite://{}", path.display());
        let saver = SqliteSaver::open(&path).await.unwrap();
        for t in ["user-1", "user-2", "bot-1"] {
            let (at, c) = put_messages(&saver, &CheckpointConfig::new(t), None, json!([])).await;
            put_messages(&saver, &at, Some(&c), json!([])).await;
        }
        let listed = |args: &[&str]| -> Vec<String> {
            let mut all = vec!["threads", url.as_str(), "--json"];
            all.extend(args);
            let mut ids: Vec<String> = json_of(&all)["shown"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["thread_id"].as_str().unwrap().to_owned())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(listed(&["--threads", "user-*"]), ["user-1", "user-2"]);
        assert_eq!(
            listed(&["--threads", "{bot,other}*", "--thread", "support"]),
            ["bot-1", "other", "support"]
        );
        assert_eq!(listed(&["--since", "1d"]).len(), 5);
        assert!(listed(&["--since", "2999-01-01"]).is_empty());
        let bad = checkpoint(&["threads", &url, "--since", "yesterday"]);
        assert_eq!(code(&bad), Some(2));
        assert!(String::from_utf8_lossy(&bad.stderr).contains("bad --since"));
        let bad = checkpoint(&["threads", &url, "--threads", "a[b"]);
        assert_eq!(code(&bad), Some(2));

        // --dry-run deletes nothing.
        let dry = json_of(&[
            "prune",
            &url,
            "--keep-last",
            "1",
            "--threads",
            "user-*",
            "--dry-run",
            "--json",
        ]);
        assert_eq!(
            (dry["checkpoints_before"].as_u64(), dry["deleted"].as_u64()),
            (Some(4), Some(2))
        );
        assert_eq!(saver.list_all(ListOptions::new()).await.unwrap().len(), 10);
        let done = json_of(&[
            "prune",
            &url,
            "--keep-last",
            "1",
            "--threads",
            "user-*",
            "--json",
        ]);
        assert_eq!(
            (done["threads"].as_u64(), done["deleted"].as_u64()),
            (Some(2), Some(2))
        );
        // Pruned history is not damage.
        let pruned = json_of(&["verify", &url, "--threads", "user-*", "--json"]);
        assert_eq!(pruned["intact"], true, "{pruned:#}");
        assert_eq!(pruned["pruned_histories"], 2);
        for (thread, n) in [("user-1", 1), ("user-2", 1), ("bot-1", 2), ("support", 3)] {
            assert_eq!(
                saver
                    .list_all(ListOptions::thread(thread))
                    .await
                    .unwrap()
                    .len(),
                n,
                "{thread}"
            );
        }
        let text = ok(&["prune", &url, "--keep-last", "2", "--thread", "support"]);
        assert!(
            text.starts_with("deleted 1 of 3 checkpoints in 1 thread;"),
            "{text}"
        );
        let kept = saver
            .get_tuple(&CheckpointConfig::new("support"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kept.checkpoint.id, ids[2]);

        // migrate picks threads the same way.
        let to = temp_file("prune-to");
        let to_url = format!("sqlite://{}", to.display());
        let report = json_of(&[
            "migrate",
            "--from",
            &url,
            "--to",
            &to_url,
            "--threads",
            "user-*",
            "--since",
            "1h",
            "--json",
        ]);
        assert_eq!(
            (report["threads"].as_u64(), report["checkpoints"].as_u64()),
            (Some(2), Some(2))
        );
        let target = SqliteSaver::open(&to).await.unwrap();
        let mut copied: Vec<String> = target
            .list_all(ListOptions::new())
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.config.thread_id)
            .collect();
        copied.sort();
        assert_eq!(copied, ["user-1", "user-2"]);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&to);
    }
}

// -- LangGraph's own files -----------------------------------------------------------------

/// A file Python's `langgraph-checkpoint-sqlite` writes (real graphs: tool calls, an
/// interrupt left pending, subgraphs, `Send`), read through `langgraph-sqlite://`: listed,
/// verified, and migrated into SQLite and every server store exactly; Python LangGraph's
/// `PostgresSaver` reads the PostgreSQL copy as its `SqliteSaver` reads the file.
#[tokio::test]
async fn langgraph_sqlite_files_migrate_into_every_store() {
    let Some(py) = langgraph::python() else {
        return;
    };
    let lg = temp_file("langgraph-written");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../checkpoint-sqlite/interop/langgraph_sqlite.py"
    );
    let expected = langgraph::run_python(&py, Path::new(script), &["write", path_str(&lg)]);
    let expected = expected.as_array().unwrap().len() as u64;
    let source = format!("langgraph-sqlite://{}", lg.display());

    let threads = json_of(&["threads", &source, "--json"]);
    assert!(threads["threads"].as_u64().unwrap() >= 2, "{threads}");
    let verified: Value =
        serde_json::from_slice(&checkpoint(&["verify", &source, "--json"]).stdout).unwrap();
    assert_eq!(
        verified["checkpoints"].as_u64(),
        Some(expected),
        "{verified:#}"
    );
    // Writing to LangGraph's file is refused: it is a source.
    let elsewhere = format!(
        "langgraph-sqlite://{}",
        temp_file("langgraph-other").display()
    );
    let refused = checkpoint(&["migrate", "--from", &source, "--to", &elsewhere]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("read-only source"));

    let ours = temp_file("langgraph-imported");
    let mut targets = vec![format!("sqlite://{}", ours.display())];
    for (backend, url) in [
        ("postgres", checkpoint_conformance::server_url("postgres")),
        ("redis", checkpoint_conformance::server_url("redis")),
        (
            "mongo",
            checkpoint_conformance::server_url("mongo")
                .map(|u| format!("{}/checkpoint_cli_langgraph", u.trim_end_matches('/'))),
        ),
    ] {
        match url {
            Some(url) => targets.push(url),
            None if checkpoint_conformance::servers_required() => {
                panic!("CHECKPOINT_TEST_{}_URL is required", backend.to_uppercase())
            }
            None => {}
        }
    }
    let thread_ids: Vec<String> = threads["shown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap().to_owned())
        .collect();
    for target in &targets {
        // Clear what an earlier run left (LangGraph's thread ids are fixed).
        if !target.starts_with("sqlite://") {
            let store = checkpoint_cli::store::Store::parse(target)
                .unwrap()
                .open_for_writing(None)
                .await
                .unwrap();
            for t in &thread_ids {
                store.delete_thread(t).await.unwrap();
            }
        }
        let report = json_of(&[
            "migrate", "--from", &source, "--to", target, "--verify", "--json",
        ]);
        assert_eq!(report["checkpoints"].as_u64(), Some(expected), "{target}");
        assert_eq!(report["differences"], json!([]), "{target}");
        // What verify finds (LangGraph's graphs leave an interrupted tool call) is the same
        // on both sides, records included.
        let mut args = vec!["verify", target.as_str(), "--json"];
        args.extend(thread_ids.iter().map(String::as_str));
        let again: Value = serde_json::from_slice(&checkpoint(&args).stdout).unwrap();
        assert_eq!(again["checkpoints"].as_u64(), Some(expected), "{target}");
        assert_eq!(
            again["issue_counts"], verified["issue_counts"],
            "{target}: {again:#}"
        );
        // LangGraph's PostgresSaver reads the copy as its SqliteSaver reads the original.
        if target.starts_with("postgres") {
            let same = langgraph::run_python(
                &py,
                Path::new(script),
                &["same-in-postgres", path_str(&lg), target],
            );
            assert_eq!(same["problems"], json!([]), "{same:#}");
            assert_eq!(same["checkpoints"].as_u64(), Some(expected));
        }
    }
    let _ = std::fs::remove_file(&lg);
    let _ = std::fs::remove_file(&ours);
}

/// A database Python's `langgraph-checkpoint-mongodb` writes (the same graphs), read through
/// `langgraph-mongodb://`: listed, verified, and migrated into SQLite and our own MongoDB
/// layout with `--verify` finding no difference.
#[tokio::test]
async fn langgraph_mongodb_databases_migrate_into_our_stores() {
    let mongo = match checkpoint_conformance::server_url("mongo") {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if checkpoint_conformance::servers_required() => {
            panic!("CHECKPOINT_TEST_MONGO_URL is required")
        }
        None => return,
    };
    let Some(py) = langgraph::python() else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let db = format!("cli_lg_{}_{}", std::process::id(), nanos % 1_000_000_000);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../checkpoint-mongo/interop/langgraph_mongodb.py"
    );
    let expected = langgraph::run_python(&py, Path::new(script), &["write", &mongo, &db]);
    let expected = expected.as_array().unwrap().len() as u64;
    let host = mongo.strip_prefix("mongodb://").unwrap();
    let source = format!("langgraph-mongodb://{host}/{db}");

    let threads = json_of(&["threads", &source, "--json"]);
    assert_eq!(threads["threads"].as_u64(), Some(2), "{threads}");
    let verified: Value =
        serde_json::from_slice(&checkpoint(&["verify", &source, "--json"]).stdout).unwrap();
    assert_eq!(
        verified["checkpoints"].as_u64(),
        Some(expected),
        "{verified:#}"
    );
    let refused = checkpoint(&[
        "migrate",
        "--from",
        &source,
        "--to",
        &format!("{source}_copy"),
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("read-only source"));

    let ours = temp_file("langgraph-mongo-imported");
    // Stores no other test writes LangGraph's thread ids to (the SQLite test above fills
    // the shared PostgreSQL and Redis with them, concurrently).
    let targets = [
        format!("sqlite://{}", ours.display()),
        format!("{mongo}/{db}_ours"),
    ];
    for target in &targets {
        let report = json_of(&[
            "migrate", "--from", &source, "--to", target, "--verify", "--json",
        ]);
        assert_eq!(report["checkpoints"].as_u64(), Some(expected), "{target}");
        assert_eq!(report["differences"], json!([]), "{target}");
        let again: Value = serde_json::from_slice(
            &checkpoint(&["verify", target, "--json", "paused", "resumed"]).stdout,
        )
        .unwrap();
        assert_eq!(again["checkpoints"].as_u64(), Some(expected), "{target}");
        assert_eq!(
            again["issue_counts"], verified["issue_counts"],
            "{target}: {again:#}"
        );
    }
    let client = checkpoint_mongo::mongodb::Client::with_uri_str(&mongo)
        .await
        .unwrap();
    client.database(&db).drop().await.unwrap();
    client.database(&format!("{db}_ours")).drop().await.unwrap();
    let _ = std::fs::remove_file(&ours);
}

/// `checkpoint migrate --from FROM --to TO --verify`, which must find no difference.
fn migrate_verified(from: &str, to: &str) {
    let report = json_of(&["migrate", "--from", from, "--to", to, "--verify", "--json"]);
    assert_eq!(report["differences"], json!([]), "{to}: {report:#}");
}

/// The store options a URL carries (`schema`, `transaction_pooling`, `key_prefix`,
/// `collection_prefix`) put a migration where a saver configured with them finds it.
#[tokio::test]
async fn store_options_in_urls_place_a_migration_where_a_configured_saver_finds_it() {
    use checkpoint_mongo::{MongoConfig, MongoSaver};
    use checkpoint_postgres::PostgresSaver;
    use checkpoint_redis::RedisSaver;

    let source = temp_file("store-options");
    write_store(&source).await;
    let from = format!("sqlite://{}", source.display());
    let tag = checkpoint_core::new_checkpoint_id().replace('-', "_");
    let url = |backend: &str| {
        let url = checkpoint_conformance::server_url(backend);
        assert!(
            url.is_some() || !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_{}_URL is required",
            backend.to_uppercase()
        );
        url
    };
    let at = CheckpointConfig::new("support");
    let mut checked = 0;

    if let Some(pg) = url("postgres") {
        let schema = format!("cli_opts_{tag}");
        let to = format!("{pg}?schema={schema}&transaction_pooling=true");
        migrate_verified(&from, &to);
        let listed = json_of(&["threads", &to, "--json"]);
        assert_eq!(listed["threads"].as_u64(), Some(2), "{listed:#}");
        let saver = PostgresSaver::builder(&pg)
            .unwrap()
            .schema(&schema)
            .connect()
            .await
            .unwrap();
        assert_eq!(
            saver.get_tuple(&at).await.unwrap().unwrap().metadata.step(),
            Some(2)
        );
        let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
        checkpoint_postgres::sqlx::query(&drop)
            .execute(saver.pool())
            .await
            .unwrap();
        checked += 1;
    }
    if let Some(redis) = url("redis") {
        let prefix = format!("cli-opts-{tag}");
        let to = format!("{redis}?key_prefix={prefix}");
        migrate_verified(&from, &to);
        let saver = RedisSaver::builder(redis.clone())
            .key_prefix(prefix)
            .build()
            .await
            .unwrap();
        assert_eq!(
            saver.get_tuple(&at).await.unwrap().unwrap().metadata.step(),
            Some(2)
        );
        assert!(saver.purge().await.unwrap() > 0);
        checked += 1;
    }
    if let Some(mongo) = url("mongo") {
        let prefix = format!("o{}_", &tag[..12]);
        let to = format!(
            "{}/checkpoint_cli?collection_prefix={prefix}",
            mongo.trim_end_matches('/')
        );
        migrate_verified(&from, &to);
        let saver = MongoSaver::connect(
            &mongo,
            MongoConfig::new("checkpoint_cli").collection_prefix(prefix),
        )
        .await
        .unwrap();
        assert_eq!(
            saver.get_tuple(&at).await.unwrap().unwrap().metadata.step(),
            Some(2)
        );
        saver.drop_collections().await.unwrap();
        checked += 1;
    }
    let _ = std::fs::remove_file(&source);
    eprintln!("store options checked on {checked} server backends");
}

/// A migration whose source server becomes unreachable for 2 s mid-way (every connection
/// reset, new ones refused): with `--retries 0` it fails; with the default retries it
/// completes, and `--verify` finds every thread equal on both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_rides_out_an_outage_of_its_source() {
    use checkpoint_conformance::chaos::{ChaosProxy, Cut};
    use checkpoint_postgres::PostgresSaver;
    use futures::StreamExt;

    const THREADS: usize = 3_000;
    let Some(pg) = checkpoint_conformance::server_url("postgres") else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let schema = format!(
        "cli_outage_{}",
        checkpoint_core::new_checkpoint_id().replace('-', "_")
    );
    let saver = PostgresSaver::builder(&pg)
        .unwrap()
        .schema(&schema)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    futures::stream::iter(0..THREADS)
        .for_each_concurrent(8, |i| {
            let saver = &saver;
            async move {
                checkpoint_conformance::fixtures::put_child(
                    saver,
                    &CheckpointConfig::new(format!("t{i:05}")),
                )
                .await
                .unwrap();
            }
        })
        .await;
    let options: checkpoint_postgres::sqlx::postgres::PgConnectOptions = pg.parse().unwrap();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    let direct = format!("{pg}?schema={schema}");
    let through = direct.replacen(&upstream, &format!("127.0.0.1:{}", proxy.port()), 1);
    assert_ne!(through, direct, "the URL names {upstream}");

    for retries in ["0", "6"] {
        let target = temp_file(&format!("outage-{retries}"));
        let to = format!("sqlite://{}", target.display());
        let connections = proxy.accepted();
        let started = std::time::Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_checkpoint"))
            .args([
                "migrate",
                "--from",
                &through,
                "--to",
                &to,
                "--jobs",
                "2",
                "--json",
                "--retries",
                retries,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The outage begins once the migration has reached the server and is under way.
        while proxy.accepted() == connections {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the migration never connected"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let mut child = child;
        assert!(
            child.try_wait().unwrap().is_none(),
            "the migration ended before the outage: it tests nothing"
        );
        proxy.refuse(true);
        proxy.cut(Cut::Reset);
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        proxy.refuse(false);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "--retries {retries}: exit {:?} after {:?}",
            out.status.code(),
            started.elapsed()
        );
        if retries == "0" {
            assert!(
                !out.status.success(),
                "the outage failed no call of the migration: it tests nothing"
            );
            assert!(stderr.contains("unavailable"), "{stderr}");
        } else {
            assert!(out.status.success(), "{stderr}");
            let report = json_of(&[
                "migrate", "--from", &direct, "--to", &to, "--verify", "--json",
            ]);
            assert_eq!(report["differences"], json!([]), "{report:#}");
            assert_eq!(
                report["threads"].as_u64(),
                Some(THREADS as u64),
                "{report:#}"
            );
        }
        let _ = std::fs::remove_file(&target);
    }
    let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
    checkpoint_postgres::sqlx::query(&drop)
        .execute(saver.pool())
        .await
        .unwrap();
}
