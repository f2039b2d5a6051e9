//! The options several commands share. [`ReplayOpts`] is both the `replay` flags (clap) and
//! the experiment file (serde, snake_case keys, unknown keys refused), so a setting is
//! declared once; [`ReplayOpts::or`] lays the flags over the file; `compare`, `sweep` and
//! `snapshot` flatten it. The vocabulary of values (formats, timing, unavailable policy,
//! balancer) is here too. Each command's own arguments live beside its code in `cmd/`.
//! Values stay close to what the user typed here: checking and defaults are
//! [`crate::spec`]'s job.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::{Args, ValueEnum};
use routerlab_engine::{Overrides, Preset};
use routerlab_sim::{ReplicaAssign, WhenUnavailable};
use serde::Deserialize;
use serde_yaml::Value;

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// The prototype's time-free replay.
    Off,
    /// The timed replay with an engine model.
    Trace,
}

/// `--engine PRESET`: the engine crate's presets, listed in `--help` by name.
fn preset_parser() -> impl clap::builder::TypedValueParser<Value = Preset> {
    clap::builder::PossibleValuesParser::new(Preset::ALL.map(Preset::name))
        .map(|name| name.parse::<Preset>().expect("a listed preset"))
}

/// What happens when no endpoint is available (the library's policy, as a flag value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnavailableArg {
    /// Wait at the router until an endpoint is available.
    Queue,
    /// Count it as rejected.
    Reject,
    /// Route it anyway, the matcher seeing every endpoint as available.
    FailOpen,
}

impl From<UnavailableArg> for WhenUnavailable {
    fn from(arg: UnavailableArg) -> WhenUnavailable {
        match arg {
            UnavailableArg::Queue => WhenUnavailable::Queue,
            UnavailableArg::Reject => WhenUnavailable::Reject,
            UnavailableArg::FailOpen => WhenUnavailable::FailOpen,
        }
    }
}

/// How the balancer spreads requests over router replicas (the library's rule, as a flag
/// value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AssignArg {
    /// In turn, in arrival order (L4 round robin).
    RoundRobin,
    /// Uniformly at random, seeded by --seed.
    Random,
    /// Sticky by session; without one, by conversation (the parent chain's first request).
    Session,
}

impl From<AssignArg> for ReplicaAssign {
    fn from(arg: AssignArg) -> ReplicaAssign {
        match arg {
            AssignArg::RoundRobin => ReplicaAssign::RoundRobin,
            AssignArg::Random => ReplicaAssign::Random,
            AssignArg::Session => ReplicaAssign::Session,
        }
    }
}

/// A setting typed as text after a flag, or written as any YAML value in the experiment
/// file (plugin configs, endpoints): [`crate::spec`] reads either form.
#[derive(Debug, Clone, PartialEq)]
pub enum TextOrValue {
    /// As typed on the command line.
    Text(String),
    /// As written in the experiment file.
    Value(Value),
}

impl std::str::FromStr for TextOrValue {
    type Err = std::convert::Infallible;
    fn from_str(text: &str) -> Result<TextOrValue, Self::Err> {
        Ok(TextOrValue::Text(text.to_owned()))
    }
}

impl<'de> Deserialize<'de> for TextOrValue {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Value::deserialize(de).map(TextOrValue::Value)
    }
}

