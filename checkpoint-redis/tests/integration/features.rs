//! Redis-specific behavior against the server of `CHECKPOINT_TEST_REDIS_URL`: the key layout
//! (hash tags, no globbing), TTLs (default, per thread, pinning, refresh on read, expired
//! threads leaving the global listing), error classification and secrets in messages.

use crate::common;

use std::time::Duration;

use checkpoint_conformance::fixtures::{step, val};
use checkpoint_core::{
    CheckpointConfig, CheckpointMetadata, Error, ListOptions, PutOptions, Saver, SaverExt,
};
use checkpoint_redis::{RedisSaver, RedisSaverBuilder, ThreadTtl, redis};
use futures::{StreamExt, TryStreamExt};
use serde_json::json;

fn url() -> Option<String> {
    let url = checkpoint_conformance::server_url("redis");
    if url.is_none() {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_REDIS_URL is required under CI"
        );
        eprintln!("SKIPPED: CHECKPOINT_TEST_REDIS_URL is not set");
    }
    url
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn put_one(saver: &RedisSaver, thread: &str) -> CheckpointConfig {
    let (c, v) = step(None, &[("a", Some(val(json!(thread))))]);
    saver
        .put(
            &CheckpointConfig::new(thread),
            c,
            CheckpointMetadata::new().with("who", thread),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap()
}

/// How many fields (values, manifests and chunks) the `bl` hash of `thread` under `prefix`
/// holds.
async fn stored_values(url: &str, prefix: &str, thread: &str) -> usize {
    let (plain, manifests, chunks) =
        common::value_layout(&[url.to_owned()], false, prefix, thread).await;
    plain + manifests + chunks
}

async fn keys(url: &str, pattern: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.extend(batch);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

/// Runs `cmd` on the server at `url` (a test's own connection).
async fn admin<T: redis::FromRedisValue>(url: &str, cmd: &mut redis::Cmd) -> T {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
}

#[test]
fn a_prefix_written_in_a_newer_layout_is_refused() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let prefix = common::unique_prefix("newer-layout");
        let builder = || RedisSaverBuilder::new(url.clone()).key_prefix(prefix.clone());
        let saver = builder().build().await.unwrap();
        put_one(&saver, "t").await;
        let key = format!("{prefix}:{{%v}}:layout");
        // A new prefix is marked with the layout this build writes; opening it again is fine.
        let marker: Option<String> = admin(&url, redis::cmd("GET").arg(&key)).await;
        assert_eq!(marker.as_deref(), Some("2"));
        builder().build().await.unwrap();

        // A newer version wrote it (or something else wrote the key).
        for found in ["3", "not a layout"] {
            let () = admin(&url, redis::cmd("SET").arg(&key).arg(found)).await;
            let e = builder().build().await.unwrap_err();
            assert!(matches!(e, Error::Backend { .. }), "{e:?}");
            assert!(!e.is_transient());
            let message = e.chain();
            assert!(
                message.contains(&format!("layout {found},")) && message.contains("upgrade"),
                "{message}"
            );
        }
        // Refusing changed nothing: the thread is there for a build that knows the layout.
        let () = admin(&url, redis::cmd("SET").arg(&key).arg("2")).await;
        let saver = builder().build().await.unwrap();
        assert!(
            saver
                .get_tuple(&CheckpointConfig::new("t"))
                .await
                .unwrap()
                .is_some()
        );
        saver.purge().await.unwrap();
        let marker: Option<String> = admin(&url, redis::cmd("GET").arg(&key)).await;
        assert_eq!(marker, None, "purge removes the marker with the rest");
    });
}

/// The thread ids `list_threads` gives, collected.
async fn thread_ids(saver: &RedisSaver) -> Vec<String> {
    saver.list_threads().try_collect().await.unwrap()
}

/// How many thread entries (`\3 ...`) the global index of `prefix` holds.
async fn thread_entries(url: &str, prefix: &str) -> usize {
    let global = format!("{prefix}:{{%g}}:mi");
    admin(
        url,
        redis::cmd("ZLEXCOUNT")
            .arg(global)
            .arg("[\x03")
            .arg("(\x04"),
    )
    .await
}

