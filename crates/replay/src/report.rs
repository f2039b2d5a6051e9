//! The report: what a replay measured, in a schema that is part of the stable surface.
//!
//! [`Report`] is the machine-readable form (`--format json|yaml`, and the snapshots); its
//! keys and nesting are documented in STABILITY.md and only ever gain keys. Floats are
//! rounded to six decimals so that reports are byte-identical across platforms' last-bit
//! differences and readable in review. The human form starts with the prototype's three
//! lines, in its wording, so results can be put beside it.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use routerlab_core::Unit;
use serde::Serialize;

use crate::trace::unit_name;

/// Requests per endpoint, in endpoint order.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Nreq {
    /// Requests routed to each endpoint.
    pub counts: Vec<u64>,
    /// Busiest endpoint over the mean (1 = perfectly even).
    pub max_over_mean: f64,
    /// Coefficient of variation (population std / mean).
    pub cv: f64,
}

/// Distribution of cache-miss lengths of routed requests, in the report's unit.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheMiss {
    /// Mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

/// Requests that continue an earlier one.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SharePrefix {
    /// Requests with a parent.
    pub total: u64,
    /// Of those, routed to their parent's endpoint.
    pub same_endpoint: u64,
}

/// What a replay measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Requests read from the trace.
    pub requests: u64,
    /// Endpoints in the fleet.
    pub endpoints: u64,
    /// Requests no endpoint took.
    pub rejected: u64,
    /// Unit of lengths: `bytes` or `tokens`.
    pub unit: &'static str,
    /// Requests per endpoint.
    pub nreq: Nreq,
    /// Cache-miss lengths.
    pub cache_miss: CacheMiss,
    /// Hit units / prompt units over routed requests.
    pub hit_ratio: f64,
    /// Requests kept with their conversation.
    pub share_prefix: SharePrefix,
    /// Decisions taken while at least one endpoint was unavailable.
    pub constrained_decisions: u64,
    /// Latencies and engine figures, in timed replays only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed: Option<crate::timed::TimedReport>,
}

/// Largest length the histogram tells apart (2^40); longer misses count as this.
const MAX_TRACKED: u64 = 1 << 40;

/// Accumulates statistics request by request.
pub struct StatsBuilder {
    unit: Unit,
    counts: Vec<u64>,
    miss: Histogram<u64>,
    miss_sum: u128,
    miss_sum_sq: u128,
    miss_max: u64,
    prompt_units: u128,
    hit_units: u128,
    requests: u64,
    rejected: u64,
    constrained: u64,
    share_total: u64,
    share_same: u64,
}

impl StatsBuilder {
    /// Statistics for `endpoints` endpoints, lengths in `unit`.
    pub fn new(endpoints: usize, unit: Unit) -> StatsBuilder {
        StatsBuilder {
            unit,
            counts: vec![0; endpoints],
            // Fixed bounds: an auto-resizing histogram clamps `saturating_record` to its
            // current (tiny) range instead of growing.
            miss: Histogram::new_with_bounds(1, MAX_TRACKED, 3).expect("valid histogram bounds"),
            miss_sum: 0,
            miss_sum_sq: 0,
            miss_max: 0,
            prompt_units: 0,
            hit_units: 0,
            requests: 0,
            rejected: 0,
            constrained: 0,
            share_total: 0,
            share_same: 0,
        }
    }

    /// A request no endpoint took.
    pub fn reject(&mut self, constrained: bool, has_parent: bool) {
        self.requests += 1;
        self.rejected += 1;
        self.constrained += u64::from(constrained);
        self.share_total += u64::from(has_parent);
    }

    /// A request routed to endpoint `pos`; `same_as_parent` is `None` without a parent.
    pub fn route(
        &mut self,
        pos: usize,
        prompt_len: u64,
        hit_units: u64,
        constrained: bool,
        same_as_parent: Option<bool>,
    ) {
        self.requests += 1;
        self.counts[pos] += 1;
        self.constrained += u64::from(constrained);
        let miss = prompt_len - hit_units;
        self.miss.saturating_record(miss);
        self.miss_sum += u128::from(miss);
        self.miss_sum_sq += u128::from(miss) * u128::from(miss);
        self.miss_max = self.miss_max.max(miss);
        self.prompt_units += u128::from(prompt_len);
        self.hit_units += u128::from(hit_units);
        if let Some(same) = same_as_parent {
            self.share_total += 1;
            self.share_same += u64::from(same);
        }
    }

