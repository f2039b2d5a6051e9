//! The experiment file's own types, and how layers of settings become one [`Experiment`].
//!
//! A run is described by layers, each a YAML mapping of the file's snake_case keys: the
//! experiment file (its relative paths taken from its directory), then the command line's
//! flags (each flag is its key with `-` for `_`), then, in a sweep, a run's grid values.
//! [`Layers`] lays each over the one before key by key (a later layer's key replaces an
//! earlier one's; inside `engine`, `prefill_engine` and `decode_engine`, key by key again,
//! so `--engine dynamo` keeps the file's other engine keys) and deserialises the result
//! once, unknown keys refused. What was given, and where, is kept for the checks that a
//! key is not ignored ([`Experiment::given`]).

use std::path::{Path, PathBuf};

use routerlab_engine::{Overrides, TransferMode};
use routerlab_trace::TraceFormat;
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

use crate::ExperimentError;
use crate::error::one_line;
use crate::hop::RouterHop;
use crate::policy::{Policy, PolicyEntry};

/// The experiment file's schema version this build reads (the file's `version`, optional).
pub const VERSION: u64 = 1;

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// Tables for people.
    Human,
    /// The report schema as JSON.
    Json,
    /// The report schema as YAML.
    Yaml,
    /// One row per report, one column per number in it (dotted paths).
    Csv,
}

/// Replay modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// The prototype's time-free replay.
    Off,
    /// The timed replay with an engine model.
    Trace,
}

/// What happens when no endpoint is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Unavailable {
    /// Wait at the router until an endpoint is available.
    Queue,
    /// Count it as rejected.
    Reject,
    /// Route it anyway, the matcher seeing every endpoint as available.
    FailOpen,
}

impl From<Unavailable> for routerlab_sim::WhenUnavailable {
    fn from(arg: Unavailable) -> routerlab_sim::WhenUnavailable {
        match arg {
            Unavailable::Queue => routerlab_sim::WhenUnavailable::Queue,
            Unavailable::Reject => routerlab_sim::WhenUnavailable::Reject,
            Unavailable::FailOpen => routerlab_sim::WhenUnavailable::FailOpen,
        }
    }
}

/// How the balancer spreads requests over router replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Assign {
    /// In turn, in arrival order (L4 round robin).
    RoundRobin,
    /// Uniformly at random, seeded by `seed`.
    Random,
    /// Sticky by session; without one, by conversation (the parent chain's first request).
    Session,
}

/// How router replicas share their state: a strategy, or a real router's preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Sync {
    /// Each replica alone.
    None,
    /// A full snapshot of each replica's state published and read every interval.
    Periodic,
    /// The changes since the last send, every interval; a lost batch is lost for good.
    Delta,
    /// Each change sent to every peer as it happens.
    Broadcast,
    /// One store every replica reads and writes.
    Shared,
    /// llm-d's cross-replica syncer: periodic loads every 200 ms, 2 s time to live.
    #[serde(rename = "llm-d")]
    #[cfg_attr(feature = "clap", value(name = "llm-d"))]
    LlmD,
    /// Dynamo's replica sync: every decision broadcast as it happens.
    Dynamo,
}

/// What a replica sync carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum SyncWhat {
    /// The in-flight counts per endpoint.
    Loads,
    /// The counts and the decisions: each matcher learns its peers' picks too.
    Decisions,
}

impl From<Assign> for routerlab_sim::ReplicaAssign {
    fn from(arg: Assign) -> routerlab_sim::ReplicaAssign {
        match arg {
            Assign::RoundRobin => routerlab_sim::ReplicaAssign::RoundRobin,
            Assign::Random => routerlab_sim::ReplicaAssign::Random,
            Assign::Session => routerlab_sim::ReplicaAssign::Session,
        }
    }
}

