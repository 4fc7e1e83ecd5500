//! Shared test support: a conformance factory giving each saver its own database file,
//! removed at teardown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use checkpoint_conformance::SaverFactory;
use checkpoint_core::{BoxError, Saver, async_trait};
use checkpoint_sqlite::SqliteSaver;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh directory of this test process for database files.
pub(crate) fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "checkpoint-sqlite-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// Removes a database file with its WAL and shared-memory files.
pub(crate) fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// Each saver gets a new database file in a directory of its own.
#[derive(Debug)]
pub(crate) struct SqliteFactory {
    dir: PathBuf,
    built: Mutex<Vec<PathBuf>>,
}

impl Default for SqliteFactory {
    fn default() -> Self {
        Self {
            dir: scratch_dir("suite"),
            built: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl SaverFactory for SqliteFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        let path = self
            .dir
            .join(format!("{}.db", NEXT.fetch_add(1, Ordering::Relaxed)));
        self.built.lock().unwrap().push(path.clone());
        // `teardown` removes the directory; a factory may build again after it.
        std::fs::create_dir_all(&self.dir)?;
        Ok(Arc::new(SqliteSaver::open(&path).await?))
    }

    async fn teardown(&self) {
        for path in self.built.lock().unwrap().drain(..) {
            remove_db(&path);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Each saver gets a private in-memory database.
#[derive(Debug, Default)]
pub(crate) struct MemoryFactory;

#[async_trait]
impl SaverFactory for MemoryFactory {
    async fn build(&self) -> Result<Arc<dyn Saver>, BoxError> {
        Ok(Arc::new(SqliteSaver::open_in_memory().await?))
    }
}
