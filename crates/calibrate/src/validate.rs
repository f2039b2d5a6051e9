//! `routerlab validate`: what a fitted engine model predicts of measured runs, against what
//! they measured. Each run is judged by TTFT and end-to-end latency (arrival to last
//! token), mean and 50th, 90th and 99th percentiles, each with its absolute percentage
//! error; over the runs the model was not fitted on, the median of each metric's errors.
//! A run replayed under several seeds of its routers is judged by each metric's median over
//! them ([`RunCheck::over_seeds`]).

use crate::measured::{Samples, quantile};

/// The metrics each run is judged by, in their order: name as printed, key in JSON and CSV.
pub const METRICS: [(&str, &str); 8] = [
    ("TTFT mean (ms)", "ttft_mean_ms"),
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TTFT p90 (ms)", "ttft_p90_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("E2E mean (ms)", "e2e_mean_ms"),
    ("E2E p50 (ms)", "e2e_p50_ms"),
    ("E2E p90 (ms)", "e2e_p90_ms"),
    ("E2E p99 (ms)", "e2e_p99_ms"),
];

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// A run's [`METRICS`], in order.
pub fn metrics(samples: &Samples) -> [f64; 8] {
    let (mut ttft, mut e2e) = (samples.ttft_ms.clone(), samples.e2e_ms.clone());
    [
        mean(&ttft),
        quantile(&mut ttft, 0.5),
        quantile(&mut ttft, 0.9),
        quantile(&mut ttft, 0.99),
        mean(&e2e),
        quantile(&mut e2e, 0.5),
        quantile(&mut e2e, 0.9),
        quantile(&mut e2e, 0.99),
    ]
}

/// Absolute percentage error of `simulated` against `measured` (0 when both are 0).
pub fn abs_error_pct(measured: f64, simulated: f64) -> f64 {
    if measured == 0.0 {
        if simulated == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        ((simulated - measured) / measured).abs() * 100.0
    }
}

/// One run, measured and simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCheck {
    /// The run as given.
    pub run: String,
    /// Whether the model was fitted on it.
    pub fitted: bool,
    /// Its requests.
    pub requests: usize,
    /// [`METRICS`] measured.
    pub measured: [f64; 8],
    /// [`METRICS`] simulated: under several seeds of the routers, each one's median over
    /// them.
    pub simulated: [f64; 8],
    /// Under several seeds, each metric's lowest and highest over them
    /// ([`RunCheck::over_seeds`]).
    pub range: Option<[[f64; 2]; 8]>,
}

impl RunCheck {
    /// Compares `simulated` with `measured`.
    pub fn new(run: String, fitted: bool, measured: &Samples, simulated: &Samples) -> RunCheck {
        RunCheck {
            run,
            fitted,
            requests: measured.ttft_ms.len(),
            measured: metrics(measured),
            simulated: metrics(simulated),
            range: None,
        }
    }

    /// Compares the runs `simulated`, one under each seed of the routers (a random or
    /// otherwise seeded router spreads the requests differently under each), with
    /// `measured`: each metric's median over the seeds as the simulated value, with its
    /// lowest and highest. One seed is [`RunCheck::new`]; `simulated` holds at least one.
    pub fn over_seeds(
        run: String,
        fitted: bool,
        measured: &Samples,
        simulated: &[Samples],
    ) -> RunCheck {
        let mut check = RunCheck::new(run, fitted, measured, &simulated[0]);
        if simulated.len() > 1 {
            let each: Vec<[f64; 8]> = simulated.iter().map(metrics).collect();
            let mut range = [[0.0; 2]; 8];
            for i in 0..8 {
                let mut values: Vec<f64> = each.iter().map(|m| m[i]).collect();
                values.sort_by(f64::total_cmp);
                check.simulated[i] = median_sorted(&values);
                range[i] = [values[0], values[values.len() - 1]];
            }
            check.range = Some(range);
        }
        check
    }

