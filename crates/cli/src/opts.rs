//! The flags that describe a run, in groups by concern, each with its help heading. A
//! command flattens the groups it takes (`replay` all of them; `compare` all but the
//! policy's and `--requests-out`); each group becomes one layer of settings, the flags'
//! names being the experiment file's keys (`--trace-block-size` is `trace_block_size`),
//! laid over the experiment file by `routerlab_experiment::Layers`. What a flag means,
//! its checks and defaults are the experiment crate's; here are spellings and help.

use std::path::PathBuf;

use clap::Args;
use clap::builder::TypedValueParser as _;
use routerlab_engine::Preset;
use routerlab_experiment::{
    Assign, Experiment, ExperimentError, Layers, OutputFormat, Timing, Unavailable, config_text,
};
use serde::Serialize;
use serde_yaml::{Mapping, Value};

use crate::exit::Failure;

/// The help heading of the settings that only the timed replay reads.
pub const TIMED: &str = "Timed replay";
/// The help heading of the flags that describe the model and GPU an engine runs.
pub const ENGINE_MODEL: &str = "Engine model";
/// The help heading of the plugins and their configs.
pub const PLUGINS: &str = "Plugins";
/// The help heading of the trace and how it is read.
pub const TRACE: &str = "Trace";
/// The help heading of the fleet and the routers in front of it.
pub const FLEET: &str = "Fleet and routers";
/// The help heading of where results go.
pub const OUTPUT: &str = "Output";

/// `--engine PRESET`: the engine crate's presets, listed in `--help` by name.
fn preset_parser() -> impl clap::builder::TypedValueParser<Value = Preset> {
    clap::builder::PossibleValuesParser::new(Preset::ALL.map(Preset::name))
        .map(|name| name.parse::<Preset>().expect("a listed preset"))
}

/// One policy's plugins: what `compare` and `sweep` take from `--policy` instead.
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct PolicyArgs {
    /// Matcher plugin: a name on the search path, or PATH[#NAME] of a library.
    #[arg(long, value_name = "NAME", help_heading = PLUGINS)]
    pub matcher: Option<String>,
    /// Matcher config, YAML or JSON text (e.g. '{seed: 3, max_nodes: 100000}').
    #[arg(long, value_name = "YAML", help_heading = PLUGINS)]
    #[serde(skip)]
    pub matcher_config: Option<String>,
    /// Scaler plugin (timed replay): sizes the fleet on each tick, between --min-endpoints
    /// and the endpoints --max-gpus allows, starting from --endpoints (e.g. hpa,
    /// keda-queue, dynamo-planner).
    #[arg(long, value_name = "NAME|PATH", help_heading = PLUGINS)]
    pub scaler: Option<String>,
    /// Scaler config, YAML or JSON text (e.g. '{metric: running, target: 8}').
    #[arg(long, value_name = "YAML", help_heading = PLUGINS)]
    #[serde(skip)]
    pub scaler_config: Option<String>,
    /// A real router's configuration, imported as the matcher and its settings: llm-d's
    /// EndpointPickerConfig, a Dynamo `router:` block, or Dynamo's or SGLang's router
    /// command line in a file (instead of --matcher).
    #[arg(long, value_name = "FILE", help_heading = PLUGINS)]
    pub router_config: Option<PathBuf>,
    /// Detector plugin that flags overloaded endpoints (none by default).
    #[arg(long, value_name = "NAME", help_heading = PLUGINS)]
    pub detector: Option<String>,
    /// Detector config, YAML or JSON text (e.g. '{max_running: 400}').
    #[arg(long, value_name = "YAML", help_heading = PLUGINS)]
    #[serde(skip)]
    pub detector_config: Option<String>,
}

