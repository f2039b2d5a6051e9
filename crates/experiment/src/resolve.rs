//! From a description to a run: defaults filled in, every value checked, nothing written
//! (a `model_config` is read). Errors name the setting by its flag, the key's name with
//! `--` and `-` for `_`, as users type it most.

use std::path::PathBuf;

use routerlab_engine::{EngineConfig, KvTransfer, Overrides, Preset};
use routerlab_route::{MAX_REPLICAS, PdDecision, Pools};
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::{Arrivals, CLOCK_RANGE, MAX_CLOCK_NS, TimedSettings};
use routerlab_sim::{MAX_ENDPOINTS, WhenUnavailable};
use routerlab_trace::TraceOptions;
use routerlab_trace::reader::{
    DEFAULT_BLOCK_SIZE, DEFAULT_MAX_LINE_BYTES, DEFAULT_TRACE_BLOCK_SIZE,
};
use serde_yaml::{Mapping, Value};

use crate::ExperimentError;
use crate::error::one_line;
use crate::file::{Experiment, OutputFormat, Timing, Unavailable};
use crate::fleet::fleet;
use crate::hop;

/// Everything a replay needs, resolved: the library's [`Scenario`], and where the
/// command line puts its results.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The run itself.
    pub scenario: Scenario,
    /// Report format.
    pub format: OutputFormat,
    /// Per-request output file.
    pub requests_out: Option<PathBuf>,
    /// What a measured run read as the trace has to say (left out, partial), for the user.
    pub trace_note: Option<String>,
}

impl std::ops::Deref for Run {
    type Target = Scenario;
    fn deref(&self) -> &Scenario {
        &self.scenario
    }
}

/// Resolves a description into a run.
pub fn resolve(opts: &Experiment) -> Result<Run, ExperimentError> {
    let (matcher, matcher_config) = crate::import::matcher_of(opts)?;
    let trace = opts.trace.clone().ok_or_else(|| {
        ExperimentError::invalid("no trace: pass --trace PATH (e.g. traces/chat.jsonl)")
    })?;
    let seed = opts.seed.unwrap_or(0);
    let detector_config = plugin_config(opts.detector_config.clone(), "detector")?;
    let (endpoints, prefill) = fleet(opts)?;
    let pools = prefill.map(|p| (p, endpoints.len() - p));
    let block_size = opts.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
    let trace_block_size = opts.trace_block_size.unwrap_or(DEFAULT_TRACE_BLOCK_SIZE);
    if block_size == 0 || trace_block_size == 0 {
        return Err(ExperimentError::invalid(
            "--block-size and --trace-block-size must be at least 1",
        ));
    }
    if opts.max_line_bytes == Some(0) {
        return Err(ExperimentError::invalid(
            "--max-line-bytes must be at least 1",
        ));
    }
    if opts.cache_blocks == Some(0) {
        return Err(ExperimentError::invalid(
            "--cache-blocks must be at least 1 (omit it for an unbounded cache)",
        ));
    }
    let pools = resolve_pools(opts, pools.map(|(p, _)| p))?;
    let timed = resolve_timed(opts, &endpoints, seed, pools.map(|p| p.prefill))?;
    let router_replicas = match opts.router_replicas {
        None => 1,
        Some(n) if (1..=MAX_REPLICAS as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ExperimentError::invalid(format!(
                "--router-replicas must be from 1 to {MAX_REPLICAS}, not {n}"
            )));
        }
    };
    let when_unavailable = match (opts.when_unavailable, opts.fail_open) {
        (Some(policy), true) if policy != Unavailable::FailOpen => {
            return Err(ExperimentError::invalid(format!(
                "--fail-open and --when-unavailable {} say different things; give one",
                match policy {
                    Unavailable::Queue => "queue",
                    _ => "reject",
                }
            )));
        }
        (Some(policy), _) => policy.into(),
        (None, true) => WhenUnavailable::FailOpen,
        (None, false) if timed.is_some() => WhenUnavailable::Queue,
        (None, false) => WhenUnavailable::Reject,
    };
    Run {
        scenario: Scenario {
            matcher,
            matcher_config,
            detector: opts.detector.clone(),
            detector_config,
            seed,
            trace,
            trace_options: TraceOptions {
                format: opts.trace_format,
                block_size,
                trace_block_size,
                skip_invalid: opts.skip_invalid,
                max_line_bytes: opts.max_line_bytes.unwrap_or(DEFAULT_MAX_LINE_BYTES),
            },
            trace_text: None,
            warm_up: Vec::new(),
            endpoints,
            cache_blocks: opts.cache_blocks,
            when_unavailable,
            router_replicas,
            replica_assign: opts.replica_assign.map(Into::into).unwrap_or_default(),
            replica_sync: crate::replica_sync::resolve(opts, router_replicas)?,
            timed,
            pools,
            scaler: None,
        },
        format: opts.format.unwrap_or(OutputFormat::Human),
        requests_out: opts.requests_out.clone(),
        trace_note: None,
    }
    .scaled(opts)?
    .read_traces(opts)
}

