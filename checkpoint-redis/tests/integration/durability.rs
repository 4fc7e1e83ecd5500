//! Durability and reconnection against servers this test starts itself: an AOF server with
//! `appendfsync always` is killed (SIGKILL) and restarted on the same directory in the middle
//! of a stream of writes; every acknowledged write must survive, the calls made while it is
//! down must fail with a transient `Error::Unavailable`, and the same saver must carry on by
//! itself once the server is back. A second server checks that each operation is one round
//! trip. Servers are stopped by a watchdog when this test process exits.

use crate::common;

use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use checkpoint_conformance::fixtures::{step, val};
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, Error, ListOptions, PutOptions,
    PutWritesOptions, Saver, SaverExt, Source, ThreadTtl,
};
use checkpoint_redis::RedisSaverBuilder;
use checkpoint_redis::redis;
use common::{free_ports, redis_binaries, scratch_dir, spawn_server, watchdog};
use futures::TryStreamExt;
use serde_json::json;

fn binaries_or_skip() -> bool {
    match redis_binaries() {
        Ok(()) => true,
        Err(reason) => {
            assert!(!checkpoint_conformance::servers_required(), "{reason}");
            eprintln!("SKIPPED: {reason}");
            false
        }
    }
}

const AOF: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

fn start(port: u16, dir: &std::path::Path) -> Child {
    let child = spawn_server(port, dir, &AOF).unwrap_or_else(|e| panic!("{e}"));
    watchdog(&[child.id()], dir, Duration::from_secs(900));
    child
}

/// A private AOF server on a free port from `base` on, and its URL; `None` (skipped)
/// without `redis-server`.
fn private_server(base: u16, tag: &str) -> Option<(Child, String)> {
    if !binaries_or_skip() {
        return None;
    }
    let port = free_ports(base, 1).unwrap();
    let server = start(port, &scratch_dir(tag));
    Some((server, format!("redis://127.0.0.1:{port}")))
}

#[test]
fn aof_restart_loses_no_acknowledged_write_and_the_saver_reconnects() {
    if !binaries_or_skip() {
        return;
    }
    let port = free_ports(7201, 1).unwrap();
    let dir = scratch_dir("aof");
    let mut server = start(port, &dir);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let saver = RedisSaverBuilder::new(format!("redis://127.0.0.1:{port}"))
            .key_prefix("durability")
            .pool_size(4)
            .pool_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        let saver = Arc::new(saver);
        const N: usize = 150;
        let acked = Arc::new(AtomicUsize::new(0));
        let writer = {
            let saver = Arc::clone(&saver);
            let acked = Arc::clone(&acked);
            tokio::spawn(async move {
                // A server that never comes back fails the test instead of hanging it: each
                // run of failed calls may last at most OUTAGE.
                const OUTAGE: Duration = Duration::from_secs(60);
                let mut down_since: Option<std::time::Instant> = None;
                let mut failures = Vec::new();
                let mut chain: Vec<(CheckpointConfig, Checkpoint)> = Vec::new();
                for i in 0..N {
                    let (c, v) = step(
                        chain.last().map(|p| &p.1),
                        &[("counter", Some(val(json!(i))))],
                    );
                    let parent = chain
                        .last()
                        .map_or_else(|| CheckpointConfig::new("durable"), |p| p.0.clone());
                    let meta = CheckpointMetadata::for_step(Source::Loop, i as i64);
                    // Retry the same put until it is acknowledged (puts are idempotent).
                    let config = loop {
                        match saver
                            .put(
                                &parent,
                                c.clone(),
                                meta.clone(),
                                v.clone(),
                                PutOptions::new(),
                            )
                            .await
                        {
                            Ok(config) => {
                                down_since = None;
                                break config;
                            }
                            Err(e) => {
                                let since = *down_since.get_or_insert_with(std::time::Instant::now);
                                assert!(
                                    since.elapsed() < OUTAGE,
                                    "the server did not come back within {OUTAGE:?}: {e:?}"
                                );
                                failures.push(e);
                                tokio::time::sleep(Duration::from_millis(25)).await;
                            }
                        }
                    };
                    loop {
                        match saver
                            .put_writes(
                                &config,
                                vec![("w".into(), val(json!(i)))],
                                "task",
                                PutWritesOptions::new(),
                            )
                            .await
                        {
                            Ok(()) => {
                                down_since = None;
                                break;
                            }
                            Err(e) => {
                                let since = *down_since.get_or_insert_with(std::time::Instant::now);
                                assert!(
                                    since.elapsed() < OUTAGE,
                                    "the server did not come back within {OUTAGE:?}: {e:?}"
                                );
                                failures.push(e);
                                tokio::time::sleep(Duration::from_millis(25)).await;
                            }
                        }
                    }
                    chain.push((config, c));
                    acked.store(i + 1, Ordering::SeqCst);
                }
                (chain, failures)
            })
        };
        // (A writer that failed early ends the wait too; its panic is reported below.)
        while acked.load(Ordering::SeqCst) < N / 3 && !writer.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Crash: SIGKILL, no shutdown save. Only the AOF (fsync always) keeps the data.
        server.kill().unwrap();
        server.wait().unwrap();
        let at_crash = acked.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let dir2 = dir.clone();
        let mut restarted = tokio::task::spawn_blocking(move || start(port, &dir2))
            .await
            .unwrap();
        let (chain, failures) = writer.await.unwrap();
        assert_eq!(chain.len(), N);
        assert!(
            !failures.is_empty(),
            "the writer must have seen the server down (acked {at_crash} before the crash)"
        );
        for e in &failures {
            assert!(
                matches!(
                    e,
                    Error::Unavailable {
                        backend: "redis",
                        ..
                    }
                ) && e.is_transient(),
                "a call made while the server is down must be Unavailable: {e:?}"
            );
            assert!(std::error::Error::source(e).is_some(), "source kept: {e:?}");
        }
        // Every acknowledged checkpoint and write is there, through the same saver.
        let listed = saver
            .list_all(ListOptions::thread("durable"))
            .await
            .unwrap();
        assert_eq!(listed.len(), N, "no acknowledged checkpoint may be lost");
        for (i, (config, c)) in chain.iter().enumerate() {
            let t = saver
                .get_tuple(config)
                .await
                .unwrap()
                .expect("acknowledged");
            assert_eq!(&t.checkpoint, c, "checkpoint {i}");
            assert_eq!(t.pending_writes.len(), 1, "writes of checkpoint {i}");
        }
        saver.purge().await.unwrap();
        let _ = restarted.kill();
        let _ = restarted.wait();
    });
}

