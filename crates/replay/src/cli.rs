//! The `routerlab` command line: argument parsing, the experiment file, and output.
//!
//! Settings come from three layers, later winning: defaults, an experiment YAML file
//! (`--config`), then flags. Errors are one line on stderr; exit code 2 means the input
//! (flags, experiment file, trace, plugin or its config) is wrong, 1 that a plugin failed
//! while replaying. Nothing is printed on stdout unless the replay completed.

#![allow(clippy::print_stdout)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use routerlab_host::{SearchPath, list_libraries, load_detector, load_matcher};
use serde::Deserialize;
use serde_yaml::Value;

use crate::engine::{EngineConfig, StepTime};
use crate::replay::{ReplayError, ReplaySettings, replay};
use crate::synth::{ChatWorkload, MooncakeWorkload, write_chat, write_mooncake};
use crate::timed::{Arrivals, TimedSettings, WhenUnavailable, replay_timed};
use crate::trace::{TraceFormat, TraceOptions, TraceReader};

/// Route LLM requests through routing plugins and measure the result.
#[derive(Parser, Debug)]
#[command(name = "routerlab", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a trace through a matcher (and optionally a detector) and report statistics.
    Replay(Box<ReplayArgs>),
    /// List every plugin on the search path: name, kind, version, ABI, file.
    Plugins(PluginsArgs),
    /// Write a synthetic trace (the prototype's chat workload, or Mooncake format).
    GenTrace(GenTraceArgs),
}

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
enum OutputFormat {
    Human,
    Json,
    Yaml,
}

