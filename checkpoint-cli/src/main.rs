//! `checkpoint`: inspect the threads a checkpoint store holds, and migrate them.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use checkpoint_cli::migrate::{self, MigrateOptions, Progress};
use checkpoint_cli::select::{self, Selection};
use checkpoint_cli::store::{SCHEMES, STORE_PARAMETERS, Store};
use checkpoint_cli::verify::{self, VerifyOptions};
use checkpoint_cli::{CliError, diff, inspect, prune};
use checkpoint_core::{Retry, RetryLayer, Saver};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

/// Inspect, verify, repair and prune the agent threads stored by any checkpoint-rs backend
/// (and LangGraph's PostgreSQL tables, which are ours), and migrate them between backends.
#[derive(Debug, Parser)]
#[command(name = "checkpoint", version, about, after_help = format!("Store URLs: {SCHEMES}\nStore options in the URL: {STORE_PARAMETERS}"))]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Make a store call that failed with a transient error (a lost connection, a server
    /// restarting or failing over) again, up to this many times, after 100 ms and then twice
    /// as long each time, up to 3.2 s (with jitter); 0 fails at once; at most 100. Every
    /// call is safe to repeat: a migration's writes are idempotent.
    #[arg(long, global = true, value_name = "N", default_value_t = 6,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    retries: u8,
}

