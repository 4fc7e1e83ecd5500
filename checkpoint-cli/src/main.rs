//! `checkpoint`: inspect the threads a checkpoint store holds, and migrate them.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use checkpoint_cli::migrate::{self, MigrateOptions, Progress};
use checkpoint_cli::store::{SCHEMES, Store};
use checkpoint_cli::{CliError, inspect};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

/// Inspect the agent threads stored by any checkpoint-rs backend (and LangGraph's PostgreSQL
/// tables, which are ours), and migrate them between backends.
#[derive(Debug, Parser)]
#[command(name = "checkpoint", version, about, after_help = format!("Store URLs: {SCHEMES}"))]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Thread ids with their number of checkpoints and latest time, most recent first.
    Threads {
        /// The store.
        url: String,
        /// Show at most this many threads.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// The parent chain of a thread, one line per checkpoint, newest first.
    History(At),
    /// One checkpoint: metadata, every channel value decoded, pending writes.
    Show(At),
    /// Copy threads from one store to another, exactly (ids, parents, metadata, values byte
    /// for byte, pending writes). Streaming, parallel across threads, and resumable: run it
    /// again after an interruption and it completes the copy.
    Migrate {
        /// The store to read.
        #[arg(long)]
        from: String,
        /// The store to write (created or set up when needed).
        #[arg(long)]
        to: String,
        /// Copy only this thread (repeatable); all threads by default.
        #[arg(long = "thread", value_name = "ID")]
        threads: Vec<String>,
        /// Threads copied at once (default: the number of cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Re-read both stores and compare every copied checkpoint; differences make the
        /// exit status 1.
        #[arg(long)]
        verify: bool,
        /// Count what would be copied; write nothing (the target is not even opened).
        #[arg(long)]
        dry_run: bool,
    },
}

/// A store, a thread, and a checkpoint in it.
#[derive(Debug, Args)]
struct At {
    /// The store.
    url: String,
    /// The thread id.
    thread: String,
    /// The namespace (subgraph); the root by default.
    #[arg(long, default_value = "")]
    ns: String,
    /// This checkpoint (for history: the chain from it) instead of the latest.
    #[arg(long)]
    id: Option<String>,
}

impl Command {
    fn url(&self) -> &str {
        match self {
            Command::Threads { url, .. } => url,
            Command::History(at) | Command::Show(at) => &at.url,
            Command::Migrate { from, .. } => from,
        }
    }
}

fn json(doc: &serde_json::Value) -> String {
    serde_json::to_string_pretty(doc).unwrap_or_default() + "\n"
}

/// Reports a migration's progress on stderr until `done` fires: a progress bar on a
/// terminal, otherwise a log line every 5 seconds.
async fn report_progress(progress: Arc<Progress>, mut done: tokio::sync::oneshot::Receiver<()>) {
    let line = |p: &Progress| {
        format!(
            "{}/{} threads, {} checkpoints, {} pending writes",
            p.threads.load(Ordering::Relaxed),
            p.total_threads.load(Ordering::Relaxed),
            p.checkpoints.load(Ordering::Relaxed),
            p.writes.load(Ordering::Relaxed),
        )
    };
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(0).with_style(
            ProgressStyle::with_template(
                "[{elapsed_precise}] {bar:20} {pos}/{len} threads, {msg} (ETA {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let started = std::time::Instant::now();
        let update = |bar: &ProgressBar| {
            let checkpoints = progress.checkpoints.load(Ordering::Relaxed);
            let rate = checkpoints as f64 / started.elapsed().as_secs_f64().max(1e-3);
            bar.set_length(progress.total_threads.load(Ordering::Relaxed));
            bar.set_position(progress.threads.load(Ordering::Relaxed));
            bar.set_message(format!("{checkpoints} checkpoints, {rate:.0}/s"));
        };
        loop {
            update(&bar);
            tokio::select! {
                _ = &mut done => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        // The final state stays on the screen, above the report.
        update(&bar);
        bar.finish();
        eprintln!();
    } else {
        loop {
            tokio::select! {
                _ = &mut done => break,
                _ = tokio::time::sleep(Duration::from_secs(5)) => {
                    eprintln!("migrate: {}", line(&progress));
                }
            }
        }
    }
}

async fn run_migrate(cli: &Cli) -> Result<(String, bool), CliError> {
    let Command::Migrate {
        from,
        to,
        threads,
        jobs,
        verify,
        dry_run,
    } = &cli.command
    else {
        unreachable!("called for migrate only");
    };
    let source = Store::parse(from)?;
    let target = Store::parse(to)?;
    if source == target {
        return Err(CliError::Url("--from and --to name the same store".into()));
    }
    let source = source.open().await?;
    let target = if *dry_run {
        None
    } else {
        Some(target.open_for_writing().await?)
    };
    let options = MigrateOptions {
        threads: threads.clone(),
        jobs: jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        verify: *verify,
        dry_run: *dry_run,
    };
    let progress = Arc::new(Progress::default());
    let (done, finished) = tokio::sync::oneshot::channel();
    let reporter = tokio::spawn(report_progress(progress.clone(), finished));
    let outcome = migrate::migrate(source, target, &options, progress).await;
    let _ = done.send(());
    let _ = reporter.await;
    let (doc, diffs) = outcome?;
    let out = if cli.json {
        json(&doc)
    } else {
        migrate::report_text(&doc)
    };
    Ok((out, diffs.is_empty()))
}

/// Runs the command: its output, and whether it found what it was asked to check intact.
async fn run(cli: Cli) -> Result<(String, bool), CliError> {
    if matches!(cli.command, Command::Migrate { .. }) {
        return run_migrate(&cli).await;
    }
    let saver = Store::parse(cli.command.url())?.open().await?;
    let saver = &*saver;
    let out = match &cli.command {
        Command::Threads { limit, .. } => {
            let doc = inspect::threads(saver, *limit).await?;
            if cli.json {
                json(&doc)
            } else {
                inspect::threads_text(&doc)
            }
        }
        Command::History(at) => {
            let doc = inspect::history(saver, &at.thread, &at.ns, at.id.as_deref()).await?;
            if cli.json {
                json(&doc)
            } else {
                inspect::history_text(&doc)
            }
        }
        Command::Show(at) => {
            let (doc, tuple) = inspect::show(saver, &at.thread, &at.ns, at.id.as_deref()).await?;
            if cli.json {
                json(&doc)
            } else {
                inspect::show_text(&doc, &tuple)
            }
        }
        Command::Migrate { .. } => unreachable!("handled above"),
    };
    Ok((out, true))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok((out, intact)) => {
            print!("{out}");
            if intact {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::from(e.exit_code())
        }
    }
}
