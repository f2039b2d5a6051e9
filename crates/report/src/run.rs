//! The `run` block of a report: what produced it, so a saved report can be read back,
//! compared, merged or reproduced without the command line that made it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use routerlab_engine::EngineConfig;
use routerlab_route::WhenUnavailable;

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
    pub when_unavailable: WhenUnavailable,
    /// Router replicas and the balancer's rule; absent = one router (added in 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_replicas: Option<ReplicasRun>,
    /// Timed-replay settings; absent for the time-free replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<TimedRun>,
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
    pub arrivals: routerlab_trace::arrivals::Arrivals,
    /// Whether children wait for their parents.
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival, ns.
    pub think_time_ns: u64,
    /// Metrics refresh period, ns (0 = live).
    pub metrics_interval_ns: u64,
    /// Output tokens of requests whose trace line has none.
    pub default_output_tokens: u64,
    /// One engine per endpoint.
    pub engines: Vec<EngineConfig>,
}

/// Router replicas behind a balancer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplicasRun {
    /// How many.
    pub count: u64,
    /// How the balancer spread requests over them.
    pub assign: routerlab_route::ReplicaAssign,
}