impl Cli {
    /// `saver` behind the `--retries` policy.
    fn retrying(&self, saver: Arc<dyn Saver>) -> Arc<dyn Saver> {
        if self.retries == 0 {
            return saver;
        }
        Arc::new(Retry::new(
            saver,
            RetryLayer::new().max_retries(usize::from(self.retries)),
        ))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Thread ids with their number of checkpoints and latest time, most recent first.
    Threads {
        /// The store.
        url: String,
        #[command(flatten)]
        select: Select,
        /// Show at most this many threads.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// The parent chain of a thread, one line per checkpoint, newest first.
    History(At),
    /// One checkpoint: metadata, every channel value decoded, pending writes.
    Show(At),
    /// What changed between two checkpoints of a thread: channels, versions, and for
    /// message lists the messages added, removed and changed.
    Diff {
        /// The store.
        url: String,
        /// The thread id.
        thread: String,
        /// The earlier checkpoint id.
        from: String,
        /// The later checkpoint id.
        to: String,
        /// The namespace (subgraph); the root by default.
        #[arg(long, default_value = "")]
        ns: String,
    },
    /// Integrity scan: parent chains, undecodable values, orphan tool calls. Exit status 1
    /// when anything is found.
    Verify {
        /// The store.
        url: String,
        /// Only these threads (all by default).
        #[arg(value_name = "THREAD")]
        thread_ids: Vec<String>,
        #[command(flatten)]
        select: Select,
        /// The channel holding the conversation.
        #[arg(long, default_value = "messages")]
        channel: String,
        /// Threads scanned at once (default: the number of cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// What the load-time repair (SanitizeOnLoad) changes in a thread's latest message list,
    /// as a diff; with --apply, store the repaired state as a new checkpoint (history is
    /// never rewritten).
    Repair {
        /// The store.
        url: String,
        /// The thread id.
        thread: String,
        /// The namespace (subgraph); the root by default.
        #[arg(long, default_value = "")]
        ns: String,
        /// The channel holding the conversation.
        #[arg(long, default_value = "messages")]
        channel: String,
        /// Write the repaired state as a new checkpoint.
        #[arg(long)]
        apply: bool,
    },
    /// Delete old checkpoints: keep the latest N of each namespace of each selected thread
    /// (all threads by default), with what their delta channels need.
    Prune {
        /// The store.
        url: String,
        /// Checkpoints kept per namespace.
        #[arg(long, value_name = "N")]
        keep_last: usize,
        #[command(flatten)]
        select: Select,
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
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
        #[command(flatten)]
        select: Select,
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

/// Which threads: all, unless some of these are given.
#[derive(Debug, Args)]
struct Select {
    /// Only this thread (repeatable).
    #[arg(long = "thread", value_name = "ID")]
    thread: Vec<String>,
    /// Only threads whose id matches this glob (repeatable): `user-*`, `run-202?`,
    /// `{a,b}-*`; `*` matches any characters, `/` and `:` included.
    #[arg(long = "threads", value_name = "GLOB")]
    threads: Vec<String>,
    /// Only threads whose latest checkpoint is at or after TIME: RFC 3339
    /// (2026-11-24T08:00:00Z), a date (2026-11-24, UTC) or an age (90s, 30m, 12h, 7d).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
}

impl Select {
    fn selection(&self, more_ids: &[String]) -> Result<Selection, CliError> {
        let mut ids = self.thread.clone();
        ids.extend(more_ids.iter().cloned());
        Selection::new(ids, self.threads.clone(), self.since.as_deref())
    }
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
            Command::Threads { url, .. }
            | Command::Diff { url, .. }
            | Command::Verify { url, .. }
            | Command::Repair { url, .. }
            | Command::Prune { url, .. } => url,
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
async fn report_progress(
    label: &'static str,
    progress: Arc<Progress>,
    mut done: tokio::sync::oneshot::Receiver<()>,
) {
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
                    eprintln!("{label}: {}", line(&progress));
                }
            }
        }
    }
}

async fn run_migrate(cli: &Cli) -> Result<(String, bool), CliError> {
    let Command::Migrate {
        from,
        to,
        select,
        jobs,
        verify,
        dry_run,
    } = &cli.command
    else {
        unreachable!("called for migrate only");
    };
    let source = Store::parse(from)?;
    let target = Store::parse(to)?;
    // Options are checked before any store is opened.
    let selection = select.selection(&[])?;
    if source == target {
        return Err(CliError::Url("--from and --to name the same store".into()));
    }
    let jobs = jobs.unwrap_or_else(cores).max(1);
    // Each job reads one call at a time and writes a put with its pending-write calls at
    // once (three for a LangGraph step); servers limit their connections (PostgreSQL: 100
    // by default), so pools stay at or below MAX_POOL.
    let pool = |per_job: usize| Some(pool_size(jobs * per_job + 2));
    let source = cli.retrying(source.open_scannable(pool(1)).await?.0);
    let target = if *dry_run {
        None
    } else {
        Some(cli.retrying(target.open_for_writing(pool(3)).await?))
    };
    let options = MigrateOptions {
        selection,
        jobs,
        verify: *verify,
        dry_run: *dry_run,
    };
    let progress = Arc::new(Progress::default());
    let (done, finished) = tokio::sync::oneshot::channel();
    let reporter = tokio::spawn(report_progress("migrate", progress.clone(), finished));
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

/// The largest connection pool a command opens to one store.
const MAX_POOL: usize = 32;

fn pool_size(wanted: usize) -> u32 {
    u32::try_from(wanted.clamp(1, MAX_POOL)).unwrap_or(1)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

async fn run_verify(cli: &Cli) -> Result<(String, bool), CliError> {
    let Command::Verify {
        url,
        thread_ids,
        select,
        channel,
        jobs,
    } = &cli.command
    else {
        unreachable!("called for verify only");
    };
    let selection = select.selection(thread_ids)?;
    let jobs = jobs.unwrap_or_else(cores).max(1);
    let pool = Some(pool_size(jobs + 2));
    let (saver, scan) = Store::parse(url)?.open_scannable(pool).await?;
    let saver = cli.retrying(saver);
    let threads = select::select_ids(&*saver, &selection).await?;
    let options = VerifyOptions {
        channel: channel.clone(),
        jobs,
        ..VerifyOptions::default()
    };
    let progress = Arc::new(Progress::default());
    let (done, finished) = tokio::sync::oneshot::channel();
    let reporter = tokio::spawn(report_progress("verify", progress.clone(), finished));
    let outcome = verify::verify(saver, Some(scan), threads, &options, progress).await;
    let _ = done.send(());
    let _ = reporter.await;
    let (doc, issues) = outcome?;
    let out = if cli.json {
        json(&doc)
    } else {
        verify::report_text(&doc)
    };
    Ok((out, issues.is_empty()))
}

/// Runs the command: its output, and whether it found what it was asked to check intact.
async fn run(cli: Cli) -> Result<(String, bool), CliError> {
    match &cli.command {
        Command::Migrate { .. } => return run_migrate(&cli).await,
        Command::Verify { .. } => return run_verify(&cli).await,
        _ => {}
    }
    // Options are checked before the store is opened.
    let selection = match &cli.command {
        Command::Threads { select, .. } | Command::Prune { select, .. } => {
            Some(select.selection(&[])?)
        }
        _ => None,
    };
    let store = Store::parse(cli.command.url())?;
    let writes = match &cli.command {
        Command::Repair { apply, .. } => *apply,
        Command::Prune { dry_run, .. } => !*dry_run,
        _ => false,
    };
    let saver = cli.retrying(if writes {
        store.open().await?
    } else {
        store.open_to_read().await?
    });
    let text = |doc: &serde_json::Value, human: fn(&serde_json::Value) -> String| {
        if cli.json { json(doc) } else { human(doc) }
    };
    let out = match &cli.command {
        Command::Threads { limit, .. } => {
            let selection = selection.unwrap_or_default();
            let doc = inspect::threads(&*saver, &selection, *limit).await?;
            text(&doc, inspect::threads_text)
        }
        Command::History(at) => {
            let doc = inspect::history(&*saver, &at.thread, &at.ns, at.id.as_deref()).await?;
            text(&doc, inspect::history_text)
        }
        Command::Show(at) => {
            let (doc, tuple) = inspect::show(&*saver, &at.thread, &at.ns, at.id.as_deref()).await?;
            if cli.json {
                json(&doc)
            } else {
                inspect::show_text(&doc, &tuple)
            }
        }
        Command::Diff {
            thread,
            from,
            to,
            ns,
            ..
        } => {
            let doc = diff::diff(&*saver, thread, ns, from, to).await?;
            text(&doc, diff::diff_text)
        }
        Command::Repair {
            thread,
            ns,
            channel,
            apply,
            ..
        } => {
            let doc = diff::repair(saver.clone(), thread, ns, channel, *apply).await?;
            text(&doc, diff::repair_text)
        }
        Command::Prune {
            keep_last, dry_run, ..
        } => {
            let selection = selection.unwrap_or_default();
            let threads = select::select(&*saver, &selection).await?;
            let doc = prune::prune(&*saver, &threads, *keep_last, *dry_run).await?;
            text(&doc, prune::report_text)
        }
        Command::Migrate { .. } | Command::Verify { .. } => unreachable!("handled above"),
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
            if let CliError::Saver(e) = &e {
                for cause in e.causes() {
                    eprintln!("  caused by: {cause}");
                }
            }
            ExitCode::from(e.exit_code())
        }
    }
}