#[test]
fn thread_listings_read_the_index_not_the_key_space() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "thread-index").await;
        for t in ["b", "a", "\0", "c{x}*"] {
            put_one(&saver, t).await;
        }
        // A thread's record hash that no index entry names: a scan of the key space would
        // list `stray`, the index does not.
        let () = admin(
            &url,
            redis::cmd("HSET")
                .arg(format!("{prefix}:{{stray}}:cp"))
                .arg("f")
                .arg("v"),
        )
        .await;
        assert_eq!(thread_ids(&saver).await, ["\0", "a", "b", "c{x}*"]);
        let after_a: Vec<String> = saver.list_threads_after("a").try_collect().await.unwrap();
        assert_eq!(after_a, ["b", "c{x}*"]);

        // Gone threads leave no entry behind once listed: deleted, expired.
        saver.delete_thread("b").await.unwrap();
        let entries = || thread_entries(&url, &prefix);
        assert_eq!(
            entries().await,
            3,
            "delete_thread removes the entry with the thread"
        );
        saver
            .set_thread_ttl("a", ThreadTtl::Expire(Duration::from_millis(50)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            entries().await,
            3,
            "an expired thread's entry stays until listed"
        );
        assert_eq!(thread_ids(&saver).await, ["\0", "c{x}*"]);
        assert_eq!(entries().await, 2, "the listing removed it");
        saver.purge().await.unwrap();
    });
}

#[test]
fn a_client_that_may_not_write_still_lists_threads() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "read-only").await;
        put_one(&saver, "a").await;
        put_one(&saver, "b").await;
        saver
            .set_thread_ttl("b", ThreadTtl::Expire(Duration::from_millis(50)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A user who may read and run scripts, but not write.
        let user = format!("ro-{}", prefix.replace([':', '/'], "-"));
        let () = admin(
            &url,
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&user)
                .arg("on")
                .arg("nopass")
                .arg("~*")
                .arg("+@read")
                .arg("+@connection")
                .arg("+@scripting")
                .arg("+info")
                .arg("-@write"),
        )
        .await;
        let ro_url = url.replacen("redis://", &format!("redis://{user}:x@"), 1);
        let reader = || RedisSaverBuilder::new(ro_url.clone()).key_prefix(prefix.clone());
        let global = format!("{prefix}:{{%g}}:mi");
        let entries = || thread_entries(&url, &prefix);

        // Layout 2: the index is read; the expired thread's entry cannot be removed by
        // this client, and is skipped.
        let ro = reader().build().await.unwrap();
        assert_eq!(thread_ids(&ro).await, ["a"]);
        assert_eq!(entries().await, 2, "the read-only listing removed nothing");

        // Layout 1 that this client cannot bring up to date: it lists with a scan.
        let layout = format!("{prefix}:{{%v}}:layout");
        let () = admin(&url, redis::cmd("SET").arg(&layout).arg("1")).await;
        let _: i64 = admin(&url, redis::cmd("DEL").arg(&global)).await;
        let ro = reader().build().await.unwrap();
        assert_eq!(thread_ids(&ro).await, ["a"]);
        let marker: Option<String> = admin(&url, redis::cmd("GET").arg(&layout)).await;
        assert_eq!(marker.as_deref(), Some("1"), "left as it was");

        let _: i64 = admin(&url, redis::cmd("ACL").arg("DELUSER").arg(&user)).await;
        saver.purge().await.unwrap();
    });
}

