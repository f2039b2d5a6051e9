//! Statistics as a run accumulates them: the time-free figures every replay reports, and
//! the latency figures of the timed replay, each a named [`LatencyStat`] rather than a slot
//! in an array.

use hdrhistogram::Histogram;
use routerlab_core::Unit;

use crate::schema::{
    CacheMiss, Latency, Nreq, Quality, ReplicaReport, Report, SharePrefix, Throughput, TimedReport,
    round6,
};
use crate::slo::{Slo, SloReport};

/// Largest length the histogram tells apart (2^40); longer misses count as this.
const MAX_TRACKED: u64 = 1 << 40;

/// Accumulates statistics request by request.
pub struct StatsBuilder {
    unit: Unit,
    counts: Vec<u64>,
    /// Cache-miss lengths, for percentiles; `None` when only decisions are counted.
    miss: Option<Histogram<u64>>,
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
    best_hit_blocks: u64,
    achieved_hit_blocks: u64,
    kv_optimal: u64,
    judged: u64,
}

impl StatsBuilder {
    /// Statistics for `endpoints` endpoints, lengths in `unit`.
    pub fn new(endpoints: usize, unit: Unit) -> StatsBuilder {
        StatsBuilder {
            unit,
            counts: vec![0; endpoints],
            // Fixed bounds: an auto-resizing histogram clamps `saturating_record` to its
            // current (tiny) range instead of growing.
            miss: Some(
                Histogram::new_with_bounds(1, MAX_TRACKED, 3).expect("valid histogram bounds"),
            ),
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
            best_hit_blocks: 0,
            achieved_hit_blocks: 0,
            kv_optimal: 0,
            judged: 0,
        }
    }

    /// Statistics of decisions only: no cache-miss percentiles (they read 0), for the
    /// per-replica tallies that report none and should cost little.
    pub fn decisions_only(endpoints: usize, unit: Unit) -> StatsBuilder {
        StatsBuilder {
            miss: None,
            ..StatsBuilder::new(endpoints, unit)
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
        if let Some(histogram) = &mut self.miss {
            histogram.saturating_record(miss);
        }
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

    /// The quality of one routing decision: the longest cached prefix among the endpoints
    /// the matcher could choose, and the one it chose, in blocks.
    pub fn judge(&mut self, best_blocks: u64, achieved_blocks: u64) {
        debug_assert!(achieved_blocks <= best_blocks);
        self.best_hit_blocks += best_blocks;
        self.achieved_hit_blocks += achieved_blocks;
        self.kv_optimal += u64::from(achieved_blocks == best_blocks);
        self.judged += 1;
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
                // The histogram rounds up to its bucket's edge: never above the exact max.
                self.miss
                    .as_ref()
                    .map_or(0, |h| h.value_at_quantile(q).min(self.miss_max))
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
            unit: self.unit.into(),
            run: None,
            measured: None,
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
            quality: Some(Quality {
                best_hit_blocks: self.best_hit_blocks,
                achieved_hit_blocks: self.achieved_hit_blocks,
                achieved_over_best: if self.best_hit_blocks == 0 {
                    1.0
                } else {
                    round6(self.achieved_hit_blocks as f64 / self.best_hit_blocks as f64)
                },
                kv_optimal_share: ratio(self.kv_optimal, self.judged),
                followup_precision: ratio(self.share_same, self.share_total),
            }),
            replicas: None,
            timed: None,
        }
    }
}

/// One latency's samples, in microseconds: a histogram for percentiles and the maximum,
/// the exact sum for the mean.
pub struct LatencyStat {
    hist: Histogram<u64>,
    sum: u128,
    count: u64,
    /// The exact largest sample: the histogram only knows its bucket.
    max: u64,
}

impl Default for LatencyStat {
    fn default() -> Self {
        LatencyStat {
            hist: Histogram::new_with_bounds(1, 1 << 42, 3).expect("valid histogram bounds"),
            sum: 0,
            count: 0,
            max: 0,
        }
    }
}

impl LatencyStat {
    /// Records one sample, microseconds.
    pub fn record(&mut self, us: u64) {
        self.hist.saturating_record(us);
        self.sum += u128::from(us);
        self.count += 1;
        self.max = self.max.max(us);
    }