/// How plugins are called, whichever they are.
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct PluginArgs {
    /// A plugin call that has not returned after MS milliseconds fails: a replay ends with
    /// an error naming the plugin, the call and the trace line (0 waits for ever); `serve`
    /// answers the request as --on-plugin-error says [default: 1000].
    #[arg(long, value_name = "MS", help_heading = PLUGINS)]
    pub plugin_timeout_ms: Option<u64>,
    /// Seed given to plugins as their `seed` config key unless their config sets one (and
    /// to seeded arrivals and balancers) [default: 0].
    #[arg(long, value_name = "N", help_heading = PLUGINS)]
    pub seed: Option<u64>,
}

/// The trace and how it is read.
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct TraceArgs {
    /// Trace file: chat, Mooncake, agentic Mooncake or token-id JSONL, Azure or BurstGPT
    /// CSV (gzip or zstd compressed or not), or a Weka session file or directory.
    #[arg(long, value_name = "PATH", help_heading = TRACE)]
    pub trace: Option<PathBuf>,
    /// A trace (or measured run) replayed first through the same fleet and routers, not
    /// measured, so the run starts with the caches it left (GPU, host and shared tiers),
    /// as a benchmark's load point follows the one before (timed replays).
    #[arg(long, value_name = "PATH", help_heading = TRACE)]
    pub warm_up: Option<PathBuf>,
    /// LMBench's ShareGPT workload file (its `sharegpt/run.json`) that a measured LMBench
    /// CSV given as the trace or the warm-up sent: each request's conversation, which the
    /// CSV does not record, so a round shares its previous round's prompt.
    #[arg(long, value_name = "FILE", help_heading = TRACE)]
    pub lmbench_workload: Option<PathBuf>,
    /// LMBench's ShareGPT warm-up file (its `sharegpt/warmup.json`), which its run script
    /// sends at the point's rate before each point, unlogged: replayed before the measured
    /// run given as the trace (after --warm-up), unmeasured, the run's rounds going on
    /// from its prompts (with --lmbench-workload; timed replays).
    #[arg(long, value_name = "FILE", help_heading = TRACE, requires = "lmbench_workload")]
    pub lmbench_warm_up: Option<PathBuf>,
    /// Trace format: chat, mooncake, agentic-mooncake, weka, token-ids, azure-csv or
    /// burstgpt; detected from the first line (a directory: weka) by default.
    #[arg(long, value_name = "FORMAT", help_heading = TRACE)]
    pub trace_format: Option<routerlab_trace::TraceFormat>,
    /// Block size for text prompts, in bytes [default: 128].
    #[arg(long, value_name = "BYTES", help_heading = TRACE)]
    pub block_size: Option<u32>,
    /// Tokens per hash id in Mooncake traces [default: 512].
    #[arg(long, value_name = "TOKENS", help_heading = TRACE)]
    pub trace_block_size: Option<u32>,
    /// Skip malformed trace lines, and say on stderr how many were skipped and why.
    #[arg(long, help_heading = TRACE)]
    pub skip_invalid: bool,
    /// The longest trace line read, bytes; a longer one is an error naming it [default:
    /// 67108864, 64 MiB].
    #[arg(long, value_name = "BYTES", help_heading = TRACE)]
    pub max_line_bytes: Option<usize>,
}