#[test]
fn a_prefix_of_layout_1_gets_its_thread_index_when_opened() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let prefix = common::unique_prefix("layout-1");
        let builder = || RedisSaverBuilder::new(url.clone()).key_prefix(prefix.clone());
        let saver = builder().build().await.unwrap();
        // A new prefix (no global index) is marked at once.
        let layout = format!("{prefix}:{{%v}}:layout");
        let marker: Option<String> = admin(&url, redis::cmd("GET").arg(&layout)).await;
        assert_eq!(marker.as_deref(), Some("2"));
        let threads: Vec<String> = (0..300).map(|i| format!("t{i:03}")).collect();
        for t in &threads {
            put_one(&saver, t).await;
        }
        // What a build of layout 1 left: no thread entries, the mark 1 (or none at all).
        let global = format!("{prefix}:{{%g}}:mi");
        for mark in [Some("1"), None] {
            let () = admin(
                &url,
                redis::cmd("ZREMRANGEBYLEX")
                    .arg(&global)
                    .arg("[\x03")
                    .arg("(\x04"),
            )
            .await;
            let () = match mark {
                Some(m) => admin(&url, redis::cmd("SET").arg(&layout).arg(m)).await,
                None => {
                    let _: i64 = admin(&url, redis::cmd("DEL").arg(&layout)).await;
                }
            };
            let reopened = builder().build().await.unwrap();
            assert_eq!(thread_ids(&reopened).await, threads, "mark {mark:?}");
            let marker: Option<String> = admin(&url, redis::cmd("GET").arg(&layout)).await;
            assert_eq!(marker.as_deref(), Some("2"));
            assert_eq!(
                thread_entries(&url, &prefix).await,
                300,
                "an entry per thread"
            );
            let page: Vec<String> = reopened
                .list_threads_after("t149")
                .take(2)
                .try_collect()
                .await
                .unwrap();
            assert_eq!(page, ["t150", "t151"]);
        }
        saver.purge().await.unwrap();
    });
}

#[test]
fn every_thread_key_carries_the_thread_hash_tag_and_ids_never_glob() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "layout").await;
        for t in ["*", "a*", "{x}", "t:1 [y]?", "\0nul", "ü"] {
            let cfg = put_one(&saver, t).await;
            saver
                .put_writes(
                    &cfg,
                    vec![("w".into(), val(json!(1)))],
                    "task",
                    Default::default(),
                )
                .await
                .unwrap();
        }
        let all = keys(&url, &format!("{prefix}:*")).await;
        for k in &all {
            let rest = &k[prefix.len() + 1..];
            assert!(rest.starts_with('{'), "{k}");
            let tag = &rest[1..rest.find('}').unwrap()];
            assert!(
                tag.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"%._-".contains(&b)),
                "hash tag {tag:?} of {k} must be glob- and brace-free"
            );
        }
        // Deleting the thread "*" deletes nothing of the others.
        saver.delete_thread("*").await.unwrap();
        for t in ["a*", "{x}", "t:1 [y]?", "\0nul", "ü"] {
            assert!(
                saver
                    .get_tuple(&CheckpointConfig::new(t))
                    .await
                    .unwrap()
                    .is_some(),
                "{t:?}"
            );
        }
        assert_eq!(saver.list_all(ListOptions::new()).await.unwrap().len(), 5);
        saver.purge().await.unwrap();
        assert!(keys(&url, &format!("{prefix}:*")).await.is_empty());
    });
}

#[test]
fn default_ttl_pinning_and_per_thread_ttl_apply_to_every_key_of_the_thread() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) = common::build_fresh(
            RedisSaverBuilder::new(url.clone()).default_ttl(Some(Duration::from_secs(60))),
            "ttl",
        )
        .await;
        let cfg = put_one(&saver, "t1").await;
        saver
            .put_writes(
                &cfg,
                vec![("w".into(), val(json!(1)))],
                "task",
                Default::default(),
            )
            .await
            .unwrap();
        let ttl = saver.thread_ttl("t1").await.unwrap().expect("a TTL");
        assert!(
            ttl <= Duration::from_secs(60) && ttl > Duration::from_secs(50),
            "{ttl:?}"
        );
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let thread_keys = keys(&url, &format!("{prefix}:{{t1}}:*")).await;
        // Every data key of the thread exists (the by-id and by-namespace orders live in
        // `mi` with the metadata index).
        for suffix in [":cp", ":bl", ":wi", ":wv", ":mi"] {
            assert!(
                thread_keys.iter().any(|k| k.ends_with(suffix)),
                "{suffix} missing from {thread_keys:?}"
            );
        }
        for k in thread_keys.iter().filter(|k| !k.ends_with(":lease")) {
            let ms: i64 = redis::cmd("PTTL")
                .arg(k)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(ms > 50_000, "{k} has TTL {ms}");
        }
        // Pinned: no key of the thread expires, also after further writes.
        saver.set_thread_ttl("t1", ThreadTtl::Pinned).await.unwrap();
        put_one(&saver, "t1").await;
        assert_eq!(saver.thread_ttl("t1").await.unwrap(), None);
        for k in keys(&url, &format!("{prefix}:{{t1}}:*")).await {
            let ms: i64 = redis::cmd("PTTL")
                .arg(&k)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(ms, -1, "{k} must not expire when pinned");
        }
        // A per-thread TTL overrides the default; back to the default afterwards.
        saver
            .set_thread_ttl("t1", ThreadTtl::Expire(Duration::from_secs(5)))
            .await
            .unwrap();
        let ttl = saver.thread_ttl("t1").await.unwrap().unwrap();
        assert!(ttl <= Duration::from_secs(5), "{ttl:?}");
        saver
            .set_thread_ttl("t1", ThreadTtl::Default)
            .await
            .unwrap();
        let ttl = saver.thread_ttl("t1").await.unwrap().unwrap();
        assert!(ttl > Duration::from_secs(50), "{ttl:?}");
        assert!(matches!(
            saver.set_thread_ttl("", ThreadTtl::Pinned).await,
            Err(Error::InvalidInput { .. })
        ));
        saver.purge().await.unwrap();
    });
}

