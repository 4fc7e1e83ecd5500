//! `--backend mongo`: [`MongoSaver`] on the server at `--url` (default
//! `CHECKPOINT_TEST_MONGO_URL`, else `mongodb://127.0.0.1:27017`).
//!
//! * Each repetition gets a fresh database (`checkpoint_bench_<pid>_<n>`); the previous one
//!   is dropped first, and the last one on teardown.
//! * Bytes stored: the sum of `storageSize + totalIndexSize` (`collStats`; `$collStats`
//!   where the command is gone) over the saver's collections.
//! * `--mongo-durability langgraph` configures the saver as LangGraph's `MongoDBSaver`
//!   writes (no transactions, the server's default write concern); the default keeps the
//!   saver's defaults. The report's `settings` say which.
//! * Floors, in a separate database on the same server, with the saver's write concern:
//!   `insert_one` of a 1 KB document (p50; the basis of put and put_writes latencies, and its
//!   single-connection rate the basis of W4 throughput) and `find_one` by `_id` of a 70 KB
//!   document (p50; the basis of every read latency).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use futures::TryStreamExt;

use checkpoint_core::{Error, Result, Saver, async_trait};
use checkpoint_mongo::mongodb::bson::spec::BinarySubtype;
use checkpoint_mongo::mongodb::bson::{Binary, Bson, Document, doc};
use checkpoint_mongo::mongodb::options::{ClientOptions, DatabaseOptions, WriteConcern};
use checkpoint_mongo::mongodb::{Client, Database};
use checkpoint_mongo::{MongoConfig, MongoSaver, TransactionMode};

use super::{Backend, BackendOptions, Floors, MongoDurability};

/// The server used when neither `--url` nor `CHECKPOINT_TEST_MONGO_URL` names one.
const DEFAULT_URL: &str = "mongodb://127.0.0.1:27017";
/// Samples per floor figure and floor call.
const FLOOR_SAMPLES: usize = 21;
/// Documents (and samples per floor call) of the bulk read floor: one `find` returning as
/// many distinct 70 KB documents as the W3 filtered list returns tuples (each W1 thread has
/// its own `big_doc`).
const BULK_DOCS: usize = 50;
const BULK_SAMPLES: usize = 11;

/// The MongoDB backend (see the module documentation).
pub struct MongoBackend {
    client: Client,
    prefix: String,
    durability: MongoDurability,
    /// How the last saver made its writes atomic (decided by the saver when created).
    atomicity: Mutex<Option<String>>,
    repetition: Mutex<u32>,
    /// The database of the current repetition.
    current: Mutex<Option<String>>,
}

impl std::fmt::Debug for MongoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client holds the connection string's credentials: never printed.
        f.debug_struct("MongoBackend")
            .field("prefix", &self.prefix)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

fn backend_error(e: checkpoint_mongo::mongodb::error::Error) -> Error {
    Error::Backend {
        backend: "mongo",
        source: Box::new(e),
    }
}

impl MongoBackend {
    /// Connects (and pings) the server at `options.url`, `CHECKPOINT_TEST_MONGO_URL` or
    /// `mongodb://127.0.0.1:27017`.
    pub async fn open(options: &BackendOptions) -> Result<Self> {
        let url = options
            .url
            .clone()
            .or_else(|| std::env::var("CHECKPOINT_TEST_MONGO_URL").ok())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let mut client_options = ClientOptions::parse(&url).await.map_err(backend_error)?;
        client_options.app_name = Some("checkpoint-bench".to_owned());
        let client = Client::with_options(client_options).map_err(backend_error)?;
        client
            .database("admin")
            .run_command(doc! { "ping": 1 })
            .await
            .map_err(|e| Error::Unavailable {
                backend: "mongo",
                source: Box::new(e),
            })?;
        Ok(Self {
            client,
            prefix: format!("checkpoint_bench_{}", std::process::id()),
            durability: options.mongo_durability,
            atomicity: Mutex::new(None),
            repetition: Mutex::new(0),
            current: Mutex::new(None),
        })
    }

    fn config(&self, database: &str) -> MongoConfig {
        let config = MongoConfig::new(database);
        match self.durability {
            MongoDurability::Default => config,
            MongoDurability::Langgraph => config
                .transactions(TransactionMode::Disabled)
                .write_concern(WriteConcern::default()),
        }
    }

    /// How `config` sets the transaction mode and the write concern, for the report.
    fn described(&self) -> (&'static str, &'static str) {
        match self.durability {
            MongoDurability::Default => ("auto", "majority, journaled"),
            MongoDurability::Langgraph => ("disabled", "server default"),
        }
    }

    fn floor_db(&self) -> Database {
        let wc = self.config("x").write_concern;
        self.client.database_with_options(
            &format!("{}_floor", self.prefix),
            DatabaseOptions::builder().write_concern(wc).build(),
        )
    }

    async fn drop_current(&self) -> Result<()> {
        let previous = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(db) = previous {
            self.client
                .database(&db)
                .drop()
                .await
                .map_err(backend_error)?;
        }
        Ok(())
    }
}

fn p50(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn payload(len: usize, seed: u8) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect(),
    })
}

#[async_trait]
impl Backend for MongoBackend {
    fn name(&self) -> &str {
        "mongo"
    }

