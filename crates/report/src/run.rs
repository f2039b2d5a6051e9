//! The `run` block of a report: what produced it, so a saved report can be read back,
//! compared, merged or reproduced without the command line that made it.
//!
//! These types are the report's own, not the library types they record (the engine's
//! config, the arrival process, the router's policies): the report schema is stable, the
//! libraries' types are not, and a boundary format keeps its own types with explicit
//! conversions (`routerlab-sim` writes them, taking each library type apart field by field,
//! so a setting added to a library type cannot reach a report unnoticed).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What produced a report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// `routerlab` version.
    pub tool_version: String,
    /// The matcher and its resolved config.
    pub matcher: PluginRun,
    /// The detector and its resolved config, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector: Option<PluginRun>,
    /// The seed.
    pub seed: u64,
    /// The trace.
    pub trace: TraceRun,
    /// Block size of the trace's chains, in the report's unit.
    pub block_size: u32,
    /// Endpoint names, in endpoint order.
    pub endpoints: Vec<String>,
    /// Time-free prefix-cache capacity per endpoint, blocks; absent = unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_blocks: Option<u64>,
    /// What happens when no endpoint is available.
    pub when_unavailable: UnavailableRun,
    /// Router replicas and the balancer's rule; absent = one router (added in 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_replicas: Option<ReplicasRun>,
    /// Timed-replay settings; absent for the time-free replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<TimedRun>,
    /// The split into prefill and decode pools; absent = aggregated (added in 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsRun>,
}

/// What a driven live run was: where it sent which trace, how, and the endpoints that
/// answered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DrivenRun {
    /// `routerlab` version.
    pub tool_version: String,
    /// The URL the requests went to.
    pub url: String,
    /// The trace.
    pub trace: TraceRun,
    /// How requests were sent.
    pub arrivals: ArrivalsRun,
    /// The endpoints that answered (named by the router's `x-routerlab-endpoint`, else
    /// `direct`), in name order; `nreq.counts` follow this order.
    pub endpoints: Vec<String>,
}

/// A plugin as it ran.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PluginRun {
    /// Name or `PATH[#NAME]`, as given.
    pub name: String,
    /// The config text it was created with (YAML), `seed` included.
    pub config: String,
}

/// The trace a run read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TraceRun {
    /// The path as given.
    pub path: PathBuf,
    /// `chat`, `mooncake` or `token-ids`.
    pub format: String,
    /// Size in bytes.
    pub bytes: u64,
    /// xxh3-64 of the file's bytes, hex.
    pub content_hash: String,
    /// Lines skipped as invalid, by reason (only with `skip_invalid`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub skipped: std::collections::BTreeMap<String, u64>,
}

/// The timed replay's settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimedRun {
    /// Arrival process.
    pub arrivals: ArrivalsRun,
    /// Whether children wait for their parents.
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival, ns.
    pub think_time_ns: u64,
    /// Metrics refresh period, ns (0 = live).
    pub metrics_interval_ns: u64,
    /// Output tokens of requests whose trace line has none.
    pub default_output_tokens: u64,
    /// One engine per endpoint.
    pub engines: Vec<EngineRun>,
    /// The KV's move between pools (added in 0.5; only for a disaggregated fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer: Option<KvTransferRun>,
    /// How late the routers' KV-event index saw the engines, ms (added in 0.5; absent
    /// when at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_event_lag_ms: Option<f64>,
    /// The routing path's latency in front of the routers, ms (added in 0.6; absent when
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_hop_ms: Option<f64>,
    /// Each routing decision's own time, ms (added in 0.6; absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_decision_ms: Option<f64>,
}

/// A disaggregated fleet's split, as run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolsRun {
    /// The first `prefill_endpoints` of `endpoints` were the prefill pool.
    pub prefill_endpoints: u64,
    /// The rest, the decode pool.
    pub decode_endpoints: u64,
    /// The P/D decision: `always` or `threshold:TOKENS`.
    pub decision: String,
}

/// The KV transfer between pools, as run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KvTransferRun {
    /// KV bytes of one token.
    pub kv_bytes_per_token: u64,
    /// KV transfer bandwidth, GB/s (0 = the bytes took no time).
    pub bandwidth_gbps: f64,
    /// KV transfer time to the first byte, ms.
    pub latency_ms: f64,
    /// Which prompt tokens moved: `full-prompt` or `missing`.
    pub mode: String,
}

/// Router replicas behind a balancer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplicasRun {
    /// How many.
    pub count: u64,
    /// How the balancer spread requests over them.
    pub assign: AssignRun,
}

/// What happened to a request no endpoint could take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnavailableRun {
    /// It waited at the router.
    Queue,
    /// It was rejected.
    Reject,
    /// It was routed anyway.
    FailOpen,
}

/// How the balancer in front of router replicas spread requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AssignRun {
    /// In turn.
    RoundRobin,
    /// Seeded uniform draws.
    Random,
    /// By session (else conversation).
    Session,
}

/// When requests arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "process")]
pub enum ArrivalsRun {
    /// At the trace's timestamps divided by `speedup`.
    Trace {
        /// Time compression.
        speedup: f64,
    },
    /// Poisson arrivals at `rate` a second.
    Poisson {
        /// Requests per second.
        rate: f64,
    },
    /// `concurrency` requests outstanding.
    Closed {
        /// Requests in flight.
        concurrency: usize,
    },
}