#[test]
fn expired_threads_vanish_from_every_read_and_the_global_index_is_repaired() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) = common::build_fresh(
            RedisSaverBuilder::new(url.clone())
                .default_ttl(Some(Duration::from_millis(1_200)))
                .refresh_on_read(true),
            "expire",
        )
        .await;
        put_one(&saver, "short").await;
        put_one(&saver, "kept").await;
        saver
            .set_thread_ttl("kept", ThreadTtl::Pinned)
            .await
            .unwrap();
        // Reads refresh the TTL: reading every 300 ms keeps the thread alive past 1.2 s
        // (the margin absorbs scheduling stalls on a loaded machine).
        put_one(&saver, "read").await;
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                saver
                    .get_tuple(&CheckpointConfig::new("read"))
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert!(
            saver
                .get_tuple(&CheckpointConfig::new("short"))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            saver
                .get_tuple(&CheckpointConfig::new("read"))
                .await
                .unwrap()
                .is_none()
        );
        let listed = saver.list_all(ListOptions::new()).await.unwrap();
        assert_eq!(listed.len(), 1, "only the pinned thread is left");
        assert_eq!(listed[0].config.thread_id, "kept");
        let filtered = saver
            .list_all(ListOptions::new().filter("who", "short"))
            .await
            .unwrap();
        assert!(filtered.is_empty());
        // The listing removed the dangling global entries.
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        // `\x01 gref` members of the global index: one per listed checkpoint.
        let n: u64 = redis::cmd("ZLEXCOUNT")
            .arg(format!("{prefix}:{{%g}}:mi"))
            .arg(&b"[\x01"[..])
            .arg(&b"(\x02"[..])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 1);
        saver.purge().await.unwrap();
    });
}

#[test]
fn unreachable_servers_are_unavailable_and_secrets_never_show() {
    rt().block_on(async {
        let e = RedisSaverBuilder::new("redis://ops:s3cr3t-pw@127.0.0.1:1/2")
            .connect_timeout(Duration::from_millis(300))
            .pool_timeout(Duration::from_millis(500))
            .build()
            .await
            .unwrap_err();
        // The error says which server could not be reached, without its password.
        let shown = e.chain();
        assert!(
            shown.contains("cannot connect to redis://ops:***@127.0.0.1:1/2"),
            "{shown}"
        );
        assert!(!shown.contains("s3cr3t-pw"), "{shown}");
        assert!(
            matches!(
                e,
                Error::Unavailable {
                    backend: "redis",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.is_transient());
        assert!(std::error::Error::source(&e).is_some());
        let e = RedisSaverBuilder::new("redis://127.0.0.1:6379")
            .key_prefix("bad{prefix}")
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
        let e = RedisSaverBuilder::new("not a url :: s3cr3t")
            .build()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidInput { .. }), "{e:?}");
    });
    let Some(url) = url() else { return };
    rt().block_on(async {
        let with_password = url.replacen("redis://", "redis://someone:s3cr3t-pw@", 1);
        let builder = RedisSaverBuilder::new(with_password);
        assert!(!format!("{builder:?}").contains("s3cr3t-pw"));
        match builder.build().await {
            Ok(saver) => assert!(!format!("{saver:?}").contains("s3cr3t-pw")),
            Err(e) => {
                let mut shown = format!("{e} {e:?}");
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    shown.push_str(&c.to_string());
                    cause = c.source();
                }
                assert!(!shown.contains("s3cr3t-pw"), "{shown}");
            }
        }
    });
}