    /// Mean and percentiles in milliseconds; `None` without samples, so that a report never
    /// shows a latency of 0 ms that nothing measured.
    pub fn summary(&self) -> Option<Latency> {
        if self.count == 0 {
            return None;
        }
        let ms = |us: u64| round6(us as f64 / 1000.0);
        Some(Latency {
            mean: round6(self.sum as f64 / self.count as f64 / 1000.0),
            p50: ms(self.hist.value_at_quantile(0.5).min(self.max)),
            p90: ms(self.hist.value_at_quantile(0.9).min(self.max)),
            p99: ms(self.hist.value_at_quantile(0.99).min(self.max)),
            max: ms(self.max),
        })
    }
}

/// `part / whole`, rounded; 0 when `whole` is 0.
pub fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round6(part as f64 / whole as f64)
    }
}

/// One finished request's times (nanoseconds on the run's clock) and tokens, as the timed
/// reduction takes them.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    /// When it arrived (was sent, for `drive`).
    pub arrival_ns: u64,
    /// When an engine first scheduled it, if the driver can see that (`drive` cannot).
    pub scheduled_ns: Option<u64>,
    /// When its first token came.
    pub first_token_ns: u64,
    /// When its last token came.
    pub finish_ns: u64,
    /// Tokens it generated.
    pub output_tokens: u64,
    /// Its prompt's tokens.
    pub prompt_tokens: u64,
    /// Of those, served from a prefix cache.
    pub hit_tokens: u64,
}

/// The latency-to-report reduction of a timed run, one for the timed replay and `drive`:
/// TTFT, TPOT (the time after the first token over the tokens after it), end to end and
/// queue time in microseconds, token throughput over the makespan (first arrival to last
/// finish) and the prefix hit ratio of finished requests.
#[derive(Default)]
pub struct TimedTally {
    ttft: LatencyStat,
    tpot: LatencyStat,
    e2e: LatencyStat,
    queue: LatencyStat,
    prompt_tokens: u128,
    hit_tokens: u128,
    output_tokens: u128,
    start_ns: Option<u64>,
    end_ns: u64,
    slo: Option<SloTally>,
}

/// The SLO targets in nanoseconds and the counts of requests meeting them.
#[derive(Default)]
struct SloTally {
    targets: Slo,
    ttft_ns: Option<u64>,
    tpot_ns: Option<u64>,
    requests: u64,
    ttft_met: u64,
    tpot_met: u64,
    met: u64,
}

impl TimedTally {
    /// A tally that also judges each finished request by `slo` (its targets finite and
    /// non-negative, as the caller checked).
    pub fn with_slo(slo: Option<Slo>) -> TimedTally {
        let ns =
            |ms: Option<f64>| ms.map(|ms| (ms * 1e6).round().clamp(0.0, u64::MAX as f64) as u64);
        TimedTally {
            slo: slo.map(|targets| SloTally {
                targets,
                ttft_ns: ns(targets.ttft_ms),
                tpot_ns: ns(targets.tpot_ms),
                ..SloTally::default()
            }),
            ..TimedTally::default()
        }
    }

    /// A request arrived at `at_ns`: the makespan starts at the earliest.
    pub fn arrived(&mut self, at_ns: u64) {
        self.start_ns = Some(self.start_ns.map_or(at_ns, |s| s.min(at_ns)));
    }

    /// The share of the requests finished so far that met the SLO; `None` without one or
    /// before any finished.
    pub fn slo_attainment(&self) -> Option<f64> {
        let slo = self.slo.as_ref()?;
        (slo.requests > 0).then(|| slo.met as f64 / slo.requests as f64)
    }

