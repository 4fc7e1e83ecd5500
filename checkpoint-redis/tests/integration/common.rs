//! Shared test support: a conformance factory with one key prefix per saver, and local
//! `redis-server` processes for the Cluster and durability tests.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{BoxError, Saver, async_trait};
use checkpoint_redis::{RedisSaver, RedisSaverBuilder};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A key prefix no other saver of any test process uses.
pub fn unique_prefix(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "cptest:{tag}:{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Hands each clause savers with fresh prefixes; teardown deletes exactly those prefixes.
pub struct RedisFactory {
    builder: Option<RedisSaverBuilder>,
    missing: String,
    tag: &'static str,
    built: Mutex<Vec<RedisSaver>>,
}

impl RedisFactory {
    /// The single server of `CHECKPOINT_TEST_REDIS_URL`.
    pub fn from_env() -> Self {
        Self {
            builder: checkpoint_conformance::server_url("redis").map(RedisSaverBuilder::new),
            missing:
                "CHECKPOINT_TEST_REDIS_URL is not set (run scripts/test.sh, which starts Redis)"
                    .into(),
            tag: "single",
            built: Mutex::new(Vec::new()),
        }
    }

    /// A given builder (its prefix is replaced per saver).
    pub fn with_builder(
        builder: Option<RedisSaverBuilder>,
        missing: String,
        tag: &'static str,
    ) -> Self {
        Self {
            builder,
            missing,
            tag,
            built: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl SaverFactory for RedisFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        let builder = self.builder.clone().ok_or_else(|| self.missing.clone())?;
        let saver = builder.key_prefix(unique_prefix(self.tag)).build().await?;
        self.built
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(saver.clone());
        Ok(Arc::new(saver))
    }

    async fn teardown(&self) {
        let built = std::mem::take(&mut *self.built.lock().unwrap_or_else(PoisonError::into_inner));
        for saver in built {
            if let Err(e) = saver.purge().await {
                eprintln!("teardown of {}: {e}", saver.key_prefix());
            }
        }
    }

    fn skip_reason(&self) -> Option<String> {
        self.builder.is_none().then(|| self.missing.clone())
    }
}

/// Whether `redis-server` and `redis-cli` can be run.
pub fn redis_binaries() -> Result<(), String> {
    for bin in ["redis-server", "redis-cli"] {
        let ok = Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!(
                "{bin} is not installed (scripts/services/redis.sh installs it)"
            ));
        }
    }
    Ok(())
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// `n` consecutive free loopback ports from `start` on (each with its Cluster bus port
/// `+10000` free too).
pub fn free_ports(start: u16, n: u16) -> Result<u16, String> {
    let mut base = start;
    while base < start + 600 {
        if (0..n).all(|i| port_free(base + i) && port_free(base + i + 10_000)) {
            return Ok(base);
        }
        base += n;
    }
    Err(format!("no {n} free ports from {start}"))
}

/// A scratch directory, removed by the watchdog.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "checkpoint-redis-{tag}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Starts `redis-server` on 127.0.0.1:`port` with `extra` arguments, in the foreground (a
/// child of this process).
pub fn spawn_server(port: u16, dir: &Path, extra: &[&str]) -> Result<Child, String> {
    let mut cmd = Command::new("redis-server");
    cmd.arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--dir")
        .arg(dir)
        .arg("--save")
        .arg("")
        .arg("--logfile")
        .arg(dir.join(format!("{port}.log")))
        .arg("--daemonize")
        .arg("no")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting redis-server: {e}"))?;
    wait_ping(port, Duration::from_secs(15))?;
    Ok(child)
}

/// Runs `redis-cli -p port args...` and returns its output.
pub fn cli(port: u16, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .arg("-h")
        .arg("127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn wait_ping(port: u16, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if cli(port, &["ping"]).is_ok_and(|o| o.trim() == "PONG") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("redis-server on port {port} did not answer PING"))
}

/// A background shell that kills `pids` and removes `dir` once this test process exits
/// (or after `max` at the latest), so servers started by a test never outlive it.
pub fn watchdog(pids: &[u32], dir: &Path, max: Duration) {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let script = format!(
        "i=0; while kill -0 {parent} 2>/dev/null && [ $i -lt {max} ]; do sleep 1; i=$((i+1)); done; \
         kill -9 {pids} 2>/dev/null; sleep 1; rm -rf '{dir}'",
        parent = std::process::id(),
        max = max.as_secs(),
        pids = pids.join(" "),
        dir = dir.display(),
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// `builder`'s saver under a fresh [`unique_prefix`] tagged `tag`, and that prefix.
pub async fn build_fresh(builder: RedisSaverBuilder, tag: &str) -> (RedisSaver, String) {
    let prefix = unique_prefix(tag);
    let saver = builder.key_prefix(prefix.clone()).build().await.unwrap();
    (saver, prefix)
}

/// `(plain values, manifests, chunks)` stored for `thread` under `prefix`, told apart by
/// the field prefixes the chunked layout uses. `nodes` is one server URL, or the seed
/// nodes of a Cluster (`cluster`), whose client routes the read to the thread's node.
pub async fn value_layout(
    nodes: &[String],
    cluster: bool,
    prefix: &str,
    thread: &str,
) -> (usize, usize, usize) {
    let mut hkeys = redis::cmd("HKEYS");
    hkeys.arg(format!("{prefix}:{{{thread}}}:bl"));
    let fields: Vec<Vec<u8>> = if cluster {
        let client = redis::cluster::ClusterClient::new(nodes.to_vec()).unwrap();
        let mut conn = client.get_async_connection().await.unwrap();
        hkeys.query_async(&mut conn).await.unwrap()
    } else {
        let client = redis::Client::open(nodes[0].as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        hkeys.query_async(&mut conn).await.unwrap()
    };
    let count = |p: &[u8]| fields.iter().filter(|f| f.starts_with(p)).count();
    let (manifests, chunks) = (count(b"\x01\x04"), count(b"\x01\x03"));
    (fields.len() - manifests - chunks, manifests, chunks)
}

/// A list of `n` messages of ~600 bytes each (large enough to be chunked from 2 on).
pub fn messages(n: usize) -> checkpoint_core::TypedValue {
    checkpoint_conformance::fixtures::val(serde_json::json!(
        (0..n)
            .map(|k| serde_json::json!({"id": format!("msg-{k}"), "content": format!("{k}-{}", "m".repeat(600))}))
            .collect::<Vec<_>>()
    ))
}

/// A growing list is stored as content-addressed chunks shared by every version: each
/// element once, not once per checkpoint. Every read path (get_tuple, thread and global
/// lists, a channel the last put left unchanged, copies) returns the exact value, and
/// refused puts, deletions and pruning leave no chunk behind that nothing names. Runs
/// against the server(s) `builder` connects to (`nodes` are their URLs, for inspection).
pub async fn chunked_list_values(builder: RedisSaverBuilder, nodes: Vec<String>) {
    use checkpoint_conformance::fixtures::{step, val};
    use checkpoint_core::{
        Checkpoint, CheckpointConfig, CheckpointMetadata, Error, ListOptions, PruneStrategy,
        PutOptions, SaverExt,
    };

    let (saver, prefix) = build_fresh(builder, "chunks").await;
    let cluster = saver.is_cluster();
    let layout = || value_layout(&nodes, cluster, &prefix, "t");
    let run = |r: &str| CheckpointMetadata::new().with("run_id", r);
    let mut prev: Option<Checkpoint> = None;
    let mut config = CheckpointConfig::new("t");
    let mut configs = Vec::new();
    for n in 1..=6 {
        let (c, v) = step(prev.as_ref(), &[("messages", Some(messages(n)))]);
        config = saver
            .put(&config, c.clone(), run("grow"), v, PutOptions::new())
            .await
            .unwrap();
        configs.push((config.clone(), n));
        prev = Some(c);
    }
    // One element (below the size and count floors) is stored whole; every later
    // version is a manifest over one chunk per ~600-byte message.
    assert_eq!(layout().await, (1, 5, 6));
    // A last step that leaves `messages` unchanged: its record carries no manifest.
    let (last, v) = step(
        prev.as_ref(),
        &[("other", Some(val(serde_json::json!("o"))))],
    );
    config = saver
        .put(&config, last, run("other"), v, PutOptions::new())
        .await
        .unwrap();
    configs.push((config.clone(), 6));
    for (cfg, n) in &configs {
        let t = saver.get_tuple(cfg).await.unwrap().unwrap();
        assert_eq!(t.checkpoint.channel_values["messages"], messages(*n));
    }
    let listed = saver.list_all(ListOptions::thread("t")).await.unwrap();
    assert_eq!(listed.len(), configs.len());
    for (t, (_, n)) in listed.iter().zip(configs.iter().rev()) {
        assert_eq!(t.checkpoint.channel_values["messages"], messages(*n));
    }
    // The last two checkpoints name the same version: a list page reads and holds it once.
    assert_eq!(
        listed[0].checkpoint.channel_values["messages"]
            .bytes
            .as_ptr(),
        listed[1].checkpoint.channel_values["messages"]
            .bytes
            .as_ptr()
    );
    let global = saver
        .list_all(ListOptions::new().filter("run_id", "other"))
        .await
        .unwrap();
    assert_eq!(global.len(), 1);
    assert_eq!(global[0].checkpoint.channel_values["messages"], messages(6));

    // A compare-and-set put that loses leaves its new chunk and manifest behind nowhere.
    let (stale, v) = step(
        Some(&saver.get(&configs[0].0).await.unwrap().unwrap()),
        &[("messages", Some(messages(9)))],
    );
    let refused = saver
        .put(
            &configs[0].0,
            stale,
            run("stale"),
            v,
            PutOptions::compare_and_set(),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::Conflict { .. })),
        "{refused:?}"
    );
    assert_eq!(layout().await, (2, 5, 6), "only `other` was added");

    saver.copy_thread("t", "copy").await.unwrap();
    let copied = saver
        .get_tuple(&CheckpointConfig::new("copy"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(copied.checkpoint.channel_values["messages"], messages(6));

    // Keeping the latest checkpoint keeps the chunks its (unchanged) value names.
    saver
        .prune(&["t".to_owned()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(
        layout().await,
        (1, 1, 6),
        "`other`, one manifest, its chunks"
    );
    let t = saver
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.checkpoint.channel_values["messages"], messages(6));
    saver.delete_for_runs(&["other".to_owned()]).await.unwrap();
    assert_eq!(layout().await, (0, 0, 0), "nothing names a chunk any more");
    saver.purge().await.unwrap();
}

/// Every member of the sorted set `key`, in order.
pub async fn zrange_all(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<Vec<u8>> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}
