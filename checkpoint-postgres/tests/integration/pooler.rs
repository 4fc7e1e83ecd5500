//! The saver behind PgBouncer (private ones, on free ports).
//!
//! Session pooling and the schema option: PgBouncer before 1.20 refuses the `options`
//! startup parameter that carries the saver's `search_path` unless told to ignore it, and
//! then the saver used the tables of the default schema without a word. Schema names with
//! capitals, which the `search_path` folded to lower case, are covered here too.
//!
//! Transaction pooling: with `transaction_pooling(true)` the whole conformance suite runs
//! through a transaction-mode PgBouncer with fewer server connections than the saver has
//! client connections, so consecutive calls of one client land on different server
//! connections and several clients share each of them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checkpoint_conformance::{SaverFactory, fixtures};
use checkpoint_core::{BoxError, Error, ListOptions, Saver, async_trait};
use checkpoint_postgres::{PostgresSaver, PostgresSaverBuilder, sqlx};

use crate::common::{
    as_root, drop_schemas, free_port, saver_in_schema, unique_schema, url, url_or_skip,
};

/// A PgBouncer of this test alone, in front of the test server, stopped on drop.
struct PrivateBouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

/// How a [`PrivateBouncer`] pools.
#[derive(Clone, Copy, Debug)]
enum Pooling {
    /// A server connection per client connection, for the client's session.
    Session,
    /// A server connection per transaction, from a pool of this many.
    Transaction(u32),
}

/// How many ports [`PrivateBouncer::start`] tries: a port found free can be taken by another
/// socket before PgBouncer binds it.
const BOUNCER_PORT_TRIES: usize = 5;

impl PrivateBouncer {
    /// Starts PgBouncer pooling as `pooling` says, ignoring the `options` startup parameter
    /// as deployments that need it to accept clients configure it. A port taken between
    /// being found free and PgBouncer binding it (the tests' own connections use the same
    /// ephemeral range) makes PgBouncer exit at once; it is started again on another.
    fn start(
        upstream: &sqlx::postgres::PgConnectOptions,
        pooling: Pooling,
    ) -> Result<Self, String> {
        let mut taken = Vec::new();
        for _ in 0..BOUNCER_PORT_TRIES {
            let port = free_port().map_err(|e| e.to_string())?;
            match Self::start_on(upstream, pooling, port)? {
                Some(bouncer) => return Ok(bouncer),
                None => taken.push(port),
            }
        }
        Err(format!(
            "PgBouncer found every port it tried taken: {taken:?}"
        ))
    }