/// A run's description: every key of the experiment file, each optional (defaults are
/// [`crate::resolve`]'s). The keys are documented with the flags of the same names
/// (`routerlab replay --help`); the ones without a flag are marked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// The schema version the file was written for (at most [`VERSION`]).
    pub version: Option<u64>,
    /// Matcher plugin.
    pub matcher: Option<String>,
    /// Matcher config, a mapping.
    pub matcher_config: Option<Value>,
    /// Scaler plugin (timed replay).
    pub scaler: Option<String>,
    /// Scaler config, a mapping.
    pub scaler_config: Option<Value>,
    /// Seconds between the scaler's ticks.
    pub scale_interval_s: Option<f64>,
    /// Seconds a started endpoint takes before it serves.
    pub startup_s: Option<f64>,
    /// The fewest endpoints a scaled fleet keeps.
    pub min_endpoints: Option<u64>,
    /// A scaled fleet's GPU ceiling.
    pub max_gpus: Option<u64>,
    /// How router replicas share their state.
    pub replica_sync: Option<Sync>,
    /// What their sync carries.
    pub sync_scope: Option<SyncWhat>,
    /// Between sync publications, ms.
    pub sync_interval_ms: Option<f64>,
    /// From a sync send to its arrival, ms.
    pub sync_delay_ms: Option<f64>,
    /// The chance a sync message is lost.
    pub sync_loss: Option<f64>,
    /// How long a periodic snapshot lasts, ms.
    pub sync_ttl_ms: Option<f64>,
    /// A real router's configuration file, imported as the matcher and its config.
    pub router_config: Option<PathBuf>,
    /// Detector plugin.
    pub detector: Option<String>,
    /// Detector config, a mapping.
    pub detector_config: Option<Value>,
    /// Trace file.
    pub trace: Option<PathBuf>,
    /// Trace format.
    pub trace_format: Option<TraceFormat>,
    /// A trace replayed first, unmeasured, to warm the caches (timed).
    pub warm_up: Option<PathBuf>,
    /// LMBench's ShareGPT workload file the measured runs given as the trace and the
    /// warm-up sent: their conversations.
    pub lmbench_workload: Option<PathBuf>,
    /// LMBench's ShareGPT warm-up file, sent before the measured run given as the trace
    /// (with `lmbench_workload`): replayed first, unmeasured, the run's rounds going on
    /// from it (timed).
    pub lmbench_warm_up: Option<PathBuf>,
    /// Endpoints: a count, a list of names, or their text (`4`, `a,b`).
    pub endpoints: Option<Value>,
    /// Disaggregated fleet: the prefill pool, a count or names (with `endpoints`, a count:
    /// its first N).
    pub prefill_endpoints: Option<Value>,
    /// Disaggregated fleet: the decode pool, a count or names.
    pub decode_endpoints: Option<Value>,
    /// Which requests the prefill pool prefills.
    pub pd_decision: Option<String>,
    /// KV bytes of one token, for the KV transfer.
    pub kv_bytes_per_token: Option<u64>,
    /// KV transfer bandwidth, GB/s.
    pub kv_transfer_gbps: Option<f64>,
    /// KV transfer time to the first byte, ms.
    pub kv_transfer_latency_ms: Option<f64>,
    /// Which prompt tokens the KV transfer moves.
    pub kv_transfer_mode: Option<TransferMode>,
    /// No flag: engine settings of the prefill pool, over `engine`.
    pub prefill_engine: Option<Overrides>,
    /// No flag: engine settings of the decode pool, over `engine`.
    pub decode_engine: Option<Overrides>,
    /// Block size for text prompts, bytes.
    pub block_size: Option<u32>,
    /// Tokens per hash id in Mooncake traces.
    pub trace_block_size: Option<u32>,
    /// Prefix-cache capacity per endpoint, blocks (time-free replay).
    pub cache_blocks: Option<u64>,
    /// Deadline of one plugin call, ms; 0 waits for ever.
    pub plugin_timeout_ms: Option<u64>,
    /// Seed given to plugins (and arrivals).
    pub seed: Option<u64>,
    /// Router replicas.
    pub router_replicas: Option<u64>,
    /// How the balancer spreads requests over the replicas.
    pub replica_assign: Option<Assign>,
    /// Report format.
    pub format: Option<OutputFormat>,
    /// Deprecated spelling of `when_unavailable: fail-open`.
    #[serde(default)]
    pub fail_open: bool,
    /// Skip malformed trace lines.
    #[serde(default)]
    pub skip_invalid: bool,
    /// The longest trace line read, bytes.
    pub max_line_bytes: Option<usize>,
    /// `trace` (timed) or `off` (time-free).
    pub timing: Option<Timing>,
    /// Trace timestamps divided by this.
    pub speedup: Option<f64>,
    /// Poisson arrivals at this rate, requests/s.
    pub rate: Option<f64>,
    /// Closed loop: requests kept outstanding.
    pub concurrency: Option<usize>,
    /// A request waits for its parent.
    #[serde(default)]
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival, s.
    pub think_time_s: Option<f64>,
    /// A model's Hugging Face `config.json`.
    pub model_config: Option<PathBuf>,
    /// The KV cache's data type with `model_config`.
    pub kv_cache_dtype: Option<String>,
    /// The GPU every engine runs on (a name of the table or a YAML file): with
    /// `model_config`, the step time is the roofline of the model on it and the KV blocks
    /// are what vLLM would make of its memory (unless `engine` gives them).
    pub gpu: Option<String>,
    /// GPUs each engine's model is split over, with `gpu`.
    pub tensor_parallel_size: Option<u32>,
    /// GPUs a mixture of experts' experts are split over, with `gpu` [default: 1, the
    /// tensor-parallel ones].
    pub expert_parallel_size: Option<u32>,
    /// The fraction of the GPU's memory vLLM may use, with `gpu` [default: 0.9].
    pub gpu_memory_utilization: Option<f64>,
    /// Engine settings (and `preset`) for every endpoint (`--engine` sets its `preset`,
    /// `--engine-config` its other keys).
    pub engine: Option<Overrides>,
    /// No flag: per-endpoint engine settings over `engine`, in endpoint order.
    pub engines: Option<Vec<Overrides>>,
    /// KV events seen this late, ms.
    pub kv_event_lag_ms: Option<f64>,
    /// The routing path's latency in front of the routers (a gateway's hop), ms.
    pub router_hop_ms: Option<RouterHop>,
    /// Each routing decision's own time, ms.
    pub router_decision_ms: Option<f64>,
    /// SLO on TTFT, ms.
    pub slo_ttft_ms: Option<f64>,
    /// SLO on time per output token, ms.
    pub slo_tpot_ms: Option<f64>,
    /// Plugins see engine statuses refreshed every this many ms; 0 = live.
    pub metrics_interval_ms: Option<f64>,
    /// When no endpoint is available.
    pub when_unavailable: Option<Unavailable>,
    /// Output tokens of requests whose trace line has none.
    pub output_tokens: Option<u64>,
    /// Per-request records, JSON lines.
    pub requests_out: Option<PathBuf>,
    /// No flag, for `compare`: the policies, each in the `--policy` grammar or a mapping.
    pub policies: Option<Vec<PolicyEntry>>,
    /// The keys given, as the layers were laid (see [`Experiment::given`]).
    #[serde(skip)]
    pub(crate) given: Mapping,
}

