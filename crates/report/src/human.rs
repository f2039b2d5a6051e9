//! The human form of a report: the prototype's three lines, in its wording, so results can
//! be put beside it, then a table per endpoint and the summaries of what the run had.

use std::fmt::Write as _;

use crate::agentic::AgenticReport;
use crate::schema::*;

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
        if let Some(replicas) = &self.replicas {
            replicas_human(&mut out, replicas);
        }
        if let Some(timed) = &self.timed {
            timed_human(&mut out, timed);
        }
        out
    }
}

/// Each router replica's decisions, a row each.
fn replicas_human(out: &mut String, replicas: &[ReplicaReport]) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<8}{:>10}{:>10}{:>11}{:>15}{:>12}{:>15}",
        "replica",
        "requests",
        "rejected",
        "hit ratio",
        "achieved/best",
        "kv-optimal",
        "load max/mean"
    );
    for (r, replica) in replicas.iter().enumerate() {
        let _ = writeln!(
            out,
            "{r:<8}{:>10}{:>10}{:>11.4}{:>15.4}{:>12.4}{:>15.3}",
            replica.requests,
            replica.rejected,
            replica.hit_ratio,
            replica.quality.achieved_over_best,
            replica.quality.kv_optimal_share,
            replica.nreq.max_over_mean
        );
    }
}

