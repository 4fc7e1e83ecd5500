//! Shared by the integration tests: a factory of savers, each in its own database.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{BoxError, Saver, async_trait};
use checkpoint_mongo::mongodb::Client;
use checkpoint_mongo::mongodb::options::ClientOptions;
use checkpoint_mongo::{MongoConfig, MongoSaver, TransactionMode};
use tokio::sync::OnceCell;

/// The test server's URL, from `CHECKPOINT_TEST_MONGO_URL`.
pub fn url() -> Option<String> {
    checkpoint_conformance::server_url("mongo")
}

/// Why tests that need the server cannot run, or `None`.
pub fn skip_reason() -> Option<String> {
    match url() {
        Some(_) => None,
        None => Some(
            "CHECKPOINT_TEST_MONGO_URL is not set (run scripts/services/mongo.sh, or bash scripts/test.sh)"
                .to_owned(),
        ),
    }
}

/// Skips (returns `true`) when the server is not configured, or fails when servers are
/// required (`CI=true`, `CHECKPOINT_TEST_REQUIRE=1`).
pub fn skip(test: &str) -> bool {
    if let Some(reason) = skip_reason() {
        if checkpoint_conformance::servers_required() {
            panic!("{test}: the MongoDB test server is required but unavailable: {reason}");
        }
        eprintln!("{test}: SKIPPED: {reason}");
        return true;
    }
    false
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A database name no other test (of this or another run) uses.
pub fn unique_db(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "ckt_{tag}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// A client for the test server.
pub async fn client() -> Client {
    let url = url().expect("CHECKPOINT_TEST_MONGO_URL");
    let options = ClientOptions::parse(&url)
        .await
        .expect("parse the test URL");
    Client::with_options(options).expect("client")
}

/// Builds savers in fresh databases and drops them all on teardown.
pub struct MongoFactory {
    mode: TransactionMode,
    bulk_write: bool,
    ttl: Option<std::time::Duration>,
    tag: &'static str,
    client: OnceCell<Client>,
    databases: Mutex<Vec<String>>,
}

impl MongoFactory {
    pub fn new(tag: &'static str, mode: TransactionMode) -> Self {
        Self {
            mode,
            bulk_write: true,
            ttl: None,
            tag,
            client: OnceCell::new(),
            databases: Mutex::new(Vec::new()),
        }
    }

    /// Savers that write a put one command per collection, as on a server without
    /// `bulkWrite` (before MongoDB 8.0).
    pub fn without_bulk_write(mut self) -> Self {
        self.bulk_write = false;
        self
    }

    /// Savers with `MongoConfig::ttl`: every put then also refreshes expiries, and keeps
    /// what its delta channels need alive.
    pub fn with_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    pub async fn saver(&self) -> Result<MongoSaver, BoxError> {
        let client = self.client.get_or_init(client).await.clone();
        let db = unique_db(self.tag);
        self.databases.lock().unwrap().push(db.clone());
        let config = MongoConfig::new(db)
            .transactions(self.mode)
            .bulk_write(self.bulk_write)
            .ttl(self.ttl);
        let saver = MongoSaver::from_client(client, config).await?;
        saver.setup().await?;
        Ok(saver)
    }
}

#[async_trait]
impl SaverFactory for MongoFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(self.saver().await?))
    }

    async fn teardown(&self) {
        let databases = std::mem::take(&mut *self.databases.lock().unwrap());
        if let Some(client) = self.client.get() {
            for db in databases {
                if let Err(e) = client.database(&db).drop().await {
                    eprintln!("teardown: could not drop database {db}: {e}");
                }
            }
        }
    }

    fn skip_reason(&self) -> Option<String> {
        skip_reason()
    }
}

/// The names of the commands a client sends, recorded through the driver's command
/// monitoring.
#[derive(Clone, Default)]
pub struct CommandLog(Arc<Mutex<Vec<String>>>);

impl CommandLog {
    /// Forgets what was recorded.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    /// The command names recorded since the last `clear`.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A client for the test server that records every command it sends.
pub async fn monitored_client() -> (Client, CommandLog) {
    monitored_client_at(&url().expect("CHECKPOINT_TEST_MONGO_URL")).await
}

/// A client for the server at `url` that records every command it sends.
pub async fn monitored_client_at(url: &str) -> (Client, CommandLog) {
    use checkpoint_mongo::mongodb::event::EventHandler;
    use checkpoint_mongo::mongodb::event::command::CommandEvent;
    let mut options = ClientOptions::parse(url).await.expect("parse the URL");
    let log = CommandLog::default();
    let sink = log.clone();
    options.command_event_handler = Some(EventHandler::callback(move |e: CommandEvent| {
        if let CommandEvent::Started(s) = e {
            sink.0.lock().unwrap().push(s.command_name);
        }
    }));
    (Client::with_options(options).expect("client"), log)
}

/// A saver in a fresh database (dropped by [`drop_saver`]).
pub async fn saver_with(
    client: &Client,
    config: impl FnOnce(MongoConfig) -> MongoConfig,
) -> MongoSaver {
    let saver = MongoSaver::from_client(client.clone(), config(MongoConfig::new(unique_db("t"))))
        .await
        .expect("saver");
    saver.setup().await.expect("setup");
    saver
}

/// Drops the saver's database.
pub async fn drop_saver(saver: &MongoSaver) {
    saver
        .database()
        .drop()
        .await
        .expect("drop the test database");
}