    /// The finished report.
    pub fn finish(self) -> Report {
        let routed = self.requests - self.rejected;
        let (mean, std) = if routed == 0 {
            (0.0, 0.0)
        } else {
            let n = routed as f64;
            let mean = self.miss_sum as f64 / n;
            // Exact integer variance: n·Σx² − (Σx)², then one division.
            let spread = u128::from(routed) * self.miss_sum_sq - self.miss_sum * self.miss_sum;
            (mean, (spread as f64 / (n * n)).sqrt())
        };
        let percentile = |q: f64| {
            if routed == 0 {
                0
            } else {
                self.miss.value_at_quantile(q)
            }
        };
        let count_mean = self.counts.iter().sum::<u64>() as f64 / self.counts.len().max(1) as f64;
        let (max_over_mean, cv) = if count_mean == 0.0 {
            (0.0, 0.0)
        } else {
            let max = *self.counts.iter().max().unwrap_or(&0) as f64;
            let var = self
                .counts
                .iter()
                .map(|c| (*c as f64 - count_mean).powi(2))
                .sum::<f64>()
                / self.counts.len() as f64;
            (max / count_mean, var.sqrt() / count_mean)
        };
        Report {
            requests: self.requests,
            endpoints: self.counts.len() as u64,
            rejected: self.rejected,
            unit: unit_name(self.unit),
            nreq: Nreq {
                counts: self.counts,
                max_over_mean: round6(max_over_mean),
                cv: round6(cv),
            },
            cache_miss: CacheMiss {
                mean: round6(mean),
                std: round6(std),
                p50: percentile(0.5),
                p90: percentile(0.9),
                p99: percentile(0.99),
                max: self.miss_max,
            },
            hit_ratio: if self.prompt_units == 0 {
                0.0
            } else {
                round6(self.hit_units as f64 / self.prompt_units as f64)
            },
            share_prefix: SharePrefix {
                total: self.share_total,
                same_endpoint: self.share_same,
            },
            constrained_decisions: self.constrained,
            timed: None,
        }
    }
}

/// Rounds to six decimals, so reports do not depend on the last bits of a float.
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The counts as numpy prints an integer array: `[400 200   0 400]`.
fn numpy_style(counts: &[u64]) -> String {
    let width = counts
        .iter()
        .map(|c| c.to_string().len())
        .max()
        .unwrap_or(1);
    let cells: Vec<String> = counts.iter().map(|c| format!("{c:>width$}")).collect();
    format!("[{}]", cells.join(" "))
}

impl Report {
    /// The human form: the prototype's three lines, then a table per endpoint and a summary.
    pub fn to_human(&self, endpoint_names: &[String]) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Nreq distribution: {}", numpy_style(&self.nreq.counts));
        let _ = writeln!(
            out,
            "Cache-miss length: mean: {:.2}, std: {:.2}",
            self.cache_miss.mean, self.cache_miss.std
        );
        let _ = writeln!(
            out,
            "{} out of {} share-prefix requests were routed to the same endpoint",
            self.share_prefix.same_endpoint, self.share_prefix.total
        );
        let _ = writeln!(out);
        let name_width = endpoint_names
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(
            out,
            "{:<name_width$}  {:>9}  {:>6}",
            "endpoint", "requests", "share"
        );
        let routed: u64 = self.nreq.counts.iter().sum();
        for (name, count) in endpoint_names.iter().zip(&self.nreq.counts) {
            let share = if routed == 0 {
                0.0
            } else {
                *count as f64 * 100.0 / routed as f64
            };
            let _ = writeln!(out, "{name:<name_width$}  {count:>9}  {share:>5.1}%");
        }
        let _ = writeln!(out);
        let unit = self.unit;
        let rows = [
            ("requests", self.requests.to_string()),
            ("rejected", self.rejected.to_string()),
            (
                "constrained decisions",
                self.constrained_decisions.to_string(),
            ),
            ("load max/mean", format!("{:.3}", self.nreq.max_over_mean)),
            ("load cv", format!("{:.3}", self.nreq.cv)),
            ("hit ratio", format!("{:.4}", self.hit_ratio)),
            (
                "cache miss p50/p90/p99/max",
                format!(
                    "{} / {} / {} / {} {unit}",
                    self.cache_miss.p50,
                    self.cache_miss.p90,
                    self.cache_miss.p99,
                    self.cache_miss.max
                ),
            ),
            (
                "same endpoint as parent",
                format!(
                    "{} of {}",
                    self.share_prefix.same_endpoint, self.share_prefix.total
                ),
            ),
        ];
        for (label, value) in rows {
            let _ = writeln!(out, "{label:<28}{value}");
        }
        if let Some(timed) = &self.timed {
            timed_human(&mut out, timed);
        }
        out
    }
}

