//! Shared test support: a factory handing out savers in fresh, uniquely named schemas.

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{BoxError, Saver, async_trait, new_checkpoint_id};
use checkpoint_postgres::PostgresSaver;
use checkpoint_postgres::sqlx::{self, PgPool};

/// The test server, from `CHECKPOINT_TEST_POSTGRES_URL`.
pub fn url() -> Option<String> {
    checkpoint_conformance::server_url("postgres")
}

/// The test server's URL, or `None` when the test should skip; with servers required
/// (`CI=true`, `CHECKPOINT_TEST_REQUIRE=1`) a missing URL fails the test instead.
pub fn url_or_skip() -> Option<String> {
    let url = url();
    assert!(
        url.is_some() || !checkpoint_conformance::servers_required(),
        "CHECKPOINT_TEST_POSTGRES_URL is required"
    );
    url
}

/// A new schema name no other test uses.
pub fn unique_schema() -> String {
    format!("cpt_{}", new_checkpoint_id().replace('-', "_"))
}

/// A saver in a new schema, set up.
pub async fn fresh_saver(url: &str) -> Result<(PostgresSaver, String), BoxError> {
    let schema = unique_schema();
    let saver = saver_in_schema(url, &schema).await?;
    Ok((saver, schema))
}

/// A saver in `schema`, set up.
pub async fn saver_in_schema(url: &str, schema: &str) -> Result<PostgresSaver, BoxError> {
    let saver = PostgresSaver::builder(url)?
        .schema(schema)
        .max_connections(8)
        .connect()
        .await?;
    saver.setup().await?;
    Ok(saver)
}

/// A TCP port free on 127.0.0.1 (bound, then released), for a private server.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Whether the tests run as root (the server tools and PgBouncer refuse to).
pub fn as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Drops schemas created for a test.
pub async fn drop_schemas(url: &str, schemas: &[String]) {
    let Ok(pool) = PgPool::connect(url).await else {
        return;
    };
    for schema in schemas {
        let statement = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        let _ = sqlx::query(&statement).execute(&pool).await;
    }
    pool.close().await;
}

/// Each build gets its own schema; teardown drops them all.
#[derive(Default)]
pub struct PgFactory {
    schemas: Mutex<Vec<String>>,
}

#[async_trait]
impl SaverFactory for PgFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        let url = url().ok_or("CHECKPOINT_TEST_POSTGRES_URL is not set")?;
        let (saver, schema) = fresh_saver(&url).await?;
        self.schemas.lock().unwrap().push(schema);
        Ok(Arc::new(saver))
    }

    async fn teardown(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        if let Some(url) = url() {
            drop_schemas(&url, &schemas).await;
        }
    }

    fn skip_reason(&self) -> Option<String> {
        url().is_none().then(|| {
            "CHECKPOINT_TEST_POSTGRES_URL is not set (scripts/services/postgres.sh sets it)".into()
        })
    }
}