/// The keys whose values are paths, taken from the experiment file's directory.
const PATH_KEYS: [&str; 7] = [
    "trace",
    "requests_out",
    "model_config",
    "router_config",
    "warm_up",
    "lmbench_workload",
    "lmbench_warm_up",
];

/// The keys whose mappings the next layer merges into key by key.
const MERGED_KEYS: [&str; 3] = ["engine", "prefill_engine", "decode_engine"];

/// Layers of settings, laid one over the next, then read as one [`Experiment`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layers {
    merged: Mapping,
}

impl Layers {
    /// No settings yet.
    pub fn new() -> Layers {
        Layers::default()
    }

    /// Lays the experiment file at `path` over what is there: its text checked, its
    /// relative paths taken from its directory. Errors name the file.
    pub fn file(self, path: &Path) -> Result<Layers, ExperimentError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ExperimentError::Invalid(format!(
                "{}: cannot read experiment file: {e}",
                path.display()
            ))
        })?;
        let at = |what: String| ExperimentError::Invalid(format!("{}: {what}", path.display()));
        let mut layer = parse_mapping(&text).map_err(at)?;
        at_directory(&mut layer, path.parent().unwrap_or(Path::new("")));
        // The file alone must read as an experiment: its own mistakes are named by it.
        read(layer.clone()).map_err(at)?;
        Ok(self.over(layer))
    }

    /// Lays `layer` over what is there, key by key.
    pub fn over(mut self, layer: Mapping) -> Layers {
        for (key, value) in layer {
            let merged = match (key.as_str(), self.merged.get_mut(&key), value) {
                (Some(k), Some(Value::Mapping(under)), Value::Mapping(over))
                    if MERGED_KEYS.contains(&k) =>
                {
                    under.extend(over);
                    continue;
                }
                (_, _, value) => value,
            };
            self.merged.insert(key, merged);
        }
        self
    }

    /// The settings as one mapping (what a plugin host or a shard line is sent).
    pub fn mapping(&self) -> &Mapping {
        &self.merged
    }

    /// The experiment the layers describe; errors name the key and what is wrong.
    pub fn experiment(self) -> Result<Experiment, ExperimentError> {
        read(self.merged).map_err(ExperimentError::Invalid)
    }
}