#[test]
fn a_put_over_an_expired_threads_left_over_global_entry_is_listed_once() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) = common::build_fresh(
            RedisSaverBuilder::new(url.clone()).default_ttl(Some(Duration::from_millis(300))),
            "reput",
        )
        .await;
        let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
        let id = c.id.clone();
        let meta = |who: &str| CheckpointMetadata::new().with("who", who);
        let cfg = CheckpointConfig::new("t");
        saver
            .put(&cfg, c.clone(), meta("old"), v.clone(), PutOptions::new())
            .await
            .unwrap();
        // The thread expires; its global index entries are left over (nothing read them).
        tokio::time::sleep(Duration::from_millis(700)).await;
        saver
            .put(&cfg, c, meta("new"), v, PutOptions::new())
            .await
            .unwrap();
        let all = saver.list_all(ListOptions::new()).await.unwrap();
        assert_eq!(all.len(), 1, "listed once");
        assert_eq!(all[0].checkpoint.id, id);
        assert_eq!(all[0].metadata, meta("new"));
        let old = ListOptions::new().filter("who", "old");
        assert!(saver.list_all(old).await.unwrap().is_empty());
        let new = ListOptions::new().filter("who", "new");
        assert_eq!(saver.list_all(new).await.unwrap().len(), 1);
        // Deleting the thread removes every global entry, the left-over ones included.
        saver.delete_thread("t").await.unwrap();
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let n: u64 = redis::cmd("ZCARD")
            .arg(format!("{prefix}:{{%g}}:mi"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 0);
        saver.purge().await.unwrap();
    });
}

#[test]
fn large_values_survive_every_operation() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "split").await;
        // Sizes on both sides of allocator class boundaries.
        let sizes = [2_100, 4_200, 65_600, 70_000, 81_000, 200_000];
        let mut prev: Option<checkpoint_core::Checkpoint> = None;
        let mut cfg = CheckpointConfig::new("src");
        for (n, len) in sizes.iter().enumerate() {
            let big = val(json!("y".repeat(*len)));
            let (c, v) = step(
                prev.as_ref(),
                &[("big", Some(big)), ("n", Some(val(json!(n))))],
            );
            cfg = saver
                .put(
                    &cfg,
                    c.clone(),
                    CheckpointMetadata::new(),
                    v,
                    PutOptions::new(),
                )
                .await
                .unwrap();
            prev = Some(c);
        }
        let check = |t: &checkpoint_core::CheckpointTuple, len: usize| {
            assert_eq!(
                t.checkpoint.channel_values["big"],
                val(json!("y".repeat(len)))
            );
        };
        let listed = saver.list_all(ListOptions::thread("src")).await.unwrap();
        assert_eq!(listed.len(), sizes.len());
        for (t, len) in listed.iter().zip(sizes.iter().rev()) {
            check(t, *len);
            check(&saver.get_tuple(&t.config).await.unwrap().unwrap(), *len);
        }
        let global = saver.list_all(ListOptions::new()).await.unwrap();
        for (t, len) in global.iter().zip(sizes.iter().rev()) {
            check(t, *len);
        }
        // A copy never overwrites a value the target already has for the same version
        // (here a different, small value).
        let (c, v) = step(None, &[("big", Some(val(json!("small"))))]);
        let own = saver
            .put(
                &CheckpointConfig::new("dst"),
                c,
                CheckpointMetadata::new(),
                v,
                PutOptions::new(),
            )
            .await
            .unwrap();
        saver.copy_thread("src", "dst").await.unwrap();
        let mine = saver.get_tuple(&own).await.unwrap().unwrap();
        assert_eq!(mine.checkpoint.channel_values["big"], val(json!("small")));
        saver.copy_thread("src", "copy").await.unwrap();
        let copied = saver.list_all(ListOptions::thread("copy")).await.unwrap();
        for (t, len) in copied.iter().zip(sizes.iter().rev()) {
            check(t, *len);
        }
        // Pruning deletes every value no checkpoint names any more.
        saver
            .prune(
                &["copy".to_owned()],
                checkpoint_core::PruneStrategy::KeepLatest,
            )
            .await
            .unwrap();
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(format!("{prefix}:{{copy}}:bl"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(fields.len(), 2, "{fields:?}");
        let last = saver.list_all(ListOptions::thread("copy")).await.unwrap();
        check(&last[0], 200_000);
        saver.purge().await.unwrap();
    });
}