#[derive(Args, Debug, Default, Clone)]
struct ReplayArgs {
    /// Matcher plugin: a name on the search path, or PATH[#NAME] of a library.
    #[arg(long, value_name = "NAME")]
    matcher: Option<String>,
    /// Matcher config, YAML or JSON text (e.g. '{seed: 3, max_nodes: 100000}').
    #[arg(long, value_name = "YAML")]
    matcher_config: Option<String>,
    /// Detector plugin that flags overloaded endpoints (none by default).
    #[arg(long, value_name = "NAME")]
    detector: Option<String>,
    /// Detector config, YAML or JSON text (e.g. '{max_running: 400}').
    #[arg(long, value_name = "YAML")]
    detector_config: Option<String>,
    /// Trace file (chat JSONL or Mooncake JSONL).
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,
    /// Trace format; detected from the first line by default.
    #[arg(long, value_name = "FORMAT")]
    trace_format: Option<TraceFormat>,
    /// Endpoints: a count (named localhost:8000, localhost:8001, ...) or a comma-separated
    /// list of names [default: 10].
    #[arg(long, value_name = "N|NAMES")]
    endpoints: Option<String>,
    /// Block size for text prompts, in bytes [default: 128].
    #[arg(long, value_name = "N")]
    block_size: Option<u32>,
    /// Tokens per hash id in Mooncake traces [default: 512].
    #[arg(long, value_name = "N")]
    trace_block_size: Option<u32>,
    /// Prefix-cache capacity per endpoint, in blocks, evicting least recently used
    /// [default: unbounded].
    #[arg(long, value_name = "N")]
    cache_blocks: Option<u64>,
    /// Seed given to plugins as their `seed` config key unless their config sets one
    /// [default: 0].
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Report format [default: human].
    #[arg(long, value_name = "FORMAT")]
    format: Option<OutputFormat>,
    /// When every endpoint is unavailable, route anyway (the matcher sees all endpoints as
    /// available) instead of counting the request as rejected.
    #[arg(long)]
    fail_open: bool,
    /// Skip malformed trace lines, and say on stderr how many were skipped and why.
    #[arg(long)]
    skip_invalid: bool,
    /// `trace`: the timed replay (arrivals, engine queues, finite KV cache, latencies);
    /// `off`: the prototype's time-free replay [default: off].
    #[arg(long, value_name = "MODE", help_heading = "Timed replay")]
    timing: Option<Timing>,
    /// Divide trace timestamps by this (2 = twice as fast) [default: 1].
    #[arg(long, value_name = "F", help_heading = "Timed replay")]
    speedup: Option<f64>,
    /// Poisson arrivals at R requests/s (seeded) instead of the trace's timestamps.
    #[arg(long, value_name = "R", help_heading = "Timed replay")]
    rate: Option<f64>,
    /// Closed loop: keep N requests outstanding instead of using timestamps.
    #[arg(long, value_name = "N", help_heading = "Timed replay")]
    concurrency: Option<usize>,
    /// Do not send a request before its parent finished (plus --think-time-s).
    #[arg(long, help_heading = "Timed replay")]
    respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival, seconds [default: 0].
    #[arg(long, value_name = "S", help_heading = "Timed replay")]
    think_time_s: Option<f64>,
    /// Engine preset for every endpoint [default: dynamo].
    #[arg(long, value_name = "PRESET", help_heading = "Timed replay")]
    engine: Option<EnginePreset>,
    /// Engine settings over the preset, YAML (e.g. '{num_gpu_blocks: 4096, max_num_seqs: 128}').
    #[arg(long, value_name = "YAML", help_heading = "Timed replay")]
    engine_config: Option<String>,
    /// Plugins see engine statuses refreshed every MS milliseconds; 0 = live [default: 0].
    #[arg(long, value_name = "MS", help_heading = "Timed replay")]
    metrics_interval_ms: Option<f64>,
    /// When no endpoint is available: wait at the router, reject, or route anyway
    /// [default: queue].
    #[arg(long, value_name = "POLICY", help_heading = "Timed replay")]
    when_unavailable: Option<WhenUnavailable>,
    /// Output tokens of requests whose trace line has none [default: 128].
    #[arg(long, value_name = "N", help_heading = "Timed replay")]
    output_tokens: Option<u64>,
    /// Write one JSON line per request (arrival, endpoint, hit tokens, queue, TTFT, finish).
    #[arg(long, value_name = "FILE", help_heading = "Timed replay")]
    requests_out: Option<PathBuf>,
    /// Experiment YAML file holding any of these settings (snake_case keys); flags override.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PluginsArgs {
    /// Search only these directories (repeatable) instead of the default search path.
    #[arg(long, value_name = "DIR")]
    path: Vec<PathBuf>,
}

#[derive(Args, Debug)]
struct GenTraceArgs {
    /// Output file [default: stdout].
    #[arg(long, short, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Which workload to write.
    #[arg(long, value_name = "FORMAT", default_value = "chat")]
    format: GenFormat,
    /// Number of requests.
    #[arg(long, value_name = "N", default_value_t = 2200)]
    requests: u64,
    /// Probability that a request continues an earlier conversation.
    #[arg(long, value_name = "P", default_value_t = 0.2)]
    continue_chat_probability: f64,
    /// Words a user types per request (chat format).
    #[arg(long, value_name = "N", default_value_t = 100)]
    tokens_typed_by_user_per_request: u64,
    /// Seed of the generator.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// Mooncake format: omit `session_id`, writing only the four canonical fields.
    #[arg(long)]
    plain: bool,
}

/// Replay modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Timing {
    /// The prototype's time-free replay.
    Off,
    /// The timed replay with an engine model.
    Trace,
}

/// Engine presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
enum EnginePreset {
    /// NVIDIA Dynamo's mocker defaults (16,384 blocks of 64 tokens, 256 seqs, 8,192
    /// tokens/step, polynomial step time).
    Dynamo,
}

/// Engine settings over a preset (every key optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EngineOverrides {
    preset: Option<EnginePreset>,
    num_gpu_blocks: Option<u32>,
    engine_block_size: Option<u32>,
    max_num_seqs: Option<u32>,
    max_num_batched_tokens: Option<u32>,
    step_time: Option<StepTime>,
}

