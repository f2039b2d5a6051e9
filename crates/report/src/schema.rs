//! The report: what a replay measured, in a schema that is part of the stable surface.
//!
//! [`Report`] is the machine-readable form (`--format json|yaml`, and the snapshots); its
//! keys and nesting are documented in STABILITY.md and only ever gain keys. Every type
//! reads back as well as it writes (`compare --from`, merging sharded sweeps and plots
//! start from saved reports), and the `run` block says what produced it. Floats are
//! rounded to six decimals so that reports are byte-identical across platforms' last-bit
//! differences and readable in review. Its rules are `invariants`', its human form is
//! `human`'s.

use serde::{Deserialize, Serialize};

pub use crate::latency::Latency;
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
    /// Speculating: tokens a decoding sequence got a decode step, on average (added in
    /// 0.6; absent without speculative decoding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_decode_step: Option<f64>,
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
    /// What the scaler did with the fleet (added in 0.6; absent for a fixed fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<ScalingReport>,
    /// How the router replicas shared their state and how stale it was (added in 0.6;
    /// absent when they did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncReport>,
    /// A replay from a decision log whose policy chose at random: what this policy's
    /// decisions would have given, estimated from the logged ones (added in 0.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_policy: Option<crate::off_policy::OffPolicyReport>,
}

/// What router replicas sharing their state did: the settings, the messages, and how stale
/// each replica's picture of its peers was.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncReport {
    /// `periodic`, `delta`, `broadcast` or `shared`.
    pub strategy: String,
    /// `loads` (in-flight counts) or `decisions` (and the matchers learn the peers' picks).
    pub scope: String,
    /// Between publications, ms (0 for strategies without one).
    pub interval_ms: f64,
    /// From a send to its arrival, ms.
    pub delay_ms: f64,
    /// The chance a message was lost.
    pub loss: f64,
    /// How long a periodic snapshot lasted, ms; 0 = until replaced.
    pub ttl_ms: f64,
    /// Messages sent: deliveries (`broadcast`, `shared`), batches (`delta`), reads
    /// (`periodic`).
    pub messages: u64,
    /// Of them, lost.
    pub lost: u64,
    /// Changes (a routing, a first token, a finish) that reached a peer.
    pub delivered: u64,
    /// Mean time from a change to its arrival at a peer, ms.
    pub mean_lag_ms: f64,
    /// The longest such time, ms.
    pub max_lag_ms: f64,
    /// Per decision, summed over endpoints: how many of its peers' in-flight requests the
    /// deciding replica had wrong (missed or phantom), on average.
    pub mean_unseen_requests: f64,
}

/// A scaled fleet over the run: its size, what it cost, and each decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalingReport {
    /// The scaler plugin.
    pub scaler: String,
    /// How often it was asked, seconds.
    pub interval_s: f64,
    /// How long a started endpoint took to serve, seconds.
    pub startup_s: f64,
    /// GPUs one endpoint takes.
    pub gpus_per_endpoint: u32,
    /// The ceiling: endpoints the GPUs allow, the pools together.
    pub max_endpoints: u32,
    /// GPU-hours the endpoints held (starting, serving and draining) from the run's start
    /// to its end: the last finish, or the last change to the fleet after it.
    pub gpu_hours: f64,
    /// Endpoints held, time-weighted mean over the same span.
    pub mean_endpoints: f64,
    /// Most endpoints held at once.
    pub peak_endpoints: u32,
    /// Requests that arrived while endpoints the scaler asked for were still starting.
    pub waited_for_capacity: u64,
    /// The fleet after each change: what the scaler wanted, and what held GPUs.
    pub timeline: Vec<ScalingPoint>,
    /// Every start, cancel, ready, drain and stop, in time order.
    pub events: Vec<ScalingEvent>,
}

/// The fleet's size at one time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalingPoint {
    /// Seconds since the run's start.
    pub t_s: f64,
    /// What the scaler wanted then (after the pool's bounds).
    pub desired: u32,
    /// Endpoints serving.
    pub ready: u32,
    /// Endpoints starting.
    pub starting: u32,
    /// Endpoints draining.
    pub draining: u32,
    /// A disaggregated fleet's pools, each on its own (absent for an aggregated one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolPoint>,
}

/// One pool's size at one time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolPoint {
    /// `prefill` or `decode`.
    pub pool: String,
    /// What the scaler wanted of it then.
    pub desired: u32,
    /// Its endpoints serving.
    pub ready: u32,
    /// Starting.
    pub starting: u32,
    /// Draining.
    pub draining: u32,
}

/// One change to one endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalingEvent {
    /// Seconds since the run's start.
    pub t_s: f64,
    /// The endpoint.
    pub endpoint: String,
    /// `start`, `cancel` (stopped before it served), `ready`, `drain` or `stop`.
    pub what: String,
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

/// Rounds to six decimals, so reports do not depend on the last bits of a float.
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