/// The timed replay's human tables: latencies, then engines.
fn timed_human(out: &mut String, timed: &TimedReport) {
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
        let _ = match l {
            Some(l) => writeln!(
                out,
                "{label:<10}{:>12.1}{:>12.1}{:>12.1}{:>12.1}{:>12.1}",
                l.mean, l.p50, l.p90, l.p99, l.max
            ),
            None => writeln!(out, "{label:<10}{:>12}", "no samples"),
        };
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
    if let Some(slo) = &timed.slo {
        let target = |name: &str, ms: Option<f64>| ms.map(|ms| format!("{name} <= {ms} ms"));
        let targets: Vec<String> = [
            target("TTFT", slo.targets.ttft_ms),
            target("TPOT", slo.targets.tpot_ms),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = writeln!(
            out,
            "SLO ({}): {:.1}% of {} requests met it (TTFT {}, TPOT {})",
            targets.join(", "),
            slo.attainment * 100.0,
            slo.requests,
            slo.ttft_met,
            slo.tpot_met
        );
    }
    if let Some(scaling) = &timed.scaling {
        let counted = |what: &str| scaling.events.iter().filter(|e| e.what == what).count();
        let _ = writeln!(
            out,
            "scaling ({} every {} s, start-up {} s, at most {} endpoints of {} GPU): {:.2} endpoints on average, {} at most, {:.3} GPU-hours\n  {} started, {} stopped; {} requests arrived while capacity was starting",
            scaling.scaler,
            scaling.interval_s,
            scaling.startup_s,
            scaling.max_endpoints,
            scaling.gpus_per_endpoint,
            scaling.mean_endpoints,
            scaling.peak_endpoints,
            scaling.gpu_hours,
            counted("start"),
            counted("stop"),
            scaling.waited_for_capacity
        );
    }
    if timed.per_endpoint.is_empty() {
        // A client's measurements: no engine figures.
        return;
    }
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
    let speculating: Vec<String> = timed
        .per_endpoint
        .iter()
        .filter_map(|e| {
            e.tokens_per_decode_step
                .map(|t| format!("{} {t:.2}", e.name))
        })
        .collect();
    if !speculating.is_empty() {
        let _ = writeln!(
            out,
            "speculative decoding, tokens a decode step: {}",
            speculating.join(", ")
        );
    }
    if let Some(pools) = &timed.pools {
        pools_human(out, pools);
    }
    if let Some(agentic) = &timed.agentic {
        agentic_human(out, agentic);
    }
    if let Some(tiers) = &timed.tiers {
        let _ = writeln!(out);
        let shared = match (tiers.shared_hit_tokens, tiers.shared_hit_ratio) {
            (Some(tokens), Some(ratio)) => {
                format!(", {tokens} from the shared tier ({ratio:.4})")
            }
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "KV tiers: reused {} GPU tokens ({:.4}), {} loaded from host memory ({:.4}){shared}; {} loads",
            tiers.gpu_hit_tokens,
            tiers.gpu_hit_ratio,
            tiers.host_hit_tokens,
            tiers.host_hit_ratio,
            tiers.loads
        );
        if let Some(l) = &tiers.load {
            let _ = writeln!(
                out,
                "load ms: mean {:.1}, p50 {:.1}, p99 {:.1}, max {:.1}",
                l.mean, l.p50, l.p99, l.max
            );
        }
        for (e, what) in (tiers.per_endpoint.iter().map(|e| (e, ": host tier")))
            .chain(tiers.shared.iter().map(|e| (e, " tier")))
        {
            let _ = writeln!(
                out,
                "{}{what} {} blocks, peak {}, {} stored, {} evicted",
                e.name, e.blocks, e.peak_blocks, e.stores, e.evictions
            );
        }
    }
}

/// A disaggregated fleet's pools, the P/D decisions and where TTFT went.
fn pools_human(out: &mut String, pools: &PoolsReport) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<8}{:>11}{:>10}{:>15}{:>11}",
        "pool", "endpoints", "requests", "prompt tokens", "hit ratio"
    );
    for (name, pool) in [("prefill", &pools.prefill), ("decode", &pools.decode)] {
        let _ = writeln!(
            out,
            "{name:<8}{:>11}{:>10}{:>15}{:>11.4}",
            pool.endpoints, pool.requests, pool.prompt_tokens, pool.hit_ratio
        );
    }
    let _ = writeln!(
        out,
        "P/D decision {}: {} prefilled in the prefill pool, {} on their decode endpoint; {} KV tokens moved",
        pools.decision, pools.disaggregated, pools.local, pools.transfer_tokens
    );
    let split = &pools.ttft_split;
    let _ = writeln!(
        out,
        "{:<22}{:>10}{:>10}{:>10}",
        "TTFT split (ms)", "mean", "p50", "p99"
    );
    for (name, part) in [
        ("prefill queue", &split.prefill_queue),
        ("prefill", &split.prefill),
        ("KV transfer", &split.transfer),
        ("decode first step", &split.decode),
    ] {
        match part {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "{name:<22}{:>10.1}{:>10.1}{:>10.1}",
                    l.mean, l.p50, l.p99
                );
            }
            None => {
                let _ = writeln!(out, "{name:<22}{:>10}", "-");
            }
        }
    }
}

/// The human lines of `agentic`.
fn agentic_human(out: &mut String, agentic: &AgenticReport) {
    let _ = writeln!(out);
    let _ = write!(out, "agentic: {} plays", agentic.plays);
    if let Some(p) = &agentic.play_ms {
        let _ = write!(
            out,
            ", play ms mean {:.1}, p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
            p.mean, p.p50, p.p90, p.p99, p.max
        );
    }
    let _ = writeln!(out);
    let _ = write!(out, "{} sessions", agentic.sessions);
    if let Some(h) = &agentic.session_hit_ratio {
        let _ = write!(
            out,
            ", session hit ratio mean {:.4}, p50 {:.4}, p90 {:.4}",
            h.mean, h.p50, h.p90
        );
    }
    match (agentic.on_cached_context, agentic.on_cached_context_share) {
        (Some(on), Some(share)) => {
            let _ = writeln!(
                out,
                "; {on} of {} follow-up turns on their cached context ({share:.4})",
                agentic.follow_up_turns
            );
        }
        _ => {
            let _ = writeln!(out, "; {} follow-up turns", agentic.follow_up_turns);
        }
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
}
