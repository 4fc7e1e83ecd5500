//! Runs the whole benchmark: payload generation, the repetitions on fresh savers with floor
//! samples interleaved, and the median summary.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoint_core::now_iso8601;

use crate::backend::Backend;
use crate::payload::Payloads;
use crate::report::{
    DeltaFigures, Figures, FloorSample, Host, Operations, RssFigures, RunReport, SCHEMA, W1Figures,
    W3Figures, W4Figures,
};
use crate::rss;
use crate::stats::{median, round3};
use crate::validate::Validation;
use crate::workload::{self, BenchError, Context, Params};

/// Runs `params.reps` repetitions of W1–W4 on `backend` and reports them. Progress goes to
/// stderr. Never fails: errors end up in [`RunReport::errors`] and make the report invalid.
pub async fn run(backend: &dyn Backend, params: &Params) -> RunReport {
    let started_at = now_iso8601();
    let mut errors = Vec::new();
    let mut repetitions = Vec::new();
    match check_params(params) {
        Err(e) => errors.push(e),
        Ok(()) => {
            let t0 = Instant::now();
            match Payloads::generate(
                params.seed,
                params.threads,
                params.w4_threads,
                params.steps,
                params.delta,
            ) {
                Err(e) => errors.push(format!("payload generation: {e}")),
                Ok(payloads) => {
                    eprintln!(
                        "[{}] payloads generated in {:.2}s",
                        backend.name(),
                        t0.elapsed().as_secs_f64()
                    );
                    let payloads = Arc::new(payloads);
                    for rep in 1..=params.reps {
                        match repetition(backend, &payloads, params, rep).await {
                            Ok(r) => {
                                progress(backend.name(), params, &r.figures, rep);
                                errors.extend(
                                    r.validation
                                        .errors
                                        .iter()
                                        .map(|e| format!("rep {rep}: {e}")),
                                );
                                let hidden =
                                    r.validation.error_count as usize - r.validation.errors.len();
                                if hidden > 0 {
                                    errors.push(format!("rep {rep}: {hidden} more errors"));
                                }
                                repetitions.push(r);
                            }
                            Err(e) => {
                                errors.push(format!("rep {rep}: {e}"));
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    if let Err(e) = backend.teardown().await {
        errors.push(format!("teardown: {}", e.chain()));
    }
    let all: Vec<&Figures> = repetitions.iter().map(|r| &r.figures).collect();
    RunReport {
        schema: SCHEMA,
        workload: if params.delta {
            "WORKLOAD.md W1-W4, delta messages (docs/workload.md §9)"
        } else {
            "WORKLOAD.md W1-W4"
        },
        backend: backend.name().to_owned(),
        settings: backend.settings(),
        started_at,
        finished_at: now_iso8601(),
        bench_version: env!("CARGO_PKG_VERSION"),
        parameters: params.clone(),
        host: Host {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            cpus: std::thread::available_parallelism().ok().map(usize::from),
            tokio_workers: tokio::runtime::Handle::try_current()
                .map(|h| h.metrics().num_workers())
                .unwrap_or(0),
        },
        valid: errors.is_empty() && repetitions.len() == params.reps,
        errors,
        summary_of_reps: all.len(),
        summary: Figures::median_of(&all),
        repetitions,
    }
}

fn check_params(p: &Params) -> Result<(), String> {
    let positive = [
        ("threads", p.threads),
        ("steps", p.steps),
        ("reps", p.reps),
        ("w4_threads", p.w4_threads),
        ("workers", p.workers),
    ];
    match positive.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(format!("parameter {name} must be at least 1")),
        None => Ok(()),
    }
}

fn progress(backend: &str, params: &Params, f: &Figures, rep: usize) {
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    eprintln!(
        "[{backend}] rep {rep}/{}: W1 {:.2}s put p50 {} ms, put_writes p50 {} ms, \
         get latest p50 {} ms, W4 {:.0} steps/s, bytes {:?}",
        params.reps,
        f.w1.wall_s,
        ms(f.operations.put.p50_ms),
        ms(f.operations.put_writes.p50_ms),
        ms(f.operations.get_tuple_latest.p50_ms),
        f.w4.steps_per_s.unwrap_or(0.0),
        f.bytes_stored_after_w1,
    );
    if let Some(d) = &f.delta {
        eprintln!(
            "[{backend}] rep {rep}/{}: delta history latest p50 {} ms ({:.2}x get latest), \
             bytes {:.3}x the append-only floor",
            params.reps,
            ms(d.history_latest.p50_ms),
            d.history_over_get_latest.unwrap_or(0.0),
            d.bytes_over_append_only_floor.unwrap_or(0.0),
        );
    }
}

/// Floor samples of one repetition.
struct FloorLog {
    samples: Vec<FloorSample>,
    basis: BTreeMap<String, String>,
}

impl FloorLog {
    async fn sample(&mut self, backend: &dyn Backend, at: &'static str) -> Result<(), BenchError> {
        let floors = backend
            .floors()
            .await
            .context(|| format!("floor sample {at}"))?;
        if let Some(f) = floors {
            self.basis.extend(f.basis);
            self.samples.push(FloorSample {
                at,
                figures: f.figures,
            });
        }
        Ok(())
    }

    /// Per floor figure, the median of the samples; `None` without samples.
    fn medians(&self) -> Option<BTreeMap<String, f64>> {
        if self.samples.is_empty() {
            return None;
        }
        let mut names: Vec<&String> = self.samples.iter().flat_map(|s| s.figures.keys()).collect();
        names.sort();
        names.dedup();
        Some(
            names
                .into_iter()
                .filter_map(|n| {
                    let v = median(
                        self.samples
                            .iter()
                            .filter_map(|s| s.figures.get(n).copied()),
                    )?;
                    Some((n.clone(), v))
                })
                .collect(),
        )
    }
}

fn per_s(count: usize, wall: Duration) -> Option<f64> {
    let s = wall.as_secs_f64();
    (s > 0.0).then(|| round3(count as f64 / s))
}

/// One repetition on a fresh saver.
async fn repetition(
    backend: &dyn Backend,
    payloads: &Arc<Payloads>,
    params: &Params,
    rep: usize,
) -> Result<crate::report::Repetition, BenchError> {
    let saver = backend
        .fresh()
        .await
        .context(|| "creating a fresh saver".to_owned())?;
    let peak_is_per_repetition = rss::reset_peak();
    let mut floors = FloorLog {
        samples: Vec::new(),
        basis: BTreeMap::new(),
    };
    let mut validation = Validation::new();

    floors.sample(backend, "before_w1").await?;
    let before_w1_bytes = rss::current_bytes();
    let w1 = workload::w1(&*saver, payloads, params, &mut validation).await?;
    let bytes_stored_after_w1 = backend
        .bytes_stored(&*saver)
        .await
        .context(|| "measuring bytes stored".to_owned())?;
    floors.sample(backend, "after_w1").await?;

    let w2 = workload::w2(&*saver, payloads, params, &w1.ids, &mut validation).await?;
    floors.sample(backend, "after_w2").await?;

    let w3 = workload::w3(&*saver, payloads, params, &w1.ids, &mut validation).await?;
    floors.sample(backend, "after_w3").await?;

    let w4 = workload::w4(
        Arc::clone(&saver),
        Arc::clone(payloads),
        params,
        &mut validation,
    )
    .await?;
    floors.sample(backend, "after_w4").await?;
    let peak_bytes = rss::peak_bytes();
    drop(saver);

    let w1_steps = w1.put.len();
    let full_list = w3.full_list.stats();
    let filtered_list = w3.filtered_list.stats();
    let w4_steps_per_s = per_s(w4.steps, w4.wall);
    let mut figures = Figures {
        operations: Operations {
            put: w1.put.stats(),
            put_writes: w1.put_writes.stats(),
            get_tuple_latest: w2.latest.stats(),
            get_tuple_by_id: w2.by_id.stats(),
            list_limit_10: w3.list_limit.stats(),
            full_list: full_list.clone(),
            filtered_list: filtered_list.clone(),
        },
        w1: W1Figures {
            steps: w1_steps as u64,
            wall_s: w1.wall.as_secs_f64(),
            steps_per_s: per_s(w1_steps, w1.wall),
        },
        w3: W3Figures {
            full_list_total_ms: full_list.total_ms,
            filtered_list_p50_ms: filtered_list.p50_ms,
        },
        w4: W4Figures {
            threads: params.w4_threads as u64,
            workers: params.workers as u64,
            steps: w4.steps as u64,
            wall_s: w4.wall.as_secs_f64(),
            steps_per_s: w4_steps_per_s,
            ops_per_s: w4_steps_per_s.map(|s| 2.0 * s),
            put: w4.put.stats(),
            put_writes: w4.put_writes.stats(),
        },
        bytes_stored_after_w1,
        rss: RssFigures {
            before_w1_bytes,
            peak_bytes,
            peak_is_per_repetition,
        },
        floors: None,
        ratios: BTreeMap::new(),
        delta: params.delta.then(|| {
            DeltaFigures::new(
                w2.delta_history.stats(),
                &w2.latest.stats(),
                bytes_stored_after_w1,
                params,
            )
        }),
    };
    figures.set_floors(floors.medians(), &floors.basis);
    Ok(crate::report::Repetition {
        rep,
        figures,
        floor_samples: floors.samples,
        validation,
    })
}