impl EngineOverrides {
    fn apply(&self, base: &mut EngineConfig) {
        if let Some(EnginePreset::Dynamo) = self.preset {
            *base = EngineConfig::dynamo();
        }
        if let Some(v) = self.num_gpu_blocks {
            base.num_gpu_blocks = v;
        }
        if let Some(v) = self.engine_block_size {
            base.engine_block_size = v;
        }
        if let Some(v) = self.max_num_seqs {
            base.max_num_seqs = v;
        }
        if let Some(v) = self.max_num_batched_tokens {
            base.max_num_batched_tokens = v;
        }
        if let Some(v) = &self.step_time {
            base.step_time = v.clone();
        }
    }
}

/// What `gen-trace` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum GenFormat {
    /// The prototype's chat workload (chat JSONL).
    Chat,
    /// A Mooncake-format stream with shared prefixes and sessions.
    Mooncake,
}

/// The experiment file: the same settings as the flags, in snake_case.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Experiment {
    matcher: Option<String>,
    matcher_config: Option<Value>,
    detector: Option<String>,
    detector_config: Option<Value>,
    trace: Option<PathBuf>,
    trace_format: Option<TraceFormat>,
    endpoints: Option<Value>,
    block_size: Option<u32>,
    trace_block_size: Option<u32>,
    cache_blocks: Option<u64>,
    seed: Option<u64>,
    format: Option<OutputFormat>,
    fail_open: Option<bool>,
    skip_invalid: Option<bool>,
    timing: Option<Timing>,
    speedup: Option<f64>,
    rate: Option<f64>,
    concurrency: Option<usize>,
    respect_parents: Option<bool>,
    think_time_s: Option<f64>,
    /// Engine settings (and `preset`) for every endpoint.
    engine: Option<EngineOverrides>,
    /// Per-endpoint engine settings over `engine`, in endpoint order.
    engines: Option<Vec<EngineOverrides>>,
    metrics_interval_ms: Option<f64>,
    when_unavailable: Option<WhenUnavailable>,
    output_tokens: Option<u64>,
    requests_out: Option<PathBuf>,
}