/// Reads `mapping` as an experiment, its version checked.
fn read(mapping: Mapping) -> Result<Experiment, String> {
    let mut experiment: Experiment =
        serde_path_to_error::deserialize(Value::Mapping(mapping.clone())).map_err(|e| {
            let inner = one_line(&e.inner().to_string());
            let path = e.path().to_string();
            // An unknown key's message names it: its path is the mapping it is in.
            let path = match inner.starts_with("unknown field") {
                true => path.rsplit_once('.').map_or("", |(parent, _)| parent),
                false => path.as_str(),
            };
            match path {
                "" | "." => inner,
                path => format!("`{path}`: {inner}"),
            }
        })?;
    if let Some(version) = experiment.version.filter(|v| !(1..=VERSION).contains(v)) {
        return Err(format!(
            "`version` {version}: this routerlab reads experiment files of version 1 to {VERSION}"
        ));
    }
    experiment.given = mapping;
    Ok(experiment)
}

/// The text of a YAML (or JSON) mapping, its nesting bounded; `Null` for an empty text.
pub fn parse_mapping(text: &str) -> Result<Mapping, String> {
    routerlab_core::config::check_nesting(text)?;
    match serde_yaml::from_str::<Value>(text).map_err(|e| one_line(&e.to_string()))? {
        Value::Mapping(mapping) => Ok(mapping),
        Value::Null => Ok(Mapping::new()),
        _ => Err("expected a mapping of settings".into()),
    }
}

impl Layers {
    /// The relative paths laid so far, taken from `dir` (where the file that gave them is).
    pub(crate) fn paths_from(mut self, dir: &Path) -> Layers {
        at_directory(&mut self.merged, dir);
        self
    }
}

/// The file's relative paths, taken from `dir`.
fn at_directory(layer: &mut Mapping, dir: &Path) {
    for key in PATH_KEYS {
        if let Some(Value::String(path)) = layer.get_mut(key) {
            *path = dir.join(&*path).to_string_lossy().into_owned();
        }
    }
    // `gpu` is a name of the table or a YAML file: only a file name is a path.
    if let Some(Value::String(gpu)) = layer.get_mut("gpu")
        && (gpu.ends_with(".yaml") || gpu.ends_with(".yml"))
    {
        *gpu = dir.join(&*gpu).to_string_lossy().into_owned();
    }
}

