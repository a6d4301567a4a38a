//! Exact percentiles of one run's samples, and the median and spread over runs.

use std::time::Duration;

use serde::Serialize;

/// One run's latencies, sorted, in nanoseconds. Percentiles are exact (nearest rank), not
/// estimated from buckets.
#[derive(Debug, Clone, Default)]
pub struct Latencies(Vec<u64>);

impl Latencies {
    pub fn from_nanos(mut nanos: Vec<u64>) -> Latencies {
        nanos.sort_unstable();
        Latencies(nanos)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q`-quantile (0 < q ≤ 1), nearest rank; zero when there are no samples.
    pub fn percentile(&self, q: f64) -> Duration {
        Duration::from_nanos(nearest_rank(&self.0, q).unwrap_or(0))
    }
}

/// The nearest-rank `q`-quantile of sorted samples: the smallest sample with at least a `q`
/// share of the samples at or below it.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Median and range of one measurement over its runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// (max − min) / median, in percent; 0 for a single run.
    pub spread_pct: f64,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let (min, max) = (sorted[0], sorted[n - 1]);
        let spread_pct = if median == 0.0 {
            0.0
        } else {
            (max - min) / median.abs() * 100.0
        };
        Some(Spread {
            median,
            min,
            max,
            spread_pct,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        let check = |q: f64, want: u64| assert_eq!(nearest_rank(&v, q), Some(want), "q={q}");
        check(0.5, 500);
        check(0.99, 990);
        check(0.999, 999);
        check(1.0, 1000);
        check(0.0, 1);
        assert_eq!(nearest_rank::<u64>(&[], 0.5), None);
        assert_eq!(nearest_rank(&[7], 0.999), Some(7));
    }

    #[test]
    fn latencies_sort_their_samples() {
        let l = Latencies::from_nanos(vec![3_000, 1_000, 2_000]);
        assert_eq!(l.percentile(0.5), Duration::from_micros(2));
        assert_eq!(l.percentile(1.0), Duration::from_micros(3));
    }

    #[test]
    fn spread_over_runs() {
        let s = Spread::of(&[10.0, 12.0, 11.0]).expect("values");
        assert_eq!((s.median, s.min, s.max), (11.0, 10.0, 12.0));
        assert!((s.spread_pct - 200.0 / 11.0).abs() < 1e-9);
        let even = Spread::of(&[1.0, 3.0]).expect("values");
        assert_eq!(even.median, 2.0);
        assert_eq!(Spread::of(&[5.0]).map(|s| s.spread_pct), Some(0.0));
        assert_eq!(Spread::of(&[]), None);
    }
}
