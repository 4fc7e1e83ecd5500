//! `threads-bench`: what listing thread ids costs as a store grows — a whole
//! `list_threads`, and one page of `list_threads_after` (the call behind paged thread
//! lists in a UI, Python's `list_threads(after=..., limit=...)`, and a resumed migration).
//!
//! For each data set size it starts from a fresh, empty saver of the backend, stores that
//! many threads (each one checkpoint with a 1 KB `messages` value and one pending write,
//! so every kind of per-thread record exists), then measures, in one run:
//!
//! * `full_ms`: collecting every id of `list_threads` (median of `--reps`);
//! * `page_p50_ms` / `page_p99_ms`: the first `--page` ids after a position drawn at random
//!   from the stored ids (`--samples` pages).
//!
//! A page whose cost does not grow with the store is what a paged listing needs; the report
//! gives the ratio of the largest set's page to the smallest's. Run, for example:
//!
//! ```sh
//! cargo run --release -p checkpoint-bench --features redis --bin threads-bench -- \
//!     --backend redis --threads 1000 --threads 20000 --out bench-results/threads-redis.json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoint_bench::BackendOptions;
use checkpoint_bench::rng::SplitMix64;
use checkpoint_bench::stats::{Latencies, median, round3};
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, PutOptions, PutWritesOptions, Saver,
    TypedValue,
};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use serde_json::{Value, json};

/// Measures `list_threads` and one page of `list_threads_after` on stores of growing size;
/// prints one JSON report.
#[derive(Debug, Parser)]
#[command(name = "threads-bench", version)]
struct Cli {
    /// The backend (`memory`, `sqlite`, `postgres`, `redis`, `mongo`, as built).
    #[arg(long, default_value = "memory")]
    backend: String,
    /// Server URL (for `sqlite`, a directory); the backend's default otherwise.
    #[arg(long)]
    url: Option<String>,
    /// Data set sizes, in threads (repeatable).
    #[arg(long = "threads", default_values_t = [1000usize, 10000])]
    threads: Vec<usize>,
    /// Ids per page.
    #[arg(long, default_value_t = 100)]
    page: usize,
    /// Pages measured per data set.
    #[arg(long, default_value_t = 50)]
    samples: usize,
    /// Whole listings measured per data set.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seed of the page positions.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the report here.
    #[arg(long)]
    out: Option<PathBuf>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Stores `n` threads named `t0000000`.. (one checkpoint and one pending write each).
async fn seed(saver: &Arc<dyn Saver>, n: usize) -> Result<Vec<String>, BoxError> {
    let ids: Vec<String> = (0..n).map(|i| format!("t{i:07}")).collect();
    let message = "m".repeat(1024);
    stream::iter(ids.clone())
        .map(|thread| {
            let saver = Arc::clone(saver);
            let message = message.clone();
            async move {
                let mut checkpoint = Checkpoint::new();
                checkpoint.set("messages", &vec![message])?;
                let versions = checkpoint.channel_versions.clone();
                let config = CheckpointConfig::new(thread);
                let stored = saver
                    .put(
                        &config,
                        checkpoint,
                        CheckpointMetadata::new(),
                        versions,
                        PutOptions::default(),
                    )
                    .await?;
                saver
                    .put_writes(
                        &stored,
                        vec![("messages".to_owned(), TypedValue::json(&"hi")?)],
                        "task",
                        PutWritesOptions::default(),
                    )
                    .await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(ids)
}

async fn measure(saver: &Arc<dyn Saver>, ids: &[String], cli: &Cli) -> Result<Value, BoxError> {
    let mut full = Vec::with_capacity(cli.reps);
    for _ in 0..cli.reps {
        let started = Instant::now();
        let listed: Vec<String> = saver.list_threads().try_collect().await?;
        full.push(ms(started.elapsed()));
        if listed.len() != ids.len() {
            return Err(format!("list_threads gave {} ids for {}", listed.len(), ids.len()).into());
        }
    }
    let mut rng = SplitMix64::from_state(cli.seed);
    let mut pages = Latencies::new();
    for _ in 0..cli.samples {
        let at = (rng.next_u64() % ids.len() as u64) as usize;
        let started = Instant::now();
        let page: Vec<String> = saver
            .list_threads_after(&ids[at])
            .take(cli.page)
            .try_collect()
            .await?;
        pages.push(started.elapsed());
        let want = &ids[at + 1..ids.len().min(at + 1 + cli.page)];
        if page != want {
            return Err(format!(
                "the page after {} is not the next {} ids",
                ids[at],
                want.len()
            )
            .into());
        }
    }
    let pages = pages.stats();
    Ok(json!({
        "threads": ids.len(),
        "full_ms": median(full).map(round3),
        "page_p50_ms": pages.p50_ms.map(round3),
        "page_p99_ms": pages.p99_ms.map(round3),
    }))
}

async fn run(cli: &Cli) -> Result<Value, BoxError> {
    let options = BackendOptions::new().url(cli.url.clone());
    let backend = checkpoint_bench::open(&cli.backend, &options).await?;
    let mut runs = Vec::new();
    let mut sizes = cli.threads.clone();
    sizes.sort_unstable();
    for &n in &sizes {
        let saver = backend.fresh().await?;
        let started = Instant::now();
        let ids = seed(&saver, n).await?;
        let seeded = started.elapsed().as_secs_f64();
        let mut figures = measure(&saver, &ids, cli).await?;
        figures["seed_seconds"] = json!(round3(seeded));
        eprintln!("{}", figures);
        runs.push(figures);
    }
    backend.teardown().await?;
    let p50 = |r: &Value| r["page_p50_ms"].as_f64();
    let growth = match (runs.first().and_then(p50), runs.last().and_then(p50)) {
        (Some(small), Some(large)) if small > 0.0 && runs.len() > 1 => Some(round3(large / small)),
        _ => None,
    };
    Ok(json!({
        "bench": "threads",
        "backend": cli.backend,
        "settings": backend.settings(),
        "page": cli.page,
        "samples": cli.samples,
        "seed": cli.seed,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "runs": runs,
        "page_p50_largest_over_smallest": growth,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.threads.is_empty() || cli.threads.contains(&0) || cli.page == 0 {
        eprintln!("error: --threads and --page must be at least 1");
        return ExitCode::from(2);
    }
    match run(&cli).await {
        Ok(report) => {
            let text = serde_json::to_string_pretty(&report).expect("a JSON value prints");
            println!("{text}");
            if let Some(path) = &cli.out
                && let Err(e) = std::fs::write(path, format!("{text}\n"))
            {
                eprintln!("error: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