/// The fleet and the routers in front of it.
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct FleetArgs {
    /// Endpoints: a count (named localhost:8000, localhost:8001, ...) or a comma-separated
    /// list of names [default: 10].
    #[arg(long, value_name = "N|NAMES", help_heading = FLEET)]
    pub endpoints: Option<String>,
    /// Disaggregated fleet: the prefill pool, N endpoints (named prefill-0, ...) or their
    /// names, with --decode-endpoints; or, with --endpoints, its first N.
    #[arg(long, value_name = "N|NAMES", help_heading = FLEET)]
    pub prefill_endpoints: Option<String>,
    /// Disaggregated fleet: the decode pool, M endpoints (named decode-0, ...) or their
    /// names, after the prefill ones.
    #[arg(long, value_name = "N|NAMES", help_heading = FLEET)]
    pub decode_endpoints: Option<String>,
    /// Which requests a disaggregated fleet prefills in its prefill pool: `always`, or
    /// `threshold:TOKENS` (the decode endpoint is chosen first and prefills locally a
    /// prompt it lacks fewer than TOKENS of; 0 = always) [default: always].
    #[arg(long, value_name = "RULE", help_heading = FLEET)]
    pub pd_decision: Option<String>,
    /// KV bytes of one token, for the KV transfer's time (e.g. 131072 for Llama-3.1-8B in
    /// bf16) [default: 0].
    #[arg(long, value_name = "BYTES", help_heading = FLEET)]
    pub kv_bytes_per_token: Option<u64>,
    /// KV transfer bandwidth between pools, GB/s; 0 = the bytes take no time [default: 0].
    #[arg(long, value_name = "GBPS", help_heading = FLEET)]
    pub kv_transfer_gbps: Option<f64>,
    /// KV transfer time to the first byte, ms [default: 0].
    #[arg(long, value_name = "MS", help_heading = FLEET)]
    pub kv_transfer_latency_ms: Option<f64>,
    /// Which prompt tokens the KV transfer moves: `full-prompt`, or `missing` (those the
    /// decode endpoint does not hold) [default: full-prompt].
    #[arg(long, value_name = "MODE", help_heading = FLEET)]
    pub kv_transfer_mode: Option<routerlab_engine::TransferMode>,
    /// Prefix-cache capacity per endpoint, in blocks, evicting least recently used
    /// [default: unbounded].
    #[arg(long, value_name = "N", help_heading = FLEET)]
    pub cache_blocks: Option<u64>,
    /// Router replicas, each with its own plugin instances, seeing only the requests the
    /// balancer gives it [default: 1].
    #[arg(long, value_name = "N", help_heading = FLEET)]
    pub router_replicas: Option<u64>,
    /// How the balancer in front of the replicas spreads requests [default: round-robin].
    #[arg(long, value_name = "RULE", help_heading = FLEET)]
    pub replica_assign: Option<Assign>,
    /// How the replicas share their state (timed replay): `periodic` snapshots, `delta`
    /// batches, `broadcast` of each change, one `shared` store, or a router's preset
    /// (`llm-d`, `dynamo`) [default: none].
    #[arg(long, value_name = "STRATEGY", help_heading = FLEET)]
    pub replica_sync: Option<routerlab_experiment::Sync>,
    /// What the replicas' sync carries: in-flight `loads`, or `decisions` too (each
    /// matcher learns its peers' picks) [default: decisions; loads for llm-d].
    #[arg(long, value_name = "WHAT", help_heading = FLEET)]
    pub sync_scope: Option<routerlab_experiment::SyncWhat>,
    /// Milliseconds between the replicas' sync publications (periodic, delta)
    /// [default: 200].
    #[arg(long, value_name = "MS", help_heading = FLEET)]
    pub sync_interval_ms: Option<f64>,
    /// Milliseconds from a sync message's send to its arrival [default: 0].
    #[arg(long, value_name = "MS", help_heading = FLEET)]
    pub sync_delay_ms: Option<f64>,
    /// The chance a sync message is lost, from 0 to below 1 [default: 0].
    #[arg(long, value_name = "P", help_heading = FLEET)]
    pub sync_loss: Option<f64>,
    /// Milliseconds a periodic snapshot lasts unless replaced; 0 = until replaced
    /// [default: 0; 2000 for llm-d].
    #[arg(long, value_name = "MS", help_heading = FLEET)]
    pub sync_ttl_ms: Option<f64>,
    /// When no endpoint is available: wait at the router (timed replay only), reject, or
    /// route anyway [default: queue in the timed replay, reject in the time-free one].
    #[arg(long, value_name = "POLICY", help_heading = FLEET)]
    pub when_unavailable: Option<Unavailable>,
    /// Deprecated spelling of `--when-unavailable fail-open` (kept until 0.4; hidden).
    #[arg(long, hide = true)]
    pub fail_open: bool,
}

