//! How every engine is timed: warm-up runs, then timed runs until both a
//! minimum count and a minimum time are reached; the median is reported.
//! `bench/ort_bench.py` follows the same policy for onnxruntime.

use std::time::{Duration, Instant};

/// When to stop timing.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Untimed runs first.
    pub warmup: usize,
    /// At least this many timed runs...
    pub min_runs: usize,
    /// ...and at least this long in all...
    pub min_time: Duration,
    /// ...but never more runs than this.
    pub max_runs: usize,
}

/// The result of timing one thing.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub median: Duration,
    /// The mean (the timed runs' total over their count).
    pub mean: Duration,
    pub runs: usize,
}

impl Timing {
    pub fn median_ms(&self) -> f64 {
        self.median.as_secs_f64() * 1e3
    }
}

/// Runs `f` under `policy` and times each timed run on its own.
pub fn measure(
    policy: &Policy,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Timing> {
    for _ in 0..policy.warmup {
        f()?;
    }
    let mut times: Vec<Duration> = Vec::new();
    let start = Instant::now();
    while times.len() < policy.max_runs.max(1)
        && (times.len() < policy.min_runs.max(1) || start.elapsed() < policy.min_time)
    {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    let total: Duration = times.iter().sum();
    times.sort_unstable();
    Ok(Timing {
        median: median_of_sorted(&times),
        mean: total / times.len() as u32,
        runs: times.len(),
    })
}

/// The median of a sorted, non-empty list (the mean of the middle two for
/// an even count, as Python's `statistics.median`).
fn median_of_sorted(times: &[Duration]) -> Duration {
    let n = times.len();
    if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_matches_pythons() {
        let d = |ms: u64| Duration::from_millis(ms);
        assert_eq!(median_of_sorted(&[d(1), d(2), d(9)]), d(2));
        assert_eq!(median_of_sorted(&[d(1), d(3), d(5), d(9)]), d(4));
    }

    #[test]
    fn runs_at_least_the_minimum_and_warms_up() {
        let mut calls = 0;
        let policy = Policy {
            warmup: 2,
            min_runs: 5,
            min_time: Duration::ZERO,
            max_runs: 100,
        };
        let t = measure(&policy, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((t.runs, calls), (5, 7));
    }
}