/// The `replay` settings: flags and experiment file in one type.
#[derive(Args, Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayOpts {
    /// Matcher plugin: a name on the search path, or PATH[#NAME] of a library.
    #[arg(long, value_name = "NAME", help_heading = PLUGINS)]
    pub matcher: Option<String>,
    /// Matcher config, YAML or JSON text (e.g. '{seed: 3, max_nodes: 100000}').
    #[arg(long, value_name = "YAML", help_heading = PLUGINS)]
    pub matcher_config: Option<TextOrValue>,
    /// Detector plugin that flags overloaded endpoints (none by default).
    #[arg(long, value_name = "NAME", help_heading = PLUGINS)]
    pub detector: Option<String>,
    /// Detector config, YAML or JSON text (e.g. '{max_running: 400}').
    #[arg(long, value_name = "YAML", help_heading = PLUGINS)]
    pub detector_config: Option<TextOrValue>,
    /// Trace file: chat, Mooncake, agentic Mooncake or token-id JSONL, Azure or BurstGPT
    /// CSV (gzip or zstd compressed or not), or a Weka session file or directory.
    #[arg(long, value_name = "PATH", help_heading = TRACE)]
    pub trace: Option<PathBuf>,
    /// Trace format: chat, mooncake, agentic-mooncake, weka, token-ids, azure-csv or
    /// burstgpt; detected from the first line (a directory: weka) by default.
    #[arg(long, value_name = "FORMAT", help_heading = TRACE)]
    pub trace_format: Option<routerlab_trace::TraceFormat>,
    /// Endpoints: a count (named localhost:8000, localhost:8001, ...) or a comma-separated
    /// list of names [default: 10].
    #[arg(long, value_name = "N|NAMES", help_heading = FLEET)]
    pub endpoints: Option<TextOrValue>,
    /// Disaggregated fleet: N prefill endpoints, named prefill-0, ... (with
    /// --decode-endpoints), or the first N of --endpoints.
    #[arg(long, value_name = "N", help_heading = FLEET)]
    pub prefill_endpoints: Option<usize>,
    /// Disaggregated fleet: M decode endpoints, named decode-0, ..., after the prefill ones.
    #[arg(long, value_name = "M", help_heading = FLEET)]
    pub decode_endpoints: Option<usize>,
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
    /// Experiment file only: engine settings of the prefill pool, over `engine`.
    #[arg(skip)]
    pub prefill_engine: Option<Overrides>,
    /// Experiment file only: engine settings of the decode pool, over `engine`.
    #[arg(skip)]
    pub decode_engine: Option<Overrides>,
    /// Block size for text prompts, in bytes [default: 128].
    #[arg(long, value_name = "N", help_heading = TRACE)]
    pub block_size: Option<u32>,
    /// Tokens per hash id in Mooncake traces [default: 512].
    #[arg(long, value_name = "N", help_heading = TRACE)]
    pub trace_block_size: Option<u32>,
    /// Prefix-cache capacity per endpoint, in blocks, evicting least recently used
    /// [default: unbounded].
    #[arg(long, value_name = "N", help_heading = FLEET)]
    pub cache_blocks: Option<u64>,
    /// A plugin call that has not returned after MS milliseconds ends the run with an error
    /// naming the plugin, the call and the trace line; 0 waits for ever [default: 10000].
    #[arg(long, value_name = "MS", help_heading = PLUGINS)]
    pub plugin_timeout_ms: Option<u64>,
    /// Seed given to plugins as their `seed` config key unless their config sets one
    /// [default: 0].
    #[arg(long, value_name = "N", help_heading = PLUGINS)]
    pub seed: Option<u64>,
    /// Router replicas, each with its own plugin instances, seeing only the requests the
    /// balancer gives it [default: 1].
    #[arg(long, value_name = "N", help_heading = FLEET)]
    pub router_replicas: Option<u64>,
    /// How the balancer in front of the replicas spreads requests [default: round-robin].
    #[arg(long, value_name = "RULE", help_heading = FLEET)]
    pub replica_assign: Option<AssignArg>,
    /// Report format [default: human].
    #[arg(long, value_name = "FORMAT", help_heading = OUTPUT)]
    pub format: Option<OutputFormat>,
    /// Deprecated spelling of `--when-unavailable fail-open` (kept until 0.4; hidden).
    #[arg(long, hide = true)]
    #[serde(default)]
    pub fail_open: bool,
    /// Skip malformed trace lines, and say on stderr how many were skipped and why.
    #[arg(long, help_heading = TRACE)]
    #[serde(default)]
    pub skip_invalid: bool,
    /// The longest trace line read, bytes; a longer one is an error naming it [default:
    /// 67108864, 64 MiB].
    #[arg(long, value_name = "BYTES", help_heading = TRACE)]
    pub max_line_bytes: Option<usize>,
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
    #[serde(default)]
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival, seconds [default: 0].
    #[arg(long, value_name = "S", help_heading = TIMED)]
    pub think_time_s: Option<f64>,
    /// Engine preset for every endpoint; overrides the file's `engine.preset` [default:
    /// dynamo].
    #[arg(long = "engine", value_name = "PRESET", help_heading = TIMED, value_parser = preset_parser())]
    #[serde(skip)]
    pub engine_preset: Option<Preset>,
    /// Engine settings over the preset, YAML (e.g. '{num_gpu_blocks: 4096, max_num_seqs: 128}').
    #[arg(long, value_name = "YAML", help_heading = TIMED)]
    #[serde(skip)]
    pub engine_config: Option<String>,
    /// A model's Hugging Face config.json: every engine's `kv_bytes_per_token` (unless an
    /// engine setting gives it) and the KV transfer's (unless --kv-bytes-per-token does),
    /// from its layers, KV heads, head size and dtype.
    #[arg(long, value_name = "PATH", help_heading = TIMED)]
    pub model_config: Option<PathBuf>,
    /// The KV cache's data type with --model-config: auto (the model's), bfloat16, float16,
    /// float32 or fp8 [default: auto].
    #[arg(long, value_name = "DTYPE", help_heading = TIMED)]
    pub kv_cache_dtype: Option<String>,
    /// Experiment file only: engine settings (and `preset`) for every endpoint.
    #[arg(skip)]
    pub engine: Option<Overrides>,
    /// Experiment file only: per-endpoint engine settings over `engine`, in endpoint order.
    #[arg(skip)]
    pub engines: Option<Vec<Overrides>>,
    /// Precise policies see the engines' KV cache stores and removals MS milliseconds late,
    /// as a router fed by KV events [default: 0].
    #[arg(long, value_name = "MS", help_heading = TIMED)]
    pub kv_event_lag_ms: Option<f64>,
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
    /// When no endpoint is available: wait at the router (timed replay only), reject, or
    /// route anyway [default: queue in the timed replay, reject in the time-free one].
    #[arg(long, value_name = "POLICY", help_heading = FLEET)]
    pub when_unavailable: Option<UnavailableArg>,
    /// Output tokens of requests whose trace line has none [default: 128].
    #[arg(long, value_name = "N", help_heading = TIMED)]
    pub output_tokens: Option<u64>,
    /// Write one JSON line per request: where it went (time-free: id, line, endpoint), and
    /// in the timed replay its arrival, hit tokens, queue, TTFT and finish.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    pub requests_out: Option<PathBuf>,
    /// Experiment YAML file holding any of these settings (snake_case keys); flags override.
    #[arg(long, value_name = "PATH")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Write SVG plots of the run into DIR (created if missing).
    #[arg(long, value_name = "DIR", help_heading = OUTPUT)]
    #[serde(skip)]
    pub plot: Option<PathBuf>,
    /// No progress bar (one is drawn on stderr, when it is a terminal, for runs past a
    /// second).
    #[arg(long, short, help_heading = OUTPUT)]
    #[serde(skip)]
    pub quiet: bool,
    /// Experiment file only, for `compare`: the policies, each a string in the `--policy`
    /// grammar or a mapping {matcher, matcher_config, detector, detector_config, label}.
    #[arg(skip)]
    pub policies: Option<Vec<crate::policy::PolicyEntry>>,
}

