//! `--backend postgres`: [`PostgresSaver`] in a fresh schema per repetition, bytes stored
//! from `pg_total_relation_size`, and the server's floors (WORKLOAD.md §6).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use checkpoint_core::{Error, Result, Saver, async_trait, new_checkpoint_id};
use checkpoint_postgres::PostgresSaver;
use checkpoint_postgres::sqlx::{self, PgPool, postgres::PgPoolOptions};

use super::{Backend, BackendOptions, Floors};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Samples per latency floor, and inserts per connection for the throughput floor.
const FLOOR_SAMPLES: usize = 200;
const FLOOR_CONNECTIONS: usize = 8;
/// Rows, and samples per floor call, of the one-query bulk read floor: as many distinct
/// 70 KB rows as the filtered list of W3 returns tuples (one per W1 thread).
const BULK_ROWS: i32 = 50;
const BULK_SAMPLES: usize = 15;

fn backend_error(e: sqlx::Error) -> Error {
    Error::Backend {
        backend: "postgres",
        source: Box::new(e),
    }
}

/// The PostgreSQL backend. Floors: single-row `INSERT`+`COMMIT` p50 (1 KB row) and
/// primary-key `SELECT` p50 (70 KB row) on one connection, and `INSERT`+`COMMIT` throughput
/// on 8 connections, measured in a schema of their own. One more, beyond WORKLOAD.md §6,
/// for the filtered list: one `SELECT` returning 50 distinct 70 KB rows (the bytes a
/// complete answer must carry: every W1 thread has its own 64 KB `big_doc`).
#[derive(Debug)]
pub struct PostgresBackend {
    url: String,
    admin: PgPool,
    floor_schema: String,
    current: Mutex<Option<String>>,
    transaction_pooling: bool,
}

impl PostgresBackend {
    /// Connects to `options.url`, `CHECKPOINT_TEST_POSTGRES_URL`, or the local server.
    pub async fn open(options: &BackendOptions) -> Result<Self> {
        let url = options
            .url
            .clone()
            .or_else(|| std::env::var("CHECKPOINT_TEST_POSTGRES_URL").ok())
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let admin = PgPoolOptions::new()
            .max_connections(FLOOR_CONNECTIONS as u32 + 1)
            .connect(&url)
            .await
            .map_err(backend_error)?;
        let floor_schema = format!("cpbench_floor_{}", std::process::id());
        for statement in [
            format!("CREATE SCHEMA IF NOT EXISTS {floor_schema}"),
            format!(
                "CREATE TABLE IF NOT EXISTS {floor_schema}.small (id BIGSERIAL PRIMARY KEY, payload BYTEA NOT NULL)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {floor_schema}.big (id INT PRIMARY KEY, payload BYTEA NOT NULL)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {floor_schema}.bulk (id INT PRIMARY KEY, payload BYTEA NOT NULL)"
            ),
        ] {
            sqlx::query(&statement)
                .execute(&admin)
                .await
                .map_err(backend_error)?;
        }
        // The saver's value columns use lz4 where the server has it (its own migration 8):
        // the floors' payloads get the same compression, or they would measure other work.
        let statement = format!(
            "DO $$
            BEGIN
                EXECUTE 'ALTER TABLE {floor_schema}.small ALTER COLUMN payload SET COMPRESSION lz4';
                EXECUTE 'ALTER TABLE {floor_schema}.big ALTER COLUMN payload SET COMPRESSION lz4';
                EXECUTE 'ALTER TABLE {floor_schema}.bulk ALTER COLUMN payload SET COMPRESSION lz4';
            EXCEPTION WHEN feature_not_supported OR syntax_error THEN
                NULL;
            END
            $$"
        );
        sqlx::query(&statement)
            .execute(&admin)
            .await
            .map_err(backend_error)?;
        // Incompressible, like the workload's payloads (pglz gives up on it, lz4 barely
        // compresses it), so the floor reads a real 70 KB row rather than a few bytes.
        let big = crate::rng::SplitMix64::for_thread(42, 7).text(70 * 1024);
        let statement = format!(
            "INSERT INTO {floor_schema}.big VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload"
        );
        sqlx::query(&statement)
            .bind(big.as_bytes())
            .execute(&admin)
            .await
            .map_err(backend_error)?;
        let statement = format!(
            "INSERT INTO {floor_schema}.bulk VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload"
        );
        for id in 0..BULK_ROWS {
            let row = crate::rng::SplitMix64::for_thread(43, id as u64).text(70 * 1024);
            sqlx::query(&statement)
                .bind(id)
                .bind(row.as_bytes())
                .execute(&admin)
                .await
                .map_err(backend_error)?;
        }
        Ok(Self {
            url,
            admin,
            floor_schema,
            current: Mutex::new(None),
            transaction_pooling: options.postgres_transaction_pooling,
        })
    }

    async fn drop_schema(&self, schema: &str) -> Result<()> {
        if std::env::var_os("CHECKPOINT_BENCH_KEEP").is_some() {
            eprintln!("[postgres] CHECKPOINT_BENCH_KEEP is set: keeping schema {schema}");
            return Ok(());
        }
        let statement = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
        sqlx::query(&statement)
            .execute(&self.admin)
            .await
            .map_err(backend_error)?;
        Ok(())
    }