impl Run {
    /// The run with its fleet sized by the scaler the description names, if any.
    fn scaled(mut self, opts: &Experiment) -> Result<Run, ExperimentError> {
        crate::scaling::apply(opts, &mut self.scenario)?;
        Ok(self)
    }
}

/// The timed-replay settings, or `None` for the time-free replay. Timed-only settings
/// without `--timing trace` are an error rather than silently ignored.
fn resolve_timed(
    opts: &Experiment,
    endpoints: &[String],
    seed: u64,
    prefill: Option<usize>,
) -> Result<Option<TimedSettings>, ExperimentError> {
    if opts.timing.unwrap_or(Timing::Off) == Timing::Off {
        if let Some(key) = timed_only_given(opts) {
            return Err(ExperimentError::invalid(format!(
                "--{} (an engine, arrival or latency setting) needs the timed replay: add --timing trace",
                key.replace('_', "-")
            )));
        }
        return Ok(None);
    }
    // Durations reach the clock: each must fit within its range.
    let clock_s = MAX_CLOCK_NS as f64 / 1e9;
    if opts
        .think_time_s
        .is_some_and(|t| !(t.is_finite() && (0.0..=clock_s).contains(&t)))
    {
        return Err(ExperimentError::invalid(format!(
            "--think-time-s must be from 0 to {clock_s:.3e} seconds ({CLOCK_RANGE})"
        )));
    }
    if opts
        .metrics_interval_ms
        .is_some_and(|t| !(t.is_finite() && (0.0..=clock_s * 1e3).contains(&t)))
    {
        return Err(ExperimentError::invalid(format!(
            "--metrics-interval-ms must be from 0 to {:.3e} ms ({CLOCK_RANGE})",
            clock_s * 1e3
        )));
    }
    let (kv_event_lag_ns, router_hop_ns, router_decision_ns) = hop::router_time(opts)?;
    let slo = slo(opts.slo_ttft_ms, opts.slo_tpot_ms)?;
    let arrivals = arrivals(opts.speedup, opts.rate, opts.concurrency)?;
    let model = model_engine(opts)?;
    let kv_transfer = KvTransfer {
        kv_bytes_per_token: opts.kv_bytes_per_token.or(model.kv_bytes).unwrap_or(0),
        bandwidth_gbps: opts.kv_transfer_gbps.unwrap_or(0.0),
        latency_ms: opts.kv_transfer_latency_ms.unwrap_or(0.0),
        mode: opts.kv_transfer_mode.unwrap_or_default(),
    };
    kv_transfer.validate().map_err(|e| {
        ExperimentError::invalid(format!(
            "{e} (--kv-transfer-gbps, --kv-transfer-latency-ms, --kv-bytes-per-token)"
        ))
    })?;
    let engines = resolve_engines(opts, endpoints, prefill, &model)?;
    Ok(Some(TimedSettings {
        engines,
        arrivals,
        respect_parents: opts.respect_parents,
        think_time_ns: (opts.think_time_s.unwrap_or(0.0) * 1e9).round() as u64,
        metrics_interval_ns: (opts.metrics_interval_ms.unwrap_or(0.0) * 1e6).round() as u64,
        kv_event_lag_ns,
        router_hop_ns,
        router_decision_ns,
        slo,
        default_output_tokens: opts.output_tokens.unwrap_or(128),
        seed,
        kv_transfer,
        scaling: None,
    }))
}

