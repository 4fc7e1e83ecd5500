//! `--backend redis`: [`checkpoint_redis::RedisSaver`] on one Redis server.
//!
//! * Fresh store per repetition: a new key prefix; the previous repetition's keys are
//!   deleted (only that prefix, never the whole database).
//! * Bytes stored: the `INFO memory` `used_memory` delta from just after [`Backend::fresh`]
//!   to just after W1 (WORKLOAD.md §6).
//! * Floors, on one dedicated connection: `SET` and `GET` p50 of a 70 KB value, and the
//!   throughput of pipelined 70 KB `SET`s (plus, for reference, pipelined 1 KB `SET`s).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use checkpoint_core::{Error, Result, Saver, async_trait};
use checkpoint_redis::RedisSaver;
use checkpoint_redis::redis::{self, aio::MultiplexedConnection};

use super::{Backend, BackendOptions, Floors};

/// Used when neither `--url` nor `CHECKPOINT_TEST_REDIS_URL` names a server.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// Size of the floor's value (the size of the workload's largest value, `big_doc`, encoded).
const FLOOR_VALUE: usize = 70 * 1024;
/// Samples per latency floor.
const FLOOR_SAMPLES: usize = 31;
/// `SET`s in the 70 KB pipeline.
const PIPELINE_70K: usize = 200;
/// `SET`s in the 1 KB pipeline.
const PIPELINE_1K: usize = 2000;
/// Keys (and samples per floor call) of the bulk read floor: one `MGET` of as many distinct
/// 70 KB values as the W3 filtered list returns tuples (each W1 thread has its own `big_doc`).
const BULK_KEYS: usize = 50;
const BULK_SAMPLES: usize = 15;

/// The Redis backend.
pub struct RedisBackend {
    url: String,
    admin: MultiplexedConnection,
    current: Mutex<Option<RedisSaver>>,
    baseline: Mutex<Option<u64>>,
    reps: Mutex<u32>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisBackend").finish_non_exhaustive()
    }
}