    /// The first metric measured as 0, if any: no request is served in no time, and an
    /// error against 0 is no percentage, so such a run cannot be judged.
    pub fn measured_zero(&self) -> Option<&'static str> {
        METRICS
            .iter()
            .zip(self.measured)
            .find(|(_, m)| *m == 0.0)
            .map(|((name, _), _)| *name)
    }

    /// Each metric's absolute percentage error.
    pub fn errors(&self) -> [f64; 8] {
        std::array::from_fn(|i| abs_error_pct(self.measured[i], self.simulated[i]))
    }
}

/// Each metric's median absolute percentage error over `runs` (the predicted ones, or all
/// when every run was fitted), and how many runs that is.
pub fn median_errors(runs: &[RunCheck]) -> ([f64; 8], usize) {
    let predicted: Vec<&RunCheck> = runs.iter().filter(|r| !r.fitted).collect();
    let judged: Vec<&RunCheck> = if predicted.is_empty() {
        runs.iter().collect()
    } else {
        predicted
    };
    let medians = std::array::from_fn(|i| {
        let mut errors: Vec<f64> = judged.iter().map(|r| r.errors()[i]).collect();
        errors.sort_by(f64::total_cmp);
        median_sorted(&errors)
    });
    (medians, judged.len())
}

/// The median of `sorted` (the middle two's mean when they are even; 0 when empty).
pub fn median_sorted(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(ttft: &[f64], e2e: &[f64]) -> Samples {
        Samples {
            ttft_ms: ttft.to_vec(),
            tpot_ms: vec![None; ttft.len()],
            makespan_s: 1.0,
            e2e_ms: e2e.to_vec(),
        }
    }

    #[test]
    fn metrics_are_means_and_nearest_rank_percentiles() {
        let m = metrics(&samples(
            &[10.0, 20.0, 30.0, 40.0],
            &[100.0, 200.0, 300.0, 400.0],
        ));
        assert_eq!(m, [25.0, 30.0, 40.0, 40.0, 250.0, 300.0, 400.0, 400.0]);
    }

    #[test]
    fn the_median_error_is_over_predicted_runs_only() {
        let measured = samples(&[100.0], &[1000.0]);
        let check = |fitted, ttft: f64| {
            RunCheck::new("r".into(), fitted, &measured, &samples(&[ttft], &[1000.0]))
        };
        let runs = [
            check(true, 500.0),
            check(false, 110.0),
            check(false, 80.0),
            check(false, 104.0),
        ];
        let (medians, judged) = median_errors(&runs);
        assert_eq!(judged, 3);
        assert!((medians[0] - 10.0).abs() < 1e-9, "{medians:?}");
        assert_eq!(medians[4], 0.0);
        // Even count: the mean of the middle two.
        let (medians, _) = median_errors(&runs[1..3]);
        assert!((medians[1] - 15.0).abs() < 1e-9, "{medians:?}");
        assert_eq!(abs_error_pct(0.0, 0.0), 0.0);
    }

    #[test]
    fn over_seeds_each_metric_is_its_median_with_its_range() {
        let measured = samples(&[100.0], &[1000.0]);
        let seeds = [
            samples(&[90.0], &[1200.0]),
            samples(&[130.0], &[800.0]),
            samples(&[100.0], &[1100.0]),
        ];
        let check = RunCheck::over_seeds("r".into(), false, &measured, &seeds);
        // TTFT: 90, 130, 100 → 100 (not the first seed's 90); E2E: 1200, 800, 1100 → 1100.
        assert_eq!(check.simulated[0], 100.0);
        assert_eq!(check.simulated[4], 1100.0);
        let range = check.range.expect("three seeds have a range");
        assert_eq!(range[0], [90.0, 130.0]);
        assert_eq!(range[4], [800.0, 1200.0]);
        assert_eq!(check.errors()[0], 0.0);
        // One seed is the plain comparison, with no range.
        let one = RunCheck::over_seeds("r".into(), false, &measured, &seeds[..1]);
        assert_eq!(one, RunCheck::new("r".into(), false, &measured, &seeds[0]));
        assert_eq!(one.range, None);
    }
}
