//! The phases W1–W4 of WORKLOAD.md §5. Only the saver calls are timed; building arguments
//! and validating results happen outside the timed spans.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoint_core::{CheckpointTuple, ListOptions, PutOptions, PutWritesOptions, Saver};
use checkpoint_core::{new_checkpoint_id, now_iso8601};
use futures::TryStreamExt;
use serde::Serialize;

use crate::payload::{MESSAGES, Payloads, ThreadPayload};
use crate::stats::Latencies;
use crate::validate::Validation;

/// The workload parameters (WORKLOAD.md defaults in [`Params::default`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Params {
    /// `T`: W1 threads.
    pub threads: usize,
    /// `S`: super-steps per thread.
    pub steps: usize,
    /// The payload seed.
    pub seed: u64,
    /// Repetitions, each on a fresh backend (the spec asks for at least 3).
    pub reps: usize,
    /// W4 threads.
    pub w4_threads: usize,
    /// W4 concurrent workers sharing one saver.
    pub workers: usize,
    /// W3 step 1 list limit (fixed: 10).
    pub list_limit: usize,
    /// W3 step 3 number of filtered global lists (fixed: 5).
    pub filtered_list_calls: usize,
    /// W3 step 3 filter's `step` (fixed: 5).
    pub filtered_step: usize,
    /// The delta variant (docs/workload.md §9): `messages` is a delta channel, and W2 also
    /// times `delta_channel_history` of the latest checkpoint.
    pub delta: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            threads: 50,
            steps: 20,
            seed: 42,
            reps: 3,
            w4_threads: 64,
            workers: 8,
            list_limit: 10,
            filtered_list_calls: 5,
            filtered_step: 5,
            delta: false,
        }
    }
}

/// A saver call that failed (the run stops: its figures would be meaningless).
#[derive(Debug)]
pub struct BenchError {
    /// What was being done (`W1 put thread-00003 step 4`).
    pub context: String,
    /// The saver's error.
    pub source: checkpoint_core::Error,
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.context, self.source.chain())
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Adds context to a saver result.
pub trait Context<T> {
    /// Wraps the error in a [`BenchError`] saying what was being done.
    fn context(self, what: impl FnOnce() -> String) -> Result<T, BenchError>;
}

impl<T> Context<T> for checkpoint_core::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, BenchError> {
        self.map_err(|source| BenchError {
            context: what(),
            source,
        })
    }
}

/// One step of one thread: `put` of the checkpoint of step `n` (child of `parent`), then
/// `put_writes` of its 2 pending writes against the returned config. Each call is timed
/// into its own [`Latencies`]. Returns the id of the new checkpoint.
pub async fn run_step(
    saver: &dyn Saver,
    payload: &ThreadPayload,
    n: usize,
    parent: Option<&str>,
    put: &mut Latencies,
    put_writes: &mut Latencies,
    validation: &mut Validation,
) -> Result<String, BenchError> {
    let config = payload.config(parent);
    let id = new_checkpoint_id();
    let checkpoint = payload.checkpoint(n, id.clone(), now_iso8601());
    let metadata = payload.metadata(n);
    let new_versions = payload.new_versions(n);

    let t0 = Instant::now();
    let stored = saver
        .put(
            &config,
            checkpoint,
            metadata,
            new_versions,
            PutOptions::new(),
        )
        .await;
    put.push(t0.elapsed());
    let stored = stored.context(|| format!("put {} step {n}", payload.thread_id))?;
    validation.check(
        stored.checkpoint_id.as_deref() == Some(id.as_str())
            && stored.thread_id == payload.thread_id,
        || format!("put {} step {n} returned {stored:?}", payload.thread_id),
    );

    let writes = payload.writes(n);
    let task_id = &payload.steps[n].task_id;
    let t0 = Instant::now();
    let done = saver
        .put_writes(&stored, writes, task_id, PutWritesOptions::new())
        .await;
    put_writes.push(t0.elapsed());
    done.context(|| format!("put_writes {} step {n}", payload.thread_id))?;
    Ok(id)
}

/// What W1 measured and the ids it got.
#[derive(Debug)]
pub struct W1Result {
    /// `put` latencies.
    pub put: Latencies,
    /// `put_writes` latencies.
    pub put_writes: Latencies,
    /// Wall time of the phase.
    pub wall: Duration,
    /// `ids[i][n]`: id of the checkpoint of step `n` of W1 thread `i`.
    pub ids: Vec<Vec<String>>,
}

/// W1 "agent loop": step-major, one call at a time.
pub async fn w1(
    saver: &dyn Saver,
    payloads: &Payloads,
    params: &Params,
    validation: &mut Validation,
) -> Result<W1Result, BenchError> {
    let threads = &payloads.w1;
    let mut ids: Vec<Vec<String>> = vec![Vec::with_capacity(params.steps); threads.len()];
    let mut put = Latencies::new();
    let mut put_writes = Latencies::new();
    let start = Instant::now();
    for n in 0..params.steps {
        for (p, thread_ids) in threads.iter().zip(ids.iter_mut()) {
            let id = run_step(
                saver,
                p,
                n,
                thread_ids.last().map(String::as_str),
                &mut put,
                &mut put_writes,
                validation,
            )
            .await
            .map_err(|e| prefix("W1", e))?;
            thread_ids.push(id);
        }
    }
    let wall = start.elapsed();
    Ok(W1Result {
        put,
        put_writes,
        wall,
        ids,
    })
}