    /// [`start`](Self::start) on `port`: `None` if PgBouncer could not bind it.
    fn start_on(
        upstream: &sqlx::postgres::PgConnectOptions,
        pooling: Pooling,
        port: u16,
    ) -> Result<Option<Self>, String> {
        let bin = bouncer_binary()?;
        // Its own directory: two tests of this process may try the same port at once.
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "cp-pgbouncer-{}-{start}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let pool = match pooling {
            Pooling::Session => "pool_mode = session\n".to_owned(),
            Pooling::Transaction(size) => {
                format!("pool_mode = transaction\ndefault_pool_size = {size}\n")
            }
        };
        let config = format!(
            "[databases]\n* = host={} port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\n\
             {pool}ignore_startup_parameters = extra_float_digits,options\n\
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
        let mut bouncer = Self { child, dir, port };
        // Its own log says when it listens: a connection to the port could reach another
        // process's socket.
        let listening = format!("listening on 127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            // Whether it exited first, then its log: all of it, if it did.
            let exited = bouncer.child.try_wait();
            let log = std::fs::read_to_string(bouncer.dir.join("log")).unwrap_or_default();
            if let Ok(Some(status)) = exited {
                if log.contains("Address already in use") {
                    return Ok(None);
                }
                return Err(format!("PgBouncer exited ({status}): {log}"));
            }
            if log.contains(&listening) {
                return Ok(Some(bouncer));
            }
            if Instant::now() > deadline {
                return Err(format!("PgBouncer does not listen on {port}: {log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// A private PgBouncer in front of the test server at `url`, and the options connecting
/// through it.
fn start_bouncer(
    url: &str,
    pooling: Pooling,
) -> Result<(PrivateBouncer, sqlx::postgres::PgConnectOptions), String> {
    let options: sqlx::postgres::PgConnectOptions = url.parse().map_err(|e| format!("{e}"))?;
    let bouncer = PrivateBouncer::start(&options, pooling)?;
    let through = options.host("127.0.0.1").port(bouncer.port);
    Ok((bouncer, through))
}

/// [`start_bouncer`], or `None` when the test should skip (failing instead when servers
/// are required).
fn bouncer(
    url: &str,
    pooling: Pooling,
) -> Option<(PrivateBouncer, sqlx::postgres::PgConnectOptions)> {
    match start_bouncer(url, pooling) {
        Ok(started) => Some(started),
        Err(why) => {
            assert!(!checkpoint_conformance::servers_required(), "{why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

#[test]
fn a_bouncer_whose_port_was_taken_gives_it_up_at_once() {
    let Some(url) = url_or_skip() else { return };
    if let Err(why) = bouncer_binary() {
        assert!(!checkpoint_conformance::servers_required(), "{why}");
        return;
    }
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let started = Instant::now();
    let gave_up = PrivateBouncer::start_on(&options, Pooling::Session, port).unwrap();
    assert!(gave_up.is_none());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
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
    let Some((_bouncer, through)) = bouncer(&url, Pooling::Session) else {
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
    // The pooler itself serves the saver: without a schema option the server's
    // search_path (the role's or the database's) decides.
    let plain = PostgresSaverBuilder::new(through.clone())
        .connect()
        .await
        .unwrap();
    let search_path: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(plain.pool())
        .await
        .unwrap();
    assert!(!search_path.contains(&schema), "{search_path}");
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
    assert_eq!(checkpoints_in(&url, &schema).await, 2);
    drop_schemas(&url, &[schema]).await;
}

/// The rows of `schema.checkpoints`, read directly from the server at `url`.
async fn checkpoints_in(url: &str, schema: &str) -> i64 {
    let direct = sqlx::PgPool::connect(url).await.unwrap();
    let statement = format!("SELECT count(*) FROM \"{schema}\".checkpoints");
    let rows = sqlx::query_scalar(&statement)
        .fetch_one(&direct)
        .await
        .unwrap();
    direct.close().await;
    rows
}

/// A saver in `schema` through the transaction pooler at `through`, set up.
async fn pooled_saver(
    through: &sqlx::postgres::PgConnectOptions,
    schema: &str,
) -> Result<PostgresSaver, Error> {
    let saver = PostgresSaverBuilder::new(through.clone())
        .schema(schema)
        .transaction_pooling(true)
        .max_connections(8)
        .connect()
        .await?;
    saver.setup().await?;
    Ok(saver)
}

#[tokio::test]
async fn a_transaction_pooler_shares_a_server_connection_between_clients() {
    // Why the option exists: sqlx names the statements it prepares per client connection,
    // and behind this pooler two clients' statements of the same name meet on one server
    // connection.
    let Some(url) = url_or_skip() else { return };
    let Some((_bouncer, through)) = bouncer(&url, Pooling::Transaction(1)) else {
        return;
    };
    use sqlx::Connection;
    let mut a = sqlx::PgConnection::connect_with(&through).await.unwrap();
    let mut b = sqlx::PgConnection::connect_with(&through).await.unwrap();
    let one: i32 = sqlx::query_scalar("SELECT $1::int4")
        .bind(1)
        .fetch_one(&mut a)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let err = sqlx::query_scalar::<_, String>("SELECT $1::text")
        .bind("b")
        .fetch_one(&mut b)
        .await
        .unwrap_err();
    let code = err.as_database_error().and_then(|e| e.code());
    assert_eq!(code.as_deref(), Some("42P05"), "{err}");
}

#[tokio::test]
async fn through_a_transaction_pooler_concurrent_callers_see_their_own_threads() {
    let Some(url) = url_or_skip() else { return };
    let Some((_bouncer, through)) = bouncer(&url, Pooling::Transaction(2)) else {
        return;
    };
    let schema = unique_schema();
    // Two savers (two processes' worth of client connections), 16 connections over the
    // pooler's 2 server connections.
    let savers = [
        pooled_saver(&through, &schema).await.unwrap(),
        pooled_saver(&through, &schema).await.unwrap(),
    ];
    let mut tasks = Vec::new();
    for task in 0..8 {
        let saver = savers[task % 2].clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..10 {
                let thread = format!("t{task}-{round}");
                let put = fixtures::put_chain(&saver, &thread, "", 3, "run").await?;
                let latest = saver
                    .get_tuple(&fixtures::cfg(&thread, ""))
                    .await?
                    .ok_or("no checkpoint")?;
                assert_eq!(latest.config, put[2].config);
                assert_eq!(latest.config.thread_id, thread);
                let listed = fixtures::list(&saver, ListOptions::thread(thread.clone())).await;
                assert_eq!(fixtures::ids(&listed).len(), 3, "{thread}");
                assert!(listed.iter().all(|t| t.config.thread_id == thread));
            }
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    // Every checkpoint went to the configured schema.
    assert_eq!(checkpoints_in(&url, &schema).await, 8 * 10 * 3);
    drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn through_a_transaction_pooler_a_stalled_thread_leaves_the_pool_to_the_others() {
    // The statement_timeout is set in each call's transaction there, not at connection.
    let Some(url) = url_or_skip() else { return };
    let Some((_bouncer, through)) = bouncer(&url, Pooling::Transaction(2)) else {
        return;
    };
    crate::timeouts::a_stalled_thread_leaves_the_pool_to_the_others(through, &url, true).await;
}

/// Savers through a transaction-mode PgBouncer of their own (2 server connections), each in
/// a new schema; teardown stops the pooler and drops the schemas.
#[derive(Default)]
struct PooledFactory {
    bouncer: tokio::sync::Mutex<Option<(PrivateBouncer, sqlx::postgres::PgConnectOptions)>>,
    schemas: Mutex<Vec<String>>,
}

#[async_trait]
impl SaverFactory for PooledFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        let url = url().ok_or("CHECKPOINT_TEST_POSTGRES_URL is not set")?;
        let mut bouncer = self.bouncer.lock().await;
        if bouncer.is_none() {
            let url = url.clone();
            let started =
                tokio::task::spawn_blocking(move || start_bouncer(&url, Pooling::Transaction(2)))
                    .await??;
            *bouncer = Some(started);
        }
        let through = bouncer.as_ref().map(|(_, through)| through.clone());
        drop(bouncer);
        let schema = unique_schema();
        self.schemas.lock().unwrap().push(schema.clone());
        let saver = pooled_saver(&through.ok_or("no pooler")?, &schema).await?;
        Ok(Arc::new(saver))
    }

    async fn teardown(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        if let Some(url) = url() {
            drop_schemas(&url, &schemas).await;
        }
        self.bouncer.lock().await.take();
    }

    fn skip_reason(&self) -> Option<String> {
        if url().is_none() {
            return Some("CHECKPOINT_TEST_POSTGRES_URL is not set".into());
        }
        bouncer_binary().err()
    }
}

/// The conformance suite through a transaction-mode pooler.
mod transaction_pooled {
    checkpoint_conformance::conformance_suite!(super::PooledFactory::default());
}