/// What only the timed replay reads.
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct TimedArgs {
    /// `trace`: the timed replay (arrivals, engine queues, finite KV cache, latencies);
    /// `off`: the prototype's time-free replay [default: off].
    #[arg(long, value_name = "MODE")]
    pub timing: Option<Timing>,
    /// Divide trace timestamps by this (2 = twice as fast) [default: 1].
    #[arg(long, value_name = "F", help_heading = TIMED)]
    pub speedup: Option<f64>,
    /// Poisson arrivals at R requests/s (seeded) instead of the trace's timestamps.
    #[arg(long, value_name = "R", help_heading = TIMED)]
    pub rate: Option<f64>,
    /// Closed loop: keep N requests outstanding instead of using timestamps.
    #[arg(long, value_name = "N", help_heading = TIMED)]
    pub concurrency: Option<usize>,
    /// Do not send a request before its parent finished (plus --think-time-s).
    #[arg(long, help_heading = TIMED)]
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival, seconds [default: 0].
    #[arg(long, value_name = "S", help_heading = TIMED)]
    pub think_time_s: Option<f64>,
    /// Engine preset for every endpoint (the file's `engine.preset`) [default: dynamo].
    #[arg(long = "engine", value_name = "PRESET", help_heading = TIMED, value_parser = preset_parser())]
    #[serde(skip)]
    pub engine_preset: Option<Preset>,
    /// Engine settings over the preset, YAML (e.g. '{num_gpu_blocks: 4096, max_num_seqs:
    /// 128}'; the file's `engine` keys, these over them).
    #[arg(long, value_name = "YAML", help_heading = TIMED)]
    #[serde(skip)]
    pub engine_config: Option<String>,
    /// The model and the GPU the engines run.
    #[command(flatten)]
    #[serde(flatten)]
    pub model: ModelArgs,
    /// Precise policies see the engines' KV cache stores and removals MS milliseconds late,
    /// as a router fed by KV events [default: 0].
    #[arg(long, value_name = "MS", help_heading = TIMED)]
    pub kv_event_lag_ms: Option<f64>,
    /// The routing path's latency: a request reaches its router MS milliseconds after it
    /// is sent (a gateway's hop in front of the engines), and its TTFT and end-to-end
    /// latency count from when it was sent; or a measured preset by name: `serve`
    /// (routerlab's own router, 0.22 ms) [default: 0].
    #[arg(long, value_name = "MS|PRESET", help_heading = TIMED)]
    pub router_hop_ms: Option<routerlab_experiment::RouterHop>,
    /// Each routing decision's own time on top of the hop: once a request, twice in a
    /// disaggregated fleet (its prefill and its decode pick) [default: 0].
    #[arg(long, value_name = "MS", help_heading = TIMED)]
    pub router_decision_ms: Option<f64>,
    /// SLO: a request meets it with its TTFT at most MS milliseconds (the report's
    /// `timed.slo`, and `compare`'s SLO attainment).
    #[arg(long, value_name = "MS", help_heading = TIMED)]
    pub slo_ttft_ms: Option<f64>,
    /// SLO: a request meets it with its time per output token after the first at most MS
    /// milliseconds.
    #[arg(long, value_name = "MS", help_heading = TIMED)]
    pub slo_tpot_ms: Option<f64>,
    /// Plugins see engine statuses refreshed every MS milliseconds; 0 = live [default: 0].
    #[arg(long, value_name = "MS", help_heading = TIMED)]
    pub metrics_interval_ms: Option<f64>,
    /// Output tokens of requests whose trace line has none [default: 128].
    #[arg(long, value_name = "N", help_heading = TIMED)]
    pub output_tokens: Option<u64>,
    /// With --scaler: seconds between its ticks [default: 15, the HPA's sync period].
    #[arg(long, value_name = "S", help_heading = TIMED)]
    pub scale_interval_s: Option<f64>,
    /// With --scaler: seconds a started endpoint takes before it serves [default: 0].
    #[arg(long, value_name = "S", help_heading = TIMED)]
    pub startup_s: Option<f64>,
    /// With --scaler: the fewest endpoints kept [default: 1].
    #[arg(long, value_name = "N", help_heading = TIMED)]
    pub min_endpoints: Option<u64>,
    /// With --scaler: the GPU ceiling; endpoints take --tensor-parallel-size GPUs each.
    #[arg(long, value_name = "N", help_heading = TIMED)]
    pub max_gpus: Option<u64>,
}

