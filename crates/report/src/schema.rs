//! The report: what a replay measured, in a schema that is part of the stable surface.
//!
//! [`Report`] is the machine-readable form (`--format json|yaml`, and the snapshots); its
//! keys and nesting are documented in STABILITY.md and only ever gain keys. Every type
//! reads back as well as it writes (`compare --from`, merging sharded sweeps and plots
//! start from saved reports), and the `run` block says what produced it. Floats are
//! rounded to six decimals so that reports are byte-identical across platforms' last-bit
//! differences and readable in review. The human form starts with the prototype's three
//! lines, in its wording, so results can be put beside it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

pub use crate::run::RunInfo;

/// Requests per endpoint, in endpoint order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Nreq {
    /// Requests routed to each endpoint.
    pub counts: Vec<u64>,
    /// Busiest endpoint over the mean (1 = perfectly even).
    pub max_over_mean: f64,
    /// Coefficient of variation (population std / mean).
    pub cv: f64,
}

/// Distribution of cache-miss lengths of routed requests, in the report's unit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SharePrefix {
    /// Requests with a parent.
    pub total: u64,
    /// Of those, routed to their parent's endpoint.
    pub same_endpoint: u64,
}

/// The unit of a report's lengths.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LengthUnit {
    /// Bytes of prompt text.
    Bytes,
    /// Tokens.
    Tokens,
}

impl From<routerlab_core::Unit> for LengthUnit {
    fn from(unit: routerlab_core::Unit) -> LengthUnit {
        match unit {
            routerlab_core::Unit::Bytes => LengthUnit::Bytes,
            routerlab_core::Unit::Tokens => LengthUnit::Tokens,
        }
    }
}

impl std::fmt::Display for LengthUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LengthUnit::Bytes => "bytes",
            LengthUnit::Tokens => "tokens",
        })
    }
}

/// What a replay measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// What produced the report: tool, plugins, settings, trace. Absent only in reports
    /// built by library callers that do not say (and in the statistics snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunInfo>,
    /// A live run measured at the client (`routerlab drive`), instead of `run`: its
    /// latencies are wall-clock times through HTTP, not the engine model's (added in 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<crate::run::DrivenRun>,
    /// Requests read from the trace.
    pub requests: u64,
    /// Endpoints in the fleet.
    pub endpoints: u64,
    /// Requests no endpoint took.
    pub rejected: u64,
    /// Unit of lengths: `bytes` or `tokens`.
    pub unit: LengthUnit,
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
    /// How good the decisions were, against what each could have had (added in 0.3);
    /// absent where that cannot be known (a live run measured at the client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<Quality>,
    /// Each router replica's own decisions, with more than one replica (added in 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaReport>>,
    /// Latencies and engine figures, in timed replays only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<TimedReport>,
}

/// One router replica's decisions: the requests the balancer gave it, where it sent them,
/// and how much of what the engines held it found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplicaReport {
    /// Requests the balancer gave this replica.
    pub requests: u64,
    /// Of those, requests it could not place.
    pub rejected: u64,
    /// Where it sent them, per endpoint.
    pub nreq: Nreq,
    /// Hit units / prompt units over the requests it routed.
    pub hit_ratio: f64,
    /// Its decisions taken while at least one endpoint was unavailable.
    pub constrained_decisions: u64,
    /// Its decisions against the best it could have made.
    pub quality: Quality,
}

impl ReplicaReport {
    /// The replica's part, from a report of its requests alone.
    pub fn of(report: Report) -> ReplicaReport {
        ReplicaReport {
            requests: report.requests,
            rejected: report.rejected,
            nreq: report.nreq,
            hit_ratio: report.hit_ratio,
            constrained_decisions: report.constrained_decisions,
            quality: report.quality.unwrap_or_default(),
        }
    }
}

/// Decision quality: what the routed requests could reuse where they went, against the
/// best any endpoint the matcher could choose held at that moment.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Quality {
    /// Sum over routed requests of the longest cached prefix among the endpoints the
    /// matcher could choose, in blocks of `run.block_size` units.
    pub best_hit_blocks: u64,
    /// Sum over routed requests of the cached prefix on the endpoint chosen, same blocks.
    pub achieved_hit_blocks: u64,
    /// `achieved_hit_blocks / best_hit_blocks` (1 when nothing could be reused).
    pub achieved_over_best: f64,
    /// Share of routed requests sent to an endpoint holding the longest cached prefix.
    pub kv_optimal_share: f64,
    /// Share of requests with a parent that were sent where the parent went.
    pub followup_precision: f64,
}

/// How unevenly requests run across endpoints, averaged over time.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    /// Time-weighted mean of (most − fewest) running requests across endpoints.
    pub max_minus_min: f64,
    /// Time-weighted mean coefficient of variation of running requests (0 when idle).
    pub cv: f64,
}

/// Percentiles of one latency, in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Tokens per second over the makespan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// Prompt tokens of finished requests per second.
    pub input_tokens_per_s: f64,
    /// Generated tokens per second.
    pub output_tokens_per_s: f64,
}

/// One endpoint's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EndpointTimed {
    /// Endpoint name.
    pub name: String,
    /// Requests it finished.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Largest KV usage (fraction of blocks held).
    pub peak_kv_usage: f64,
    /// Time-weighted mean KV usage.
    pub mean_kv_usage: f64,
    /// Cached blocks evicted.
    pub evictions: u64,
    /// Sequences preempted and recomputed.
    pub preemptions: u64,
}

