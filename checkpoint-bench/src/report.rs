//! The JSON report (WORKLOAD.md §6): one [`RunReport`] object per run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::{OpStats, median, median_u64};
use crate::validate::Validation;
use crate::workload::Params;

/// Value of [`RunReport::schema`]; bumped when a field changes meaning or disappears.
pub const SCHEMA: &str = "checkpoint-bench/1";

/// Workload figures that always appear in [`Figures::ratios`] (as `null` when the backend
/// names no floor for them). A backend may name any other figure [`Figures::figure`]
/// resolves; it is then added.
pub const WORKLOAD_FIGURES: &[&str] = &[
    "put_p50_ms",
    "put_writes_p50_ms",
    "get_tuple_latest_p50_ms",
    "get_tuple_by_id_p50_ms",
    "list_limit_10_p50_ms",
    "full_list_p50_ms",
    "full_list_total_ms",
    "filtered_list_p50_ms",
    "w4_steps_per_s",
    "w4_ops_per_s",
    "w4_put_p50_ms",
    "w4_put_writes_p50_ms",
];

/// One run: parameters, every repetition and their median.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The workload definition followed.
    pub workload: &'static str,
    /// Backend name.
    pub backend: String,
    /// The backend's saver settings that matter for comparing runs (empty for most; see
    /// [`Backend::settings`](crate::Backend::settings)).
    pub settings: BTreeMap<String, String>,
    /// Start of the run, UTC ISO-8601.
    pub started_at: String,
    /// End of the run, UTC ISO-8601.
    pub finished_at: String,
    /// Version of this crate.
    pub bench_version: &'static str,
    /// Workload parameters.
    pub parameters: Params,
    /// Where it ran.
    pub host: Host,
    /// `false` if any repetition had a validation error or an operation failed: the run's
    /// figures must not be used.
    pub valid: bool,
    /// Every error of the run (validation errors prefixed by their repetition, failed
    /// operations, setup failures), at most [`MAX_ERRORS`](crate::validate::MAX_ERRORS) per
    /// repetition.
    pub errors: Vec<String>,
    /// How many repetitions [`summary`](Self::summary) is the median of.
    pub summary_of_reps: usize,
    /// Field-wise median of the completed repetitions (`null` if none completed).
    pub summary: Option<Figures>,
    /// Each completed repetition, in order.
    pub repetitions: Vec<Repetition>,
}

/// The machine and runtime.
#[derive(Clone, Debug, Serialize)]
pub struct Host {
    /// `std::env::consts::OS`.
    pub os: &'static str,
    /// `std::env::consts::ARCH`.
    pub arch: &'static str,
    /// `std::thread::available_parallelism`.
    pub cpus: Option<usize>,
    /// Worker threads of the multi-thread tokio runtime.
    pub tokio_workers: usize,
}

/// One repetition, on a fresh backend.
#[derive(Clone, Debug, Serialize)]
pub struct Repetition {
    /// 1-based repetition number.
    pub rep: usize,
    /// The figures.
    #[serde(flatten)]
    pub figures: Figures,
    /// Every floor sample taken during the repetition (empty for backends without a floor).
    pub floor_samples: Vec<FloorSample>,
    /// What W2, W3 and W4 read back.
    pub validation: Validation,
}

/// One call of [`Backend::floors`](crate::backend::Backend::floors).
#[derive(Clone, Debug, Serialize)]
pub struct FloorSample {
    /// When: `before_w1`, `after_w1`, `after_w2`, `after_w3`, `after_w4`.
    pub at: &'static str,
    /// Floor figure name → value.
    pub figures: BTreeMap<String, f64>,
}

/// The figures of a repetition, or their median in [`RunReport::summary`].
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// The seven operations of W1–W3.
    pub operations: Operations,
    /// W1 phase figures.
    pub w1: W1Figures,
    /// W3 aggregate figures.
    pub w3: W3Figures,
    /// W4 figures.
    pub w4: W4Figures,
    /// Bytes stored after W1, before W2–W4, as the backend measures it (`null` if unknown).
    pub bytes_stored_after_w1: Option<u64>,
    /// Memory of the benchmark process.
    pub rss: RssFigures,
    /// Floor figure name → value: per repetition the median of its samples (`null` for a
    /// backend without a server).
    pub floors: Option<BTreeMap<String, f64>>,
    /// Workload figure name → its ratio to its floor (`null` when there is no floor for it).
    /// Every name of [`WORKLOAD_FIGURES`] is present.
    pub ratios: BTreeMap<String, Option<Ratio>>,
    /// The delta variant's figures (docs/workload.md §9); absent from plain runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<DeltaFigures>,
}

