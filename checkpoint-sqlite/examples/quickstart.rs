//! Quickstart: a support agent whose state lives in a SQLite file survives being killed.
//!
//! `cargo run -p checkpoint-sqlite --example quickstart` runs the whole story with real
//! processes on a fresh database file:
//!
//! 1. a worker process runs the agent, checkpointing every step, and is killed with SIGKILL
//!    in the middle of a step;
//! 2. a new worker process opens the file, continues from the last checkpoint (nothing is
//!    redone, nothing is lost) and stops where the agent asks a human for approval;
//! 3. a third process records the human's answer and finishes the run; the refund is issued
//!    exactly once, guarded by the idempotency ledger.
//!
//! The same steps by hand, killing the worker yourself (Ctrl-C or `kill -9`) at any moment:
//!
//! ```sh
//! cargo run -p checkpoint-sqlite --example quickstart -- run --db agent.db
//! cargo run -p checkpoint-sqlite --example quickstart -- run --db agent.db
//! cargo run -p checkpoint-sqlite --example quickstart -- approve --db agent.db
//! cargo run -p checkpoint-sqlite --example quickstart -- history --db agent.db
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use checkpoint_core::writes::{INTERRUPT, RESUME};
use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple, Claim, Error, ListOptions,
    PutOptions, PutWritesOptions, Saver, SaverExt, Source, TypedValue,
};
use checkpoint_sqlite::SqliteSaver;
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

const THREAD: &str = "support-chat-42";

#[derive(Parser)]
#[command(about = "A support agent that survives being killed, on a SQLite file")]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the agent from its last checkpoint until it needs a human (or is done).
    Run {
        #[arg(long)]
        db: PathBuf,
    },
    /// Answer the agent's pending question with "approved" and let it finish.
    Approve {
        #[arg(long)]
        db: PathBuf,
    },
    /// Print the thread's checkpoints, newest first.
    History {
        #[arg(long)]
        db: PathBuf,
    },
}

/// A chat message in LangChain's dict form, as LangGraph agents keep them.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Message {
    /// `human`, `ai` or `tool`.
    #[serde(rename = "type")]
    role: String,
    content: String,
    /// The tools an `ai` message calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ToolCall {
    id: String,
    name: String,
    args: serde_json::Value,
}

impl Message {
    fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    fn calls(mut self, id: &str, name: &str, args: serde_json::Value) -> Self {
        self.tool_calls.push(ToolCall {
            id: id.into(),
            name: name.into(),
            args,
        });
        self
    }

    fn answers(mut self, call: &str) -> Self {
        self.tool_call_id = Some(call.into());
        self
    }
}

/// The agent's script: message `i` of the conversation, before it needs a human.
fn script(i: usize) -> Option<Message> {
    Some(match i {
        0 => Message::new("human", "Please refund order #1001, it arrived broken."),
        1 => Message::new("ai", "Let me look up order #1001.").calls(
            "call_lookup",
            "lookup_order",
            serde_json::json!({"order": 1001}),
        ),
        2 => Message::new("tool", "order #1001: 89.90 EUR, delivered 2026-11-20")
            .answers("call_lookup"),
        3 => Message::new("ai", "The order qualifies for a refund of 89.90 EUR.").calls(
            REFUND_CALL,
            "issue_refund",
            serde_json::json!({"order": 1001, "amount": 89.90}),
        ),
        _ => return None,
    })
}

/// Messages in the script.
const SCRIPT_LEN: usize = 4;
/// The tool call that needs a human's approval.
const REFUND_CALL: &str = "call_refund";

fn say(text: impl AsRef<str>) {
    println!("[pid {}] {}", std::process::id(), text.as_ref());
}

/// Stores the next checkpoint of the thread: the messages so far plus `message`. A
/// compare-and-set put: it succeeds only if `head` is still the thread's latest checkpoint.
async fn append(
    saver: &SqliteSaver,
    head: Option<&CheckpointTuple>,
    message: Message,
) -> Result<CheckpointTuple, Error> {
    let (parent, mut checkpoint, step) = match head {
        Some(t) => (
            t.config.clone(),
            t.checkpoint.successor(),
            t.metadata.step().unwrap_or(-1) + 1,
        ),
        None => (CheckpointConfig::new(THREAD), Checkpoint::new(), -1),
    };
    let mut messages: Vec<Message> = checkpoint.get("messages")?.unwrap_or_default();
    messages.push(message);
    let version = checkpoint.set("messages", &messages)?;
    let source = if step < 0 {
        Source::Input
    } else {
        Source::Loop
    };
    let config = saver
        .put(
            &parent,
            checkpoint,
            CheckpointMetadata::for_step(source, step),
            [("messages".to_owned(), version)].into(),
            PutOptions::compare_and_set(),
        )
        .await?;
    Ok(saver.get_tuple(&config).await?.expect("just stored"))
}

fn messages(t: &CheckpointTuple) -> Result<Vec<Message>, Error> {
    Ok(t.checkpoint.get("messages")?.unwrap_or_default())
}