    /// The latest finish so far (0 before any).
    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }

    /// One finished request.
    pub fn finished(&mut self, r: Finished) {
        let us = |ns: u64| ns / 1000;
        self.ttft.record(us(r.first_token_ns - r.arrival_ns));
        if r.output_tokens > 1 {
            let per_token = (r.finish_ns - r.first_token_ns) / (r.output_tokens - 1);
            self.tpot.record(us(per_token));
        }
        if let Some(slo) = &mut self.slo {
            let ttft = r.first_token_ns - r.arrival_ns;
            let ttft_ok = slo.ttft_ns.is_none_or(|t| ttft <= t);
            // The time after the first token against the target for each token after it,
            // exactly: no rounding of the per-token time decides a request at the edge.
            let tpot_ok = r.output_tokens <= 1
                || slo.tpot_ns.is_none_or(|t| {
                    u128::from(r.finish_ns - r.first_token_ns)
                        <= u128::from(t) * u128::from(r.output_tokens - 1)
                });
            slo.requests += 1;
            slo.ttft_met += u64::from(ttft_ok);
            slo.tpot_met += u64::from(tpot_ok);
            slo.met += u64::from(ttft_ok && tpot_ok);
        }
        self.e2e.record(us(r.finish_ns - r.arrival_ns));
        if let Some(scheduled) = r.scheduled_ns {
            self.queue.record(us(scheduled - r.arrival_ns));
        }
        self.prompt_tokens += u128::from(r.prompt_tokens);
        self.hit_tokens += u128::from(r.hit_tokens);
        self.output_tokens += u128::from(r.output_tokens);
        self.end_ns = self.end_ns.max(r.finish_ns);
    }

    /// The report's `timed` block, with no router queue, no spread and no per-endpoint
    /// rows (the replay fills those in; `drive` cannot see them).
    pub fn report(&self) -> TimedReport {
        let start = self.start_ns.unwrap_or(0);
        let seconds = self.end_ns.saturating_sub(start) as f64 / 1e9;
        let per_second = |tokens: u128| {
            if seconds > 0.0 {
                round6(tokens as f64 / seconds)
            } else {
                0.0
            }
        };
        TimedReport {
            ttft: self.ttft.summary(),
            tpot: self.tpot.summary(),
            e2e: self.e2e.summary(),
            queue: self.queue.summary(),
            throughput: Throughput {
                input_tokens_per_s: per_second(self.prompt_tokens),
                output_tokens_per_s: per_second(self.output_tokens),
            },
            makespan_s: round6(seconds),
            hit_ratio: if self.prompt_tokens == 0 {
                0.0
            } else {
                round6(self.hit_tokens as f64 / self.prompt_tokens as f64)
            },
            router_queued: 0,
            too_long: 0,
            running_spread: Default::default(),
            per_endpoint: Vec::new(),
            pools: None,
            tiers: None,
            agentic: None,
            slo: self.slo.as_ref().map(|slo| SloReport {
                targets: slo.targets,
                requests: slo.requests,
                ttft_met: slo.ttft_met,
                tpot_met: slo.tpot_met,
                met: slo.met,
                attainment: ratio(slo.met, slo.requests),
            }),
            scaling: None,
            sync: None,
            off_policy: None,
        }
    }
}

/// The statistics of the whole run and, with more than one replica, of each replica's
/// own decisions.
pub struct Tally {
    /// The whole run's statistics.
    pub all: StatsBuilder,
    replicas: Vec<StatsBuilder>,
}

impl Tally {
    /// For `replicas` replicas over `endpoints` endpoints; per-replica statistics only
    /// when there are several.
    pub fn new(replicas: usize, endpoints: usize, unit: routerlab_core::Unit) -> Tally {
        let per_replica = if replicas > 1 { replicas } else { 0 };
        Tally {
            all: StatsBuilder::new(endpoints, unit),
            replicas: (0..per_replica)
                .map(|_| StatsBuilder::decisions_only(endpoints, unit))
                .collect(),
        }
    }