/// The keys only the timed replay reads (besides `when_unavailable: queue`): given without
/// `timing: trace`, they are refused rather than silently ignored.
pub const TIMED_ONLY: &[&str] = &[
    "speedup",
    "rate",
    "concurrency",
    "respect_parents",
    "think_time_s",
    "model_config",
    "kv_cache_dtype",
    "gpu",
    "tensor_parallel_size",
    "expert_parallel_size",
    "gpu_memory_utilization",
    "engine",
    "engines",
    "metrics_interval_ms",
    "kv_event_lag_ms",
    "router_hop_ms",
    "router_decision_ms",
    "warm_up",
    "lmbench_warm_up",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "output_tokens",
    "kv_bytes_per_token",
    "kv_transfer_gbps",
    "kv_transfer_latency_ms",
    "kv_transfer_mode",
    "prefill_engine",
    "decode_engine",
    "scaler",
    "scaler_config",
    "scale_interval_s",
    "startup_s",
    "min_endpoints",
    "max_gpus",
    "replica_sync",
    "sync_scope",
    "sync_interval_ms",
    "sync_delay_ms",
    "sync_loss",
    "sync_ttl_ms",
];

/// The keys of the KV transfer between pools.
const KV_TRANSFER: [&str; 4] = [
    "kv_bytes_per_token",
    "kv_transfer_gbps",
    "kv_transfer_latency_ms",
    "kv_transfer_mode",
];

/// Whether a setting only the timed replay reads is given.
fn timed_only_given(opts: &Experiment) -> Option<&'static str> {
    let queue = opts.when_unavailable == Some(Unavailable::Queue);
    (TIMED_ONLY.iter().find(|key| opts.given(key)).copied())
        .or(queue.then_some("when_unavailable queue"))
}

/// The SLO of `--slo-ttft-ms` and `--slo-tpot-ms`, each checked; `None` without either.
pub fn slo(
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
) -> Result<Option<routerlab_report::Slo>, ExperimentError> {
    let most = MAX_CLOCK_NS as f64 / 1e6;
    for (flag, target) in [("--slo-ttft-ms", ttft_ms), ("--slo-tpot-ms", tpot_ms)] {
        if target.is_some_and(|t| !(t.is_finite() && (0.0..=most).contains(&t))) {
            return Err(ExperimentError::invalid(format!(
                "{flag} must be from 0 to {most:.3e} ms ({CLOCK_RANGE})"
            )));
        }
    }
    Ok((ttft_ms.is_some() || tpot_ms.is_some())
        .then_some(routerlab_report::Slo { ttft_ms, tpot_ms }))
}

/// The split into pools of `--prefill-endpoints`/`--decode-endpoints` (`prefill`: the
/// count, when given), with its P/D decision; `None` for an aggregated fleet, whose pool
/// settings are refused rather than ignored.
fn resolve_pools(
    opts: &Experiment,
    prefill: Option<usize>,
) -> Result<Option<Pools>, ExperimentError> {
    let Some(prefill) = prefill else {
        if opts.pd_decision.is_some()
            || KV_TRANSFER.iter().any(|k| opts.given(k))
            || opts.prefill_engine.is_some()
            || opts.decode_engine.is_some()
        {
            return Err(ExperimentError::invalid(
                "P/D decision, KV transfer and pool engine settings need a disaggregated fleet: add --prefill-endpoints N --decode-endpoints M",
            ));
        }
        return Ok(None);
    };
    let decision = match &opts.pd_decision {
        None => PdDecision::Always,
        Some(text) => text
            .parse()
            .map_err(|e: String| ExperimentError::invalid(format!("--pd-decision: {e}")))?,
    };
    Ok(Some(Pools { prefill, decision }))
}

/// The arrival process of `--speedup`, `--rate` and `--concurrency` (replay and drive
/// alike): at most one of them; none means the trace's own times.
pub fn arrivals(
    speedup: Option<f64>,
    rate: Option<f64>,
    concurrency: Option<usize>,
) -> Result<Arrivals, ExperimentError> {
    let positive = |name: &str, value: f64| {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(ExperimentError::invalid(format!(
                "--{name} must be a positive number, not {value}"
            )))
        }
    };
    match (speedup, rate, concurrency) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(
            ExperimentError::invalid("give at most one of --speedup, --rate and --concurrency"),
        ),
        (_, Some(rate), None) => Ok(Arrivals::Poisson {
            rate: positive("rate", rate)?,
        }),
        (_, None, Some(0)) => Err(ExperimentError::invalid("--concurrency must be at least 1")),
        (_, None, Some(concurrency)) => Ok(Arrivals::Closed { concurrency }),
        (speedup, None, None) => Ok(Arrivals::Trace {
            speedup: positive("speedup", speedup.unwrap_or(1.0))?,
        }),
    }
}

