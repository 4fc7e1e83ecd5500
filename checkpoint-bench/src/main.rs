//! `checkpoint-bench`: runs the standard W1–W4 workload (WORKLOAD.md) against one backend
//! and prints the JSON report.

use std::path::PathBuf;
use std::process::ExitCode;

use checkpoint_bench::{BACKENDS, BackendOptions, MongoDurability, Params};
use clap::Parser;
use clap::builder::PossibleValuesParser;

/// Runs the W1–W4 checkpoint workload against a backend and reports JSON (one object per
/// run) on stdout.
#[derive(Debug, Parser)]
#[command(name = "checkpoint-bench", version, about)]
struct Cli {
    /// Backend to benchmark.
    #[arg(long, default_value = "memory", value_parser = PossibleValuesParser::new(BACKENDS))]
    backend: String,
    /// Connection URL of a server backend; for `sqlite`, a directory for its files.
    #[arg(long)]
    url: Option<String>,
    /// T: number of W1 threads.
    #[arg(long, default_value_t = 50)]
    threads: usize,
    /// S: super-steps per thread.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Payload seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Repetitions, each on a fresh backend (the spec requires at least 3).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Number of fresh W4 threads.
    #[arg(long, default_value_t = 64)]
    w4_threads: usize,
    /// Concurrent W4 workers sharing one saver.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// The delta variant (docs/workload.md §9): `messages` is a delta channel, snapshotted
    /// every 100 updates; W2 also times `delta_channel_history` of the latest checkpoint.
    #[arg(long)]
    delta: bool,
    /// MongoDB only: `langgraph` writes as LangGraph's `MongoDBSaver` does (no
    /// transactions, the server's default write concern; the floors use it too) instead of
    /// the saver's defaults (transactions, `w: "majority"`, journaled).
    #[arg(long, value_enum, default_value_t = MongoDurability::Default)]
    mongo_durability: MongoDurability,
    /// PostgreSQL only: run the saver as behind a transaction-mode pooler (each call in a
    /// transaction of its own, unnamed statements); the report's `settings` say so.
    #[arg(long)]
    postgres_transaction_pooling: bool,
    /// Also write the JSON report to this file (parent directories are created).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let params = Params {
        threads: cli.threads,
        steps: cli.steps,
        seed: cli.seed,
        reps: cli.reps,
        w4_threads: cli.w4_threads,
        workers: cli.workers,
        delta: cli.delta,
        ..Params::default()
    };
    if params.reps < 3 {
        eprintln!(
            "warning: --reps {} is below the 3 repetitions WORKLOAD.md requires",
            params.reps
        );
    }
    let options = BackendOptions::new()
        .url(cli.url)
        .mongo_durability(cli.mongo_durability)
        .postgres_transaction_pooling(cli.postgres_transaction_pooling);
    let backend = match checkpoint_bench::open(&cli.backend, &options).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot open backend {}: {e}", cli.backend);
            return ExitCode::from(2);
        }
    };
    let report = checkpoint_bench::run(&*backend, &params).await;
    let json = match serde_json::to_string_pretty(&report) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: cannot encode the report: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{json}");
    if let Some(path) = &cli.out {
        let written = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(path, format!("{json}\n")));
        if let Err(e) = written {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("report written to {}", path.display());
    }
    if report.valid {
        ExitCode::SUCCESS
    } else {
        for e in &report.errors {
            eprintln!("error: {e}");
        }
        eprintln!("the run is INVALID");
        ExitCode::FAILURE
    }
}