/// Values carry no reference counts: the ones a re-put or a deletion leaves unnamed are
/// swept, the ones another checkpoint still names stay.
#[test]
fn values_no_checkpoint_names_are_swept_and_shared_ones_kept() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "sweep").await;
        let values = || stored_values(&url, &prefix, "t");
        let run = |r: &str| CheckpointMetadata::new().with("run_id", r);
        let (a, va) = step(
            None,
            &[
                ("doc", Some(val(json!("D".repeat(5000))))),
                ("b", Some(val(json!("b1")))),
            ],
        );
        let at_a = saver
            .put(
                &CheckpointConfig::new("t"),
                a.clone(),
                run("r1"),
                va,
                PutOptions::new(),
            )
            .await
            .unwrap();
        // B shares A's unchanged `doc`.
        let (b, vb) = step(Some(&a), &[("b", Some(val(json!("b2"))))]);
        saver
            .put(&at_a, b.clone(), run("r2"), vb, PutOptions::new())
            .await
            .unwrap();
        assert_eq!(values().await, 3, "doc once, b twice");
        // Re-putting B with another `b` drops the value only the old B named.
        let mut b_again = b.clone();
        let v3 = b_again.set_typed("b", val(json!("b3")));
        let at_b = saver
            .put(
                &at_a,
                b_again,
                run("r2"),
                [("b".to_owned(), v3)].into(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        assert_eq!(values().await, 3, "b2 swept, b3 stored");
        let t = saver.get_tuple(&at_b).await.unwrap().unwrap();
        assert_eq!(t.checkpoint.channel_values["b"], val(json!("b3")));
        assert_eq!(
            t.checkpoint.channel_values["doc"],
            val(json!("D".repeat(5000)))
        );
        // Deleting B keeps the `doc` A still names.
        saver.delete_for_runs(&["r2".to_owned()]).await.unwrap();
        assert_eq!(values().await, 2, "A's doc and b1 stay");
        let t = saver.get_tuple(&at_a).await.unwrap().unwrap();
        assert_eq!(
            t.checkpoint.channel_values["doc"],
            val(json!("D".repeat(5000)))
        );
        saver.delete_for_runs(&["r1".to_owned()]).await.unwrap();
        assert_eq!(values().await, 0, "nothing names a value any more");
        saver.purge().await.unwrap();
    });
}