/// What `model_config` (and `gpu`) say of every engine: the KV bytes of one token, and on
/// a GPU the roofline step time and what the KV cache is sized from.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModelEngine {
    /// KV bytes of one token, every layer.
    pub kv_bytes: Option<u64>,
    /// The roofline step time, with `gpu`.
    pub roofline: Option<routerlab_engine::Roofline>,
    /// `gpu`'s fitted efficiencies, when it is a profile.
    profile: Option<routerlab_engine::Efficiency>,
    /// The config's text, with `gpu` (the KV blocks are sized from it).
    text: String,
    /// `gpu_memory_utilization`.
    utilization: f64,
}

/// The engines' model, from `model_config`, `kv_cache_dtype`, `gpu`,
/// `tensor_parallel_size`, `expert_parallel_size` and `gpu_memory_utilization`.
pub(crate) fn model_engine(opts: &Experiment) -> Result<ModelEngine, ExperimentError> {
    let Some(path) = &opts.model_config else {
        for (given, flag) in [
            (opts.kv_cache_dtype.is_some(), "--kv-cache-dtype"),
            (opts.gpu.is_some(), "--gpu"),
        ] {
            if given {
                return Err(ExperimentError::invalid(format!(
                    "{flag} needs --model-config"
                )));
            }
        }
        return Ok(ModelEngine::default());
    };
    if opts.gpu.is_none() {
        for (given, flag) in [
            (
                opts.tensor_parallel_size.is_some(),
                "--tensor-parallel-size",
            ),
            (
                opts.expert_parallel_size.is_some(),
                "--expert-parallel-size",
            ),
            (
                opts.gpu_memory_utilization.is_some(),
                "--gpu-memory-utilization",
            ),
        ] {
            if given {
                return Err(ExperimentError::invalid(format!("{flag} needs --gpu")));
            }
        }
    }
    let text = routerlab_engine::read_model_config(path).map_err(ExperimentError::Invalid)?;
    let fail = |why: String| ExperimentError::invalid(format!("{}: {why}", path.display()));
    let kv = routerlab_engine::kv_from_model_config(&text, opts.kv_cache_dtype.as_deref())
        .map_err(|e| fail(e.to_string()))?;
    let Some(gpu) = &opts.gpu else {
        return Ok(ModelEngine {
            kv_bytes: Some(kv.bytes_per_token),
            ..ModelEngine::default()
        });
    };
    let gpu = routerlab_engine::Gpu::resolve(gpu)
        .map_err(|e| ExperimentError::invalid(format!("--gpu: {e}")))?;
    let profile = gpu.efficiency;
    let utilization = opts.gpu_memory_utilization.unwrap_or(0.9);
    if !(utilization > 0.0 && utilization <= 1.0) {
        return Err(ExperimentError::invalid(
            "--gpu-memory-utilization must be above 0 and at most 1",
        ));
    }
    let (tensor_parallel, expert_parallel) = (
        opts.tensor_parallel_size.unwrap_or(1),
        opts.expert_parallel_size.unwrap_or(1),
    );
    if tensor_parallel == 0 || expert_parallel == 0 {
        return Err(ExperimentError::invalid(
            "--tensor-parallel-size and --expert-parallel-size must be at least 1",
        ));
    }
    let roofline = routerlab_engine::Roofline::new(
        gpu,
        routerlab_engine::ModelShape::from_config(&text).map_err(|e| fail(e.to_string()))?,
        tensor_parallel,
        expert_parallel,
        kv.dtype_bytes as u32,
    );
    roofline.validate().map_err(fail)?;
    Ok(ModelEngine {
        kv_bytes: Some(kv.bytes_per_token),
        roofline: Some(roofline),
        profile,
        text,
        utilization,
    })
}