    /// The whole run's statistics and those of replica `r` (when kept).
    pub fn each(&mut self, r: usize, mut f: impl FnMut(&mut StatsBuilder)) {
        f(&mut self.all);
        if let Some(replica) = self.replicas.get_mut(r) {
            f(replica);
        }
    }

    /// The report, with its `replicas` block when there are several.
    pub fn finish(self) -> Report {
        let mut report = self.all.finish();
        if !self.replicas.is_empty() {
            report.replicas = Some(
                self.replicas
                    .into_iter()
                    .map(|stats| ReplicaReport::of(stats.finish()))
                    .collect(),
            );
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_is_judged_by_the_slo_exactly_at_its_edge() {
        let finished = |ttft_ms: u64, after_first_ms: u64, output_tokens: u64| Finished {
            arrival_ns: 1_000,
            scheduled_ns: None,
            first_token_ns: 1_000 + ttft_ms * 1_000_000,
            finish_ns: 1_000 + (ttft_ms + after_first_ms) * 1_000_000,
            output_tokens,
            prompt_tokens: 10,
            hit_tokens: 0,
        };
        let mut tally = TimedTally::with_slo(Some(Slo {
            ttft_ms: Some(100.0),
            tpot_ms: Some(10.0),
        }));
        tally.finished(finished(100, 40, 5)); // TTFT at the target, TPOT 10 ms: met
        tally.finished(finished(101, 40, 5)); // TTFT over
        tally.finished(finished(50, 41, 5)); // TPOT 10.25 ms: over
        tally.finished(finished(50, 999, 1)); // one token: no TPOT to miss
        let slo = tally.report().slo.unwrap();
        assert_eq!(
            (slo.requests, slo.ttft_met, slo.tpot_met, slo.met),
            (4, 3, 3, 2)
        );
        assert_eq!(slo.attainment, 0.5);
        // A TTFT target alone judges by TTFT alone; no targets, no block.
        let mut ttft_only = TimedTally::with_slo(Some(Slo {
            ttft_ms: Some(100.0),
            tpot_ms: None,
        }));
        ttft_only.finished(finished(50, 41, 5));
        assert_eq!(ttft_only.report().slo.unwrap().met, 1);
        assert_eq!(TimedTally::default().report().slo, None);
    }

    #[test]
    fn percentiles_never_pass_the_exact_maximum() {
        // The histogram keeps 3 significant digits: 100,001 µs sits in a bucket whose
        // upper edge is above it. The report must still say p99 <= max = the sample.
        let mut stat = LatencyStat::default();
        stat.record(100_001);
        let l = stat.summary().expect("one sample");
        assert_eq!((l.p50, l.p99, l.max), (100.001, 100.001, 100.001));
        let mut stats = StatsBuilder::new(1, routerlab_core::Unit::Tokens);
        stats.route(0, 100_001, 0, false, None);
        let report = stats.finish();
        assert_eq!(
            (report.cache_miss.p99, report.cache_miss.max),
            (100_001, 100_001)
        );
        assert_eq!(report.invariant_violations(), Vec::<String>::new());
    }

    #[test]
    fn a_broken_report_is_caught() {
        let mut stats = StatsBuilder::new(2, routerlab_core::Unit::Tokens);
        stats.route(0, 100, 50, false, None);
        let mut report = stats.finish();
        report.cache_miss.p99 = report.cache_miss.max + 1;
        report.rejected = 5;
        report.hit_ratio = 1.5;
        let broken = report.invariant_violations();
        assert_eq!(broken.len(), 3, "{broken:?}");
        assert!(
            broken[0].starts_with("cache_miss.p99 51 > cache_miss.max 50"),
            "{broken:?}"
        );
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
