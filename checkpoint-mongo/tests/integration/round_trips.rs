//! How many commands each operation sends, counted with the driver's command monitoring:
//! reads never do one query per checkpoint (no N+1), `list(limit 10)` is two commands.

use crate::common;

use checkpoint_core::{
    ChannelVersion, Checkpoint, CheckpointConfig, CheckpointMetadata, ListOptions, PutOptions,
    PutWritesOptions, Saver, SaverExt, Source, TypedValue,
};
use checkpoint_mongo::mongodb::Client;
use checkpoint_mongo::mongodb::bson::{Bson, doc};
use checkpoint_mongo::{Atomicity, TransactionMode};
use common::{CommandLog, drop_saver, monitored_client, saver_with, skip};

/// A W1-shaped thread (WORKLOAD.md §4): a growing message list, a scratch value that
/// changes every step, a 64 KiB document that never changes, and two pending writes per
/// step. Returns the config of every checkpoint.
async fn agent_loop(saver: &dyn Saver, thread: &str, steps: usize) -> Vec<CheckpointConfig> {
    let big = "d".repeat(64 * 1024);
    let mut messages: Vec<String> = Vec::new();
    let mut prev: Option<(CheckpointConfig, Checkpoint)> = None;
    let mut out = Vec::new();
    for n in 0..steps {
        messages.push(format!("message {n} {}", "m".repeat(480)));
        let mut c = match &prev {
            Some((_, p)) => p.successor(),
            None => Checkpoint::new(),
        };
        let mut versions = std::collections::BTreeMap::new();
        let mut set = |c: &mut Checkpoint, channel: &str, value: TypedValue| {
            let v = ChannelVersion::next_string(c.channel_versions.get(channel));
            c.channel_values.insert(channel.to_owned(), value);
            c.channel_versions.insert(channel.to_owned(), v.clone());
            versions.insert(channel.to_owned(), v);
        };
        set(&mut c, "messages", TypedValue::msgpack(&messages).unwrap());
        set(
            &mut c,
            "scratch",
            TypedValue::msgpack(&format!("scratch {n}")).unwrap(),
        );
        if n == 0 {
            set(&mut c, "big_doc", TypedValue::msgpack(&big).unwrap());
        }
        let parent = prev
            .as_ref()
            .map_or_else(|| CheckpointConfig::new(thread), |p| p.0.clone());
        let config = saver
            .put(
                &parent,
                c.clone(),
                CheckpointMetadata::for_step(Source::Loop, n as i64),
                versions,
                PutOptions::new(),
            )
            .await
            .unwrap();
        saver
            .put_writes(
                &config,
                vec![
                    ("messages".into(), TypedValue::msgpack(&"w").unwrap()),
                    ("scratch".into(), TypedValue::msgpack(&"x").unwrap()),
                ],
                &format!("task-{n}"),
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        out.push(config.clone());
        prev = Some((config, c));
    }
    out
}

#[tokio::test]
async fn list_limit_10_is_two_commands_and_reads_never_go_per_checkpoint() {
    if skip("list_limit_10_is_two_commands_and_reads_never_go_per_checkpoint") {
        return;
    }
    let (client, log) = monitored_client().await;
    let saver = saver_with(&client, |c| c).await;
    let configs = agent_loop(&saver, "thread-a", 20).await;
    agent_loop(&saver, "thread-b", 3).await;

    log.clear();
    let page = saver
        .list_all(ListOptions::thread("thread-a").namespace("").limit(10))
        .await
        .unwrap();
    assert_eq!(log.take(), ["aggregate", "find"], "list(limit 10)");
    assert_eq!(page.len(), 10);
    assert!(page.iter().all(|t| t.pending_writes.len() == 2));
    assert!(page.iter().all(|t| t.checkpoint.channel_values.len() == 3));

    // A whole history (one page) and the latest checkpoint: the same two commands.
    saver
        .list_all(ListOptions::thread("thread-a"))
        .await
        .unwrap();
    assert_eq!(log.take(), ["aggregate", "find"], "full list");
    let latest = saver
        .get_tuple(&CheckpointConfig::new("thread-a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(log.take(), ["aggregate", "find"], "get_tuple latest");
    assert_eq!(latest.config, configs[19]);
    saver.get_tuple(&configs[10]).await.unwrap().unwrap();
    assert_eq!(log.take(), ["aggregate", "find"], "get_tuple by id");

    // A global filtered list over two threads: still one checkpoint query and one values
    // query for the page.
    let hits = saver
        .list_all(
            ListOptions::new()
                .filter("source", "loop")
                .filter("step", 2),
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(log.take(), ["aggregate", "find"], "filtered global list");

    // Nothing found: one command.
    assert!(
        saver
            .get_tuple(&CheckpointConfig::new("nobody"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(log.take(), ["aggregate"]);
    drop_saver(&saver).await;
}

#[tokio::test]
async fn pages_cost_a_bounded_number_of_commands() {
    if skip("pages_cost_a_bounded_number_of_commands") {
        return;
    }
    let (client, log) = monitored_client().await;
    let saver = saver_with(&client, |c| c.list_page_size(8)).await;
    agent_loop(&saver, "long", 20).await;
    log.clear();
    let all = saver.list_all(ListOptions::thread("long")).await.unwrap();
    assert_eq!(all.len(), 20);
    // Three pages (8 + 8 + 4), each one aggregate and one values query.
    assert_eq!(
        log.take(),
        [
            "aggregate",
            "find",
            "aggregate",
            "find",
            "aggregate",
            "find"
        ]
    );
    drop_saver(&saver).await;
}

/// Whether the server takes the client-level `bulkWrite` command (MongoDB 8.0, wire
/// version 25, and later).
async fn takes_bulk_write(client: &Client) -> bool {
    let hello = client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await
        .expect("hello");
    let wire = match hello.get("maxWireVersion") {
        Some(Bson::Int32(v)) => i64::from(*v),
        Some(Bson::Int64(v)) => *v,
        other => panic!("hello without a maxWireVersion: {other:?}"),
    };
    wire >= 25
}

/// The atomicity a mode gets on the test server, a replica set (so the transaction paths
/// are the ones a test of `Auto` exercises).
fn atomicity_of(mode: TransactionMode) -> Atomicity {
    match mode {
        TransactionMode::Disabled => Atomicity::OrderedWrites,
        _ => Atomicity::Transactions,
    }
}

#[tokio::test]
async fn writes_send_a_fixed_number_of_commands() {
    if skip("writes_send_a_fixed_number_of_commands") {
        return;
    }
    let (client, log) = monitored_client().await;
    let bulk_write = takes_bulk_write(&client).await;
    for mode in [TransactionMode::Auto, TransactionMode::Disabled] {
        for ttl in [false, true] {
            writes_of(&client, &log, bulk_write, mode, ttl).await;
            // Configured off, as on a server without the command.
            writes_of(&client, &log, false, mode, ttl).await;
        }
    }
}

async fn writes_of(
    client: &Client,
    log: &CommandLog,
    bulk_write: bool,
    mode: TransactionMode,
    ttl: bool,
) {
    let ttl = ttl.then_some(std::time::Duration::from_secs(3600));
    let saver = saver_with(client, |c| {
        c.transactions(mode).bulk_write(bulk_write).ttl(ttl)
    })
    .await;
    assert_eq!(
        saver.atomicity(),
        atomicity_of(mode),
        "the test server is a replica set"
    );
    let configs = agent_loop(&saver, "w", 2).await;
    let c = saver
        .get_tuple(&configs[1])
        .await
        .unwrap()
        .unwrap()
        .checkpoint;
    let mut next = c.successor();
    let v = next.set("scratch", &"new").unwrap();
    log.clear();
    let config = saver
        .put(
            &configs[1],
            next,
            CheckpointMetadata::new(),
            [("scratch".to_owned(), v)].into(),
            PutOptions::new(),
        )
        .await
        .unwrap();
    let put = log.take();
    // With a TTL, the expiry refresh of the named values' documents and chunks: two more
    // updates, inside the `bulkWrite` when there is one.
    let refresh: &[&str] = if ttl.is_some() {
        &["update", "update"]
    } else {
        &[]
    };
    let expected: Vec<&str> = match (saver.atomicity(), bulk_write) {
        // The head document, then the new value and the checkpoint document in one
        // command, commit.
        (Atomicity::Transactions, true) => vec!["update", "bulkWrite", "commitTransaction"],
        // Before MongoDB 8.0, one command per collection.
        (Atomicity::Transactions, false) => [
            &["update", "insert"],
            refresh,
            &["update", "commitTransaction"],
        ]
        .concat(),
        (_, true) => vec!["bulkWrite"],
        // The head document's upsert (a no-op when it exists) first, as in a transaction.
        (_, false) => [&["update", "insert"], refresh, &["update"]].concat(),
    };
    assert_eq!(
        put, expected,
        "{mode:?}, bulk_write {bulk_write}, ttl {ttl:?}"
    );
    saver
        .put_writes(
            &config,
            vec![("a".into(), TypedValue::msgpack(&1).unwrap())],
            "task",
            PutWritesOptions::new(),
        )
        .await
        .unwrap();
    // All writes of a call are one document: one insert, no transaction.
    assert_eq!(log.take(), ["insert"]);
    let stored = saver.get_tuple(&config).await.unwrap().unwrap();
    assert_eq!(
        stored
            .checkpoint
            .get::<String>("scratch")
            .unwrap()
            .as_deref(),
        Some("new")
    );
    assert_eq!(stored.parent_config.as_ref(), Some(&configs[1]));
    assert_eq!(stored.pending_writes.len(), 1);
    drop_saver(&saver).await;
}

/// A TCP proxy in front of `upstream` that makes it look like an older server: every
/// `maxWireVersion` field in its replies (the handshake's `hello`) reads `wire`, so the
/// driver treats it as that MongoDB version. Replies are forwarded whole (their length
/// prefix frames them) and the rewrite keeps their length; requests pass unchanged.
async fn older_server(upstream: String, wire: i32) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut from_client, mut to_client) = inbound.into_split();
                let (mut from_server, mut to_server) = outbound.into_split();
                let replies = async {
                    loop {
                        let mut head = [0u8; 4];
                        from_server.read_exact(&mut head).await?;
                        let len = usize::try_from(i32::from_le_bytes(head))
                            .unwrap_or(4)
                            .max(4);
                        let mut message = vec![0u8; len];
                        message[..4].copy_from_slice(&head);
                        from_server.read_exact(&mut message[4..]).await?;
                        let field = b"\x10maxWireVersion\x00";
                        let mut at = 0;
                        while let Some(i) =
                            message[at..].windows(field.len()).position(|w| w == field)
                        {
                            let value = at + i + field.len();
                            message[value..value + 4].copy_from_slice(&wire.to_le_bytes());
                            at = value + 4;
                        }
                        to_client.write_all(&message).await?;
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                };
                tokio::select! {
                    _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                    _ = replies => {}
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn before_mongodb_8_a_put_writes_collection_by_collection() {
    if skip("before_mongodb_8_a_put_writes_collection_by_collection") {
        return;
    }
    use checkpoint_mongo::mongodb::options::ClientOptions;
    use checkpoint_mongo::{MongoConfig, MongoSaver};

    let url = common::url().expect("checked by skip");
    let upstream = ClientOptions::parse(&url).await.unwrap().hosts[0].to_string();
    // MongoDB 7.0 (wire version 21): no client-level bulkWrite. A direct connection, so
    // the driver does not discover the server's own address and bypass the proxy.
    let port = older_server(upstream, 21).await;
    let (client, log) = common::monitored_client_at(&format!(
        "mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=5000"
    ))
    .await;
    assert!(
        !takes_bulk_write(&client).await,
        "the proxy reports MongoDB 7.0"
    );
    for mode in [TransactionMode::Auto, TransactionMode::Disabled] {
        let config = MongoConfig::new(common::unique_db("old")).transactions(mode);
        let saver = MongoSaver::from_client(client.clone(), config)
            .await
            .unwrap();
        saver.setup().await.unwrap();
        // Both paths: the transaction's attempt is rerun, the ordered put continues.
        assert_eq!(
            saver.atomicity(),
            atomicity_of(mode),
            "through the proxy too"
        );
        // The saver is configured to try bulkWrite: the driver refuses it before sending
        // anything, the saver falls back, and every put of the thread stores.
        log.clear();
        let configs = agent_loop(&saver, "old", 3).await;
        let sent = log.take();
        assert!(!sent.iter().any(|c| c == "bulkWrite"), "{mode:?}: {sent:?}");
        let latest = saver
            .get_tuple(&CheckpointConfig::new("old"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.config, configs[2]);
        assert_eq!(latest.checkpoint.channel_values.len(), 3);
        assert_eq!(latest.pending_writes.len(), 2);
        let history = saver.list_all(ListOptions::thread("old")).await.unwrap();
        assert_eq!(history.len(), 3);
        drop_saver(&saver).await;
    }
}
