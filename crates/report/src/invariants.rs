//! The rules every report keeps ([`Report::invariant_violations`]), checked at the end of
//! every replay in debug builds.

use crate::schema::*;

impl Report {
    /// Every rule a report must keep, broken: percentiles in order and at most the max,
    /// the mean within the range, ratios within 0..=1, counts that add up, and (timed)
    /// end-to-end at least time to first token, which is at least the queue. Empty when
    /// the report is consistent. Checked in debug builds at the end of every replay, and
    /// by the tests.
    pub fn invariant_violations(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let mut ordered = |name: &str, values: &[(&str, f64)]| {
            for pair in values.windows(2) {
                if pair[0].1 > pair[1].1 {
                    broken.push(format!(
                        "{name}.{} {} > {name}.{} {}",
                        pair[0].0, pair[0].1, pair[1].0, pair[1].1
                    ));
                }
            }
        };
        let m = &self.cache_miss;
        ordered(
            "cache_miss",
            &[
                ("p50", m.p50 as f64),
                ("p90", m.p90 as f64),
                ("p99", m.p99 as f64),
                ("max", m.max as f64),
            ],
        );
        ordered("cache_miss", &[("mean", m.mean), ("max", m.max as f64)]);
        if let Some(t) = &self.timed {
            for (name, l) in [
                ("timed.ttft", &t.ttft),
                ("timed.tpot", &t.tpot),
                ("timed.e2e", &t.e2e),
                ("timed.queue", &t.queue),
            ] {
                let Some(l) = l else { continue };
                ordered(
                    name,
                    &[
                        ("p50", l.p50),
                        ("p90", l.p90),
                        ("p99", l.p99),
                        ("max", l.max),
                    ],
                );
                ordered(name, &[("mean", l.mean), ("max", l.max)]);
            }
            // Per request e2e >= ttft >= queue, so every quantile and the mean keep that order.
            // ttft and e2e are sampled from the same finished requests: both present or
            // neither; queue too, except where it cannot be seen (a client's measurements).
            match (&t.ttft, &t.e2e) {
                (Some(ttft), Some(e2e)) => {
                    let queue = t.queue.as_ref();
                    for (q, queue, ttft, e2e) in [
                        ("p50", queue.map(|l| l.p50), ttft.p50, e2e.p50),
                        ("p99", queue.map(|l| l.p99), ttft.p99, e2e.p99),
                        ("max", queue.map(|l| l.max), ttft.max, e2e.max),
                        ("mean", queue.map(|l| l.mean), ttft.mean, e2e.mean),
                    ] {
                        // Rounded to 1 µs: allow the last digit.
                        if queue.unwrap_or(0.0) > ttft + 1e-3 || ttft > e2e + 1e-3 {
                            broken.push(format!(
                                "timed {q}: queue {queue:?} <= ttft {ttft} <= e2e {e2e} does not hold"
                            ));
                        }
                    }
                }
                (None, None) => {
                    if t.tpot.is_some() || t.queue.is_some() {
                        broken.push(
                            "timed latencies have samples but no request finished".to_owned(),
                        );
                    }
                }
                _ => broken
                    .push("timed: ttft and e2e are not both present or both absent".to_owned()),
            }
            if !(0.0..=1.0).contains(&t.hit_ratio) {
                broken.push(format!("timed.hit_ratio {} outside 0..=1", t.hit_ratio));
            }
            if t.makespan_s < 0.0 {
                broken.push(format!("timed.makespan_s {} is negative", t.makespan_s));
            }
        }
        if !(0.0..=1.0).contains(&self.hit_ratio) {
            broken.push(format!("hit_ratio {} outside 0..=1", self.hit_ratio));
        }
        if let Some(q) = &self.quality {
            for (name, v) in [
                ("quality.achieved_over_best", q.achieved_over_best),
                ("quality.kv_optimal_share", q.kv_optimal_share),
                ("quality.followup_precision", q.followup_precision),
            ] {
                if !(0.0..=1.0).contains(&v) {
                    broken.push(format!("{name} {v} outside 0..=1"));
                }
            }
            if q.achieved_hit_blocks > q.best_hit_blocks {
                broken.push(format!(
                    "quality.achieved_hit_blocks {} > best_hit_blocks {}",
                    q.achieved_hit_blocks, q.best_hit_blocks
                ));
            }
        }
        let routed: u64 = self.nreq.counts.iter().sum();
        if routed + self.rejected != self.requests {
            broken.push(format!(
                "{routed} routed + {} rejected != {} requests",
                self.rejected, self.requests
            ));
        }
        broken
    }
}

/// `report`, after checking its invariants in debug builds (a broken one is a bug here).
pub fn checked(report: Report) -> Report {
    debug_assert!(
        report.invariant_violations().is_empty(),
        "a report breaks its invariants: {:?}",
        report.invariant_violations()
    );
    report
}
