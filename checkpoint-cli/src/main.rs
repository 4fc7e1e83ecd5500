//! `checkpoint`: inspect the threads a checkpoint store holds.

use std::process::ExitCode;

use checkpoint_cli::store::{SCHEMES, Store};
use checkpoint_cli::{CliError, inspect};
use clap::{Args, Parser, Subcommand};

/// Inspect the agent threads stored by any checkpoint-rs backend (and LangGraph's PostgreSQL
/// tables, which are ours).
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
        }
    }
}

async fn run(cli: Cli) -> Result<String, CliError> {
    let saver = Store::parse(cli.command.url())?.open().await?;
    let saver = &*saver;
    let json =
        |doc: &serde_json::Value| serde_json::to_string_pretty(doc).unwrap_or_default() + "\n";
    Ok(match &cli.command {
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
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
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
