//! The saver behind PgBouncer (a private one, session pooling, on a free port), and the
//! schema option: PgBouncer before 1.20 refuses the `options` startup parameter that
//! carries the saver's `search_path` unless told to ignore it, and then the saver used the
//! tables of the default schema without a word. Schema names with capitals, which the
//! `search_path` folded to lower case, are covered here too.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use checkpoint_conformance::fixtures;
use checkpoint_core::{Error, Saver};
use checkpoint_postgres::{PostgresSaverBuilder, sqlx};
use futures::StreamExt;

use crate::common::{
    as_root, drop_schemas, free_port, saver_in_schema, unique_schema, url_or_skip,
};

/// A PgBouncer of this test alone, in front of the test server, stopped on drop.
struct PrivateBouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl PrivateBouncer {
    /// Starts PgBouncer with session pooling, ignoring the `options` startup parameter as
    /// deployments that need it to accept clients configure it.
    fn start(upstream: &sqlx::postgres::PgConnectOptions) -> Result<Self, String> {
        let bin = bouncer_binary()?;
        let port = free_port().map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!("cp-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let config = format!(
            "[databases]\n* = host={} port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\n\
             pool_mode = session\nignore_startup_parameters = extra_float_digits,options\n\
             logfile = {}\n",
            upstream.get_host(),
            upstream.get_port(),
            dir.join("users.txt").display(),
            dir.join("log").display(),
        );
        let user = upstream.get_username();
        std::fs::write(dir.join("users.txt"), format!("\"{user}\" \"\"\n"))
            .and_then(|()| std::fs::write(dir.join("pgbouncer.ini"), config))
            .map_err(|e| e.to_string())?;
        let mut command = Command::new(&bin);
        if as_root() {
            // PgBouncer refuses to run as root; `-u` switches user after reading its files.
            command.args(["-u", "postgres"]);
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .map_err(|e| e.to_string())?;
        }
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let bouncer = Self { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(bouncer.dir.join("log")).unwrap_or_default();
                return Err(format!("PgBouncer does not listen on {port}: {log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(bouncer)
    }
}

impl Drop for PrivateBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `CHECKPOINT_TEST_PGBOUNCER` (set by `scripts/test.sh`), else `pgbouncer` on the path or
/// in `/usr/sbin`.
fn bouncer_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("CHECKPOINT_TEST_PGBOUNCER") {
        return Ok(path.into());
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v pgbouncer"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/pgbouncer")).filter(|p| p.exists()))
        .ok_or_else(|| "pgbouncer is not installed (scripts/test.sh installs it)".into())
}

/// A private PgBouncer in front of the test server, or `None` when the test should skip
/// (failing instead when servers are required).
fn bouncer(url: &str) -> Option<(PrivateBouncer, sqlx::postgres::PgConnectOptions)> {
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    match PrivateBouncer::start(&options) {
        Ok(bouncer) => {
            let through = options.clone().host("127.0.0.1").port(bouncer.port);
            Some((bouncer, through))
        }
        Err(why) => {
            assert!(!checkpoint_conformance::servers_required(), "{why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn assert_search_path_ignored(err: &Error, schema: &str) {
    let message = err.chain();
    assert!(matches!(err, Error::Backend { .. }), "{message}");
    assert!(!err.is_transient(), "{message}");
    assert!(
        message.contains(&format!("schema {schema:?} was configured"))
            && message.contains("ignore_startup_parameters"),
        "{message}"
    );
}

#[tokio::test]
async fn a_schema_the_pooler_drops_is_refused_not_replaced_by_the_default() {
    let Some(url) = url_or_skip() else { return };
    let Some((_bouncer, through)) = bouncer(&url) else {
        return;
    };
    let schema = unique_schema();
    let err = PostgresSaverBuilder::new(through.clone())
        .schema(&schema)
        .connect()
        .await
        .unwrap_err();
    assert_search_path_ignored(&err, &schema);
    // Connected lazily, its setup is the first statement: refused there.
    let lazy = PostgresSaverBuilder::new(through.clone())
        .schema(&schema)
        .connect_lazy()
        .unwrap();
    assert_search_path_ignored(&lazy.setup().await.unwrap_err(), &schema);
    // The pooler itself serves the saver: without a schema option (the role's or the
    // database's search_path decides), calls go through.
    let plain = PostgresSaverBuilder::new(through.clone())
        .connect()
        .await
        .unwrap();
    let threads: Vec<_> = plain.list_threads().collect().await;
    assert!(threads.iter().all(Result::is_ok), "{threads:?}");
    // Nothing was created anywhere by the refused savers.
    let direct = sqlx::PgPool::connect(&url).await.unwrap();
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
        .bind(&schema)
        .fetch_one(&direct)
        .await
        .unwrap();
    assert_eq!(found, 0);
}

#[tokio::test]
async fn a_schema_name_with_capitals_is_used_as_written() {
    let Some(url) = url_or_skip() else { return };
    let schema = format!("Mixed_{}", unique_schema());
    let saver = saver_in_schema(&url, &schema).await.unwrap();
    let put = fixtures::put_chain(&saver, "capitals", "", 2, "run")
        .await
        .unwrap();
    let latest = saver
        .get_tuple(&fixtures::cfg("capitals", ""))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.config, put[1].config);
    let direct = sqlx::PgPool::connect(&url).await.unwrap();
    let statement = format!("SELECT count(*) FROM \"{schema}\".checkpoints");
    let rows: i64 = sqlx::query_scalar(&statement)
        .fetch_one(&direct)
        .await
        .unwrap();
    assert_eq!(rows, 2);
    drop_schemas(&url, &[schema]).await;
}