    fn settings(&self) -> std::collections::BTreeMap<String, String> {
        let atomicity = self
            .atomicity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "no saver created".to_owned());
        let (transactions, write_concern) = self.described();
        [
            ("durability", self.durability.as_str().to_owned()),
            ("transactions", transactions.to_owned()),
            ("atomicity", atomicity),
            ("write_concern", write_concern.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    async fn fresh(&self) -> Result<Arc<dyn Saver>> {
        self.drop_current().await?;
        let n = {
            let mut r = self
                .repetition
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *r += 1;
            *r
        };
        let database = format!("{}_{n}", self.prefix);
        self.client
            .database(&database)
            .drop()
            .await
            .map_err(backend_error)?;
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(database.clone());
        let saver = MongoSaver::from_client(self.client.clone(), self.config(&database)).await?;
        saver.setup().await?;
        eprintln!(
            "[mongo] database {database}: atomicity {}",
            saver.atomicity()
        );
        *self
            .atomicity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(saver.atomicity().to_string());
        Ok(Arc::new(saver))
    }

    async fn bytes_stored(&self, _saver: &dyn Saver) -> Result<Option<u64>> {
        let Some(database) = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        else {
            return Ok(None);
        };
        let db = self.client.database(&database);
        let mut total = 0u64;
        for name in self.config(&database).collection_names().all() {
            let stats = match db.run_command(doc! { "collStats": name }).await {
                Ok(s) => s,
                Err(_) => {
                    // Servers without the (deprecated) command: the aggregation stage.
                    let docs: Vec<Document> = db
                        .collection::<Document>(name)
                        .aggregate(vec![doc! { "$collStats": { "storageStats": {} } }])
                        .await
                        .map_err(backend_error)?
                        .try_collect()
                        .await
                        .map_err(backend_error)?;
                    docs.into_iter()
                        .next()
                        .and_then(|d| d.get_document("storageStats").ok().cloned())
                        .unwrap_or_default()
                }
            };
            let number = |field: &str| match stats.get(field) {
                Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
                Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
                Some(Bson::Double(f)) if *f >= 0.0 => *f as u64,
                _ => 0,
            };
            total += number("storageSize") + number("totalIndexSize");
        }
        Ok(Some(total))
    }

    async fn floors(&self) -> Result<Option<Floors>> {
        let coll = self.floor_db().collection::<Document>("floor");
        coll.delete_many(doc! {}).await.map_err(backend_error)?;
        let mut inserts = Vec::with_capacity(FLOOR_SAMPLES);
        for i in 0..FLOOR_SAMPLES {
            let d = doc! { "_id": i as i64, "d": payload(1024, i as u8) };
            let t = Instant::now();
            coll.insert_one(d).await.map_err(backend_error)?;
            inserts.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        coll.insert_one(doc! { "_id": "big", "d": payload(70 * 1024, 7) })
            .await
            .map_err(backend_error)?;
        let mut finds = Vec::with_capacity(FLOOR_SAMPLES);
        for _ in 0..FLOOR_SAMPLES {
            let t = Instant::now();
            let found = coll
                .find_one(doc! { "_id": "big" })
                .await
                .map_err(backend_error)?;
            finds.push(t.elapsed().as_secs_f64() * 1000.0);
            if found.is_none() {
                return Err(Error::invalid("the floor document vanished"));
            }
        }
        let bulk_ids: Vec<String> = (0..BULK_DOCS).map(|i| format!("bulk{i}")).collect();
        coll.insert_many(
            bulk_ids
                .iter()
                .enumerate()
                .map(|(i, id)| doc! { "_id": id, "d": payload(70 * 1024, i as u8) }),
        )
        .await
        .map_err(backend_error)?;
        let mut bulk_reads = Vec::with_capacity(BULK_SAMPLES);
        for _ in 0..BULK_SAMPLES {
            let t = Instant::now();
            let docs: Vec<Document> = coll
                .find(doc! { "_id": { "$in": &bulk_ids } })
                .await
                .map_err(backend_error)?
                .try_collect()
                .await
                .map_err(backend_error)?;
            bulk_reads.push(t.elapsed().as_secs_f64() * 1000.0);
            if docs.len() != BULK_DOCS {
                return Err(Error::invalid("the bulk floor documents vanished"));
            }
        }
        coll.delete_many(doc! {}).await.map_err(backend_error)?;
        let insert = p50(inserts);
        let find = p50(finds);
        let mut floors = Floors::new()
            .figure("insert_one_1k_p50_ms", insert)
            .figure("find_one_by_id_70k_p50_ms", find)
            .figure("insert_one_1k_per_s", 1000.0 / insert)
            .figure("find_50x70k_p50_ms", p50(bulk_reads));
        for write in [
            "put_p50_ms",
            "put_writes_p50_ms",
            "w4_put_p50_ms",
            "w4_put_writes_p50_ms",
        ] {
            floors = floors.compare(write, "insert_one_1k_p50_ms");
        }
        for read in [
            "get_tuple_latest_p50_ms",
            "get_tuple_by_id_p50_ms",
            "list_limit_10_p50_ms",
            "full_list_p50_ms",
        ] {
            floors = floors.compare(read, "find_one_by_id_70k_p50_ms");
        }
        floors = floors.compare("filtered_list_p50_ms", "find_50x70k_p50_ms");
        for rate in ["w4_steps_per_s", "w4_ops_per_s"] {
            floors = floors.compare(rate, "insert_one_1k_per_s");
        }
        Ok(Some(floors))
    }

    async fn teardown(&self) -> Result<()> {
        self.drop_current().await?;
        self.floor_db().drop().await.map_err(backend_error)?;
        Ok(())
    }
}