/// What the delta variant adds (docs/workload.md §9).
#[derive(Clone, Debug, Serialize)]
pub struct DeltaFigures {
    /// `delta_channel_history(latest, ["messages"])`, once per W1 thread in W2.
    pub history_latest: OpStats,
    /// `history_latest` p50 ÷ `get_tuple_latest` p50 of the same repetition.
    pub history_over_get_latest: Option<f64>,
    /// The append-only floor of WORKLOAD.md §7 for these parameters:
    /// `T × (65536 + S × (480 + 1024 + 2 × 1024))` bytes (6.83 MB at T=50, S=20).
    pub append_only_floor_bytes: u64,
    /// `bytes_stored_after_w1 ÷ append_only_floor_bytes`.
    pub bytes_over_append_only_floor: Option<f64>,
}

impl DeltaFigures {
    /// The figures of one repetition.
    pub fn new(
        history_latest: OpStats,
        get_latest: &OpStats,
        bytes_stored: Option<u64>,
        params: &Params,
    ) -> Self {
        use crate::payload::{BIG_DOC_LEN, MSG_CONTENT_LEN, SCRATCH_LEN};
        let per_step = MSG_CONTENT_LEN + SCRATCH_LEN + 2 * SCRATCH_LEN;
        let floor = (params.threads * (BIG_DOC_LEN + params.steps * per_step)) as u64;
        let history_over_get_latest = match (history_latest.p50_ms, get_latest.p50_ms) {
            (Some(h), Some(g)) if g > 0.0 => Some(h / g),
            _ => None,
        };
        Self {
            history_latest,
            history_over_get_latest,
            append_only_floor_bytes: floor,
            bytes_over_append_only_floor: bytes_stored
                .filter(|_| floor > 0)
                .map(|b| b as f64 / floor as f64),
        }
    }

    fn median_of(all: &[&DeltaFigures]) -> Option<DeltaFigures> {
        let first = all.first()?;
        Some(DeltaFigures {
            history_latest: OpStats::median_of(
                &all.iter().map(|d| &d.history_latest).collect::<Vec<_>>(),
            ),
            history_over_get_latest: median(all.iter().filter_map(|d| d.history_over_get_latest)),
            append_only_floor_bytes: first.append_only_floor_bytes,
            bytes_over_append_only_floor: median(
                all.iter().filter_map(|d| d.bytes_over_append_only_floor),
            ),
        })
    }
}

/// Per-operation figures (WORKLOAD.md §6).
#[derive(Clone, Debug, Serialize)]
pub struct Operations {
    /// W1 `put`.
    pub put: OpStats,
    /// W1 `put_writes`.
    pub put_writes: OpStats,
    /// W2 `get_tuple` of the latest checkpoint.
    pub get_tuple_latest: OpStats,
    /// W2 `get_tuple` of the checkpoint of step `S//2`.
    pub get_tuple_by_id: OpStats,
    /// W3 `list(thread, limit=10)`, consumed fully.
    pub list_limit_10: OpStats,
    /// W3 `list(thread)` without limit, consumed fully (one call per thread).
    pub full_list: OpStats,
    /// W3 global `list` filtered on `{"source": "loop", "step": 5}`.
    pub filtered_list: OpStats,
}