/// How many `NOSCRIPT` errors the server has answered (`INFO errorstats`).
async fn noscript_errors(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_NOSCRIPT:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

fn calls(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn evalsha_calls(info: &str) -> u64 {
    calls(info, "evalsha")
}

/// Client commands other than `EVALSHA`, `MULTI`/`EXEC` and `HSETNX` a saver could send
/// (commands run inside scripts are counted by `INFO commandstats` too, so they cannot be
/// summed blindly).
fn other_client_calls(info: &str) -> u64 {
    ["eval", "script", "ping", "watch", "hgetall", "mget"]
        .iter()
        .filter_map(|c| {
            let prefix = format!("cmdstat_{c}:");
            let l = info.lines().find(|l| l.starts_with(&prefix))?;
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn put_put_writes_and_get_tuple_are_one_round_trip_each() {
    let Some((mut server, url)) = private_server(7251, "roundtrip") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let saver = RedisSaverBuilder::new(url.clone())
            .key_prefix("rt")
            .pool_size(1)
            .build()
            .await
            .unwrap();
        let client = redis::Client::open(url).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        let stats = || {
            let mut admin = admin.clone();
            async move {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                (
                    evalsha_calls(&info),
                    other_client_calls(&info),
                    calls(&info, "exec"),
                    calls(&info, "hsetnx"),
                    calls(&info, "zadd"),
                )
            }
        };
        let big = val(json!("x".repeat(70_000)));
        let (c1, v1) = step(None, &[("big", Some(big)), ("small", Some(val(json!(0))))]);
        let cfg1 = saver
            .put(
                &CheckpointConfig::new("t"),
                c1.clone(),
                CheckpointMetadata::new(),
                v1,
                PutOptions::new(),
            )
            .await
            .unwrap();
        let before = stats().await;
        let (c2, v2) = step(Some(&c1), &[("small", Some(val(json!(1))))]);
        let cfg2 = saver
            .put(&cfg1, c2, CheckpointMetadata::new(), v2, PutOptions::new())
            .await
            .unwrap();
        let after = stats().await;
        // One script (the TTL refresh) inside one MULTI/EXEC with the new value's and the
        // record's HSETNX (one pipelined write, one reply): values and the record go in as
        // plain commands, not through Lua.
        assert_eq!(after.0 - before.0, 1, "put runs one EVALSHA");
        assert_eq!(after.2 - before.2, 1, "put is one MULTI/EXEC");
        assert_eq!(after.3 - before.3, 2, "the value's HSETNX and the record's");
        // One ZADD per index (commandstats counts ZADDs from scripts too, so this bounds
        // the count; that they are the MULTI's plain commands is what the single EVALSHA
        // above, the TTL script, leaves room for).
        assert_eq!(after.4 - before.4, 2, "one ZADD per index");
        assert_eq!(after.1, before.1, "put sends nothing else");
        saver
            .put_writes(
                &cfg2,
                vec![("a".into(), val(json!(1))), ("b".into(), val(json!(2)))],
                "task",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        let after_writes = stats().await;
        assert_eq!(after_writes.0 - after.0, 1, "put_writes is one EVALSHA");
        assert_eq!(after_writes.1, after.1, "put_writes sends nothing else");
        assert_eq!(after_writes.2, after.2, "put_writes needs no MULTI/EXEC");
        assert_eq!(after_writes.3 - after.3, 2, "each new write is one HSETNX");
        let t = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        let after_get = stats().await;
        assert_eq!(after_get.0 - after_writes.0, 1, "get_tuple is one EVALSHA");
        assert_eq!(after_get.1, after_writes.1, "get_tuple sends nothing else");
        assert_eq!(after_get.2, after_writes.2, "get_tuple needs no MULTI/EXEC");
        assert_eq!(t.pending_writes.len(), 2);
        assert_eq!(t.checkpoint.channel_values.len(), 2);
        // The unchanged 70 KB channel was stored once, not again by the second put.
        let blobs: u64 = redis::cmd("HLEN")
            .arg("rt:{t}:bl")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(blobs, 3, "big once, small twice");
        saver.purge().await.unwrap();
        let left: u64 = redis::cmd("DBSIZE").query_async(&mut admin).await.unwrap();
        assert_eq!(left, 0, "purge removes every key of the prefix");
    });
    let _ = server.kill();
    let _ = server.wait();
}

/// An unconditional put writes its record and index entries with plain commands in the
/// same `MULTI`/`EXEC` as its TTL script. If the script is not cached (`SCRIPT FLUSH`),
/// `EXEC` still runs the plain commands; the saver loads the script and sends the
/// transaction again, finds its own record there and completes the put as a re-put. Index
/// entries without a record (left by hand, or by an earlier release whose put script met
/// `NOSCRIPT`) must not change what readers see either: the latest checkpoint,
/// compare-and-set and `prune` skip them.
#[test]
fn a_put_whose_script_did_not_run_leaves_no_visible_trace() {
    let Some((mut server, url)) = private_server(7261, "noscript") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let saver = RedisSaverBuilder::new(url.clone())
            .key_prefix("ns")
            .build()
            .await
            .unwrap();
        let client = redis::Client::open(url).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        let meta = |step: i64| CheckpointMetadata::for_step(Source::Loop, step);
        let (c1, v1) = step(None, &[("a", Some(val(json!(1))))]);
        let cfg1 = saver
            .put(
                &CheckpointConfig::new("t"),
                c1.clone(),
                meta(1),
                v1,
                PutOptions::new(),
            )
            .await
            .unwrap();

        // The script cache is emptied: the next put's EVALSHA fails inside its MULTI, and
        // the saver loads the script and sends the transaction again.
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        let before = noscript_errors(&mut admin).await;
        let (c2, v2) = step(Some(&c1), &[("a", Some(val(json!(2))))]);
        let cfg2 = saver
            .put(&cfg1, c2.clone(), meta(2), v2, PutOptions::new())
            .await
            .unwrap();
        // The retry did happen: the TTL script met NOSCRIPT, then so did the put script of
        // the re-put that completed the put.
        assert_eq!(noscript_errors(&mut admin).await - before, 2);
        let latest = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.checkpoint.id, c2.id);
        let members = common::zrange_all(&mut admin, "ns:{t}:mi").await;
        // `\1 tref`, `\2 ns id` and 3 metadata tokens per checkpoint; the re-put that
        // completed the retried put left no stale token.
        assert_eq!(members.len(), 10, "{members:?}");

        // Index entries without a record, with an id newer than every stored checkpoint.
        let ghost = "ffffffff-ffff-7fff-bfff-ffffffffffff";
        let tref = format!("{ghost}\0\0");
        let _: () = redis::cmd("ZADD")
            .arg("ns:{t}:mi")
            .arg(0)
            .arg(format!("\u{1}{tref}"))
            .arg(0)
            .arg(format!("\u{2}\0{ghost}\0"))
            .arg(0)
            .arg(format!("kstep=3.0\0{tref}"))
            .query_async(&mut admin)
            .await
            .unwrap();
        let latest = saver
            .get_tuple(&CheckpointConfig::new("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.checkpoint.id, c2.id, "the ghost is not the head");
        let listed = saver.list_all(ListOptions::thread("t")).await.unwrap();
        assert_eq!(listed.len(), 2);
        let filtered = saver
            .list_all(ListOptions::thread("t").filter("step", 3))
            .await
            .unwrap();
        assert!(filtered.is_empty());
        // Compare-and-set still sees the real head.
        let (c3, v3) = step(Some(&c2), &[("a", Some(val(json!(3))))]);
        saver
            .put(
                &cfg2,
                c3.clone(),
                meta(3),
                v3,
                PutOptions::compare_and_set(),
            )
            .await
            .unwrap();
        // Keeping the latest keeps the real latest checkpoint and drops the ghost's
        // ordering entries.
        saver
            .prune(
                &["t".to_owned()],
                checkpoint_core::PruneStrategy::KeepLatest,
            )
            .await
            .unwrap();
        let left = saver.list_all(ListOptions::thread("t")).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].checkpoint.id, c3.id);
        assert_eq!(left[0].checkpoint.channel_values["a"], val(json!(3)));
        let members = common::zrange_all(&mut admin, "ns:{t}:mi").await;
        assert!(
            !members
                .iter()
                .any(|m| m.starts_with(b"\x01ffffffff") || m.starts_with(b"\x02\x00ffffffff")),
            "{members:?}"
        );
        saver.purge().await.unwrap();
    });
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn no_call_fails_on_a_connection_a_restart_killed() {
    if !binaries_or_skip() {
        return;
    }
    let port = free_ports(7271, 1).unwrap();
    let dir = scratch_dir("restart-calls");
    let server = std::sync::Mutex::new(start(port, &dir));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let saver = RedisSaverBuilder::new(format!("redis://127.0.0.1:{port}"))
            .key_prefix("restart")
            .pool_size(4)
            .build()
            .await
            .unwrap();
        checkpoint_conformance::chaos::calls_succeed_after_restarts(&saver, 4, || {
            let (server, dir) = (&server, &dir);
            async move {
                let mut server = server.lock().unwrap();
                server.kill().map_err(|e| e.to_string())?;
                server.wait().map_err(|e| e.to_string())?;
                *server = start(port, dir);
                Ok(())
            }
        })
        .await
        .unwrap();
    });
    let mut server = server.into_inner().unwrap();
    let _ = server.kill();
    let _ = server.wait();
}