/// A put of an id that exists already (a re-put) replaces its metadata in both indexes:
/// on a single node the first transaction finds the record there and the script then
/// replaces it and drops the index entries only the old metadata named.
#[test]
fn a_re_put_replaces_the_metadata_index_entries() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "reput").await;
        let who = |w: &str| CheckpointMetadata::new().with("who", w);
        let (c, v) = step(None, &[("a", Some(val(json!(1))))]);
        let at = saver
            .put(
                &CheckpointConfig::new("t"),
                c.clone(),
                who("x"),
                v.clone(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        saver
            .put(
                &CheckpointConfig::new("t"),
                c.clone(),
                who("y"),
                v,
                PutOptions::new(),
            )
            .await
            .unwrap();
        let t = saver.get_tuple(&at).await.unwrap().unwrap();
        assert_eq!(t.metadata, who("y"));
        let filtered = |thread: Option<&str>, w: &str| {
            let o = match thread {
                Some(thread) => ListOptions::thread(thread),
                None => ListOptions::new(),
            };
            saver.list_all(o.filter("who", w))
        };
        for thread in [Some("t"), None] {
            assert!(filtered(thread, "x").await.unwrap().is_empty());
            assert_eq!(filtered(thread, "y").await.unwrap().len(), 1);
        }
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let members = common::zrange_all(&mut conn, &format!("{prefix}:{{t}}:mi")).await;
        // `\1 tref`, `\2 ns id` and the one token of the new metadata.
        assert_eq!(members.len(), 3, "{members:?}");
        assert!(members.iter().any(|m| m.starts_with(b"kwho=%22y%22\0")));
        // The global index likewise: `\1 gref pack(tokens)` with the new tokens only, and
        // the new token's entry; the checkpoint is listed once; and the thread's entry.
        let global = common::zrange_all(&mut conn, &format!("{prefix}:{{%g}}:mi")).await;
        assert_eq!(global.len(), 3, "{global:?}");
        assert_eq!(
            global.iter().filter(|m| m.starts_with(b"\x03t\0")).count(),
            1
        );
        assert!(global.iter().any(|m| m.starts_with(b"kwho=%22y%22\0")));
        let old_token = b"kwho=%22x%22";
        assert!(
            !global
                .iter()
                .any(|m| m.windows(old_token.len()).any(|w| w == old_token)),
            "nothing names the old metadata: {global:?}"
        );
        assert_eq!(saver.list_all(ListOptions::new()).await.unwrap().len(), 1);
        // What a re-put whose second transaction never ran leaves: an entry of metadata
        // the stored record does not have. Filtered lists re-check and skip it.
        let token = members
            .iter()
            .find(|m| m.starts_with(b"kwho="))
            .expect("the token entry");
        let stale = [
            &b"kwho=%22z%22"[..],
            &token[token.iter().position(|&b| b == 0).unwrap()..],
        ]
        .concat();
        let _: () = redis::cmd("ZADD")
            .arg(format!("{prefix}:{{t}}:mi"))
            .arg(0)
            .arg(stale)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(filtered(Some("t"), "z").await.unwrap().is_empty());
        assert_eq!(filtered(Some("t"), "y").await.unwrap().len(), 1);
        saver.purge().await.unwrap();
    });
}

/// On a single node a put writes its values with plain `HSETNX`es ahead of the script in
/// one `MULTI`/`EXEC`; a put the script then refuses (compare-and-set conflict, stale
/// fence) leaves none of them behind.
#[test]
fn a_refused_put_leaves_no_value_behind() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "refused").await;
        let values = || stored_values(&url, &prefix, "t");
        let cas = PutOptions::compare_and_set();
        let (a, va) = step(None, &[("doc", Some(val(json!("D".repeat(70_000)))))]);
        let at_a = saver
            .put(
                &CheckpointConfig::new("t"),
                a.clone(),
                CheckpointMetadata::new(),
                va,
                cas.clone(),
            )
            .await
            .unwrap();
        let (b, vb) = step(Some(&a), &[("x", Some(val(json!("b"))))]);
        saver
            .put(&at_a, b, CheckpointMetadata::new(), vb, cas.clone())
            .await
            .unwrap();
        assert_eq!(values().await, 2);
        // A second child of A: A is no longer the head.
        let (c, vc) = step(
            Some(&a),
            &[
                ("x", Some(val(json!("c")))),
                ("y", Some(val(json!("Y".repeat(70_000))))),
            ],
        );
        let refused = saver
            .put(
                &at_a,
                c.clone(),
                CheckpointMetadata::new(),
                vc.clone(),
                cas.clone(),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::Conflict { .. })),
            "{refused:?}"
        );
        assert_eq!(values().await, 2, "the refused put's values were swept");
        // A stale fencing token is refused the same way.
        let lease = saver
            .acquire_lease("t", "holder", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let refused = saver
            .put(
                &at_a,
                c,
                CheckpointMetadata::new(),
                vc,
                PutOptions::new().fence(lease.token + 1),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::StaleFence { .. })),
            "{refused:?}"
        );
        assert_eq!(values().await, 2, "the fenced-out put's values were swept");
        saver.release_lease(&lease).await.unwrap();
        saver.purge().await.unwrap();
    });
}

/// A growing list is stored as content-addressed chunks shared by every version (the
/// scenario is in `common`, shared with the Cluster tests).
#[test]
fn list_values_are_stored_once_per_element_and_read_back_exactly() {
    let Some(url) = url() else { return };
    rt().block_on(common::chunked_list_values(
        RedisSaverBuilder::new(url.clone()),
        vec![url],
    ));
}