/// A user-facing failure: the one-line message and the exit code.
struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    fn input(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: 2,
        }
    }
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => run_replay(*args),
        Command::Plugins(args) => run_plugins(args),
        Command::GenTrace(args) => run_gen_trace(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Replay settings after merging defaults, the experiment file and flags.
#[derive(Debug)]
struct Resolved {
    matcher: String,
    matcher_config: String,
    detector: Option<String>,
    detector_config: String,
    trace: PathBuf,
    trace_options: TraceOptions,
    endpoints: Vec<String>,
    cache_blocks: Option<u64>,
    format: OutputFormat,
    fail_open: bool,
    /// Present for the timed replay.
    timed: Option<TimedSettings>,
    requests_out: Option<PathBuf>,
}

fn resolve(args: ReplayArgs) -> Result<Resolved, Failure> {
    let (experiment, base) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::input(format!(
                    "{}: cannot read experiment file: {e}",
                    path.display()
                ))
            })?;
            let experiment: Experiment = serde_yaml::from_str(&text).map_err(|e| {
                Failure::input(format!("{}: {}", path.display(), one_line(&e.to_string())))
            })?;
            (
                experiment,
                path.parent().map(Path::to_owned).unwrap_or_default(),
            )
        }
        None => (Experiment::default(), PathBuf::new()),
    };
    let (timed_args, timed_experiment) = (args.clone(), experiment.clone());
    let matcher = args.matcher.or(experiment.matcher).ok_or_else(|| {
        Failure::input(
            "no matcher: pass --matcher NAME (see `routerlab plugins` for what is installed)",
        )
    })?;
    let trace = match (args.trace, experiment.trace) {
        (Some(flag), _) => flag,
        (None, Some(in_file)) => base.join(in_file),
        (None, None) => {
            return Err(Failure::input(
                "no trace: pass --trace PATH (e.g. traces/chat.jsonl)",
            ));
        }
    };
    let seed = args.seed.or(experiment.seed).unwrap_or(0);
    let matcher_config = plugin_config(
        args.matcher_config,
        experiment.matcher_config,
        seed,
        "matcher",
    )?;
    let detector_config = plugin_config(
        args.detector_config,
        experiment.detector_config,
        seed,
        "detector",
    )?;
    let endpoints = match (args.endpoints, experiment.endpoints) {
        (Some(flag), _) => parse_endpoints(&flag)?,
        (None, Some(Value::Number(n))) => parse_endpoints(&n.to_string())?,
        (None, Some(Value::Sequence(names))) => names
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Failure::input("experiment `endpoints`: expected a count or a list of names")
            })
            .and_then(check_endpoints)?,
        (None, Some(_)) => {
            return Err(Failure::input(
                "experiment `endpoints`: expected a count or a list of names",
            ));
        }
        (None, None) => default_endpoints(10),
    };
    let block_size = args.block_size.or(experiment.block_size).unwrap_or(128);
    let trace_block_size = args
        .trace_block_size
        .or(experiment.trace_block_size)
        .unwrap_or(512);
    if block_size == 0 || trace_block_size == 0 {
        return Err(Failure::input(
            "--block-size and --trace-block-size must be at least 1",
        ));
    }
    let cache_blocks = args.cache_blocks.or(experiment.cache_blocks);
    if cache_blocks == Some(0) {
        return Err(Failure::input(
            "--cache-blocks must be at least 1 (omit it for an unbounded cache)",
        ));
    }
    let fail_open = args.fail_open || experiment.fail_open.unwrap_or(false);
    let timed = resolve_timed(&timed_args, &timed_experiment, &endpoints, seed, fail_open)?;
    let requests_out = match (&args.requests_out, &experiment.requests_out) {
        (Some(flag), _) => Some(flag.clone()),
        (None, Some(in_file)) => Some(base.join(in_file)),
        (None, None) => None,
    };
    Ok(Resolved {
        matcher,
        matcher_config,
        detector: args.detector.or(experiment.detector),
        detector_config,
        trace,
        trace_options: TraceOptions {
            format: args.trace_format.or(experiment.trace_format),
            block_size,
            trace_block_size,
            skip_invalid: args.skip_invalid || experiment.skip_invalid.unwrap_or(false),
        },
        endpoints,
        cache_blocks,
        format: args
            .format
            .or(experiment.format)
            .unwrap_or(OutputFormat::Human),
        fail_open,
        timed,
        requests_out,
    })
}

