//! Server restarts under load: a private PostgreSQL (initdb in a scratch directory, on a
//! free port) is stopped with `pg_ctl stop -m immediate` (no checkpoint, no clean
//! shutdown: what a crash or an OOM kill of the postmaster looks like) and started again,
//! repeatedly, while the crash test's writers run; acknowledged writes must survive WAL
//! recovery and the same saver must carry on (see `checkpoint_conformance::chaos`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use checkpoint_conformance::chaos;
use checkpoint_core::{CheckpointConfig, CheckpointMetadata, Error, PutOptions, Saver};
use checkpoint_postgres::PostgresSaver;
use checkpoint_postgres::sqlx::{self, PgPool};

use crate::common::{as_root, free_port};

/// A PostgreSQL instance of this test alone, stopped and removed on drop.
struct PrivatePg {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl PrivatePg {
    /// `initdb` and start, or why not.
    fn start() -> Result<Self, String> {
        let bin = server_bindir()?;
        let port = free_port().map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!("cp-pg-restart-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let pg = Self { bin, dir, port };
        if as_root() {
            // initdb and the server refuse to run as root: the directory goes to `postgres`.
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&pg.dir))?;
        }
        run(pg
            .tool("initdb")
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-D"])
            .arg(pg.dir.join("data")))?;
        pg.pg_ctl_start()?;
        Ok(pg)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A command running one of the server's tools, as `postgres` when we are root.
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=on",
            self.port,
            self.dir.display()
        );
        run(self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-o", &options, "-l"])
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "start"]))
    }

    /// Stops the server without a checkpoint (`-m immediate`), then starts it again: WAL
    /// recovery runs at startup.
    fn crash_restart(&self) -> Result<(), String> {
        run(self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"]))?;
        self.pg_ctl_start()
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where the server's tools are: `CHECKPOINT_TEST_PG_BINDIR`, else the newest
/// `/usr/lib/postgresql/*/bin` holding `initdb` (Debian), else `pg_config --bindir`.
fn server_bindir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("CHECKPOINT_TEST_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("bin"))
                .filter(|bin| bin.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    debian.sort_by_key(|bin| {
        bin.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(newest) = debian.pop() {
        return Ok(newest);
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .map_err(|e| format!("no PostgreSQL server tools found (pg_config: {e})"))?;
    let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && bin.join("initdb").exists() {
        Ok(bin)
    } else {
        Err(format!(
            "no initdb next to pg_config --bindir ({})",
            bin.display()
        ))
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {status}\n{}{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ))
    }
}

fn log_tail(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log"))
        .map(|l| l.lines().rev().take(20).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

/// A private server and a set-up saver of 4 connections on it, or `None` (skipped) where
/// no server can start and none is required.
async fn private_saver() -> Option<(PrivatePg, PostgresSaver)> {
    let pg = match PrivatePg::start() {
        Ok(pg) => pg,
        Err(reason) => {
            assert!(
                !checkpoint_conformance::servers_required(),
                "a private PostgreSQL could not start: {reason}"
            );
            eprintln!("SKIPPED: {reason}");
            return None;
        }
    };
    let saver = PostgresSaver::builder(&pg.url())
        .unwrap()
        .max_connections(4)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    Some((pg, saver))
}

/// [`PrivatePg::crash_restart`] from a test's runtime, its error with the server's log.
async fn restart(pg: &PrivatePg) -> Result<(), String> {
    let restarted = tokio::task::block_in_place(|| pg.crash_restart());
    restarted.map_err(|e| format!("{e}\n{}", log_tail(&pg.dir)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_immediate_shutdowns() {
    let Some((pg, saver)) = private_saver().await else {
        return;
    };
    let report = chaos::run_with_restarts(Arc::new(saver), 3, 7, || restart(&pg))
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", log_tail(&pg.dir)));
    eprintln!("postgres restarts: {report}");
    assert_eq!(report.restarts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_fails_on_a_connection_a_restart_killed() {
    let Some((pg, saver)) = private_saver().await else {
        return;
    };
    chaos::calls_succeed_after_restarts(&saver, 4, || restart(&pg))
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", log_tail(&pg.dir)));
}

/// A failover leaves the connections made to the old primary on a server that no longer
/// takes writes (SQLSTATE 25006), here simulated by turning the private server read-only.
/// A write then fails with a transient error, and the connections it met are closed
/// rather than handed out again; once the server takes writes, the saver writes on new
/// connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_a_server_that_turned_read_only_are_closed() {
    use checkpoint_core::{Error, Saver};
    use checkpoint_postgres::sqlx;

    let Some((pg, saver)) = private_saver().await else {
        return;
    };
    // Every connection of the test's own pool is named, so none counts as the saver's.
    let admin_options: sqlx::postgres::PgConnectOptions = pg.url().parse().unwrap();
    let admin = sqlx::PgPool::connect_with(admin_options.application_name("admin"))
        .await
        .unwrap();
    let read_only = |on: bool| {
        let admin = admin.clone();
        async move {
            let set = format!("ALTER SYSTEM SET default_transaction_read_only = {on}");
            sqlx::query(&set).execute(&admin).await.unwrap();
            sqlx::query("SELECT pg_reload_conf()")
                .execute(&admin)
                .await
                .unwrap();
            // Each backend applies the reloaded setting at its next command.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    };
    let first = checkpoint_conformance::fixtures::put_chain(&saver, "t", "", 1, "run")
        .await
        .unwrap();
    let before = client_backends(&admin).await;
    assert!(!before.is_empty());

    read_only(true).await;
    let err = checkpoint_conformance::fixtures::put_chain(&saver, "t2", "", 1, "run")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{}", err.chain());
    assert!(err.chain().contains("read-only"), "{}", err.chain());
    // Reads still work on the read-only server.
    let latest = saver.get_tuple(&first[0].config).await.unwrap().unwrap();
    assert_eq!(latest.config, first[0].config);
    // A lease fails, transient (sent again once, on another connection, which meets the
    // same), and the connections it met (the read's, kept warm, or others of the pool's)
    // are closed too, not handed to the next call.
    let open = client_backends(&admin).await;
    let err = saver
        .acquire_lease("t-lease", "me", std::time::Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{}", err.chain());
    assert!(err.chain().contains("read-only"), "{}", err.chain());
    assert!(
        closed_within_5s(&admin, &open, 1).await,
        "the connection the lease met on the read-only server is still open"
    );
    // So does a call that runs a transaction: its `BEGIN` succeeds, its first write fails.
    // (A saver of one connection, named apart, which a read opened: the call meets that
    // one, and only its closing counts.)
    let options: sqlx::postgres::PgConnectOptions = pg.url().parse().unwrap();
    let single = checkpoint_postgres::PostgresSaverBuilder::new(options.application_name("single"))
        .max_connections(1)
        .connect()
        .await
        .unwrap();
    single.get_tuple(&first[0].config).await.unwrap().unwrap();
    let open: Vec<i32> =
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = 'single'")
            .fetch_all(&admin)
            .await
            .unwrap();
    assert_eq!(open.len(), 1, "the one-connection saver has {open:?}");
    let ttl = checkpoint_core::ThreadTtl::Expire(std::time::Duration::from_secs(60));
    let err = single.set_thread_ttl("t", ttl).await.unwrap_err();
    assert!(err.is_transient(), "{}", err.chain());
    assert!(err.chain().contains("read-only"), "{}", err.chain());
    assert!(
        closed_within_5s(&admin, &open, 1).await,
        "the connection set_thread_ttl met on the read-only server is still open"
    );

    read_only(false).await;
    checkpoint_conformance::fixtures::put_chain(&saver, "t3", "", 2, "run")
        .await
        .unwrap_or_else(|e| panic!("a write once the server takes writes: {}", e.chain()));
    // The two connections the failed put met were closed, not kept.
    assert!(
        closed_within_5s(&admin, &before, 2.min(before.len())).await,
        "the connections that failed on the read-only server are still open"
    );
}

/// The server's client backends other than the test's own (`application_name = 'admin'`):
/// the saver's connections.
async fn client_backends(admin: &checkpoint_postgres::sqlx::PgPool) -> Vec<i32> {
    checkpoint_postgres::sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' \
         AND application_name <> 'admin' ORDER BY pid",
    )
    .fetch_all(admin)
    .await
    .unwrap()
}

/// Whether, within 5 s, at least `n` of the backends `of` are gone.
async fn closed_within_5s(admin: &checkpoint_postgres::sqlx::PgPool, of: &[i32], n: usize) -> bool {
    for _ in 0..50 {
        let now = client_backends(admin).await;
        if of.iter().filter(|pid| !now.contains(pid)).count() >= n {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

/// A tmpfs of `size` mounted for a private server's tablespace and handed to `postgres`;
/// unmounted and removed on drop, which must come after the server stopped (declare it
/// before the [`PrivatePg`]). Needs root.
struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    fn mount(size: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("cp-pg-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let disk = Self { dir };
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&disk.dir))?;
        run(Command::new("chown")
            .arg("postgres:postgres")
            .arg(&disk.dir))?;
        Ok(disk)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).output();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `n` bytes that no compressor shrinks much (hex digits of a xorshift sequence).
fn incompressible(n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from_digit((x % 16) as u32, 16).unwrap()
        })
        .collect()
}

/// The disk holding the saver's tables fills up: a put that does not fit fails with a
/// transient error (as on SQLite) and stores nothing, every acknowledged checkpoint loads
/// whole, and once space is freed the same put is stored. The tables live in a tablespace
/// on a 3 MB tmpfs of a private server (mounting needs root; a server whose tablespace
/// vanishes would fail its checkpoints, so never the shared one).
#[tokio::test]
async fn a_full_disk_refuses_puts_transiently_and_keeps_every_stored_one() {
    if !as_root() {
        assert!(
            !checkpoint_conformance::servers_required(),
            "this test mounts a small filesystem, which needs root"
        );
        eprintln!("SKIPPED: not root");
        return;
    }
    let disk = SmallDisk::mount("3m").unwrap();
    let Some((pg, saver)) = private_saver().await else {
        return;
    };
    let admin = PgPool::connect(&pg.url()).await.unwrap();
    let statements = [
        format!("CREATE TABLESPACE small LOCATION '{}'", disk.dir.display()),
        "ALTER TABLE checkpoints SET TABLESPACE small".to_owned(),
        "ALTER TABLE checkpoint_blobs SET TABLESPACE small".to_owned(),
        "ALTER TABLE checkpoint_writes SET TABLESPACE small".to_owned(),
        "ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE small".to_owned(),
        // Space to give back later.
        "CREATE TABLE filler TABLESPACE small AS
         SELECT repeat(md5(i::text), 32) AS pad FROM generate_series(1, 600) AS i"
            .to_owned(),
    ];
    for statement in &statements {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    let put = |thread: String, seed: u64| {
        let saver = saver.clone();
        async move {
            let (c, v) = checkpoint_conformance::fixtures::step(
                None,
                &[(
                    "doc",
                    Some(checkpoint_conformance::fixtures::val(serde_json::json!(
                        incompressible(20_000, seed)
                    ))),
                )],
            );
            saver
                .put(
                    &CheckpointConfig::new(thread),
                    c,
                    CheckpointMetadata::new(),
                    v,
                    PutOptions::new(),
                )
                .await
        }
    };
    let mut stored = Vec::new();
    let refused = loop {
        let thread = format!("t{}", stored.len());
        match put(thread.clone(), stored.len() as u64 + 1).await {
            Ok(config) => stored.push(config),
            Err(e) => break (thread, e),
        }
        assert!(stored.len() < 1000, "a 3 MB disk held 20 MB of checkpoints");
    };
    let (thread, error) = refused;
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    assert!(error.chain().contains("No space left"), "{}", error.chain());
    assert!(stored.len() > 10, "only {} puts fitted", stored.len());
    for config in &stored {
        let t = saver.get_tuple(config).await.unwrap().expect("stored");
        assert_eq!(t.checkpoint.channel_values.len(), 1, "{config:?}");
    }
    let refused = CheckpointConfig::new(&thread);
    assert!(saver.get_tuple(&refused).await.unwrap().is_none());

    sqlx::query("DROP TABLE filler")
        .execute(&admin)
        .await
        .unwrap();
    put(thread, 0).await.unwrap();
    assert!(saver.get_tuple(&refused).await.unwrap().is_some());
}