impl Experiment {
    /// Every file the run reads, whatever key named it (the trace, the model config): none
    /// may be an output. The experiment file itself is its reader's to add.
    pub fn inputs(&self) -> Vec<&Path> {
        let mut inputs: Vec<&Path> = [
            &self.trace,
            &self.model_config,
            &self.router_config,
            &self.warm_up,
            &self.lmbench_workload,
            &self.lmbench_warm_up,
        ]
        .into_iter()
        .filter_map(|p| p.as_deref())
        .collect();
        // A GPU described in a file.
        inputs.extend(self.gpu.as_deref().map(Path::new).filter(|p| p.is_file()));
        inputs
    }

    /// This description with `policy`'s plugins instead of its own (what the layers gave
    /// stays as [`Experiment::given`] says).
    pub fn with_policy(&self, policy: &Policy) -> Result<Experiment, ExperimentError> {
        let config = |given: &Option<crate::policy::TextOrValue>, which| {
            given.clone().map(|c| c.value(which)).transpose()
        };
        Ok(Experiment {
            matcher: Some(policy.matcher.clone()),
            matcher_config: config(&policy.matcher_config, "matcher")?,
            detector: policy.detector.clone(),
            detector_config: config(&policy.detector_config, "detector")?,
            ..self.clone()
        })
    }

    /// Whether `key` was given a value that says something: present, not null, not a
    /// switch turned off.
    pub fn given(&self, key: &str) -> bool {
        !matches!(
            self.given.get(key),
            None | Some(Value::Null) | Some(Value::Bool(false))
        )
    }

    /// The keys given, in the order the layers gave them.
    pub fn given_keys(&self) -> impl Iterator<Item = &str> {
        self.given
            .iter()
            .filter(|(k, _)| k.as_str().is_some_and(|k| self.given(k)))
            .filter_map(|(k, _)| k.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(yaml: &str) -> Mapping {
        parse_mapping(yaml).unwrap()
    }

    #[test]
    fn a_later_layer_replaces_keys_and_merges_engine_keys() {
        let e = Layers::new()
            .over(layer(
                "matcher: a\nseed: 1\nengine: {preset: dynamo, max_num_seqs: 8}",
            ))
            .over(layer("seed: 2\nengine: {num_gpu_blocks: 100}"))
            .experiment()
            .unwrap();
        assert_eq!(e.matcher.as_deref(), Some("a"));
        assert_eq!(e.seed, Some(2));
        let engine = e.engine.unwrap();
        assert_eq!(engine.max_num_seqs, Some(8));
        assert_eq!(engine.num_gpu_blocks, Some(100));
    }

    #[test]
    fn a_wrong_value_is_named_by_its_keys_path() {
        let err = |text: &str| {
            Layers::new()
                .over(layer(text))
                .experiment()
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("engine: {host_tier: {blocks: 8, d2h_gbps: 1, h2d_gbps: 1, blocking: yes}}"),
            "`engine.host_tier.blocking`: invalid type: string \"yes\", expected a boolean"
        );
        // An unknown key is named by the mapping it is in and its own name.
        assert!(
            err("engine: {host_tier: {blocks: 8, d2h_gbps: 1, h2d_gbps: 1, blockin: true}}")
                .starts_with("`engine.host_tier`: unknown field `blockin`"),
        );
    }

    #[test]
    fn unknown_keys_and_newer_versions_are_refused_by_name() {
        let err = Layers::new()
            .over(layer("matchr: a"))
            .experiment()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("unknown field `matchr`"), "{err}");
        let err = Layers::new()
            .over(layer("version: 2"))
            .experiment()
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "`version` 2: this routerlab reads experiment files of version 1 to 1"
        );
    }

    #[test]
    fn given_ignores_switches_turned_off_and_nulls() {
        let e = Layers::new()
            .over(layer("respect_parents: false\nrate: null\nseed: 3"))
            .experiment()
            .unwrap();
        assert!(!e.given("respect_parents") && !e.given("rate") && e.given("seed"));
        assert_eq!(e.given_keys().collect::<Vec<_>>(), ["seed"]);
    }
}