/// The model and the GPU an engine runs (`replay`, `compare`, `sweep`, `serve`, `engine`).
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct ModelArgs {
    /// A model's Hugging Face config.json: every engine's `kv_bytes_per_token` (unless an
    /// engine setting gives it) and the KV transfer's (unless --kv-bytes-per-token does),
    /// from its layers, KV heads, head size and dtype.
    #[arg(long, value_name = "PATH", help_heading = ENGINE_MODEL)]
    pub model_config: Option<PathBuf>,
    /// The KV cache's data type with --model-config: auto (the model's), bfloat16, float16,
    /// float32 or fp8 [default: auto].
    #[arg(long, value_name = "DTYPE", help_heading = ENGINE_MODEL)]
    pub kv_cache_dtype: Option<String>,
    /// The GPU every engine runs on: a name of the table (A100-40GB, A100-80GB, H100-SXM,
    /// H100-PCIe, H200, B200, L40S, L4, RTX-4090, RTX-PRO-6000, MI300X) or a YAML file
    /// describing one. With --model-config the step time is the roofline of the model on it
    /// and the KV blocks what vLLM would make of its memory (shown on stderr), unless an
    /// engine setting gives them.
    #[arg(long, value_name = "NAME|FILE", help_heading = ENGINE_MODEL)]
    pub gpu: Option<String>,
    /// GPUs each engine's model is split over, with --gpu [default: 1].
    #[arg(long, value_name = "N", help_heading = ENGINE_MODEL)]
    pub tensor_parallel_size: Option<u32>,
    /// GPUs a mixture of experts' experts are split over, with --gpu [default: 1: the
    /// tensor-parallel ones].
    #[arg(long, value_name = "N", help_heading = ENGINE_MODEL)]
    pub expert_parallel_size: Option<u32>,
    /// The fraction of the GPU's memory vLLM may use, with --gpu [default: 0.9].
    #[arg(long, value_name = "F", help_heading = ENGINE_MODEL)]
    pub gpu_memory_utilization: Option<f64>,
}

/// Where results go.
#[derive(Args, Debug, Default, Clone, Serialize)]
pub struct OutputArgs {
    /// Report format [default: human].
    #[arg(long, value_name = "FORMAT", help_heading = OUTPUT)]
    pub format: Option<OutputFormat>,
    /// Write SVG plots of the run into DIR (created if missing).
    #[arg(long, value_name = "DIR", help_heading = OUTPUT)]
    #[serde(skip)]
    pub plot: Option<PathBuf>,
    /// No progress bar (one is drawn on stderr, when it is a terminal, for runs past a
    /// second).
    #[arg(long, short, help_heading = OUTPUT)]
    #[serde(skip)]
    pub quiet: bool,
}

