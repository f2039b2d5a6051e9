//! Judging a new policy on logged decisions. Where the logging policy chose at random, each
//! decision the new policy would have taken alike tells, weighted by the inverse of the
//! chance the logged choice had, what the new policy's decisions would have given:
//! the inverse-propensity estimate (IPS), its self-normalised form (SNIPS), and the doubly
//! robust one (DR), which adds a model of the metric per endpoint (its logged mean) and
//! corrects it where the choices agree. Each with a 95% interval from the spread of its
//! terms (normal approximation).

use serde::{Deserialize, Serialize};

/// One logged decision, as the estimates need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoggedDecision {
    /// The chance the logging policy had of its choice.
    pub propensity: f64,
    /// The endpoint it chose.
    pub logged: usize,
    /// The endpoint the new policy chooses in the same state.
    pub chosen: usize,
    /// The metric measured (TTFT, ms).
    pub value: f64,
}

/// An estimate and its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The estimate.
    pub value: f64,
    /// Its 95% interval, low and high.
    pub ci95: [f64; 2],
}

/// What a new policy's decisions would have given on logged traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffPolicyReport {
    /// The metric: `ttft_ms`.
    pub metric: String,
    /// The policy that logged the decisions.
    pub logged_policy: String,
    /// Logged decisions with a propensity (the others cannot be weighed).
    pub decisions: u64,
    /// Of them, those the new policy takes alike.
    pub matched: u64,
    /// The metric's mean under the logging policy.
    pub logged_mean: f64,
    /// Inverse-propensity estimate of its mean under the new policy.
    pub ips: Estimate,
    /// Self-normalised IPS (the weights summing to the decisions).
    pub snips: f64,
    /// Doubly robust estimate.
    pub dr: Estimate,
}

fn mean_and_interval(terms: &[f64]) -> Estimate {
    let n = terms.len() as f64;
    let mean = terms.iter().sum::<f64>() / n;
    let var = match terms.len() {
        0 | 1 => 0.0,
        _ => terms.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0),
    };
    let half = 1.96 * (var / n).sqrt();
    Estimate {
        value: mean,
        ci95: [mean - half, mean + half],
    }
}

/// The estimates of `metric` from `decisions` logged by `logged_policy`; `None` when none
/// has a propensity above 0.
pub fn estimate(
    metric: &str,
    logged_policy: &str,
    decisions: &[LoggedDecision],
) -> Option<OffPolicyReport> {
    let decisions: Vec<&LoggedDecision> = (decisions.iter())
        .filter(|d| d.propensity > 0.0 && d.propensity <= 1.0 && d.value.is_finite())
        .collect();
    if decisions.is_empty() {
        return None;
    }
    // The metric's model per endpoint: its logged mean there (the overall mean elsewhere).
    let overall = decisions.iter().map(|d| d.value).sum::<f64>() / decisions.len() as f64;
    let endpoints = decisions
        .iter()
        .map(|d| d.logged.max(d.chosen))
        .max()
        .unwrap_or(0)
        + 1;
    let mut sums = vec![(0.0, 0u64); endpoints];
    for d in &decisions {
        sums[d.logged].0 += d.value;
        sums[d.logged].1 += 1;
    }
    let model = |e: usize| match sums[e] {
        (_, 0) => overall,
        (sum, n) => sum / n as f64,
    };
    let weight = |d: &LoggedDecision| {
        if d.chosen == d.logged {
            1.0 / d.propensity
        } else {
            0.0
        }
    };
    let ips: Vec<f64> = decisions.iter().map(|d| weight(d) * d.value).collect();
    let dr: Vec<f64> = (decisions.iter())
        .map(|d| model(d.chosen) + weight(d) * (d.value - model(d.logged)))
        .collect();
    let weights: f64 = decisions.iter().map(|d| weight(d)).sum();
    Some(OffPolicyReport {
        metric: metric.to_owned(),
        logged_policy: logged_policy.to_owned(),
        decisions: decisions.len() as u64,
        matched: decisions.iter().filter(|d| d.chosen == d.logged).count() as u64,
        logged_mean: overall,
        ips: mean_and_interval(&ips),
        snips: match weights {
            0.0 => f64::NAN,
            w => ips.iter().sum::<f64>() / w,
        },
        dr: mean_and_interval(&dr),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(logged: usize, chosen: usize, value: f64) -> LoggedDecision {
        LoggedDecision {
            propensity: 0.5,
            logged,
            chosen,
            value,
        }
    }

    #[test]
    fn the_estimates_as_computed_by_hand() {
        // Logged uniformly over two endpoints: 0 took 10 and 20 ms, 1 took 40 and 50 ms.
        // The new policy always picks 0: it agrees on the first two.
        let decisions = [d(0, 0, 10.0), d(0, 0, 20.0), d(1, 0, 40.0), d(1, 0, 50.0)];
        let r = estimate("ttft_ms", "random", &decisions).unwrap();
        assert_eq!((r.decisions, r.matched), (4, 2));
        assert_eq!(r.logged_mean, 30.0);
        // IPS: (2·10 + 2·20 + 0 + 0) / 4 = 15; SNIPS: 60 / 4 = 15.
        assert_eq!(r.ips.value, 15.0);
        assert_eq!(r.snips, 15.0);
        // DR: the model says 15 at 0 and 45 at 1. Terms: 15 + 2·(10 − 15) = 5,
        // 15 + 2·(20 − 15) = 25, 15 + 0 = 15, 15: mean 15.
        assert_eq!(r.dr.value, 15.0);
        // Its terms 5, 25, 15, 15: sample variance 200/3, so ±1.96·√(200/3/4).
        let half = 1.96 * (200.0_f64 / 3.0 / 4.0).sqrt();
        assert!((r.dr.ci95[1] - (15.0 + half)).abs() < 1e-9, "{r:?}");
        // A policy that never agrees has IPS 0 and DR the model's value at its choice.
        let never = [d(0, 1, 10.0), d(0, 1, 20.0)];
        let r = estimate("ttft_ms", "random", &never).unwrap();
        assert_eq!((r.ips.value, r.matched), (0.0, 0));
        assert_eq!(r.dr.value, 15.0, "no decision at 1: the overall mean");
        assert!(
            estimate(
                "ttft_ms",
                "lcp",
                &[LoggedDecision {
                    propensity: 0.0,
                    ..d(0, 0, 1.0)
                }]
            )
            .is_none()
        );
    }
}