/// The timed replay's human tables: latencies, then engines.
fn timed_human(out: &mut String, timed: &crate::timed::TimedReport) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10}{:>12}{:>12}{:>12}{:>12}{:>12}",
        "ms", "mean", "p50", "p90", "p99", "max"
    );
    for (label, l) in [
        ("ttft", &timed.ttft),
        ("tpot", &timed.tpot),
        ("e2e", &timed.e2e),
        ("queue", &timed.queue),
    ] {
        let _ = writeln!(
            out,
            "{label:<10}{:>12.1}{:>12.1}{:>12.1}{:>12.1}{:>12.1}",
            l.mean, l.p50, l.p90, l.p99, l.max
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "makespan {:.1} s; {:.0} input and {:.0} output tokens/s; realised hit ratio {:.4}; {} waited at the router",
        timed.makespan_s,
        timed.throughput.input_tokens_per_s,
        timed.throughput.output_tokens_per_s,
        timed.hit_ratio,
        timed.router_queued
    );
    let width = timed
        .per_endpoint
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        out,
        "{:<width$}  {:>9}  {:>13}  {:>7}  {:>7}  {:>10}  {:>11}",
        "endpoint", "requests", "prompt tokens", "peak KV", "mean KV", "evictions", "preemptions"
    );
    for e in &timed.per_endpoint {
        let _ = writeln!(
            out,
            "{:<width$}  {:>9}  {:>13}  {:>6.1}%  {:>6.1}%  {:>10}  {:>11}",
            e.name,
            e.requests,
            e.prompt_tokens,
            e.peak_kv_usage * 100.0,
            e.mean_kv_usage * 100.0,
            e.evictions,
            e.preemptions
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_like_numpy() {
        assert_eq!(numpy_style(&[400, 200, 0, 400]), "[400 200   0 400]");
        assert_eq!(numpy_style(&[]), "[]");
    }

    #[test]
    fn statistics_by_hand() {
        let mut stats = StatsBuilder::new(2, Unit::Tokens);
        stats.route(0, 100, 100, false, None); // miss 0
        stats.route(0, 100, 0, false, Some(true)); // miss 100
        stats.route(1, 50, 0, true, Some(false)); // miss 50
        stats.reject(true, true);
        for _ in 0..7 {
            stats.route(1, 3000, 1000, false, None); // miss 2000
        }
        let report = stats.finish();
        assert_eq!(report.requests, 11);
        assert_eq!(report.rejected, 1);
        assert_eq!(report.nreq.counts, vec![2, 8]);
        assert_eq!(report.nreq.max_over_mean, 1.6);
        // Misses: 0, 100, 50 and seven of 2000.
        let misses = [
            0.0, 100.0, 50.0, 2000.0, 2000.0, 2000.0, 2000.0, 2000.0, 2000.0, 2000.0,
        ];
        let mean = misses.iter().sum::<f64>() / 10.0;
        let var = misses.iter().map(|m| (m - mean) * (m - mean)).sum::<f64>() / 10.0;
        assert_eq!(report.cache_miss.mean, round6(mean));
        assert_eq!(report.cache_miss.std, round6(var.sqrt()));
        assert_eq!(report.cache_miss.p50, 2000);
        assert_eq!(report.cache_miss.p90, 2000);
        assert_eq!(report.cache_miss.max, 2000);
        assert_eq!(report.hit_ratio, round6(7100.0 / 21250.0));
        assert_eq!(
            report.share_prefix,
            SharePrefix {
                total: 3,
                same_endpoint: 1
            }
        );
        assert_eq!(report.constrained_decisions, 2);
    }
}
