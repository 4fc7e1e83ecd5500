//! Latency samples, nearest-rank percentiles and medians.

use std::time::Duration;

use serde::Serialize;

/// The per-call latencies of one operation.
#[derive(Clone, Debug, Default)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    /// No samples.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one call.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// Adds another set of samples.
    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    /// Number of calls.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no call was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The summary figures of these samples.
    pub fn stats(&self) -> OpStats {
        // Whole nanoseconds, converted once: the JSON shows `0.000697`, not float noise.
        let mut ns: Vec<u128> = self.0.iter().map(Duration::as_nanos).collect();
        ns.sort_unstable();
        let total_ns: u128 = ns.iter().sum();
        let ms: Vec<f64> = ns.iter().map(|&n| n as f64 / 1e6).collect();
        OpStats {
            calls: ms.len() as u64,
            total_ms: total_ns as f64 / 1e6,
            ops_per_s: (total_ns > 0).then(|| round3(ms.len() as f64 * 1e9 / total_ns as f64)),
            p50_ms: nearest_rank(&ms, 50),
            p99_ms: nearest_rank(&ms, 99),
        }
    }
}

/// The reported figures of one operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OpStats {
    /// Number of calls.
    pub calls: u64,
    /// Summed latency of all calls, in milliseconds.
    pub total_ms: f64,
    /// `calls ÷ summed latency` (`null` without calls).
    pub ops_per_s: Option<f64>,
    /// Median latency (nearest rank), in milliseconds.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency (nearest rank), in milliseconds.
    pub p99_ms: Option<f64>,
}

impl OpStats {
    /// The field-wise median of several repetitions' figures.
    pub fn median_of(all: &[&OpStats]) -> OpStats {
        OpStats {
            calls: median_u64(all.iter().map(|s| s.calls)).unwrap_or(0),
            total_ms: median(all.iter().map(|s| s.total_ms)).unwrap_or(0.0),
            ops_per_s: median(all.iter().filter_map(|s| s.ops_per_s)),
            p50_ms: median(all.iter().filter_map(|s| s.p50_ms)),
            p99_ms: median(all.iter().filter_map(|s| s.p99_ms)),
        }
    }
}

/// `x` rounded to 3 decimals (rates: more digits would be noise).
pub fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// The `p`-th percentile of sorted samples by the nearest-rank method: the value at rank
/// `ceil(p/100 · N)` (1-based); `None` for no samples.
pub fn nearest_rank(sorted: &[f64], p: usize) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The median (the mean of the two middle values for an even count); `None` when empty.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// [`median`] of integers, rounded down for an even count.
pub fn median_u64(values: impl IntoIterator<Item = u64>) -> Option<u64> {
    let mut v: Vec<u64> = values.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        v[mid - 1] / 2 + v[mid] / 2 + (v[mid - 1] % 2 + v[mid] % 2) / 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50), Some(50.0));
        assert_eq!(nearest_rank(&v, 99), Some(99.0));
        let v = [1.0, 2.0, 3.0];
        assert_eq!(nearest_rank(&v, 50), Some(2.0));
        assert_eq!(nearest_rank(&v, 99), Some(3.0));
        assert_eq!(nearest_rank(&[7.0], 1), Some(7.0));
        assert_eq!(nearest_rank(&[], 50), None);
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99), Some(990.0));
    }

    #[test]
    fn medians() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median([]), None);
        assert_eq!(median_u64([5, 1, 9]), Some(5));
        assert_eq!(median_u64([u64::MAX, u64::MAX]), Some(u64::MAX));
        assert_eq!(median_u64([1, 2]), Some(1));
    }

    #[test]
    fn op_stats() {
        let mut l = Latencies::new();
        for ms in [1, 2, 3, 4] {
            l.push(Duration::from_millis(ms));
        }
        let s = l.stats();
        assert_eq!(s.calls, 4);
        assert!((s.total_ms - 10.0).abs() < 1e-9);
        assert!((s.ops_per_s.unwrap() - 400.0).abs() < 1e-6);
        assert_eq!(s.p50_ms, Some(2.0));
        assert_eq!(s.p99_ms, Some(4.0));
        let empty = Latencies::new().stats();
        assert_eq!(empty.calls, 0);
        assert_eq!(empty.p50_ms, None);
    }
}