/// The timed part of the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimedReport {
    /// Arrival to first token. Each latency is `null` when no request gave a sample (no
    /// request finished; for `tpot`, none generated a second token), never a made-up 0.
    pub ttft: Option<Latency>,
    /// Time per output token after the first.
    pub tpot: Option<Latency>,
    /// Arrival to last token.
    pub e2e: Option<Latency>,
    /// Arrival to first scheduled on an engine (router queue included).
    pub queue: Option<Latency>,
    /// Token throughput.
    pub throughput: Throughput,
    /// First arrival to last finish, seconds.
    pub makespan_s: f64,
    /// Prompt tokens reused from engine prefix caches / prompt tokens (after eviction).
    pub hit_ratio: f64,
    /// Requests that waited at the router because nothing was available.
    pub router_queued: u64,
    /// Requests rejected because prompt plus output exceed their engine's whole KV cache.
    pub too_long: u64,
    /// Running requests across endpoints over time (added in 0.3).
    #[serde(default)]
    pub running_spread: Spread,
    /// Per endpoint, in endpoint order.
    pub per_endpoint: Vec<EndpointTimed>,
    /// The pools of a disaggregated fleet (added in 0.5; absent for an aggregated one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsReport>,
    /// The KV cache's tiers (added in 0.5; absent unless an engine has a host tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<TiersReport>,
    /// An agentic trace's plays and sessions (added in 0.5; absent for other traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentic: Option<crate::agentic::AgenticReport>,
    /// How many finished requests met the latency targets given (added in 0.5; absent
    /// without targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<crate::slo::SloReport>,
}

/// Where reused prompt tokens came from, when engines keep KV in host memory too: the
/// GPU cache, or a load from the host tier (each over every sequence an engine admitted:
/// a disaggregated request's prefill and decode legs count on their own).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TiersReport {
    /// Prompt tokens of those sequences.
    pub prompt_tokens: u64,
    /// Reused from the GPU cache.
    pub gpu_hit_tokens: u64,
    /// `gpu_hit_tokens / prompt_tokens`.
    pub gpu_hit_ratio: f64,
    /// Loaded from the host tier instead of computed.
    pub host_hit_tokens: u64,
    /// `host_hit_tokens / prompt_tokens`.
    pub host_hit_ratio: f64,
    /// Loaded from the fleet's shared tier instead of computed (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_hit_tokens: Option<u64>,
    /// `shared_hit_tokens / prompt_tokens` (absent without a shared tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_hit_ratio: Option<f64>,
    /// Sequences that waited for a load (host, shared or both).
    pub loads: u64,
    /// Time of each sequence's loads, ms.
    pub load: Option<Latency>,
    /// Per endpoint with a host tier, in endpoint order.
    pub per_endpoint: Vec<HostTierTimed>,
    /// The fleet's shared tier (named `shared`), when an engine has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<HostTierTimed>,
}

/// One endpoint's host tier, or the fleet's shared tier.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostTierTimed {
    /// Endpoint name (`shared` for the shared tier).
    pub name: String,
    /// Its capacity, blocks.
    pub blocks: u64,
    /// The most it held at once, blocks.
    pub peak_blocks: u64,
    /// Blocks stored.
    pub stores: u64,
    /// Blocks evicted to make room.
    pub evictions: u64,
}

/// A disaggregated fleet's pools: where requests were prefilled and decoded, the P/D
/// decisions, the KV transfers and where time to first token went.
///
/// The top-level `hit_ratio` and `timed.hit_ratio` of such a run count the prompt tokens
/// reused where each prompt was computed (its prefill endpoint, or its decode endpoint
/// when prefilled there), as NVIDIA Dynamo's disaggregated replay counts its prefix reuse
/// (at the prefill's admission); `decode.hit_ratio` counts what the decode endpoints held
/// of the prompts moved to them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolsReport {
    /// The prefill pool: the prompts it computed.
    pub prefill: PoolStats,
    /// The decode pool: the requests it decoded (prompts moved in, or computed there).
    pub decode: PoolStats,
    /// Requests prefilled in the prefill pool and moved.
    pub disaggregated: u64,
    /// Requests prefilled on their decode endpoint (the P/D decision kept them local).
    pub local: u64,
    /// How the P/D decision was taken: `always` or `threshold:TOKENS`.
    pub decision: String,
    /// KV tokens moved from prefill to decode endpoints.
    pub transfer_tokens: u64,
    /// Time of each KV transfer, ms.
    pub transfer: Option<Latency>,
    /// Time to first token of the moved requests, in its parts.
    pub ttft_split: TtftSplit,
}

/// One pool's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolStats {
    /// Its endpoints.
    pub endpoints: u64,
    /// Requests it served (prefilled, or decoded).
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Prompt tokens its prefix caches held when each request was admitted.
    pub hit_tokens: u64,
    /// `hit_tokens / prompt_tokens`.
    pub hit_ratio: f64,
}

/// Time to first token of a disaggregated request, in order: waiting for the prefill
/// endpoint (router wait included), prefilling, moving the KV, and the decode endpoint's
/// wait and first step. Each `null` when no request was moved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TtftSplit {
    /// Arrival to the prefill's first step.
    pub prefill_queue: Option<Latency>,
    /// The prefill's first step to its end.
    pub prefill: Option<Latency>,
    /// The prefill's end to the KV's arrival at the decode endpoint (routing wait included).
    pub transfer: Option<Latency>,
    /// The KV's arrival to the first token.
    pub decode: Option<Latency>,
}

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
    if let Some(pools) = &timed.pools {
        pools_human(out, pools);
    }
    if let Some(agentic) = &timed.agentic {
        crate::agentic::human(out, agentic);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_like_numpy() {
        assert_eq!(numpy_style(&[400, 200, 0, 400]), "[400 200   0 400]");
        assert_eq!(numpy_style(&[]), "[]");
    }
}