/// What W2 measured.
#[derive(Debug)]
pub struct W2Result {
    /// `get_tuple` of the latest checkpoint.
    pub latest: Latencies,
    /// `get_tuple` of the checkpoint of step `S//2`.
    pub by_id: Latencies,
    /// Delta variant: `delta_channel_history(latest, ["messages"])`.
    pub delta_history: Latencies,
}

/// W2 "resume read": per W1 thread, `get_tuple` latest then by id of step `S//2`.
pub async fn w2(
    saver: &dyn Saver,
    payloads: &Payloads,
    params: &Params,
    ids: &[Vec<String>],
    validation: &mut Validation,
) -> Result<W2Result, BenchError> {
    let mut latest = Latencies::new();
    let mut by_id = Latencies::new();
    let mut delta_history = Latencies::new();
    let last = params.steps - 1;
    let mid = params.steps / 2;
    for (p, ids) in payloads.w1.iter().zip(ids) {
        let config = p.config(None);
        let t0 = Instant::now();
        let got = saver.get_tuple(&config).await;
        latest.push(t0.elapsed());
        let got = got.context(|| format!("W2 get_tuple latest {}", p.thread_id))?;
        expect_tuple(
            validation,
            "W2 get_tuple latest",
            got.as_ref(),
            p,
            last,
            ids,
        );

        let config = p.config(Some(&ids[mid]));
        let t0 = Instant::now();
        let got = saver.get_tuple(&config).await;
        by_id.push(t0.elapsed());
        let got = got.context(|| format!("W2 get_tuple by id {}", p.thread_id))?;
        expect_tuple(validation, "W2 get_tuple by id", got.as_ref(), p, mid, ids);

        if params.delta {
            let config = p.config(None);
            let channels = [MESSAGES.to_owned()];
            let t0 = Instant::now();
            let got = saver.delta_channel_history(&config, &channels).await;
            delta_history.push(t0.elapsed());
            let got = got.context(|| format!("W2 delta_channel_history {}", p.thread_id))?;
            validation.delta_history("W2 delta_channel_history", &got, p, last);
        }
    }
    Ok(W2Result {
        latest,
        by_id,
        delta_history,
    })
}

fn expect_tuple(
    validation: &mut Validation,
    what: &str,
    got: Option<&CheckpointTuple>,
    p: &ThreadPayload,
    n: usize,
    ids: &[String],
) {
    match got {
        Some(t) => validation.tuple(what, t, p, n, ids),
        None => validation.fail(format!("{what} {} step {n}: not found", p.thread_id)),
    }
}

/// What W3 measured.
#[derive(Debug)]
pub struct W3Result {
    /// `list(thread, limit=10)` per thread.
    pub list_limit: Latencies,
    /// `list(thread)` per thread.
    pub full_list: Latencies,
    /// Filtered global lists.
    pub filtered_list: Latencies,
}

async fn timed_list(
    saver: &dyn Saver,
    options: ListOptions,
    latencies: &mut Latencies,
) -> checkpoint_core::Result<Vec<CheckpointTuple>> {
    let t0 = Instant::now();
    let got: checkpoint_core::Result<Vec<CheckpointTuple>> =
        saver.list(options).try_collect().await;
    latencies.push(t0.elapsed());
    got
}

/// W3 "history": per-thread lists with limit 10, unlimited per-thread lists, and filtered
/// global lists.
pub async fn w3(
    saver: &dyn Saver,
    payloads: &Payloads,
    params: &Params,
    ids: &[Vec<String>],
    validation: &mut Validation,
) -> Result<W3Result, BenchError> {
    let s = params.steps;
    let mut list_limit = Latencies::new();
    for (p, ids) in payloads.w1.iter().zip(ids) {
        let options = ListOptions::from_config(&p.config(None)).limit(params.list_limit);
        let got = timed_list(saver, options, &mut list_limit)
            .await
            .context(|| format!("W3 list limit {} {}", params.list_limit, p.thread_id))?;
        check_history(
            validation,
            "W3 list limit",
            &got,
            p,
            ids,
            s.min(params.list_limit),
        );
    }

    let mut full_list = Latencies::new();
    for (p, ids) in payloads.w1.iter().zip(ids) {
        let options = ListOptions::from_config(&p.config(None));
        let got = timed_list(saver, options, &mut full_list)
            .await
            .context(|| format!("W3 full list {}", p.thread_id))?;
        check_history(validation, "W3 full list", &got, p, ids, s);
    }

    let mut filtered_list = Latencies::new();
    let step = params.filtered_step;
    let expected = if step < s { payloads.w1.len() } else { 0 };
    for call in 0..params.filtered_list_calls {
        let options = ListOptions::new()
            .filter("source", "loop")
            .filter("step", step);
        let got = timed_list(saver, options, &mut filtered_list)
            .await
            .context(|| format!("W3 filtered list call {call}"))?;
        let what = "W3 filtered list";
        validation.check(got.len() == expected, || {
            format!(
                "{what} call {call}: {} tuples, expected {expected}",
                got.len()
            )
        });
        validation.check(
            got.windows(2).all(|w| {
                (&w[0].checkpoint.id, &w[0].config.thread_id)
                    > (&w[1].checkpoint.id, &w[1].config.thread_id)
            }),
            || format!("{what} call {call}: not ordered newest first"),
        );
        let mut seen = vec![false; payloads.w1.len()];
        for t in &got {
            let index = payloads
                .w1
                .iter()
                .position(|p| p.thread_id == t.config.thread_id);
            match index {
                Some(i) if !seen[i] => {
                    seen[i] = true;
                    validation.tuple(what, t, &payloads.w1[i], step, &ids[i]);
                }
                Some(_) => validation.fail(format!(
                    "{what} call {call}: thread {} appears twice",
                    t.config.thread_id
                )),
                None => validation.fail(format!(
                    "{what} call {call}: unexpected thread {:?}",
                    t.config.thread_id
                )),
            }
        }
    }
    Ok(W3Result {
        list_limit,
        full_list,
        filtered_list,
    })
}