/// Puts `threads` threads of one 20 KB value each; the addresses of those acknowledged, and
/// the first error.
async fn fill(
    saver: &checkpoint_redis::RedisSaver,
    threads: usize,
) -> (Vec<CheckpointConfig>, Option<Error>) {
    let big = val(json!("x".repeat(20_000)));
    let mut stored = Vec::new();
    for t in 0..threads {
        let (c, v) = step(
            None,
            &[("big", Some(big.clone())), ("small", Some(val(json!(t))))],
        );
        let put = saver
            .put(
                &CheckpointConfig::new(format!("t{t}")),
                c,
                CheckpointMetadata::new(),
                v,
                PutOptions::new(),
            )
            .await;
        match put {
            Ok(config) => stored.push(config),
            Err(e) => return (stored, Some(e)),
        }
    }
    (stored, None)
}

/// A private server with a 4 MB memory limit and `policy`, and its URL.
fn limited_server(base: u16, policy: &str) -> Option<(Child, String)> {
    if !binaries_or_skip() {
        return None;
    }
    let port = free_ports(base, 1).unwrap();
    let dir = scratch_dir(&format!("evict-{policy}"));
    let server = spawn_server(
        port,
        &dir,
        &["--maxmemory", "4mb", "--maxmemory-policy", policy],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    watchdog(&[server.id()], &dir, Duration::from_secs(300));
    Some((server, format!("redis://127.0.0.1:{port}")))
}

#[test]
fn a_server_that_would_evict_stored_threads_is_refused() {
    let Some((mut server, url)) = limited_server(7281, "allkeys-lru") else {
        return;
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let builder = || RedisSaverBuilder::new(url.clone()).key_prefix("evict");
        let e = builder().build().await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Backend {
                    backend: "redis",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(!e.is_transient());
        let text = e.chain();
        assert!(
            text.contains("allkeys-lru") && text.contains("noeviction"),
            "{text}"
        );
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut admin = client.get_multiplexed_async_connection().await.unwrap();
        let mut marker = async || -> Option<String> {
            redis::cmd("GET")
                .arg("evict:{%v}:layout")
                .query_async(&mut admin)
                .await
                .unwrap()
        };
        assert_eq!(marker().await, None, "a refused build writes nothing");
        // Accepted on request: and then, over the limit, Redis deletes parts of threads,
        // which load without some of their values. This is what the check prevents.
        let saver = builder().allow_eviction(true).build().await.unwrap();
        assert_eq!(
            marker().await,
            None,
            "opening writes nothing to a server that evicts any key"
        );
        let (stored, error) = fill(&saver, 200).await;
        assert!(error.is_none(), "{error:?}");
        let mut incomplete = 0;
        let mut loading = Vec::new();
        for config in &stored {
            if let Some(t) = saver.get_tuple(config).await.unwrap() {
                incomplete += usize::from(t.checkpoint.channel_values.len() != 2);
                loading.push(config.thread_id.clone());
            }
        }
        assert!(
            incomplete > 0,
            "nothing was evicted: the test proves nothing"
        );
        // The global index may be gone with the rest; thread listings scan the keys that
        // are left instead of trusting it.
        loading.sort();
        let listed: Vec<String> = saver.list_threads().try_collect().await.unwrap();
        assert_eq!(listed, loading);
    });
    let _ = server.kill();
}

#[test]
fn keys_with_a_ttl_are_refused_where_the_server_evicts_those() {
    let Some((mut server, url)) = limited_server(7291, "volatile-lru") else {
        return;
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let builder = || RedisSaverBuilder::new(url.clone()).key_prefix("volatile");
        // A default TTL would give every key one.
        let e = builder()
            .default_ttl(Some(Duration::from_secs(3600)))
            .build()
            .await
            .unwrap_err();
        assert!(e.chain().contains("volatile-lru"), "{e:?}");
        // Without TTLs nothing of the saver is evictable; a thread TTL is refused.
        let saver = builder().build().await.unwrap();
        let (stored, _) = fill(&saver, 1).await;
        let thread = &stored[0].thread_id;
        let e = saver
            .set_thread_ttl(thread, ThreadTtl::Expire(Duration::from_secs(60)))
            .await
            .unwrap_err();
        assert!(e.chain().contains("volatile-lru"), "{e:?}");
        assert_eq!(
            saver.thread_ttl(thread).await.unwrap(),
            None,
            "no TTL was set"
        );
        saver
            .set_thread_ttl(thread, ThreadTtl::Pinned)
            .await
            .unwrap();
        saver
            .set_thread_ttl(thread, ThreadTtl::Default)
            .await
            .unwrap();
    });
    let _ = server.kill();
}