impl ModelEngine {
    /// The KV blocks vLLM would make for `engine` on the GPU, and how (each term), when a
    /// GPU is given.
    pub(crate) fn kv_blocks(
        &self,
        engine: &EngineConfig,
    ) -> Result<Option<(u32, String)>, ExperimentError> {
        let Some(roofline) = &self.roofline else {
            return Ok(None);
        };
        let budget = routerlab_engine::GpuBudget {
            gpu_memory_bytes: roofline.gpu.memory_bytes(),
            utilization: self.utilization,
            tensor_parallel: roofline.tensor_parallel,
            expert_parallel: roofline.expert_parallel,
            max_num_batched_tokens: engine.max_num_batched_tokens,
            max_num_seqs: engine.max_num_seqs,
            block_size: engine.engine_block_size,
            kv_dtype: None,
            non_kv_bytes: None,
        };
        let kv = routerlab_engine::kv_budget(&self.text, &budget)
            .map_err(|e| ExperimentError::invalid(format!("--model-config on --gpu: {e}")))?;
        // Bytes a token on one GPU with the KV cache's own dtype.
        let bytes_per_token = roofline.kv_bytes_per_token();
        let blocks = routerlab_engine::memory::blocks_in(
            kv.available_bytes,
            bytes_per_token,
            engine.engine_block_size,
        )
        .min(1 << 24) as u32;
        if blocks == 0 {
            return Err(ExperimentError::invalid(format!(
                "--model-config on --gpu: no KV block fits in the {:.2} GiB left",
                kv.available_bytes as f64 / (1u64 << 30) as f64
            )));
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        Ok(Some((
            blocks,
            format!(
                "{:.2} GiB for KV of {} {:.2} GiB at {}, less {}; {} KV bytes a token per GPU",
                gib(kv.available_bytes),
                roofline.gpu.name,
                roofline.gpu.memory_gib,
                self.utilization,
                kv.deductions(),
                bytes_per_token
            ),
        )))
    }
}

/// One engine per endpoint, each validated here (a bad setting fails before any trace is
/// read). Precedence, later winning: the preset (`--engine`, else the file's
/// `engine.preset`, else dynamo), the KV bytes of `--model-config`, the file's `engine`
/// keys, `--engine-config`, then each endpoint's entry of the file's `engines`.
fn resolve_engines(
    opts: &Experiment,
    endpoints: &[String],
    prefill: Option<usize>,
    model: &ModelEngine,
) -> Result<Vec<EngineConfig>, ExperimentError> {
    let base = base_engine(opts, model)?;
    // A disaggregated fleet's pools may have engines of their own (other GPUs).
    let pool_base = |pos: usize| {
        match prefill {
            Some(p) if pos < p => opts.prefill_engine.as_ref().map(|o| base.clone().with(o)),
            Some(_) => opts.decode_engine.as_ref().map(|o| base.clone().with(o)),
            None => None,
        }
        .unwrap_or_else(|| base.clone())
    };
    let mut engines: Vec<EngineConfig> = match &opts.engines {
        None => (0..endpoints.len()).map(pool_base).collect(),
        Some(list) if list.len() != endpoints.len() => {
            return Err(ExperimentError::invalid(format!(
                "experiment `engines`: {} entries for {} endpoints (give one per endpoint)",
                list.len(),
                endpoints.len(),
            )));
        }
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(pos, o)| pool_base(pos).with(o))
            .collect(),
    };
    for (engine, name) in engines.iter_mut().zip(endpoints) {
        // A pool's or an endpoint's own scheduler has its own host loop.
        settle_efficiency(model, engine);
        engine
            .validate()
            .map_err(|e| ExperimentError::invalid(format!("endpoint `{name}`: {e}")))?;
    }
    Ok(engines)
}

/// An engine whose step time is the model's roofline (whatever its efficiencies so far)
/// takes those for its own scheduler: the profile's under it when `gpu` is a profile, else
/// the typical ones.
fn settle_efficiency(model: &ModelEngine, config: &mut EngineConfig) {
    let (Some(roofline), routerlab_engine::StepTime::Roofline(step)) =
        (&model.roofline, &mut config.step_time)
    else {
        return;
    };
    let as_made = routerlab_engine::Roofline {
        efficiency: roofline.efficiency,
        ..(**step).clone()
    };
    if as_made != *roofline {
        return;
    }
    step.efficiency =
        routerlab_engine::Efficiency::for_engine(model.profile, config.scheduler, step.gpu.link);
}