/// The timed-replay settings, or `None` for the time-free replay. Timed-only settings
/// without `--timing trace` are an error rather than silently ignored.
fn resolve_timed(
    args: &ReplayArgs,
    experiment: &Experiment,
    endpoints: &[String],
    seed: u64,
    fail_open: bool,
) -> Result<Option<TimedSettings>, Failure> {
    let timing = args.timing.or(experiment.timing).unwrap_or(Timing::Off);
    let speedup = args.speedup.or(experiment.speedup);
    let rate = args.rate.or(experiment.rate);
    let concurrency = args.concurrency.or(experiment.concurrency);
    let respect_parents = args.respect_parents || experiment.respect_parents.unwrap_or(false);
    let think_time_s = args.think_time_s.or(experiment.think_time_s);
    let metrics_interval_ms = args.metrics_interval_ms.or(experiment.metrics_interval_ms);
    let when_unavailable = args.when_unavailable.or(experiment.when_unavailable);
    let output_tokens = args.output_tokens.or(experiment.output_tokens);
    let engine_given = args.engine.is_some()
        || args.engine_config.is_some()
        || experiment.engine.is_some()
        || experiment.engines.is_some();
    if timing == Timing::Off {
        let timed_only = speedup.is_some()
            || rate.is_some()
            || concurrency.is_some()
            || respect_parents
            || think_time_s.is_some()
            || metrics_interval_ms.is_some()
            || when_unavailable.is_some()
            || output_tokens.is_some()
            || engine_given
            || args.requests_out.is_some()
            || experiment.requests_out.is_some();
        if timed_only {
            return Err(Failure::input(
                "engine, arrival and latency settings need the timed replay: add --timing trace",
            ));
        }
        return Ok(None);
    }
    let positive = |name: &str, value: Option<f64>| match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(Failure::input(format!(
            "--{name} must be a positive number"
        ))),
        _ => Ok(()),
    };
    positive("speedup", speedup)?;
    positive("rate", rate)?;
    if think_time_s.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
        return Err(Failure::input("--think-time-s must be zero or more"));
    }
    if metrics_interval_ms.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
        return Err(Failure::input("--metrics-interval-ms must be zero or more"));
    }
    let arrivals = match (rate, concurrency) {
        (Some(_), Some(_)) => {
            return Err(Failure::input(
                "--rate and --concurrency exclude each other",
            ));
        }
        (Some(rate), None) => Arrivals::Poisson { rate },
        (None, Some(0)) => return Err(Failure::input("--concurrency must be at least 1")),
        (None, Some(concurrency)) => Arrivals::Closed { concurrency },
        (None, None) => Arrivals::Trace {
            speedup: speedup.unwrap_or(1.0),
        },
    };
    let mut base = match args.engine.unwrap_or(EnginePreset::Dynamo) {
        EnginePreset::Dynamo => EngineConfig::dynamo(),
    };
    if let Some(overrides) = &experiment.engine {
        overrides.apply(&mut base);
    }
    if let Some(text) = &args.engine_config {
        let overrides: EngineOverrides = serde_yaml::from_str(text).map_err(|e| {
            Failure::input(format!("--engine-config: {}", one_line(&e.to_string())))
        })?;
        overrides.apply(&mut base);
    }
    let engines: Vec<EngineConfig> = match &experiment.engines {
        None => vec![base; endpoints.len()],
        Some(list) if list.len() != endpoints.len() => {
            return Err(Failure::input(format!(
                "experiment `engines`: {} entries for {} endpoints (give one per endpoint)",
                list.len(),
                endpoints.len()
            )));
        }
        Some(list) => list
            .iter()
            .map(|overrides| {
                let mut engine = base.clone();
                overrides.apply(&mut engine);
                engine
            })
            .collect(),
    };
    for (name, engine) in endpoints.iter().zip(&engines) {
        engine
            .validate()
            .map_err(|e| Failure::input(format!("endpoint `{name}`: {e}")))?;
    }
    let when_unavailable = match (when_unavailable, fail_open) {
        (Some(policy), _) => policy,
        (None, true) => WhenUnavailable::FailOpen,
        (None, false) => WhenUnavailable::Queue,
    };
    Ok(Some(TimedSettings {
        endpoints: endpoints.to_vec(),
        engines,
        arrivals,
        respect_parents,
        think_time_ns: (think_time_s.unwrap_or(0.0) * 1e9).round() as u64,
        metrics_interval_ns: (metrics_interval_ms.unwrap_or(0.0) * 1e6).round() as u64,
        when_unavailable,
        default_output_tokens: output_tokens.unwrap_or(128),
        seed,
    }))
}

