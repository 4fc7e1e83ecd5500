//! A kill -9 harness for savers that persist: a writer process is killed with SIGKILL at
//! random moments, many times, and after each kill the store must hold everything the
//! writer was told was stored, complete, and nothing torn.
//!
//! The writer runs in a child process: the test binary itself, started again with one
//! ignored test selected. Two tests make a crash test:
//!
//! ```ignore
//! use checkpoint_conformance::crash::{self, CrashTest};
//!
//! /// The child: opens the saver the parent named (here through an environment variable).
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! #[ignore = "entry point of the crash test's child process"]
//! async fn crash_child() {
//!     let path = std::env::var("CRASH_DB").expect("run by the crash test");
//!     crash::child(Arc::new(MySaver::open(&path).await.unwrap())).await;
//! }
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn killed_writers_leave_only_complete_checkpoints() {
//!     let report = CrashTest::new("crash::crash_child")
//!         .kills(60)
//!         .env("CRASH_DB", &path)
//!         .run(|| async { Ok(Arc::new(MySaver::open(&path).await?) as Arc<dyn Saver>) })
//!         .await
//!         .unwrap();
//!     eprintln!("{report}");
//! }
//! ```
//!
//! The child continues [`THREADS`] from their heads with compare-and-set puts, each
//! checkpoint carrying three values that all name its step (one of 48 KB), then a
//! `put_writes` of [`WRITES_PER_CALL`] writes, and prints a line after every acknowledged
//! call. After each kill the parent opens a fresh saver on the same store and checks that
//! every call acknowledged since the previous kill loads completely, that the newest
//! checkpoints of each thread are whole (their values all of their own step, their writes
//! all of one call or none) and that the parent chains are unbroken; after the last kill it
//! checks everything acknowledged in any run, and every checkpoint.

use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use checkpoint_core::{
    BoxError, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple, ListOptions,
    PutOptions, PutWritesOptions, Saver, SaverExt, TypedValue,
};

/// The threads the child writes, one task each.
pub const THREADS: [&str; 2] = ["crash-a", "crash-b"];
/// Writes per `put_writes` call.
pub const WRITES_PER_CALL: usize = 3;
/// Bytes of the large value of every checkpoint.
const BIG: usize = 48 * 1024;

/// The child's work: writes [`THREADS`] through `saver` until the process is killed.
pub async fn child(saver: Arc<dyn Saver>) {
    println!("ready");
    let _ = std::io::stdout().flush();
    let tasks: Vec<_> = THREADS
        .into_iter()
        .map(|thread| tokio::spawn(write_forever(Arc::clone(&saver), thread)))
        .collect();
    for task in tasks {
        if let Err(e) = task.await {
            panic!("a crash-test writer failed: {e}");
        }
    }
}

/// Continues `thread` from its head forever, printing `put <thread> <id>` and
/// `writes <thread> <id>` after each acknowledged call.
async fn write_forever(saver: Arc<dyn Saver>, thread: &'static str) {
    let mut head = saver
        .get_tuple(&CheckpointConfig::new(thread))
        .await
        .expect("read the head");
    loop {
        let (config, step) = put_step(&*saver, thread, head.as_ref()).await.expect("put");
        let id = config.checkpoint_id.clone().expect("an id");
        println!("put {thread} {id}");
        writes_step(&*saver, &config, step)
            .await
            .expect("put_writes");
        println!("writes {thread} {id}");
        let _ = std::io::stdout().flush();
        head = saver.get_tuple(&config).await.expect("read back");
    }
}

/// Puts the next checkpoint of `thread` after `head` (compare-and-set): three values that
/// all name its step, one of them large. Returns its address and step.
pub(crate) async fn put_step(
    saver: &dyn Saver,
    thread: &str,
    head: Option<&CheckpointTuple>,
) -> checkpoint_core::Result<(CheckpointConfig, u64)> {
    let (parent, mut next) = match head {
        Some(t) => (t.config.clone(), t.checkpoint.successor()),
        None => (CheckpointConfig::new(thread), Checkpoint::new()),
    };
    let step = next.get::<u64>("step")?.map_or(0, |s| s + 1);
    // Every value names the step it belongs to, so a mix of steps would show.
    let versions = [
        ("step".to_owned(), next.set("step", &step)?),
        (
            "big".to_owned(),
            next.set_typed("big", TypedValue::from_bytes(vec![byte_of(step); BIG])),
        ),
        (
            "label".to_owned(),
            next.set("label", &format!("{thread}-{step}"))?,
        ),
    ]
    .into();
    let metadata = CheckpointMetadata::new().with("step", step);
    let config = saver
        .put(
            &parent,
            next,
            metadata,
            versions,
            PutOptions::compare_and_set(),
        )
        .await?;
    Ok((config, step))
}

/// Records [`WRITES_PER_CALL`] writes naming `step` against `config`, in one call.
pub(crate) async fn writes_step(
    saver: &dyn Saver,
    config: &CheckpointConfig,
    step: u64,
) -> checkpoint_core::Result<()> {
    let writes = (0..WRITES_PER_CALL)
        .map(|i| Ok((format!("w{i}"), TypedValue::msgpack(&step)?)))
        .collect::<checkpoint_core::Result<Vec<_>>>()?;
    saver
        .put_writes(config, writes, "task", PutWritesOptions::new())
        .await
}

fn byte_of(step: u64) -> u8 {
    u8::try_from(step % 251).unwrap_or(0)
}

/// A crash test: which child to start, how often to kill it, and what to check.
#[derive(Clone, Debug)]
pub struct CrashTest {
    child_test: String,
    kills: usize,
    recent: usize,
    window_ms: (u64, u64),
    env: Vec<(OsString, OsString)>,
}

/// What a crash test saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CrashReport {
    /// Times the child was killed.
    pub kills: usize,
    /// Puts the child acknowledged, over all runs.
    pub acknowledged_puts: usize,
    /// `put_writes` calls the child acknowledged, over all runs.
    pub acknowledged_writes: usize,
    /// The seed of the kill moments.
    pub seed: u64,
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash test: {} kills, {} acknowledged puts, {} acknowledged put_writes (seed {})",
            self.kills, self.acknowledged_puts, self.acknowledged_writes, self.seed
        )
    }
}

