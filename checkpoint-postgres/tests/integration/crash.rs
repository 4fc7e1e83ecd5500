//! Crash atomicity (`checkpoint_conformance::crash`): a writer process is killed with
//! SIGKILL at random moments, many times; afterwards every acknowledged put and put_writes
//! is present, and every checkpoint that loads is complete (all its values, and whole
//! put_writes calls only).

use crate::common;

use std::sync::Arc;

use checkpoint_conformance::crash::{self, CrashTest};
use checkpoint_core::Saver;
use checkpoint_postgres::PostgresSaver;

/// The writer, run in a child process by `killed_writers_leave_only_complete_checkpoints`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process of the crash test"]
async fn crash_child_writer() {
    let url = std::env::var("CRASH_URL").expect("run by the crash test");
    let schema = std::env::var("CRASH_SCHEMA").unwrap();
    let saver = PostgresSaver::builder(&url)
        .unwrap()
        .schema(&schema)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    crash::child(Arc::new(saver)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_writers_leave_only_complete_checkpoints() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let (saver, schema) = common::fresh_saver(&url).await.unwrap();
    let saver: Arc<dyn Saver> = Arc::new(saver);
    let report = CrashTest::new("crash::crash_child_writer")
        .kills(50)
        .env("CRASH_URL", &url)
        .env("CRASH_SCHEMA", &schema)
        .run(|| {
            let saver = Arc::clone(&saver);
            async move { Ok(saver) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{report}");
    common::drop_schemas(&url, &[schema]).await;
}