#[test]
fn at_its_memory_limit_a_noeviction_server_refuses_writes_and_keeps_every_thread() {
    let Some((mut server, url)) = limited_server(7301, "noeviction") else {
        return;
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let saver = RedisSaverBuilder::new(url.clone())
            .key_prefix("full")
            .build()
            .await
            .unwrap();
        let (stored, error) = fill(&saver, 400).await;
        let error = error.expect("4 MB cannot hold 400 threads of 20 KB");
        assert!(error.chain().contains("OOM"), "{error:?}");
        // Transient, as a full disk is for SQLite: memory frees up as threads go.
        assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
        assert!(!stored.is_empty());
        // Every acknowledged thread loads whole, and the refused put left nothing behind.
        for config in &stored {
            let t = saver.get_tuple(config).await.unwrap().expect("stored");
            assert_eq!(t.checkpoint.channel_values.len(), 2, "{config:?}");
        }
        let refused = CheckpointConfig::new(format!("t{}", stored.len()));
        assert!(saver.get_tuple(&refused).await.unwrap().is_none());
        // Once some threads are deleted, the same put, retried, is stored.
        for config in &stored[..stored.len() / 2] {
            saver.delete_thread(&config.thread_id).await.unwrap();
        }
        let (c, v) = step(None, &[("big", Some(val(json!("x".repeat(20_000)))))]);
        saver
            .put(&refused, c, CheckpointMetadata::new(), v, PutOptions::new())
            .await
            .unwrap();
        assert!(saver.get_tuple(&refused).await.unwrap().is_some());
    });
    let _ = server.kill();
}
