//! Server restarts under load: a private MongoDB-wire test server (its own port and
//! storage) is killed with SIGKILL and started again on the same storage, repeatedly,
//! while the crash test's writers run; acknowledged writes (`w: majority, j: true`, in
//! transactions) must survive and the same saver must carry on (see
//! `checkpoint_conformance::chaos`). The server's executable comes from
//! `CHECKPOINT_TEST_SECANTUSD` (exported by `scripts/services/mongo.sh`); it runs with
//! `--sync-on-commit`, without which it does not keep `j: true` (see `spawn`).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checkpoint_conformance::chaos;
use checkpoint_mongo::mongodb::Client;
use checkpoint_mongo::mongodb::bson::doc;
use checkpoint_mongo::mongodb::options::ClientOptions;
use checkpoint_mongo::{MongoConfig, MongoSaver};

/// A server of this test alone; killed and its storage removed on drop.
struct PrivateServer {
    exe: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Mutex<Option<Child>>,
}

impl PrivateServer {
    fn new(exe: PathBuf) -> Result<Self, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let dir =
            std::env::temp_dir().join(format!("cp-mongo-restart-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(Self {
            exe,
            dir,
            port,
            child: Mutex::new(None),
        })
    }

    fn url(&self) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=30000",
            self.port
        )
    }

    fn spawn(&self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))
            .map_err(|e| e.to_string())?;
        let child = Command::new(&self.exe)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--storage-path")
            .arg(self.dir.join("data"))
            .args(["--log-level", "WARNING"])
            // A mongod acknowledges a `j: true` write once it is in the journal on disk.
            // This server does so only with `--sync-on-commit`; without it, acknowledged
            // `j: true` transactions are lost to SIGKILL (measured with pymongo: 40 of 240
            // over 6 kills; with it, 0 of 240), which this test would report as the saver's.
            .arg("--sync-on-commit")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.exe.display()))?;
        *self.child.lock().unwrap() = Some(child);
        Ok(())
    }

    fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until the server answers `ping`.
    async fn ready(&self) -> Result<(), String> {
        let started = Instant::now();
        let client = Client::with_options(
            ClientOptions::parse(self.url())
                .await
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        loop {
            match client
                .database("admin")
                .run_command(doc! { "ping": 1 })
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if started.elapsed() > Duration::from_secs(90) => {
                    return Err(format!(
                        "the private server did not answer within 90 s: {e}"
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    fn log_tail(&self) -> String {
        std::fs::read_to_string(self.dir.join("log"))
            .map(|l| l.lines().rev().take(20).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A started private server and a set-up saver on it, or `None` (skipped) where the
/// server's executable is not given and none is required.
async fn private_saver(options: &str) -> Option<(PrivateServer, MongoSaver)> {
    let Some(exe) = std::env::var_os("CHECKPOINT_TEST_SECANTUSD").map(PathBuf::from) else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_SECANTUSD is required (scripts/services/mongo.sh exports it)"
        );
        eprintln!("SKIPPED: CHECKPOINT_TEST_SECANTUSD is not set");
        return None;
    };
    let server = PrivateServer::new(exe).unwrap();
    server.spawn().unwrap();
    server.ready().await.unwrap();
    let url = format!("{}{options}", server.url());
    let client = Client::with_options(ClientOptions::parse(url).await.unwrap()).unwrap();
    let saver = MongoSaver::from_client(client, MongoConfig::new("restart"))
        .await
        .unwrap();
    saver.setup().await.unwrap();
    Some((server, saver))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_server_kills() {
    let Some((server, saver)) = private_saver("").await else {
        return;
    };
    let report = chaos::run_with_restarts(Arc::new(saver), 2, 7, || async {
        server.kill();
        server.spawn()?;
        server.ready().await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", server.log_tail()));
    eprintln!("mongo restarts: {report}");
    assert_eq!(report.restarts, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_fails_on_a_connection_a_restart_killed() {
    let Some((server, saver)) = private_saver("&maxPoolSize=4").await else {
        return;
    };
    chaos::calls_succeed_after_restarts(&saver, 4, || async {
        server.kill();
        server.spawn()?;
        server.ready().await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", server.log_tail()));
}