impl Operations {
    /// `(name, figures)` of each operation, in report order.
    pub fn iter(&self) -> [(&'static str, &OpStats); 7] {
        [
            ("put", &self.put),
            ("put_writes", &self.put_writes),
            ("get_tuple_latest", &self.get_tuple_latest),
            ("get_tuple_by_id", &self.get_tuple_by_id),
            ("list_limit_10", &self.list_limit_10),
            ("full_list", &self.full_list),
            ("filtered_list", &self.filtered_list),
        ]
    }
}

/// W1 "agent loop".
#[derive(Clone, Debug, Serialize)]
pub struct W1Figures {
    /// Steps run (`T·S`; each is one put and one put_writes).
    pub steps: u64,
    /// Wall time of the phase, in seconds.
    pub wall_s: f64,
    /// `steps ÷ wall_s`.
    pub steps_per_s: Option<f64>,
}

/// W3 "history" aggregates.
#[derive(Clone, Debug, Serialize)]
pub struct W3Figures {
    /// Summed latency of the unlimited per-thread lists ("full-list time"), in ms.
    pub full_list_total_ms: f64,
    /// p50 of the filtered global lists ("filtered-list time"), in ms.
    pub filtered_list_p50_ms: Option<f64>,
}

/// W4 "concurrency".
#[derive(Clone, Debug, Serialize)]
pub struct W4Figures {
    /// Fresh threads written.
    pub threads: u64,
    /// Concurrent tasks sharing one saver.
    pub workers: u64,
    /// Steps run (`threads · S`).
    pub steps: u64,
    /// Wall time of the phase, in seconds.
    pub wall_s: f64,
    /// Throughput: `steps ÷ wall_s`.
    pub steps_per_s: Option<f64>,
    /// `2 × steps_per_s` (one put and one put_writes per step).
    pub ops_per_s: Option<f64>,
    /// Per-call `put` latencies under concurrency.
    pub put: OpStats,
    /// Per-call `put_writes` latencies under concurrency.
    pub put_writes: OpStats,
}

/// Resident set size of the benchmark process (Linux `/proc/self/status`).
#[derive(Clone, Debug, Serialize)]
pub struct RssFigures {
    /// `VmRSS` just before W1, in bytes (pre-generated payloads included).
    pub before_w1_bytes: Option<u64>,
    /// `VmHWM` at the end of the repetition, in bytes.
    pub peak_bytes: Option<u64>,
    /// Whether the peak was reset at the start of the repetition (after the fresh saver was
    /// made), so that it is this repetition's peak rather than the process's.
    pub peak_is_per_repetition: bool,
}

/// A workload figure against its floor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// The floor figure's name.
    pub floor: String,
    /// The floor figure's value.
    pub floor_value: f64,
    /// The workload figure's value.
    pub value: f64,
    /// `value ÷ floor_value`: for latencies, how many floors a call costs; for throughputs,
    /// the fraction of the floor's throughput reached.
    pub ratio: f64,
}