/// Every endpoint's engine before its pool's and its own settings: the preset (the
/// `engine.preset` key, which `--engine` sets, else dynamo), the KV bytes of `model_config`
/// (and on a `gpu`, its roofline step time), then the rest of `engine` (the file's keys,
/// `--engine-config`'s over them); on a `gpu`, the KV blocks vLLM would make of its memory
/// unless `engine` gives `num_gpu_blocks`.
pub(crate) fn base_engine(
    opts: &Experiment,
    model: &ModelEngine,
) -> Result<EngineConfig, ExperimentError> {
    let engine = opts.engine.clone().unwrap_or_default();
    let mut preset = engine.preset.unwrap_or(Preset::Dynamo).config();
    if model.kv_bytes.is_some() {
        preset.kv_bytes_per_token = model.kv_bytes;
    }
    if let Some(roofline) = &model.roofline {
        preset.step_time = routerlab_engine::StepTime::Roofline(Box::new(roofline.clone()));
    }
    let blocks_given = engine.num_gpu_blocks.is_some();
    let mut config = preset.with(&Overrides {
        preset: None,
        ..engine
    });
    settle_efficiency(model, &mut config);
    if !blocks_given && let Some((blocks, _)) = model.kv_blocks(&config)? {
        config.num_gpu_blocks = blocks;
    }
    Ok(config)
}

/// A plugin's config as given (a mapping, or nothing), as a mapping; the scenario adds the
/// seed. Errors name the flag.
pub(crate) fn plugin_config(given: Option<Value>, which: &str) -> Result<Mapping, ExperimentError> {
    match given.unwrap_or(Value::Null) {
        Value::Null => Ok(Mapping::new()),
        Value::Mapping(map) => Ok(map),
        other => Err(ExperimentError::invalid(format!(
            "--{which}-config must be a mapping of keys, found {}",
            one_line(&serde_yaml::to_string(&other).unwrap_or_default())
        ))),
    }
}

/// A pool's endpoints as given: a count (named by routerlab), or their names.
pub(crate) enum Given {
    Count(u64),
    Names(Vec<String>),
}

/// `key`'s value read as a count or names (`4`, `a,b`, `[a, b]`).
pub(crate) fn given_endpoints(value: &Value, key: &str) -> Result<Given, ExperimentError> {
    let expected = || {
        ExperimentError::invalid(format!(
            "experiment `{key}`: expected a count or a list of names"
        ))
    };
    match value {
        Value::Number(n) => n.as_u64().map(Given::Count).ok_or_else(expected),
        Value::String(text) => Ok(match text.trim().parse::<u64>() {
            Ok(n) => Given::Count(n),
            Err(_) => Given::Names(text.split(',').map(|s| s.trim().to_owned()).collect()),
        }),
        Value::Sequence(names) => names
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Given::Names)
            .ok_or_else(expected),
        _ => Err(expected()),
    }
}