/// The help heading of the settings that only the timed replay reads.
pub const TIMED: &str = "Timed replay";
/// The help heading of the plugins and their configs.
pub const PLUGINS: &str = "Plugins";
/// The help heading of the trace and how it is read.
pub const TRACE: &str = "Trace";
/// The help heading of the fleet and the routers in front of it.
pub const FLEET: &str = "Fleet and routers";
/// The help heading of where results go.
pub const OUTPUT: &str = "Output";

impl ReplayOpts {
    /// These options (flags) over `file` (the experiment file): each setting from the flags
    /// when given, else from the file. Switches are on when either turns them on.
    pub fn or(self, file: ReplayOpts) -> ReplayOpts {
        ReplayOpts {
            matcher: self.matcher.or(file.matcher),
            matcher_config: self.matcher_config.or(file.matcher_config),
            detector: self.detector.or(file.detector),
            detector_config: self.detector_config.or(file.detector_config),
            trace: self.trace.or(file.trace),
            trace_format: self.trace_format.or(file.trace_format),
            endpoints: self.endpoints.or(file.endpoints),
            prefill_endpoints: self.prefill_endpoints.or(file.prefill_endpoints),
            decode_endpoints: self.decode_endpoints.or(file.decode_endpoints),
            pd_decision: self.pd_decision.or(file.pd_decision),
            kv_bytes_per_token: self.kv_bytes_per_token.or(file.kv_bytes_per_token),
            kv_transfer_gbps: self.kv_transfer_gbps.or(file.kv_transfer_gbps),
            kv_transfer_latency_ms: self.kv_transfer_latency_ms.or(file.kv_transfer_latency_ms),
            kv_transfer_mode: self.kv_transfer_mode.or(file.kv_transfer_mode),
            prefill_engine: file.prefill_engine,
            decode_engine: file.decode_engine,
            block_size: self.block_size.or(file.block_size),
            trace_block_size: self.trace_block_size.or(file.trace_block_size),
            cache_blocks: self.cache_blocks.or(file.cache_blocks),
            seed: self.seed.or(file.seed),
            router_replicas: self.router_replicas.or(file.router_replicas),
            replica_assign: self.replica_assign.or(file.replica_assign),
            format: self.format.or(file.format),
            fail_open: self.fail_open || file.fail_open,
            skip_invalid: self.skip_invalid || file.skip_invalid,
            max_line_bytes: self.max_line_bytes.or(file.max_line_bytes),
            plugin_timeout_ms: self.plugin_timeout_ms.or(file.plugin_timeout_ms),
            timing: self.timing.or(file.timing),
            speedup: self.speedup.or(file.speedup),
            rate: self.rate.or(file.rate),
            concurrency: self.concurrency.or(file.concurrency),
            respect_parents: self.respect_parents || file.respect_parents,
            think_time_s: self.think_time_s.or(file.think_time_s),
            engine_preset: self.engine_preset,
            engine_config: self.engine_config,
            model_config: self.model_config.or(file.model_config),
            kv_cache_dtype: self.kv_cache_dtype.or(file.kv_cache_dtype),
            engine: file.engine,
            engines: file.engines,
            metrics_interval_ms: self.metrics_interval_ms.or(file.metrics_interval_ms),
            kv_event_lag_ms: self.kv_event_lag_ms.or(file.kv_event_lag_ms),
            slo_ttft_ms: self.slo_ttft_ms.or(file.slo_ttft_ms),
            slo_tpot_ms: self.slo_tpot_ms.or(file.slo_tpot_ms),
            when_unavailable: self.when_unavailable.or(file.when_unavailable),
            output_tokens: self.output_tokens.or(file.output_tokens),
            requests_out: self.requests_out.or(file.requests_out),
            config: self.config,
            plot: self.plot,
            quiet: self.quiet,
            policies: file.policies,
        }
    }

    /// Whether any setting that only the timed replay reads is given.
    pub fn any_timed_only(&self) -> bool {
        self.speedup.is_some()
            || self.rate.is_some()
            || self.concurrency.is_some()
            || self.respect_parents
            || self.think_time_s.is_some()
            || self.engine_preset.is_some()
            || self.engine_config.is_some()
            || self.model_config.is_some()
            || self.kv_cache_dtype.is_some()
            || self.engine.is_some()
            || self.engines.is_some()
            || self.metrics_interval_ms.is_some()
            || self.kv_event_lag_ms.is_some()
            || self.slo_ttft_ms.is_some()
            || self.slo_tpot_ms.is_some()
            || self.when_unavailable == Some(UnavailableArg::Queue)
            || self.output_tokens.is_some()
            || self.kv_transfer_given()
            || self.prefill_engine.is_some()
            || self.decode_engine.is_some()
    }

    /// Whether any setting of the KV transfer between pools is given.
    pub fn kv_transfer_given(&self) -> bool {
        self.kv_bytes_per_token.is_some()
            || self.kv_transfer_gbps.is_some()
            || self.kv_transfer_latency_ms.is_some()
            || self.kv_transfer_mode.is_some()
    }
}