impl CrashTest {
    /// A test whose child is the test `child_test` of the current test binary (its full
    /// path, e.g. `crash::crash_child`); 50 kills by default.
    pub fn new(child_test: impl Into<String>) -> Self {
        Self {
            child_test: child_test.into(),
            kills: 50,
            recent: 8,
            window_ms: (5, 120),
            env: Vec::new(),
        }
    }

    /// How many times to kill the child.
    pub fn kills(mut self, n: usize) -> Self {
        self.kills = n;
        self
    }

    /// How long after the child is ready it may be killed (default 5 to 120 ms).
    pub fn kill_window(mut self, from: Duration, to: Duration) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.window_ms = (ms(from), ms(to).max(ms(from) + 1));
        self
    }

    /// An environment variable for the child (how it finds the store).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs the test: starts and kills the child [`kills`](Self::kills) times, checking
    /// the store after each kill with a saver from `open`. An `Err` says what was missing
    /// or torn, and after which kill.
    pub async fn run<F, Fut>(self, mut open: F) -> Result<CrashReport, String>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Arc<dyn Saver>, BoxError>>,
    {
        let exe = std::env::current_exe().map_err(|e| format!("the test binary: {e}"))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(42, |d| u64::from(d.subsec_nanos()) ^ d.as_secs());
        let mut rng = seed;
        let mut puts: Vec<(String, String)> = Vec::new();
        let mut writes: Vec<(String, String)> = Vec::new();
        let mut checked = (0, 0);
        for kill in 1..=self.kills {
            let mut child = Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    &self.child_test,
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting the child: {e}"))?;
            let stdout = child.stdout.take().ok_or("the child has no stdout")?;
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn(move || {
                let mut lines = Vec::new();
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    // The test harness prints the test's name on the same line.
                    if line.ends_with("ready") {
                        let _ = ready_tx.send(());
                    } else {
                        lines.push(line);
                    }
                }
                lines
            });
            if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "kill {kill}: the child never became ready (is {:?} its test name?)",
                    self.child_test
                ));
            }
            let (from, to) = self.window_ms;
            let delay = from + next_random(&mut rng) % (to - from);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            child.kill().map_err(|e| format!("kill {kill}: {e}"))?; // SIGKILL
            let _ = child.wait();
            for line in reader.join().map_err(|_| "the reader thread panicked")? {
                let mut parts = line.split(' ');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("put"), Some(thread), Some(id)) => {
                        puts.push((thread.to_owned(), id.to_owned()));
                    }
                    (Some("writes"), Some(thread), Some(id)) => {
                        writes.push((thread.to_owned(), id.to_owned()));
                    }
                    _ => {}
                }
            }
            let last = kill == self.kills;
            let saver = open()
                .await
                .map_err(|e| format!("kill {kill}: reopening the store: {e}"))?;
            let (new_puts, new_writes, recent) = if last {
                (&puts[..], &writes[..], None)
            } else {
                (&puts[checked.0..], &writes[checked.1..], Some(self.recent))
            };
            verify(&*saver, new_puts, new_writes, recent)
                .await
                .map_err(|e| format!("after kill {kill} (seed {seed}): {e}"))?;
            checked = (puts.len(), writes.len());
        }
        // A child that never gets to write makes the test vacuous. A busy machine may kill
        // many runs before their first put (the kill window starts when the child is
        // connected), so the bar is one acknowledged put per four runs.
        if puts.len() * 4 < self.kills {
            return Err(format!(
                "the child made too little progress: {} puts in {} runs",
                puts.len(),
                self.kills
            ));
        }
        Ok(CrashReport {
            kills: self.kills,
            acknowledged_puts: puts.len(),
            acknowledged_writes: writes.len(),
            seed,
        })
    }
}