fn unavailable(e: redis::RedisError) -> Error {
    Error::Unavailable {
        backend: "redis",
        source: Box::new(e),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn p50_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    let d = samples[(samples.len() - 1) / 2];
    (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

impl RedisBackend {
    /// Connects to `options.url`, else `CHECKPOINT_TEST_REDIS_URL`, else
    /// `redis://127.0.0.1:6379`.
    pub async fn open(options: &BackendOptions) -> Result<Self> {
        let url = options
            .url
            .clone()
            .or_else(|| std::env::var("CHECKPOINT_TEST_REDIS_URL").ok())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let client = redis::Client::open(url.as_str()).map_err(|e| Error::InvalidInput {
            reason: format!("invalid redis URL: {e}"),
        })?;
        let mut admin = client
            .get_multiplexed_async_connection()
            .await
            .map_err(unavailable)?;
        let _: String = redis::cmd("PING")
            .query_async(&mut admin)
            .await
            .map_err(unavailable)?;
        Ok(Self {
            url,
            admin,
            current: Mutex::new(None),
            baseline: Mutex::new(None),
            reps: Mutex::new(0),
        })
    }

    async fn used_memory(&self) -> Result<u64> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.admin.clone())
            .await
            .map_err(unavailable)?;
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| Error::invalid("INFO memory has no used_memory"))
    }

    fn floor_key(&self) -> String {
        format!("checkpoint-bench:floor:{}", std::process::id())
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn name(&self) -> &str {
        "redis"
    }

    async fn fresh(&self) -> Result<Arc<dyn Saver>> {
        let previous = lock(&self.current).take();
        if let Some(previous) = previous {
            previous.purge().await?;
        }
        let rep = {
            let mut reps = lock(&self.reps);
            *reps += 1;
            *reps
        };
        let saver = RedisSaver::builder(self.url.clone())
            .key_prefix(format!("checkpoint-bench:{}:{rep}", std::process::id()))
            .build()
            .await?;
        // A leftover of an interrupted earlier run with the same pid and rep is removed too.
        saver.purge().await?;
        *lock(&self.current) = Some(saver.clone());
        let baseline = self.used_memory().await?;
        *lock(&self.baseline) = Some(baseline);
        Ok(Arc::new(saver))
    }

    async fn bytes_stored(&self, _saver: &dyn Saver) -> Result<Option<u64>> {
        let Some(baseline) = *lock(&self.baseline) else {
            return Ok(None);
        };
        let now = self.used_memory().await?;
        Ok(Some(now.saturating_sub(baseline)))
    }

    async fn floors(&self) -> Result<Option<Floors>> {
        let mut conn = self.admin.clone();
        let key = self.floor_key();
        let big = vec![b'x'; FLOOR_VALUE];
        let mut set = Vec::with_capacity(FLOOR_SAMPLES);
        let mut get = Vec::with_capacity(FLOOR_SAMPLES);
        for _ in 0..FLOOR_SAMPLES {
            let t = Instant::now();
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(&big[..])
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            set.push(t.elapsed());
            let t = Instant::now();
            let v: Vec<u8> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            get.push(t.elapsed());
            debug_assert_eq!(v.len(), FLOOR_VALUE);
        }
        let pipelined = |n: usize, value: &[u8]| {
            let mut p = redis::pipe();
            for _ in 0..n {
                p.cmd("SET").arg(&key).arg(value).ignore();
            }
            p
        };
        let p70 = pipelined(PIPELINE_70K, &big);
        let t = Instant::now();
        let _: () = p70.query_async(&mut conn).await.map_err(unavailable)?;
        let per_s_70k = PIPELINE_70K as f64 / t.elapsed().as_secs_f64();
        let small = vec![b'x'; 1024];
        let p1 = pipelined(PIPELINE_1K, &small);
        let t = Instant::now();
        let _: () = p1.query_async(&mut conn).await.map_err(unavailable)?;
        let per_s_1k = PIPELINE_1K as f64 / t.elapsed().as_secs_f64();
        let bulk_keys: Vec<String> = (0..BULK_KEYS).map(|i| format!("{key}:bulk:{i}")).collect();
        let mut fill = redis::pipe();
        for k in &bulk_keys {
            fill.cmd("SET").arg(k).arg(&big[..]).ignore();
        }
        let _: () = fill.query_async(&mut conn).await.map_err(unavailable)?;
        let mut mget = Vec::with_capacity(BULK_SAMPLES);
        for _ in 0..BULK_SAMPLES {
            let t = Instant::now();
            let values: Vec<Vec<u8>> = redis::cmd("MGET")
                .arg(&bulk_keys)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            mget.push(t.elapsed());
            if values.len() != BULK_KEYS || values.iter().any(|v| v.len() != FLOOR_VALUE) {
                return Err(Error::invalid("the bulk floor values vanished"));
            }
        }
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .arg(&bulk_keys)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let set = p50_ms(set);
        let get = p50_ms(get);
        Ok(Some(
            Floors::new()
                .figure("set_70k_p50_ms", set)
                .figure("get_70k_p50_ms", get)
                .figure("pipelined_set_70k_per_s", per_s_70k.round())
                .figure("pipelined_set_1k_per_s", per_s_1k.round())
                .figure("mget_50x70k_p50_ms", p50_ms(mget))
                .compare("put_p50_ms", "set_70k_p50_ms")
                .compare("put_writes_p50_ms", "set_70k_p50_ms")
                .compare("w4_put_p50_ms", "set_70k_p50_ms")
                .compare("w4_put_writes_p50_ms", "set_70k_p50_ms")
                .compare("get_tuple_latest_p50_ms", "get_70k_p50_ms")
                .compare("get_tuple_by_id_p50_ms", "get_70k_p50_ms")
                .compare("list_limit_10_p50_ms", "get_70k_p50_ms")
                .compare("full_list_p50_ms", "get_70k_p50_ms")
                .compare("filtered_list_p50_ms", "mget_50x70k_p50_ms")
                .compare("w4_ops_per_s", "pipelined_set_70k_per_s")
                .compare("w4_steps_per_s", "pipelined_set_70k_per_s"),
        ))
    }

    async fn teardown(&self) -> Result<()> {
        let last = lock(&self.current).take();
        if let Some(saver) = last {
            saver.purge().await?;
        }
        Ok(())
    }
}