/// The config text handed to a plugin: flag text, else the experiment's value, with
/// `seed` added unless it is set.
fn plugin_config(
    flag: Option<String>,
    in_file: Option<Value>,
    seed: u64,
    which: &str,
) -> Result<String, Failure> {
    let value = match (flag, in_file) {
        (Some(text), _) if text.trim().is_empty() => Value::Null,
        (Some(text), _) => serde_yaml::from_str(&text).map_err(|e| {
            Failure::input(format!(
                "--{which}-config is not valid YAML or JSON: {}",
                one_line(&e.to_string())
            ))
        })?,
        (None, Some(value)) => value,
        (None, None) => Value::Null,
    };
    let mut map = match value {
        Value::Null => serde_yaml::Mapping::new(),
        Value::Mapping(map) => map,
        other => {
            return Err(Failure::input(format!(
                "--{which}-config must be a mapping of keys, found {}",
                one_line(&serde_yaml::to_string(&other).unwrap_or_default())
            )));
        }
    };
    let key = Value::String("seed".into());
    if !map.contains_key(&key) {
        map.insert(key, Value::Number(seed.into()));
    }
    serde_yaml::to_string(&map).map_err(|e| Failure::input(format!("--{which}-config: {e}")))
}

fn default_endpoints(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("localhost:{}", 8000 + i)).collect()
}

fn parse_endpoints(text: &str) -> Result<Vec<String>, Failure> {
    if let Ok(n) = text.trim().parse::<usize>() {
        if n == 0 || n > MAX_ENDPOINTS {
            return Err(Failure::input(format!(
                "--endpoints: expected 1 to {MAX_ENDPOINTS} endpoints, found {n}"
            )));
        }
        return Ok(default_endpoints(n));
    }
    check_endpoints(text.split(',').map(|s| s.trim().to_owned()).collect())
}

const MAX_ENDPOINTS: usize = 4096;

fn check_endpoints(names: Vec<String>) -> Result<Vec<String>, Failure> {
    if names.is_empty() || names.len() > MAX_ENDPOINTS || names.iter().any(String::is_empty) {
        return Err(Failure::input(format!(
            "--endpoints: expected a count or 1 to {MAX_ENDPOINTS} non-empty, comma-separated names"
        )));
    }
    let mut sorted = names.clone();
    sorted.sort();
    if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(Failure::input(format!(
            "--endpoints: `{}` is listed twice",
            pair[0]
        )));
    }
    Ok(names)
}