/// SplitMix64: the kill moments, reproducible from the printed seed.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Every `(thread, id)` of `puts` loads, every one of `writes` has all its writes, and
/// nothing torn is visible among each thread's newest `recent` checkpoints (`None`: among
/// all of them, and the chains go back to a first checkpoint without a parent).
pub async fn verify(
    saver: &dyn Saver,
    puts: &[(String, String)],
    writes: &[(String, String)],
    recent: Option<usize>,
) -> Result<(), String> {
    let get = |thread: &str, id: &str| {
        let config = CheckpointConfig::new(thread).with_checkpoint_id(id);
        async move { saver.get_tuple(&config).await.map_err(|e| e.to_string()) }
    };
    for (thread, id) in puts {
        if get(thread, id).await?.is_none() {
            return Err(format!("acknowledged put {thread}/{id} is missing"));
        }
    }
    for (thread, id) in writes {
        let t = get(thread, id)
            .await?
            .ok_or(format!("{thread}/{id} is missing"))?;
        if t.pending_writes.len() != WRITES_PER_CALL {
            return Err(format!(
                "acknowledged writes of {thread}/{id}: {} of {WRITES_PER_CALL}",
                t.pending_writes.len()
            ));
        }
    }
    for thread in THREADS {
        let mut options = ListOptions::thread(thread);
        options.limit = recent;
        let all = saver.list_all(options).await.map_err(|e| e.to_string())?;
        for t in &all {
            let id = &t.checkpoint.id;
            let step: u64 = t.checkpoint.require("step").map_err(|e| e.to_string())?;
            let label: String = t.checkpoint.require("label").map_err(|e| e.to_string())?;
            if label != format!("{thread}-{step}") {
                return Err(format!("{id}: label {label} at step {step}"));
            }
            let big = t
                .checkpoint
                .channel_values
                .get("big")
                .ok_or(format!("{id}: the big value is missing"))?;
            if big.len() != BIG || !big.bytes.iter().all(|b| *b == byte_of(step)) {
                return Err(format!("{id}: the big value is torn or of another step"));
            }
            if !(t.pending_writes.is_empty() || t.pending_writes.len() == WRITES_PER_CALL) {
                return Err(format!(
                    "{id}: a put_writes call was half-applied ({} writes)",
                    t.pending_writes.len()
                ));
            }
        }
        for w in all.windows(2) {
            let parent = w[0]
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.as_deref());
            if parent != Some(w[1].checkpoint.id.as_str()) {
                return Err(format!("{thread}: broken chain at {}", w[0].checkpoint.id));
            }
        }
        if let (None, Some(first)) = (recent, all.last())
            && first.parent_config.is_some()
        {
            return Err(format!("{thread}: the oldest checkpoint has a parent"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::InMemorySaver;

    /// Writes `steps` checkpoints of `thread` as the child does; `tear` spoils one.
    async fn store(saver: &InMemorySaver, steps: u64, tear: Option<u64>) -> Vec<(String, String)> {
        let mut acked = Vec::new();
        let mut parent = CheckpointConfig::new(THREADS[0]);
        let mut head: Option<Checkpoint> = None;
        for step in 0..steps {
            let mut next = head
                .as_ref()
                .map_or_else(Checkpoint::new, Checkpoint::successor);
            let big = if tear == Some(step) {
                byte_of(step + 1)
            } else {
                byte_of(step)
            };
            let versions = [
                ("step".to_owned(), next.set("step", &step).unwrap()),
                (
                    "big".to_owned(),
                    next.set_typed("big", TypedValue::from_bytes(vec![big; BIG])),
                ),
                (
                    "label".to_owned(),
                    next.set("label", &format!("{}-{step}", THREADS[0]))
                        .unwrap(),
                ),
            ]
            .into();
            let config = saver
                .put(
                    &parent,
                    next.clone(),
                    CheckpointMetadata::new(),
                    versions,
                    PutOptions::new(),
                )
                .await
                .unwrap();
            acked.push((THREADS[0].to_owned(), config.checkpoint_id.clone().unwrap()));
            parent = config;
            head = Some(next);
        }
        acked
    }

    #[tokio::test]
    async fn verify_accepts_a_whole_store_and_finds_what_is_wrong() {
        let whole = InMemorySaver::new();
        let acked = store(&whole, 4, None).await;
        verify(&whole, &acked, &[], None).await.unwrap();

        // A value of another step.
        let torn = InMemorySaver::new();
        let acked = store(&torn, 4, Some(2)).await;
        let err = verify(&torn, &acked, &[], None).await.unwrap_err();
        assert!(err.contains("torn or of another step"), "{err}");

        // An acknowledged put that is not there.
        let mut missing = acked.clone();
        missing.push((
            THREADS[0].to_owned(),
            "1f000000-0000-6000-8000-000000000000".into(),
        ));
        let err = verify(&whole, &missing, &[], Some(8)).await.unwrap_err();
        assert!(err.contains("is missing"), "{err}");

        // Half of a put_writes call.
        let whole2 = InMemorySaver::new();
        let acked2 = store(&whole2, 1, None).await;
        let config = CheckpointConfig::new(THREADS[0]).with_checkpoint_id(acked2[0].1.clone());
        whole2
            .put_writes(
                &config,
                vec![("w0".into(), TypedValue::msgpack(&0u64).unwrap())],
                "task",
                PutWritesOptions::new(),
            )
            .await
            .unwrap();
        let err = verify(&whole2, &acked2, &acked2, None).await.unwrap_err();
        assert!(err.contains("1 of 3"), "{err}");
    }
}