    fn schema(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn p50(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[async_trait]
impl Backend for PostgresBackend {
    fn name(&self) -> &str {
        "postgres"
    }

    fn settings(&self) -> std::collections::BTreeMap<String, String> {
        if self.transaction_pooling {
            [("transaction_pooling".to_owned(), "true".to_owned())].into()
        } else {
            std::collections::BTreeMap::new()
        }
    }

    async fn fresh(&self) -> Result<Arc<dyn Saver>> {
        let old = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(old) = old {
            self.drop_schema(&old).await?;
        }
        let schema = format!("cpbench_{}", new_checkpoint_id().replace('-', "_"));
        let saver = PostgresSaver::builder(&self.url)?
            .schema(&schema)
            .max_connections(16)
            .transaction_pooling(self.transaction_pooling)
            .connect()
            .await?;
        saver.setup().await?;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(schema);
        Ok(Arc::new(saver))
    }

    async fn bytes_stored(&self, _saver: &dyn Saver) -> Result<Option<u64>> {
        let Some(schema) = self.schema() else {
            return Ok(None);
        };
        let bytes: Option<i64> = sqlx::query_scalar(
            "SELECT sum(pg_total_relation_size(format('%I.%I', schemaname, tablename)::regclass))::bigint \
             FROM pg_tables WHERE schemaname = $1",
        )
        .bind(&schema)
        .fetch_one(&self.admin)
        .await
        .map_err(backend_error)?;
        Ok(bytes.map(|b| b as u64))
    }

    async fn floors(&self) -> Result<Option<Floors>> {
        let insert = format!(
            "INSERT INTO {}.small (payload) VALUES ($1)",
            self.floor_schema
        );
        let select = format!("SELECT payload FROM {}.big WHERE id = 1", self.floor_schema);
        let row = crate::rng::SplitMix64::for_thread(42, 8)
            .text(1024)
            .into_bytes();
        let mut conn = self.admin.acquire().await.map_err(backend_error)?;
        let mut inserts = Vec::with_capacity(FLOOR_SAMPLES);
        let mut selects = Vec::with_capacity(FLOOR_SAMPLES);
        for _ in 0..FLOOR_SAMPLES {
            let t = Instant::now();
            sqlx::query(insert.as_str())
                .bind(&row)
                .execute(&mut *conn)
                .await
                .map_err(backend_error)?;
            inserts.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let payload: Vec<u8> = sqlx::query_scalar(select.as_str())
                .fetch_one(&mut *conn)
                .await
                .map_err(backend_error)?;
            selects.push(t.elapsed().as_secs_f64() * 1e3);
            debug_assert_eq!(payload.len(), 70 * 1024);
        }
        let bulk = format!(
            "SELECT payload FROM {}.bulk WHERE id = ANY($1)",
            self.floor_schema
        );
        let ids: Vec<i32> = (0..BULK_ROWS).collect();
        let mut bulk_reads = Vec::with_capacity(BULK_SAMPLES);
        for _ in 0..BULK_SAMPLES {
            let t = Instant::now();
            let rows: Vec<Vec<u8>> = sqlx::query_scalar(bulk.as_str())
                .bind(&ids)
                .fetch_all(&mut *conn)
                .await
                .map_err(backend_error)?;
            bulk_reads.push(t.elapsed().as_secs_f64() * 1e3);
            if rows.len() != BULK_ROWS as usize {
                return Err(Error::invalid("the bulk floor rows vanished"));
            }
        }
        drop(conn);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..FLOOR_CONNECTIONS {
            let pool = self.admin.clone();
            let insert = insert.clone();
            let row = row.clone();
            tasks.push(tokio::spawn(async move {
                let mut conn = pool.acquire().await?;
                for _ in 0..FLOOR_SAMPLES / 2 {
                    sqlx::query(insert.as_str())
                        .bind(&row)
                        .execute(&mut *conn)
                        .await?;
                }
                Ok::<(), sqlx::Error>(())
            }));
        }
        for t in tasks {
            t.await
                .map_err(|e| Error::Backend {
                    backend: "postgres",
                    source: Box::new(e),
                })?
                .map_err(backend_error)?;
        }
        let per_s =
            (FLOOR_CONNECTIONS * FLOOR_SAMPLES / 2) as f64 / started.elapsed().as_secs_f64();
        sqlx::query(&format!("TRUNCATE {}.small", self.floor_schema))
            .execute(&self.admin)
            .await
            .map_err(backend_error)?;
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(Some(
            Floors::new()
                .figure("insert_commit_p50_ms", p50(inserts))
                .figure("pk_select_70kb_p50_ms", p50(selects))
                .figure("insert_commit_8conn_per_s", per_s)
                .figure("select_50x70kb_p50_ms", p50(bulk_reads))
                .compare("filtered_list_p50_ms", "select_50x70kb_p50_ms")
                .compare("put_p50_ms", "insert_commit_p50_ms")
                .compare("put_writes_p50_ms", "insert_commit_p50_ms")
                .compare("get_tuple_latest_p50_ms", "pk_select_70kb_p50_ms")
                .compare("get_tuple_by_id_p50_ms", "pk_select_70kb_p50_ms")
                .compare("w4_ops_per_s", "insert_commit_8conn_per_s"),
        ))
    }

    async fn teardown(&self) -> Result<()> {
        let old = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(old) = old {
            self.drop_schema(&old).await?;
        }
        self.drop_schema(&self.floor_schema).await
    }
}
