//! The whole conformance suite against a local 3-primary Redis Cluster.
//!
//! The first clause to run starts three `redis-server --cluster-enabled yes` processes on
//! free loopback ports (from 7101 on), joins them with `redis-cli --cluster create`, and
//! starts a watchdog that stops them and removes their directory when this test process
//! exits (or after 30 minutes at the latest). Without `redis-server` the clauses are skipped
//! with a reason, except under `CI=true` / `CHECKPOINT_TEST_REQUIRE=1`, where they fail.

use crate::common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use checkpoint_redis::RedisSaverBuilder;
use common::{RedisFactory, cli, free_ports, redis_binaries, scratch_dir, spawn_server, watchdog};
use futures::TryStreamExt;

static CLUSTER: OnceLock<Result<Vec<String>, String>> = OnceLock::new();

fn start_cluster() -> Result<Vec<String>, String> {
    redis_binaries()?;
    let base = free_ports(7101, 3)?;
    let dir = scratch_dir("cluster");
    let mut pids = Vec::new();
    let mut nodes = Vec::new();
    for port in base..base + 3 {
        let conf = format!("nodes-{port}.conf");
        let child = spawn_server(
            port,
            &dir,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf,
                "--cluster-node-timeout",
                "5000",
                "--appendonly",
                "no",
            ],
        );
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                watchdog(&pids, &dir, Duration::from_secs(1));
                return Err(e);
            }
        };
        pids.push(child.id());
        // The watchdog owns the process from here on.
        std::mem::forget(child);
        nodes.push(format!("127.0.0.1:{port}"));
    }
    watchdog(&pids, &dir, Duration::from_secs(1800));
    let mut args = vec!["--cluster", "create"];
    args.extend(nodes.iter().map(String::as_str));
    args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
    let out = cli(base, &args)?;
    if !out.contains("All 16384 slots covered") {
        return Err(format!("redis-cli --cluster create failed:\n{out}"));
    }
    let started = Instant::now();
    loop {
        let ok = (base..base + 3)
            .all(|p| cli(p, &["cluster", "info"]).is_ok_and(|o| o.contains("cluster_state:ok")));
        if ok {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err("the local cluster did not reach cluster_state:ok".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(nodes.iter().map(|n| format!("redis://{n}")).collect())
}

fn cluster_factory() -> RedisFactory {
    if let Err(reason) = redis_binaries() {
        return RedisFactory::with_builder(None, reason, "cluster");
    }
    match CLUSTER.get_or_init(start_cluster) {
        Ok(nodes) => RedisFactory::with_builder(
            Some(RedisSaverBuilder::cluster(nodes.clone())),
            String::new(),
            "cluster",
        ),
        Err(e) => panic!("could not start the local Redis Cluster: {e}"),
    }
}

checkpoint_conformance::conformance_suite!(cluster_factory());

/// The local cluster's node URLs, started on first use; `None` (skipped, with the reason
/// printed) without `redis-server`, which fails instead when servers are required.
fn cluster_nodes() -> Option<Vec<String>> {
    if let Err(reason) = redis_binaries() {
        assert!(!checkpoint_conformance::servers_required(), "{reason}");
        eprintln!("SKIPPED: {reason}");
        return None;
    }
    Some(
        CLUSTER
            .get_or_init(start_cluster)
            .clone()
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// The cluster really spreads threads over its primaries, and every key of one thread sits
/// in one slot (the thread's hash tag), so each thread script runs on one node. (The saver
/// is opened by a `redis+cluster://` URL, the conformance suite's by a list of nodes.)
#[test]
fn threads_spread_over_primaries_and_each_thread_stays_in_one_slot() {
    use checkpoint_conformance::fixtures::{cfg, step, val};
    use checkpoint_core::{CheckpointMetadata, PutOptions, Saver};
    let Some(nodes) = cluster_nodes() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let prefix = common::unique_prefix("spread");
        let hosts: Vec<&str> = nodes
            .iter()
            .map(|n| n.trim_start_matches("redis://"))
            .collect();
        let saver = RedisSaverBuilder::new(format!("redis+cluster://{}", hosts.join(",")))
            .key_prefix(prefix.clone())
            .build()
            .await
            .unwrap();
        assert!(saver.is_cluster());
        for i in 0..24 {
            let (c, v) = step(None, &[("a", Some(val(serde_json::json!(i))))]);
            saver
                .put(
                    &cfg(&format!("thread-{i}"), ""),
                    c,
                    CheckpointMetadata::new().with("i", i),
                    v,
                    PutOptions::new(),
                )
                .await
                .unwrap();
        }
        let mut holding = 0;
        for n in &nodes {
            let port: u16 = n.rsplit(':').next().unwrap().parse().unwrap();
            let keys = cli(port, &["--scan", "--pattern", &format!("{prefix}:*")]).unwrap();
            let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
            if keys.iter().any(|k| k.contains("{thread-")) {
                holding += 1;
            }
            for k in keys.iter().filter(|k| k.contains("{thread-")) {
                let tag = &k[k.find('{').unwrap()..=k.find('}').unwrap()];
                let slot = |key: &str| cli(port, &["cluster", "keyslot", key]).unwrap();
                assert_eq!(slot(k), slot(&format!("{prefix}:{tag}:cp")), "{k}");
            }
        }
        assert!(
            holding >= 2,
            "24 threads should land on at least 2 of 3 primaries"
        );
        let listed =
            checkpoint_core::SaverExt::list_all(&saver, checkpoint_core::ListOptions::new())
                .await
                .unwrap();
        assert_eq!(listed.len(), 24);

        // The prefix is marked with the layout that has thread entries, and thread listings
        // read them: a deleted thread is not listed, but its entry stays while a put may
        // still be in flight (it was written less than 60 s ago).
        let port: u16 = nodes[0].rsplit(':').next().unwrap().parse().unwrap();
        let marker = cli(port, &["-c", "GET", &format!("{prefix}:{{%v}}:layout")]).unwrap();
        assert_eq!(marker.trim(), "2");
        let entries = || {
            let global = format!("{prefix}:{{%g}}:mi");
            let n = cli(port, &["-c", "ZLEXCOUNT", &global, "[\x03", "(\x04"]).unwrap();
            n.trim().parse::<usize>().unwrap()
        };
        assert_eq!(entries(), 24);
        saver.delete_thread("thread-0").await.unwrap();
        let threads: Vec<String> = saver.list_threads().try_collect().await.unwrap();
        assert_eq!(threads.len(), 23);
        assert!(!threads.contains(&"thread-0".to_owned()));
        let after: Vec<String> = saver
            .list_threads_after("thread-19")
            .try_collect()
            .await
            .unwrap();
        let mut want: Vec<String> = (1..24).map(|i| format!("thread-{i}")).collect();
        want.sort();
        want.retain(|t| t.as_str() > "thread-19");
        assert_eq!(after, want);
        assert_eq!(after[..2], ["thread-2", "thread-20"]);
        assert_eq!(entries(), 24, "a young entry of a gone thread is kept");
        // Once the entries' times are old, the next listing removes the gone thread's.
        let stamps = format!("{prefix}:{{%g}}:ts");
        let age = "for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
                   redis.call('HSET', KEYS[1], f, 0) end";
        cli(port, &["-c", "EVAL", age, "1", &stamps]).unwrap();
        let threads: Vec<String> = saver.list_threads().try_collect().await.unwrap();
        assert_eq!(threads.len(), 23);
        assert_eq!(entries(), 23, "an old entry of a gone thread is removed");
        saver.purge().await.unwrap();
    });
}

/// The chunked layout of list values on a Cluster, where a put's values and chunks go
/// through the thread script instead of a `MULTI` of plain commands: the same exact reads,
/// field counts and sweeps as on a single server.
#[test]
fn list_values_are_stored_once_per_element_and_read_back_exactly() {
    let Some(nodes) = cluster_nodes() else {
        return;
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::chunked_list_values(
            RedisSaverBuilder::cluster(nodes.clone()),
            nodes,
        ));
}
