//! `migrate-bench`: the `checkpoint migrate` and `checkpoint verify` figures of
//! `checkpoint-cli` (throughput and peak RSS), on a W1-shaped data set of `T` threads × `S`
//! steps generated with the workload's payload code, PostgreSQL → Redis and back.
//!
//! The `checkpoint` binary runs as a child process, as a user runs it; its peak RSS is its
//! `VmHWM`, polled from `/proc/<pid>/status` every 5 ms (the last value read before it
//! exits). Build both binaries in release mode first:
//!
//! ```sh
//! cargo build --release -p checkpoint-cli -p checkpoint-bench --features postgres,redis
//! target/release/migrate-bench --threads 1000 --threads 10000 --out bench-results/migrate.json
//! ```

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use checkpoint_bench::payload::ThreadPayload;
use checkpoint_bench::rss::parse_kb_field;
use checkpoint_bench::stats::Latencies;
use checkpoint_bench::validate::Validation;
use checkpoint_bench::workload::run_step;
use checkpoint_core::Saver;
use checkpoint_postgres::PostgresSaver;
use checkpoint_postgres::sqlx::{self, PgPool};
use checkpoint_redis::RedisSaver;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

/// Measures `checkpoint migrate` (PostgreSQL → Redis, Redis → PostgreSQL) and `checkpoint
/// verify` on W1-shaped data sets; prints one JSON report.
#[derive(Debug, Parser)]
#[command(name = "migrate-bench", version)]
struct Cli {
    /// PostgreSQL server (its `postgres` database); the bench creates and drops the
    /// databases `cpmig_src` and `cpmig_dst`.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    postgres: String,
    /// Redis server; the data set goes under the default key prefix (`checkpoint:`), which
    /// is purged before and after.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Data set sizes, in threads (repeatable).
    #[arg(long = "threads", default_values_t = [1000usize])]
    threads: Vec<usize>,
    /// Steps per thread.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Payload seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// `--jobs` of the measured commands.
    #[arg(long, default_value_t = 16)]
    jobs: usize,
    /// The `checkpoint` binary (default: next to this one).
    #[arg(long)]
    checkpoint_bin: Option<PathBuf>,
    /// Also write the report here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Leave the last data set in place (databases `cpmig_src`, `cpmig_dst`, the Redis keys)
    /// instead of dropping it.
    #[arg(long)]
    keep: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn database_url(server: &str, db: &str) -> String {
    let base = server.rsplit_once('/').map_or(server, |(b, _)| b);
    format!("{base}/{db}")
}

async fn recreate_database(admin: &PgPool, db: &str) -> Result<(), BoxError> {
    sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .execute(admin)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(admin)
        .await?;
    Ok(())
}

/// Writes `threads` W1 threads of `steps` steps (16 threads at a time, steps in order).
async fn generate(
    saver: &dyn Saver,
    seed: u64,
    threads: usize,
    steps: usize,
) -> Result<u64, BoxError> {
    let written = futures::stream::iter(0..threads)
        .map(|i| async move {
            let payload = ThreadPayload::generate(seed, i as u64, format!("thread-{i:05}"), steps)?;
            let (mut put, mut put_writes) = (Latencies::new(), Latencies::new());
            let mut validation = Validation::default();
            let mut parent: Option<String> = None;
            for n in 0..steps {
                let id = run_step(
                    saver,
                    &payload,
                    n,
                    parent.as_deref(),
                    &mut put,
                    &mut put_writes,
                    &mut validation,
                )
                .await
                .map_err(|e| e.to_string())?;
                parent = Some(id);
            }
            Ok::<u64, BoxError>(steps as u64)
        })
        .buffer_unordered(16)
        .try_fold(0u64, |a, n| async move { Ok(a + n) })
        .await?;
    Ok(written)
}

/// Runs the `checkpoint` binary with `args` and `--json`; returns its report, wall time and
/// peak RSS.
fn run_checkpoint(bin: &PathBuf, args: &[&str]) -> Result<Value, BoxError> {
    let started = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(hwm) = parse_kb_field(&text, "VmHWM")
        {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let wall = started.elapsed().as_secs_f64();
    let output = child.wait_with_output()?;
    if !status.success() {
        return Err(format!(
            "checkpoint {args:?} failed ({status}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let report: Value = serde_json::from_slice(&output.stdout)?;
    let checkpoints = report["checkpoints"].as_u64().unwrap_or_default();
    Ok(json!({
        "command": args.first(),
        "checkpoints": checkpoints,
        "wall_seconds": wall,
        "checkpoints_per_second": checkpoints as f64 / wall,
        "peak_rss_bytes": peak,
        "report": report,
    }))
}

async fn run(cli: &Cli) -> Result<Value, BoxError> {
    let bin = match &cli.checkpoint_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?
            .parent()
            .ok_or("no directory")?
            .join("checkpoint"),
    };
    if !bin.is_file() {
        return Err(format!(
            "{} not found: build it with cargo build --release -p checkpoint-cli",
            bin.display()
        )
        .into());
    }
    let admin = PgPool::connect(&cli.postgres).await?;
    let redis = RedisSaver::connect(cli.redis.clone()).await?;
    let (src, dst) = (
        database_url(&cli.postgres, "cpmig_src"),
        database_url(&cli.postgres, "cpmig_dst"),
    );
    let jobs = cli.jobs.to_string();
    let mut runs = Vec::new();
    for &threads in &cli.threads {
        eprintln!("migrate-bench: {threads} threads x {} steps", cli.steps);
        recreate_database(&admin, "cpmig_src").await?;
        recreate_database(&admin, "cpmig_dst").await?;
        redis.purge().await?;
        let source = PostgresSaver::builder(&src)?
            .max_connections(16)
            .connect()
            .await?;
        source.setup().await?;
        let t0 = Instant::now();
        let written = generate(&source, cli.seed, threads, cli.steps).await?;
        let generated = t0.elapsed().as_secs_f64();
        drop(source);
        eprintln!("  generated {written} checkpoints in {generated:.1} s");
        let to_redis = run_checkpoint(
            &bin,
            &[
                "migrate", "--from", &src, "--to", &cli.redis, "--jobs", &jobs,
            ],
        )?;
        eprintln!(
            "  postgres -> redis: {:.0} checkpoints/s",
            to_redis["checkpoints_per_second"]
                .as_f64()
                .unwrap_or_default()
        );
        let to_pg = run_checkpoint(
            &bin,
            &[
                "migrate", "--from", &cli.redis, "--to", &dst, "--jobs", &jobs,
            ],
        )?;
        eprintln!(
            "  redis -> postgres: {:.0} checkpoints/s",
            to_pg["checkpoints_per_second"].as_f64().unwrap_or_default()
        );
        let verify = run_checkpoint(&bin, &["verify", &dst, "--jobs", &jobs])?;
        eprintln!(
            "  verify postgres: {:.0} checkpoints/s",
            verify["checkpoints_per_second"]
                .as_f64()
                .unwrap_or_default()
        );
        for (what, r) in [
            ("postgres -> redis", &to_redis),
            ("redis -> postgres", &to_pg),
            ("verify", &verify),
        ] {
            if r["checkpoints"].as_u64() != Some(written) {
                return Err(format!(
                    "{what} saw {} checkpoints, {written} written",
                    r["checkpoints"]
                )
                .into());
            }
        }
        if verify["report"]["intact"] != true {
            return Err(
                format!("verify found issues: {}", verify["report"]["issue_counts"]).into(),
            );
        }
        let strip = |mut v: Value| {
            if let Some(o) = v.as_object_mut() {
                o.remove("report");
            }
            v
        };
        runs.push(json!({
            "threads": threads,
            "steps": cli.steps,
            "checkpoints": written,
            "generate_seconds": generated,
            "postgres_to_redis": strip(to_redis),
            "redis_to_postgres": strip(to_pg),
            "verify_postgres": strip(verify),
        }));
    }
    if cli.keep {
        return Ok(report(cli, runs));
    }
    redis.purge().await?;
    for db in ["cpmig_src", "cpmig_dst"] {
        sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
            .execute(&admin)
            .await?;
    }
    Ok(report(cli, runs))
}

fn report(cli: &Cli, runs: Vec<Value>) -> Value {
    json!({
        "bench": "migrate",
        "seed": cli.seed,
        "jobs": cli.jobs,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "runs": runs,
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(report) => {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            println!("{text}");
            if let Some(path) = &cli.out {
                if let Err(e) = std::fs::write(path, format!("{text}\n")) {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return ExitCode::from(2);
                }
                eprintln!("report written to {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