#[test]
fn the_integrity_scan_finds_a_lost_value_a_lost_chunk_and_orphan_writes() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let prefix = common::unique_prefix("integrity");
        let saver = RedisSaver::builder(url.clone())
            .key_prefix(prefix.clone())
            .build()
            .await
            .unwrap();
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let bl = |thread: &str| format!("{prefix}:{{{thread}}}:bl");
        // A plain value: its field is esc(ns) esc(channel) version (README, key layout).
        let (key, mut c) = (bl("scanned"), conn.clone());
        checkpoint_conformance::integrity::integrity_scan_scenario(
            &saver,
            "scanned",
            |_, version| async move {
                let mut field = b"\x00".to_vec();
                field.extend_from_slice(checkpoint_conformance::integrity::LOST_CHANNEL.as_bytes());
                field.push(0);
                field.extend_from_slice(
                    match version {
                        checkpoint_core::ChannelVersion::Int(n) => format!("i{n}"),
                        checkpoint_core::ChannelVersion::Str(s) => format!("s{s}"),
                    }
                    .as_bytes(),
                );
                let gone: u64 = redis::cmd("HDEL")
                    .arg(&key)
                    .arg(field)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                assert_eq!(gone, 1);
            },
        )
        .await;

        // A value stored in chunks: losing one chunk loses the value.
        let (cp, v) = step(None, &[("messages", Some(common::messages(40)))]);
        let stored = saver
            .put(
                &CheckpointConfig::new("chunked"),
                cp.clone(),
                CheckpointMetadata::new(),
                v,
                PutOptions::new(),
            )
            .await
            .unwrap();
        use checkpoint_core::IntegrityScan;
        assert_eq!(saver.scan_thread("chunked").await.unwrap(), vec![]);
        let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(bl("chunked"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let chunk = fields
            .iter()
            .find(|f| f.starts_with(b"\x01\x03"))
            .expect("the list is chunked");
        let _: u64 = redis::cmd("HDEL")
            .arg(bl("chunked"))
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .unwrap();
        let scan = saver.scan_thread("chunked").await.unwrap();
        assert_eq!(scan.len(), 1, "{scan:?}");
        assert!(
            matches!(&scan[0], checkpoint_core::StorageIssue::MissingValue { channel, checkpoint_id, .. }
                if channel == "messages" && Some(checkpoint_id) == stored.checkpoint_id.as_ref()),
            "{scan:?}"
        );
        saver.purge().await.unwrap();
    });
}

/// Two forks of one checkpoint that both bump `messages` to the same version with different
/// chunked lists: each checkpoint's record carries the manifest its put wrote, and a list
/// page (which reads a value the page's checkpoints share once) returns each fork's own
/// value, as `get_tuple` does.
#[test]
fn a_list_page_returns_each_forks_own_value_of_a_reused_version() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let (saver, _prefix) =
            common::build_fresh(RedisSaverBuilder::new(url.clone()), "forkver").await;
        let (root, v) = step(None, &[("messages", Some(common::messages(2)))]);
        let at = saver
            .put(
                &CheckpointConfig::new("t"),
                root.clone(),
                CheckpointMetadata::new(),
                v,
                PutOptions::new(),
            )
            .await
            .unwrap();
        let other = val(json!([
            {"id": "x-0", "content": format!("x0-{}", "o".repeat(600))},
            {"id": "x-1", "content": format!("x1-{}", "o".repeat(600))},
            {"id": "x-2", "content": format!("x2-{}", "o".repeat(600))},
        ]));
        let mut forks = Vec::new();
        for value in [common::messages(3), other] {
            let (cp, v) = step(Some(&root), &[("messages", Some(value.clone()))]);
            let config = saver
                .put(&at, cp, CheckpointMetadata::new(), v, PutOptions::new())
                .await
                .unwrap();
            forks.push((config, value));
        }
        let listed = saver.list_all(ListOptions::thread("t")).await.unwrap();
        assert_eq!(listed.len(), 3);
        for (config, value) in &forks {
            let got = saver.get_tuple(config).await.unwrap().unwrap();
            assert_eq!(&got.checkpoint.channel_values["messages"], value);
            let id = config.checkpoint_id.as_deref();
            let from_list = listed
                .iter()
                .find(|t| t.config.checkpoint_id.as_deref() == id)
                .unwrap();
            assert_eq!(&from_list.checkpoint.channel_values["messages"], value);
        }
        saver.purge().await.unwrap();
    });
}