/// One engine's settings (the experiment file's `engine` keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineRun {
    /// KV-cache blocks.
    pub num_gpu_blocks: u32,
    /// Tokens per KV block.
    pub engine_block_size: u32,
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Token budget of one step.
    pub max_num_batched_tokens: u32,
    /// Step-time model.
    pub step_time: StepTimeRun,
    /// KV bytes of one token (added in 0.5; absent when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<u64>,
    /// The host-memory tier (added in 0.5; absent for one tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tier: Option<HostTierRun>,
    /// The engine's link to the fleet's shared tier, and the tier's capacity (added in
    /// 0.5; absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_tier: Option<HostTierRun>,
    /// The scheduler, when it is not vLLM V1's (`v0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<String>,
    /// `false` when the engine kept no prefix cache (added in 0.5; absent when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_caching: Option<bool>,
    /// V0's padded prompt batches: the most padding a batch took (added in 0.5; absent
    /// when prompts batched unpadded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_paddings: Option<u32>,
    /// LoRA adapter slots (added in 0.5; absent when adapters were not modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraRun>,
    /// Speculative decoding, when on (added in 0.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeRun>,
    /// `true` when the engine planned each step while the last one ran, as vLLM's async
    /// scheduling does (added in 0.6; absent when it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
}

/// An engine's speculative decoding, as run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeculativeRun {
    /// How drafts are proposed: ngram, eagle, mtp or draft.
    pub method: String,
    /// Draft tokens a step.
    pub num_tokens: u32,
    /// Acceptance rates, one or one per position.
    pub acceptance: Vec<f64>,
    /// A draft pass's cost as a fraction of a decode step.
    pub draft_cost: f64,
    /// Tokens a decoding sequence yields a step, on average, as the rates say.
    pub tokens_per_step: f64,
}

/// An engine's LoRA adapter slots, as run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoraRun {
    /// Adapters resident at once.
    pub slots: u32,
    /// Milliseconds to load one.
    pub load_ms: f64,
    /// Step time added per distinct adapter in a batch, as a fraction.
    pub step_overhead: f64,
}

/// A host-memory or shared tier, as run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostTierRun {
    /// Blocks it held.
    pub blocks: u32,
    /// Device-to-host GB/s.
    pub d2h_gbps: f64,
    /// Host-to-device GB/s.
    pub h2d_gbps: f64,
    /// Time to a load's first byte, ms.
    pub latency_ms: f64,
    /// The engine's steps waited for its transfers (LMCache's connector).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocking: bool,
}

/// A step-time model and its coefficients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", deny_unknown_fields)]
pub enum StepTimeRun {
    /// NVIDIA Dynamo's mocker polynomials (ms): prefill in the uncached tokens computed
    /// in the step, decode in the KV utilisation.
    Polynomial {
        /// Prefill coefficients `[a, b, c]` of `a T² + b T + c`.
        prefill: [f64; 3],
        /// Decode coefficients `[d, e, f]` of `d u² + e u + f`.
        decode: [f64; 3],
    },
    /// A fixed cost and a cost per token when the step prefills, a fixed cost when it
    /// decodes (ms).
    Linear {
        /// Fixed cost of a step that prefills.
        overhead_ms: f64,
        /// Cost per prefilled (uncached) token.
        prefill_ms_per_token: f64,
        /// Cost of a step that decodes.
        decode_ms: f64,
    },
    /// A fixed cost plus costs per prompt token, per decoding sequence and per thousand
    /// tokens of context (ms).
    Batched {
        /// Fixed cost of any step.
        overhead_ms: f64,
        /// Cost per prompt token computed in the step.
        prefill_ms_per_token: f64,
        /// Cost per sequence that decodes a token in the step.
        decode_ms_per_seq: f64,
        /// Cost per thousand tokens of context the batch reads.
        context_ms_per_ktoken: f64,
        /// A mixture-of-experts model's expert term: `count` experts a layer, `per_token`
        /// of them for each token, `ms` for each expert a step touches.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        experts: Option<ExpertsRun>,
    },
    /// From the model's shape and the GPU's limits: what it was given.
    Roofline {
        /// The GPU's name.
        gpu: String,
        /// The model's parameters.
        params: u64,
        /// GPUs the model is split over.
        tensor_parallel: u32,
        /// GPUs the routed experts are split over (1: the tensor-parallel ones).
        expert_parallel: u32,
        /// Bits of one weight.
        weight_bits: u32,
        /// Bytes of one KV element.
        kv_bytes: u32,
        /// Fraction of the matrix throughput achieved.
        compute_efficiency: f64,
        /// Fraction of the memory bandwidth achieved.
        memory_efficiency: f64,
        /// Fixed cost of a step (ms).
        overhead_ms: f64,
        /// What the GPUs of an engine reach each other over: `fabric` or `pcie`.
        link: String,
        /// Fixed cost of each step of a collective between them (µs).
        collective_step_us: f64,
        /// Fraction of the link's bandwidth collectives achieve.
        interconnect_efficiency: f64,
    },
}

/// The expert term of a batched step-time model, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExpertsRun {
    /// Experts a layer.
    pub count: u32,
    /// Experts each token is routed to.
    pub per_token: u32,
    /// Cost of one expert touched (ms).
    pub ms: f64,
}