pub(crate) fn check_endpoints(names: Vec<String>) -> Result<Vec<String>, ExperimentError> {
    if names.is_empty() || names.len() > MAX_ENDPOINTS || names.iter().any(String::is_empty) {
        return Err(ExperimentError::invalid(format!(
            "--endpoints: expected a count or 1 to {MAX_ENDPOINTS} non-empty, comma-separated names"
        )));
    }
    let mut sorted = names.clone();
    sorted.sort();
    if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(ExperimentError::invalid(format!(
            "--endpoints: `{}` is listed twice",
            pair[0]
        )));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{Layers, parse_mapping};

    /// The description of `layers`, each a YAML mapping, later ones over earlier ones.
    fn layers(yaml: &[&str]) -> Experiment {
        yaml.iter()
            .fold(Layers::new(), |l, y| l.over(parse_mapping(y).unwrap()))
            .experiment()
            .expect("the layers read as an experiment")
    }

    fn message(result: Result<Run, ExperimentError>) -> String {
        result.expect_err("an error").to_string()
    }

    #[test]
    fn defaults_fill_what_nobody_set() {
        let spec = resolve(&layers(&["{matcher: lcp, trace: t.jsonl}"])).unwrap();
        assert_eq!(spec.endpoints.len(), 10);
        assert_eq!(spec.endpoints[9], "localhost:8009");
        assert_eq!(spec.trace_options.block_size, 128);
        assert_eq!(spec.trace_options.trace_block_size, 512);
        assert_eq!(spec.plugin_configs(0).0, "seed: 0\n");
        assert_eq!(spec.when_unavailable, WhenUnavailable::Reject);
        assert_eq!(spec.timed, None);
        assert_eq!(spec.format, OutputFormat::Human);
    }

    #[test]
    fn a_later_layer_overrides_and_the_earlier_fills_the_rest() {
        let file = "matcher: simhash\ntrace: a.jsonl\nendpoints: [x, y]\nseed: 4\nmatcher_config: {virtual_nodes: 7}\n";
        let spec = resolve(&layers(&[file, "{matcher: lcp, seed: 9}"])).unwrap();
        assert_eq!(spec.matcher, "lcp");
        assert_eq!(spec.trace, PathBuf::from("a.jsonl"));
        assert_eq!(spec.endpoints, ["x", "y"]);
        assert_eq!(spec.seed, 9);
        assert_eq!(spec.plugin_configs(0).0, "virtual_nodes: 7\nseed: 9\n");
    }

    #[test]
    fn the_engine_preset_and_keys_over_the_file_keep_its_other_keys() {
        let file =
            "timing: trace\nengine: {preset: dynamo, num_gpu_blocks: 100, max_num_seqs: 8}\n";
        let flags = "{matcher: lcp, trace: t, engine: {preset: dynamo, max_num_seqs: 3}}";
        let timed = resolve(&layers(&[file, flags]))
            .unwrap()
            .scenario
            .timed
            .unwrap();
        let engine = &timed.engines[0];
        assert_eq!(engine.num_gpu_blocks, 100, "the file's keys stay");
        assert_eq!(engine.max_num_seqs, 3, "the later layer's key wins");
        assert_eq!(
            engine.engine_block_size,
            EngineConfig::dynamo().engine_block_size
        );
    }

    #[test]
    fn timed_only_settings_need_timing_and_bad_values_name_their_flag() {
        let with = |extra: &str| resolve(&layers(&["{matcher: lcp, trace: t}", extra]));
        assert!(message(with("{rate: 3}")).contains("add --timing trace"));
        assert!(message(with("{engines: []}")).contains("add --timing trace"));
        assert!(
            with("{respect_parents: false}").is_ok(),
            "a switch off is not given"
        );
        assert_eq!(
            message(with("{timing: trace, rate: 0}")),
            "--rate must be a positive number, not 0"
        );
        assert_eq!(
            message(with("{timing: trace, rate: 1, concurrency: 2}")),
            "give at most one of --speedup, --rate and --concurrency"
        );
        assert_eq!(
            message(with("{endpoints: 'a,b,a'}")),
            "--endpoints: `a` is listed twice"
        );
        assert_eq!(
            message(with("{matcher_config: [1]}")),
            "--matcher-config must be a mapping of keys, found - 1"
        );
        let queue = with("{timing: trace, rate: 1}").unwrap();
        assert_eq!(queue.when_unavailable, WhenUnavailable::Queue);
    }

    /// `when_unavailable: reject|fail-open` work without a clock (the one vocabulary for
    /// what `fail_open` says); waiting at the router needs the timed replay.
    #[test]
    fn the_unavailable_policy_outside_the_timed_replay() {
        let with = |extra: &str| resolve(&layers(&["{matcher: lcp, trace: t}", extra]));
        let open = with("{when_unavailable: fail-open}").unwrap();
        assert_eq!(open.when_unavailable, WhenUnavailable::FailOpen);
        assert!(open.timed.is_none());
        assert_eq!(open, with("{fail_open: true}").unwrap());
        let reject = with("{when_unavailable: reject}").unwrap();
        assert_eq!(reject.when_unavailable, WhenUnavailable::Reject);
        assert!(message(with("{when_unavailable: queue}")).contains("add --timing trace"));
    }

    /// Every key of the schema that only the timed replay reads is in [`TIMED_ONLY`]: each
    /// is refused without `timing: trace` (the CLI's test does the same from its flags).
    #[test]
    fn every_timed_only_key_is_refused_in_time_free_mode() {
        for key in TIMED_ONLY {
            let value = match *key {
                "respect_parents" => "true",
                "engine" | "prefill_engine" | "decode_engine" => "{}",
                "engines" => "[]",
                "model_config" | "kv_cache_dtype" | "gpu" | "warm_up" | "lmbench_warm_up"
                | "scaler" => "x",
                "scaler_config" => "{}",
                "kv_transfer_mode" => "missing",
                "replica_sync" => "shared",
                "sync_scope" => "loads",
                _ => "1",
            };
            // A disaggregated fleet, so that pool settings pass their own check first.
            let base = "{matcher: lcp, trace: t, prefill_endpoints: 1, decode_endpoints: 1}";
            let e = layers(&[base, &format!("{{{key}: {value}}}")]);
            assert!(
                message(resolve(&e)).contains("add --timing trace"),
                "{key} is accepted without timing: trace"
            );
        }
    }
}
