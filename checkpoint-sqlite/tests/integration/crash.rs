//! Crash atomicity (`checkpoint_conformance::crash`): a process writing checkpoints to a
//! database file is killed with SIGKILL at random moments, 60 times. After each kill the
//! file is opened again (SQLite recovers from its WAL) and everything acknowledged is there,
//! complete, and nothing torn is visible.

use std::sync::Arc;

use checkpoint_conformance::crash::{self, CrashTest};
use checkpoint_core::Saver;
use checkpoint_sqlite::SqliteSaver;

use crate::common::{remove_db, scratch_dir};

/// The writer, run in a child process by `killed_writers_leave_only_complete_checkpoints`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process of the crash test"]
async fn crash_child_writer() {
    let path = std::env::var("CRASH_DB").expect("run by the crash test");
    crash::child(Arc::new(SqliteSaver::open(&path).await.unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_writers_leave_only_complete_checkpoints() {
    let dir = scratch_dir("crash");
    let path = dir.join("crash.db");
    let report = CrashTest::new("crash::crash_child_writer")
        .kills(60)
        .env("CRASH_DB", &path)
        .run(|| {
            let path = path.clone();
            async move { Ok(Arc::new(SqliteSaver::open(&path).await?) as Arc<dyn Saver>) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{report}");
    remove_db(&path);
    let _ = std::fs::remove_dir(&dir);
}