fn run_replay(args: ReplayArgs) -> Result<(), Failure> {
    let settings = resolve(args)?;
    let search = SearchPath::from_env();
    let mut matcher = load_matcher(&settings.matcher, &settings.matcher_config, &search)
        .map_err(|e| Failure::input(e.to_string()))?;
    let mut detector = match &settings.detector {
        Some(name) => Some(
            load_detector(name, &settings.detector_config, &search)
                .map_err(|e| Failure::input(e.to_string()))?,
        ),
        None => None,
    };
    let started = Instant::now();
    let mut reader = TraceReader::open(&settings.trace, settings.trace_options.clone())
        .map_err(|e| Failure::input(e.to_string()))?;
    let replay_settings = ReplaySettings {
        endpoints: settings.endpoints.clone(),
        cache_blocks: settings.cache_blocks,
        fail_open: settings.fail_open,
    };
    let outcome = match &settings.timed {
        None => replay(
            &mut reader,
            &mut matcher,
            detector.as_mut(),
            &replay_settings,
        ),
        Some(timed) => {
            let mut out = match &settings.requests_out {
                Some(path) => Some(std::io::BufWriter::new(
                    std::fs::File::create(path).map_err(|e| {
                        Failure::input(format!("{}: cannot create: {e}", path.display()))
                    })?,
                )),
                None => None,
            };
            let sink = out.as_mut().map(|w| w as &mut dyn std::io::Write);
            let result = replay_timed(&mut reader, &mut matcher, detector.as_mut(), timed, sink);
            if let Some(mut w) = out {
                w.flush().map_err(|e| Failure {
                    message: format!("cannot write --requests-out: {e}"),
                    code: 1,
                })?;
            }
            // A failed replay leaves no per-request file that could pass for a complete one.
            if let (Err(_), Some(path)) = (&result, &settings.requests_out) {
                let _ = std::fs::remove_file(path);
            }
            result
        }
    };
    let report = outcome.map_err(|e| match e {
        ReplayError::Trace(e) => Failure::input(e.to_string()),
        ReplayError::Timing(message) => Failure::input(message),
        plugin @ ReplayError::Plugin { .. } => Failure {
            message: plugin.to_string(),
            code: 1,
        },
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    if !reader.skipped().is_empty() {
        let total: u64 = reader.skipped().values().sum();
        let reasons: Vec<String> = reader
            .skipped()
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        eprintln!(
            "warning: skipped {total} invalid line(s) of {}: {}",
            settings.trace.display(),
            reasons.join(", ")
        );
    }
    let text = match settings.format {
        OutputFormat::Human => report.to_human(&settings.endpoints),
        OutputFormat::Json => serde_json::to_string_pretty(&report)
            .map(|s| s + "\n")
            .expect("report serialises"),
        OutputFormat::Yaml => serde_yaml::to_string(&report).expect("report serialises"),
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure {
            message: format!("cannot write the report: {e}"),
            code: 1,
        })?;
    if settings.format == OutputFormat::Human {
        eprintln!(
            "replayed {} requests in {:.3} s ({:.0} decisions/s, {:.1} MB/s of trace)",
            report.requests,
            elapsed,
            report.requests as f64 / elapsed.max(1e-9),
            reader.len_bytes() as f64 / 1e6 / elapsed.max(1e-9),
        );
    }
    Ok(())
}

fn run_plugins(args: PluginsArgs) -> Result<(), Failure> {
    let search = if args.path.is_empty() {
        SearchPath::from_env()
    } else {
        SearchPath::new(args.path)
    };
    let mut rows = vec![[
        "NAME".to_owned(),
        "KIND".into(),
        "VERSION".into(),
        "ABI".into(),
        "FILE".into(),
    ]];
    let mut failures = 0;
    for library in list_libraries(&search) {
        match library {
            Ok(library) => {
                for plugin in &library.plugins {
                    rows.push([
                        plugin.name.clone(),
                        plugin.kind.as_str().to_owned(),
                        plugin.version.clone(),
                        format!("{}.{}", library.abi_major, library.abi_minor),
                        library.path.display().to_string(),
                    ]);
                }
            }
            Err(e) => {
                failures += 1;
                eprintln!("error: {e}");
            }
        }
    }
    if rows.len() == 1 && failures == 0 {
        let dirs: Vec<String> = search
            .dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        return Err(Failure::input(format!(
            "no plugins found in: {} (build them with `cargo build --workspace`, or set ROUTERLAB_PLUGIN_PATH)",
            dirs.join(", ")
        )));
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    if failures > 0 {
        return Err(Failure::input(format!(
            "{failures} plugin librar{} could not be loaded (see above)",
            if failures == 1 { "y" } else { "ies" }
        )));
    }
    Ok(())
}

fn run_gen_trace(args: GenTraceArgs) -> Result<(), Failure> {
    if !(0.0..=1.0).contains(&args.continue_chat_probability) {
        return Err(Failure::input(
            "--continue-chat-probability must be within 0..=1",
        ));
    }
    let mut sink: Box<dyn std::io::Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| Failure::input(format!("{}: cannot create: {e}", path.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let written = match args.format {
        GenFormat::Chat => write_chat(
            &ChatWorkload {
                requests: args.requests,
                continue_chat_probability: args.continue_chat_probability,
                tokens_typed_by_user_per_request: args.tokens_typed_by_user_per_request,
                seed: args.seed,
            },
            &mut sink,
        ),
        GenFormat::Mooncake => write_mooncake(
            &MooncakeWorkload {
                requests: args.requests,
                continue_chat_probability: args.continue_chat_probability,
                seed: args.seed,
                sessions: !args.plain,
            },
            &mut sink,
        ),
    };
    written.and_then(|()| sink.flush()).map_err(|e| Failure {
        message: format!("cannot write trace: {e}"),
        code: 1,
    })
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