/// `run`: continue from the file's latest checkpoint, one slow step at a time.
async fn run(db: &Path) -> Result<(), Error> {
    let saver = SqliteSaver::open(db).await?;
    let mut head = saver.get_tuple(&CheckpointConfig::new(THREAD)).await?;
    match &head {
        Some(t) => say(format!(
            "opened {}: thread {THREAD} has {} messages; continuing from checkpoint {}",
            db.display(),
            messages(t)?.len(),
            t.checkpoint.id
        )),
        None => say(format!("opened {}: new thread {THREAD}", db.display())),
    }
    loop {
        let done = head
            .as_ref()
            .map_or(Ok(0), |t| messages(t).map(|m| m.len()))?;
        if let Some(t) = &head
            && t.pending_writes.iter().any(|w| w.channel == INTERRUPT)
        {
            say("the agent is waiting for a human: run `approve`");
            return Ok(());
        }
        let Some(message) = script(done) else {
            break;
        };
        let line = format!("{}: {}", message.role, message.content);
        // The agent "thinks" (a model call): a good moment to be killed.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let t = append(&saver, head.as_ref(), message).await?;
        say(format!("step {} saved: {line}", done + 1));
        head = Some(t);
    }
    // The script is done: ask for approval. The question is a pending write of the
    // checkpoint, stored before the question is shown to anyone.
    let t = head.expect("the script stored checkpoints");
    if messages(&t)?.len() == SCRIPT_LEN {
        saver
            .put_writes(
                &t.config,
                vec![(
                    INTERRUPT.into(),
                    TypedValue::msgpack("Refund 89.90 EUR for order #1001?")?,
                )],
                "ask-human",
                PutWritesOptions::new(),
            )
            .await?;
        say("asked a human: \"Refund 89.90 EUR for order #1001?\" (run `approve`)");
    } else {
        say("the thread is complete");
    }
    Ok(())
}

/// `approve`: answer the pending question, issue the refund once, finish.
async fn approve(db: &Path) -> Result<(), Error> {
    let saver = SqliteSaver::open(db).await?;
    let Some(head) = saver.get_tuple(&CheckpointConfig::new(THREAD)).await? else {
        say("no thread yet: run `run` first");
        return Ok(());
    };
    let Some(question) = head.pending_writes.iter().find(|w| w.channel == INTERRUPT) else {
        say("nothing is waiting for a human");
        return Ok(());
    };
    let question: String = question.value.decode()?;
    say(format!("the agent asks: {question:?} -> approved"));
    saver
        .put_writes(
            &head.config,
            vec![(RESUME.into(), TypedValue::msgpack("approved")?)],
            "ask-human",
            PutWritesOptions::new(),
        )
        .await?;
    // The side effect runs at most once, whatever crashes or retries: the ledger key is
    // claimed first, and a completed claim returns the recorded outcome instead.
    let key = format!("{THREAD}/refund/order-1001");
    let receipt: String = match saver.claim(&key, Duration::from_secs(60)).await? {
        Claim::Acquired { token } => {
            let receipt = "refund R-7731 issued".to_owned();
            saver
                .complete_claim(&key, token, TypedValue::msgpack(&receipt)?)
                .await?;
            receipt
        }
        Claim::Completed { outcome } => outcome.decode()?,
        Claim::Pending { .. } => {
            return Err(Error::invalid("another process is issuing the refund"));
        }
    };
    let tool = append(
        &saver,
        Some(&head),
        Message::new("tool", &receipt).answers(REFUND_CALL),
    )
    .await?;
    append(
        &saver,
        Some(&tool),
        Message::new("ai", &format!("Done: {receipt}.")),
    )
    .await?;
    say(format!("{receipt}; thread complete"));
    Ok(())
}

async fn history(db: &Path) -> Result<(), Error> {
    let saver = SqliteSaver::open(db).await?;
    let all = saver.list_all(ListOptions::thread(THREAD)).await?;
    say(format!(
        "{} checkpoints in {}, newest first:",
        all.len(),
        db.display()
    ));
    for t in all {
        let messages = messages(&t)?;
        let last = messages
            .last()
            .map(|m| format!("{}: {}", m.role, m.content));
        println!(
            "  step {:>2}  {}  {}",
            t.metadata.step().unwrap_or_default(),
            t.checkpoint.id,
            last.unwrap_or_default()
        );
    }
    Ok(())
}

/// Runs this example as a child process with `args`, printing its output as it comes; when
/// `kill_after` is given, kills it with SIGKILL right after it printed that many saved steps.
fn child(args: &[&str], kill_after: Option<usize>) -> std::io::Result<()> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut saved = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if line.contains(" saved: ") {
            saved += 1;
            if Some(saved) == kill_after {
                child.kill()?; // SIGKILL: no destructor, no flush, no goodbye
                child.wait()?;
                say(format!(
                    "killed pid {} with SIGKILL in the middle of its next step",
                    child.id()
                ));
                return Ok(());
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "child {args:?} failed: {status}"
        )));
    }
    Ok(())
}

fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("checkpoint-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("agent.db");
    let db_arg = db
        .to_str()
        .ok_or("the temporary directory's path is not UTF-8")?;
    say(format!("a fresh database: {}", db.display()));
    say("1. a worker runs the agent and is killed mid-run");
    child(&["run", "--db", db_arg], Some(2))?;
    say("2. a new worker opens the file and continues where the killed one stopped");
    child(&["run", "--db", db_arg], None)?;
    say("3. a human approves; the agent finishes");
    child(&["approve", "--db", db_arg], None)?;
    child(&["history", "--db", db_arg], None)?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match Cli::parse().command {
        None => demo(),
        Some(Cmd::Run { db }) => Ok(run(&db).await?),
        Some(Cmd::Approve { db }) => Ok(approve(&db).await?),
        Some(Cmd::History { db }) => Ok(history(&db).await?),
    }
}