/// Checks a per-thread history: `expected` tuples, newest first, each the exact checkpoint
/// of its step.
fn check_history(
    validation: &mut Validation,
    what: &str,
    got: &[CheckpointTuple],
    p: &ThreadPayload,
    ids: &[String],
    expected: usize,
) {
    validation.check(got.len() == expected, || {
        format!(
            "{what} {}: {} tuples, expected {expected}",
            p.thread_id,
            got.len()
        )
    });
    for (k, t) in got.iter().enumerate().take(ids.len()) {
        // Newest first: the k-th tuple is the checkpoint of step S-1-k.
        validation.tuple(what, t, p, ids.len() - 1 - k, ids);
    }
}

/// What W4 measured.
#[derive(Debug)]
pub struct W4Result {
    /// `put` latencies of all workers.
    pub put: Latencies,
    /// `put_writes` latencies of all workers.
    pub put_writes: Latencies,
    /// Wall time of the phase.
    pub wall: Duration,
    /// Steps run.
    pub steps: usize,
}

/// W4 "concurrency": `workers` tasks sharing one saver; task `w` runs all steps of threads
/// `w, w+workers, ...` in turn. The latest checkpoint of each thread is validated afterwards.
pub async fn w4(
    saver: Arc<dyn Saver>,
    payloads: Arc<Payloads>,
    params: &Params,
    validation: &mut Validation,
) -> Result<W4Result, BenchError> {
    let steps = params.steps;
    let workers = params.workers;
    let total = payloads.w4.len();
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let saver = Arc::clone(&saver);
            let payloads = Arc::clone(&payloads);
            tokio::spawn(async move {
                let mut put = Latencies::new();
                let mut put_writes = Latencies::new();
                let mut v = Validation::new();
                let mut ids = Vec::new();
                for j in (w..total).step_by(workers) {
                    let p = &payloads.w4[j];
                    let mut thread_ids: Vec<String> = Vec::with_capacity(steps);
                    for n in 0..steps {
                        let id = run_step(
                            &*saver,
                            p,
                            n,
                            thread_ids.last().map(String::as_str),
                            &mut put,
                            &mut put_writes,
                            &mut v,
                        )
                        .await
                        .map_err(|e| prefix("W4", e))?;
                        thread_ids.push(id);
                    }
                    ids.push((j, thread_ids));
                }
                Ok::<_, BenchError>((put, put_writes, v, ids))
            })
        })
        .collect();
    let joined = futures::future::join_all(handles).await;
    let wall = start.elapsed();

    let mut put = Latencies::new();
    let mut put_writes = Latencies::new();
    let mut all_ids = Vec::new();
    for result in joined {
        match result {
            Ok(Ok((p, pw, v, ids))) => {
                put.extend(p);
                put_writes.extend(pw);
                validation.merge(v);
                all_ids.extend(ids);
            }
            Ok(Err(e)) => return Err(e),
            Err(join) => {
                validation.fail(format!("W4 worker panicked: {join}"));
            }
        }
    }
    for (j, ids) in &all_ids {
        let p = &payloads.w4[*j];
        let got = saver
            .get_tuple(&p.config(None))
            .await
            .context(|| format!("W4 validation get_tuple {}", p.thread_id))?;
        expect_tuple(validation, "W4 latest", got.as_ref(), p, steps - 1, ids);
    }
    validation.check(all_ids.len() == total, || {
        format!("W4: {} threads completed, expected {total}", all_ids.len())
    });
    Ok(W4Result {
        put,
        put_writes,
        wall,
        steps: total * steps,
    })
}

fn prefix(phase: &str, mut e: BenchError) -> BenchError {
    e.context = format!("{phase} {}", e.context);
    e
}