/// The settings every command that replays takes, whatever its policies: the experiment
/// file and the groups under it but the policy's.
#[derive(Args, Debug, Default, Clone)]
pub struct SettingsArgs {
    /// Experiment YAML file holding any of these settings (snake_case keys); flags override.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// How plugins are called.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// The trace.
    #[command(flatten)]
    pub trace: TraceArgs,
    /// The fleet.
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// The timed replay.
    #[command(flatten)]
    pub timed: TimedArgs,
    /// Where results go.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The `replay` settings: one policy, where its per-request records go, and the rest.
#[derive(Args, Debug, Default, Clone)]
pub struct ReplayArgs {
    /// The policy's plugins.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Everything else.
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Write one JSON line per request: where it went (time-free: id, line, endpoint), and
    /// in the timed replay its arrival, hit tokens, queue, TTFT and finish.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    pub requests_out: Option<PathBuf>,
    /// Replay the traffic `serve --decision-log` logged, through this policy: the trace,
    /// the endpoints and an engine fitted on the log's own latencies (through the logged
    /// policy) come from LOG, timed; flags given still win (--engine-config's keys over
    /// the fitted engine's).
    #[arg(long, value_name = "LOG", help_heading = FROM_LOG, conflicts_with = "trace")]
    pub from_log: Option<PathBuf>,
    /// With --from-log: the engines' max_num_seqs, which a log does not record.
    #[arg(long, value_name = "N", help_heading = FROM_LOG, default_value_t = 256, requires = "from_log")]
    pub log_max_num_seqs: u32,
    /// With --from-log: the engines' max_num_batched_tokens, which a log does not record.
    #[arg(long, value_name = "N", help_heading = FROM_LOG, default_value_t = 8192, requires = "from_log")]
    pub log_max_num_batched_tokens: u32,
}

/// `replay --from-log`'s help heading.
const FROM_LOG: &str = "From a decision log";

/// A group of flags as a layer of settings: the flags given, by their keys.
pub(crate) fn layer_of(group: &impl Serialize) -> Mapping {
    let Ok(Value::Mapping(mapping)) = serde_yaml::to_value(group) else {
        unreachable!("a group of flags serialises to a mapping");
    };
    mapping
        .into_iter()
        .filter(|(_, v)| !matches!(v, Value::Null | Value::Bool(false)))
        .collect()
}

impl PolicyArgs {
    /// The flags given, as a layer; the configs' text read as YAML.
    pub fn layer(&self) -> Result<Mapping, Failure> {
        let mut layer = layer_of(self);
        for (key, text, which) in [
            ("matcher_config", &self.matcher_config, "matcher"),
            ("detector_config", &self.detector_config, "detector"),
            ("scaler_config", &self.scaler_config, "scaler"),
        ] {
            if let Some(text) = text {
                layer.insert(key.into(), config_text(text, which)?);
            }
        }
        Ok(layer)
    }
}

impl TimedArgs {
    /// The flags given, as a layer; `--engine` and `--engine-config` as keys of `engine`.
    pub fn layer(&self) -> Result<Mapping, Failure> {
        let mut layer = layer_of(self);
        let mut engine = match &self.engine_config {
            Some(text) => routerlab_experiment::parse_mapping(text)
                .map_err(|e| Failure::input(format!("--engine-config: {e}")))?,
            None => Mapping::new(),
        };
        if let Some(preset) = self.engine_preset {
            engine.insert("preset".into(), preset.name().into());
        }
        if self.engine_config.is_some() || self.engine_preset.is_some() {
            layer.insert("engine".into(), Value::Mapping(engine));
        }
        Ok(layer)
    }
}

impl SettingsArgs {
    /// The groups' flags, as one layer.
    pub fn layer(&self) -> Result<Mapping, Failure> {
        let mut layer = layer_of(&self.plugins);
        layer.extend(layer_of(&self.trace));
        layer.extend(layer_of(&self.fleet));
        layer.extend(self.timed.layer()?);
        layer.extend(layer_of(&self.output));
        Ok(layer)
    }