impl Figures {
    /// The value of a workload figure by name: `<operation>_{p50_ms,p99_ms,ops_per_s}` for
    /// each operation of [`Operations`], `full_list_total_ms`, `w1_wall_s`,
    /// `w1_steps_per_s`, `w4_steps_per_s`, `w4_ops_per_s`, `w4_wall_s`, and
    /// `w4_{put,put_writes}_{p50_ms,p99_ms,ops_per_s}`.
    pub fn figure(&self, name: &str) -> Option<f64> {
        match name {
            "full_list_total_ms" => return Some(self.w3.full_list_total_ms),
            "w1_wall_s" => return Some(self.w1.wall_s),
            "w1_steps_per_s" => return self.w1.steps_per_s,
            "w4_wall_s" => return Some(self.w4.wall_s),
            "w4_steps_per_s" => return self.w4.steps_per_s,
            "w4_ops_per_s" => return self.w4.ops_per_s,
            _ => {}
        }
        let (op, stat) = ["_p50_ms", "_p99_ms", "_ops_per_s"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).map(|op| (op, *suffix)))?;
        let stats = match op {
            "w4_put" => &self.w4.put,
            "w4_put_writes" => &self.w4.put_writes,
            _ => {
                self.operations
                    .iter()
                    .into_iter()
                    .find(|(n, _)| *n == op)?
                    .1
            }
        };
        match stat {
            "_p50_ms" => stats.p50_ms,
            "_p99_ms" => stats.p99_ms,
            _ => stats.ops_per_s,
        }
    }

    /// Fills [`floors`](Self::floors) and [`ratios`](Self::ratios) from the floor figures
    /// and the backend's workload-figure → floor-figure basis.
    pub fn set_floors(
        &mut self,
        floors: Option<BTreeMap<String, f64>>,
        basis: &BTreeMap<String, String>,
    ) {
        let mut ratios: BTreeMap<String, Option<Ratio>> = WORKLOAD_FIGURES
            .iter()
            .map(|n| ((*n).to_owned(), None))
            .collect();
        if let Some(floors) = &floors {
            for (figure, floor) in basis {
                let ratio = match (self.figure(figure), floors.get(floor)) {
                    (Some(value), Some(&floor_value)) if floor_value > 0.0 => Some(Ratio {
                        floor: floor.clone(),
                        floor_value,
                        value,
                        ratio: value / floor_value,
                    }),
                    _ => None,
                };
                ratios.insert(figure.clone(), ratio);
            }
        }
        self.floors = floors;
        self.ratios = ratios;
    }

    /// The field-wise median of several repetitions (ratios: the median of each
    /// repetition's ratio, each taken against a floor measured in that repetition).
    pub fn median_of(all: &[&Figures]) -> Option<Figures> {
        let first = all.first()?;
        let op = |f: fn(&Figures) -> &OpStats| {
            OpStats::median_of(&all.iter().map(|x| f(x)).collect::<Vec<_>>())
        };
        let floors = {
            let mut names: Vec<&String> = all
                .iter()
                .filter_map(|f| f.floors.as_ref())
                .flat_map(|m| m.keys())
                .collect();
            names.sort();
            names.dedup();
            all.iter().any(|f| f.floors.is_some()).then(|| {
                names
                    .into_iter()
                    .filter_map(|n| {
                        let v = median(
                            all.iter()
                                .filter_map(|f| f.floors.as_ref()?.get(n).copied()),
                        )?;
                        Some((n.clone(), v))
                    })
                    .collect()
            })
        };
        let ratios = first
            .ratios
            .keys()
            .chain(all.iter().flat_map(|f| f.ratios.keys()))
            .map(|name| {
                let some: Vec<&Ratio> = all
                    .iter()
                    .filter_map(|f| f.ratios.get(name)?.as_ref())
                    .collect();
                let ratio = some.first().map(|r0| Ratio {
                    floor: r0.floor.clone(),
                    floor_value: median(some.iter().map(|r| r.floor_value)).unwrap_or(0.0),
                    value: median(some.iter().map(|r| r.value)).unwrap_or(0.0),
                    ratio: median(some.iter().map(|r| r.ratio)).unwrap_or(0.0),
                });
                (name.clone(), ratio)
            })
            .collect();
        let f64_of = |f: fn(&Figures) -> f64| median(all.iter().map(|x| f(x))).unwrap_or(0.0);
        let opt_of = |f: fn(&Figures) -> Option<f64>| median(all.iter().filter_map(|x| f(x)));
        let u64_of = |f: fn(&Figures) -> Option<u64>| median_u64(all.iter().filter_map(|x| f(x)));
        Some(Figures {
            operations: Operations {
                put: op(|f| &f.operations.put),
                put_writes: op(|f| &f.operations.put_writes),
                get_tuple_latest: op(|f| &f.operations.get_tuple_latest),
                get_tuple_by_id: op(|f| &f.operations.get_tuple_by_id),
                list_limit_10: op(|f| &f.operations.list_limit_10),
                full_list: op(|f| &f.operations.full_list),
                filtered_list: op(|f| &f.operations.filtered_list),
            },
            w1: W1Figures {
                steps: first.w1.steps,
                wall_s: f64_of(|f| f.w1.wall_s),
                steps_per_s: opt_of(|f| f.w1.steps_per_s),
            },
            w3: W3Figures {
                full_list_total_ms: f64_of(|f| f.w3.full_list_total_ms),
                filtered_list_p50_ms: opt_of(|f| f.w3.filtered_list_p50_ms),
            },
            w4: W4Figures {
                threads: first.w4.threads,
                workers: first.w4.workers,
                steps: first.w4.steps,
                wall_s: f64_of(|f| f.w4.wall_s),
                steps_per_s: opt_of(|f| f.w4.steps_per_s),
                ops_per_s: opt_of(|f| f.w4.ops_per_s),
                put: op(|f| &f.w4.put),
                put_writes: op(|f| &f.w4.put_writes),
            },
            bytes_stored_after_w1: u64_of(|f| f.bytes_stored_after_w1),
            rss: RssFigures {
                before_w1_bytes: u64_of(|f| f.rss.before_w1_bytes),
                peak_bytes: u64_of(|f| f.rss.peak_bytes),
                peak_is_per_repetition: all.iter().all(|f| f.rss.peak_is_per_repetition),
            },
            floors,
            ratios,
            delta: DeltaFigures::median_of(
                &all.iter()
                    .filter_map(|f| f.delta.as_ref())
                    .collect::<Vec<_>>(),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(p50: f64) -> OpStats {
        OpStats {
            calls: 10,
            total_ms: p50 * 10.0,
            ops_per_s: Some(1000.0 / p50),
            p50_ms: Some(p50),
            p99_ms: Some(p50 * 2.0),
        }
    }

    fn figures(p50: f64) -> Figures {
        let mut f = Figures {
            operations: Operations {
                put: stats(p50),
                put_writes: stats(p50),
                get_tuple_latest: stats(p50),
                get_tuple_by_id: stats(p50),
                list_limit_10: stats(p50),
                full_list: stats(p50),
                filtered_list: stats(p50),
            },
            w1: W1Figures {
                steps: 10,
                wall_s: p50,
                steps_per_s: Some(1.0 / p50),
            },
            w3: W3Figures {
                full_list_total_ms: p50,
                filtered_list_p50_ms: Some(p50),
            },
            w4: W4Figures {
                threads: 1,
                workers: 1,
                steps: 1,
                wall_s: p50,
                steps_per_s: Some(100.0 / p50),
                ops_per_s: Some(200.0 / p50),
                put: stats(p50),
                put_writes: stats(p50),
            },
            bytes_stored_after_w1: Some(p50 as u64),
            rss: RssFigures {
                before_w1_bytes: None,
                peak_bytes: Some(1),
                peak_is_per_repetition: true,
            },
            floors: None,
            ratios: BTreeMap::new(),
            delta: None,
        };
        f.set_floors(None, &BTreeMap::new());
        f
    }

    #[test]
    fn figures_resolve_by_name() {
        let f = figures(2.0);
        assert_eq!(f.figure("put_p50_ms"), Some(2.0));
        assert_eq!(f.figure("filtered_list_p99_ms"), Some(4.0));
        assert_eq!(f.figure("w4_put_writes_p50_ms"), Some(2.0));
        assert_eq!(f.figure("w4_steps_per_s"), Some(50.0));
        assert_eq!(f.figure("nope_p50_ms"), None);
        for name in WORKLOAD_FIGURES {
            assert!(f.figure(name).is_some(), "{name}");
        }
    }

    #[test]
    fn no_floor_gives_null_ratios_for_every_figure() {
        let f = figures(2.0);
        assert!(f.floors.is_none());
        assert_eq!(f.ratios.len(), WORKLOAD_FIGURES.len());
        assert!(f.ratios.values().all(Option::is_none));
        let json = serde_json::to_value(&f).unwrap();
        assert!(json["floors"].is_null());
        assert!(json["ratios"]["put_p50_ms"].is_null());
    }

    #[test]
    fn ratios_and_medians() {
        let basis = BTreeMap::from([
            ("put_p50_ms".to_owned(), "insert_p50_ms".to_owned()),
            ("put_p99_ms".to_owned(), "insert_p50_ms".to_owned()),
        ]);
        let mut reps: Vec<Figures> = [1.0, 3.0, 2.0].into_iter().map(figures).collect();
        for (r, floor) in reps.iter_mut().zip([0.5, 1.0, 4.0]) {
            r.set_floors(
                Some(BTreeMap::from([("insert_p50_ms".to_owned(), floor)])),
                &basis,
            );
        }
        assert_eq!(reps[0].ratios["put_p50_ms"].as_ref().unwrap().ratio, 2.0);
        assert_eq!(reps[0].ratios["put_p99_ms"].as_ref().unwrap().ratio, 4.0);
        let m = Figures::median_of(&reps.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(m.operations.put.p50_ms, Some(2.0));
        assert_eq!(m.floors.as_ref().unwrap()["insert_p50_ms"], 1.0);
        // Per-repetition ratios 2.0, 3.0, 0.5: median 2.0.
        assert_eq!(m.ratios["put_p50_ms"].as_ref().unwrap().ratio, 2.0);
        assert!(m.ratios["w4_ops_per_s"].is_none());
        assert_eq!(m.bytes_stored_after_w1, Some(2));
    }
}