    /// The run these flags describe over the experiment file, if one is given.
    pub fn experiment(&self) -> Result<Experiment, Failure> {
        experiment(self.config.as_deref(), self.layer()?)
    }
}

impl ReplayArgs {
    /// The run these flags describe over the experiment file, if one is given.
    pub fn experiment(&self) -> Result<Experiment, Failure> {
        let mut layer = self.policy.layer()?;
        layer.extend(self.settings.layer()?);
        if let Some(path) = &self.requests_out {
            layer.insert(
                "requests_out".into(),
                path.to_string_lossy().into_owned().into(),
            );
        }
        if let Some(log) = &self.from_log {
            let fitted = routerlab_calibrate::from_log::fit_log(
                log,
                self.log_max_num_seqs,
                self.log_max_num_batched_tokens,
                layer.get("seed").and_then(Value::as_u64).unwrap_or(0),
                200,
            )
            .map_err(|e| Failure::input(format!("--from-log {e}")))?;
            eprintln!("{}", fitted.summary);
            let mut add = |key: &str, value: Value| {
                if !layer.contains_key(key) {
                    layer.insert(key.into(), value);
                }
            };
            add("trace", log.to_string_lossy().into_owned().into());
            add("timing", "trace".into());
            add("endpoints", fitted.endpoints.join(",").into());
            // The fitted engine, under the keys an --engine-config gives.
            let Ok(Value::Mapping(mut engine)) = serde_yaml::to_value(&fitted.engine) else {
                unreachable!("an engine config serialises to a mapping")
            };
            if let Some(Value::Mapping(given)) = layer.get("engine") {
                engine.extend(given.clone());
            }
            layer.insert("engine".into(), Value::Mapping(engine));
        }
        experiment(self.settings.config.as_deref(), layer)
    }
}

/// The text of `--engine-config`: engine keys, each checked, as a mapping.
pub fn engine_config(text: &str) -> Result<Mapping, Failure> {
    let fail = |e: String| Failure::input(format!("--engine-config: {e}"));
    let engine = routerlab_experiment::parse_mapping(text).map_err(fail)?;
    serde_yaml::from_value::<routerlab_engine::Overrides>(Value::Mapping(engine.clone()))
        .map_err(|e| fail(routerlab_experiment::one_line(&e.to_string())))?;
    Ok(engine)
}

/// `flags` laid over the experiment file at `config`, if any, read as one description.
pub fn experiment(config: Option<&std::path::Path>, flags: Mapping) -> Result<Experiment, Failure> {
    let mut layers = Layers::new();
    if let Some(path) = config {
        layers = layers.file(path)?;
    }
    Ok(layers.over(flags).experiment()?)
}

impl From<ExperimentError> for Failure {
    fn from(e: ExperimentError) -> Failure {
        Failure::input(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    /// Every flag under the "Timed replay" heading, taken from clap itself, is refused
    /// without `--timing trace`: a new timed flag cannot be silently ignored.
    #[test]
    fn every_timed_replay_flag_is_rejected_in_time_free_mode() {
        use clap::{CommandFactory, Parser};
        let cli = crate::Cli::command();
        let replay = cli.find_subcommand("replay").expect("replay");
        let timed: Vec<_> = replay
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some(super::TIMED))
            .collect();
        // `--when-unavailable` left the heading in 0.3: reject and fail-open need no clock.
        assert!(timed.len() >= 9, "found {}", timed.len());
        for arg in timed {
            let flag = format!("--{}", arg.get_long().expect("long flag"));
            let takes_value = arg.get_action().takes_values();
            let value = match arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.as_str())
            {
                Some("PRESET") => "dynamo",
                Some("YAML") => "{}",
                Some("POLICY") => "reject",
                Some("FILE") => "out.jsonl",
                _ => "1",
            };
            let mut args = vec![
                "routerlab",
                "replay",
                "--matcher",
                "lcp",
                "--trace",
                "t",
                flag.as_str(),
            ];
            if takes_value {
                args.push(value);
            }
            let crate::Command::Replay(replay) = crate::Cli::try_parse_from(args)
                .expect("flags parse")
                .command
            else {
                unreachable!()
            };
            let message = replay
                .experiment()
                .and_then(|e| routerlab_experiment::resolve(&e).map_err(Into::into))
                .expect_err("refused")
                .to_string();
            assert!(
                message.contains("add --timing trace"),
                "{flag} is accepted without --timing trace: {message}"
            );
        }
    }
}
