//! From options to a run: defaults filled in, every value checked, nothing read or written.
//! [`resolve`] is a pure function, so how flags and the experiment file combine is unit
//! tested here rather than through processes.

use std::path::PathBuf;

use routerlab_engine::{EngineConfig, KvTransfer, Overrides, Preset};
use routerlab_route::{MAX_REPLICAS, PdDecision, Pools};
use routerlab_sim::scenario::{DEFAULT_ENDPOINTS, Scenario, default_endpoints};
use routerlab_sim::timed::{Arrivals, CLOCK_RANGE, MAX_CLOCK_NS, TimedSettings};
use routerlab_sim::{MAX_ENDPOINTS, WhenUnavailable};
use routerlab_trace::TraceOptions;
use routerlab_trace::reader::{
    DEFAULT_BLOCK_SIZE, DEFAULT_MAX_LINE_BYTES, DEFAULT_TRACE_BLOCK_SIZE,
};
use serde_yaml::{Mapping, Value};

use crate::exit::Failure;
use crate::opts::{OutputFormat, ReplayOpts, TextOrValue, Timing};

/// Everything a replay needs, resolved: the library's [`Scenario`], and where the
/// command line puts its results.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// The run itself.
    pub scenario: Scenario,
    /// Report format.
    pub format: OutputFormat,
    /// Per-request output file.
    pub requests_out: Option<PathBuf>,
}

impl std::ops::Deref for RunSpec {
    type Target = Scenario;
    fn deref(&self) -> &Scenario {
        &self.scenario
    }
}

/// Resolves merged options (flags over the experiment file).
pub fn resolve(opts: ReplayOpts) -> Result<RunSpec, Failure> {
    let matcher = opts.matcher.clone().ok_or_else(|| {
        Failure::input(
            "no matcher: pass --matcher NAME (see `routerlab plugins` for what is installed)",
        )
    })?;
    let trace = opts
        .trace
        .clone()
        .ok_or_else(|| Failure::input("no trace: pass --trace PATH (e.g. traces/chat.jsonl)"))?;
    let seed = opts.seed.unwrap_or(0);
    let matcher_config = plugin_config(opts.matcher_config.clone(), "matcher")?;
    let detector_config = plugin_config(opts.detector_config.clone(), "detector")?;
    let named = match (
        opts.prefill_endpoints,
        opts.decode_endpoints,
        &opts.endpoints,
    ) {
        (_, Some(_), Some(_)) => {
            return Err(Failure::input(
                "give --decode-endpoints or --endpoints, not both (with --endpoints, --prefill-endpoints N makes its first N the prefill pool)",
            ));
        }
        (None, Some(_), None) => {
            return Err(Failure::input(
                "a disaggregated fleet needs --prefill-endpoints as well as --decode-endpoints",
            ));
        }
        (Some(p), Some(d), None) => {
            if p == 0 || d == 0 || p + d > MAX_ENDPOINTS {
                return Err(Failure::input(format!(
                    "--prefill-endpoints and --decode-endpoints must each be at least 1, and {MAX_ENDPOINTS} at most together"
                )));
            }
            Some(
                (0..p)
                    .map(|i| format!("prefill-{i}"))
                    .chain((0..d).map(|i| format!("decode-{i}")))
                    .collect::<Vec<_>>(),
            )
        }
        (Some(_), None, None) => {
            return Err(Failure::input(
                "a disaggregated fleet needs --decode-endpoints M as well (or --endpoints, whose first N --prefill-endpoints makes the prefill pool)",
            ));
        }
        _ => None,
    };
    let endpoints = match &opts.endpoints {
        None => named.unwrap_or_else(|| default_endpoints(DEFAULT_ENDPOINTS)),
        Some(TextOrValue::Text(text)) => parse_endpoints(text)?,
        Some(TextOrValue::Value(Value::Number(n))) => parse_endpoints(&n.to_string())?,
        Some(TextOrValue::Value(Value::Sequence(names))) => names
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Failure::input("experiment `endpoints`: expected a count or a list of names")
            })
            .and_then(check_endpoints)?,
        Some(TextOrValue::Value(_)) => {
            return Err(Failure::input(
                "experiment `endpoints`: expected a count or a list of names",
            ));
        }
    };
    let pools = match opts.prefill_endpoints {
        Some(p) if p == 0 || p >= endpoints.len() => {
            return Err(Failure::input(format!(
                "--prefill-endpoints must be from 1 to {} (the rest of the {} endpoints decode)",
                endpoints.len().saturating_sub(1),
                endpoints.len()
            )));
        }
        other => other.map(|p| (p, endpoints.len() - p)),
    };
    let block_size = opts.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
    let trace_block_size = opts.trace_block_size.unwrap_or(DEFAULT_TRACE_BLOCK_SIZE);
    if block_size == 0 || trace_block_size == 0 {
        return Err(Failure::input(
            "--block-size and --trace-block-size must be at least 1",
        ));
    }
    if opts.max_line_bytes == Some(0) {
        return Err(Failure::input("--max-line-bytes must be at least 1"));
    }
    if opts.cache_blocks == Some(0) {
        return Err(Failure::input(
            "--cache-blocks must be at least 1 (omit it for an unbounded cache)",
        ));
    }
    let pools = resolve_pools(&opts, pools.map(|(p, _)| p))?;
    let timed = resolve_timed(&opts, &endpoints, seed, pools.map(|p| p.prefill))?;
    let router_replicas = match opts.router_replicas {
        None => 1,
        Some(n) if (1..=MAX_REPLICAS as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(Failure::input(format!(
                "--router-replicas must be from 1 to {MAX_REPLICAS}, not {n}"
            )));
        }
    };
    let when_unavailable = match (opts.when_unavailable, opts.fail_open) {
        (Some(policy), true) if policy != crate::opts::UnavailableArg::FailOpen => {
            return Err(Failure::input(format!(
                "--fail-open and --when-unavailable {} say different things; give one",
                match policy {
                    crate::opts::UnavailableArg::Queue => "queue",
                    _ => "reject",
                }
            )));
        }
        (Some(policy), _) => policy.into(),
        (None, true) => WhenUnavailable::FailOpen,
        (None, false) if timed.is_some() => WhenUnavailable::Queue,
        (None, false) => WhenUnavailable::Reject,
    };
    Ok(RunSpec {
        scenario: Scenario {
            matcher,
            matcher_config,
            detector: opts.detector,
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
            endpoints,
            cache_blocks: opts.cache_blocks,
            when_unavailable,
            router_replicas,
            replica_assign: opts.replica_assign.map(Into::into).unwrap_or_default(),
            timed,
            pools,
        },
        format: opts.format.unwrap_or(OutputFormat::Human),
        requests_out: opts.requests_out,
    })
}

/// The timed-replay settings, or `None` for the time-free replay. Timed-only settings
/// without `--timing trace` are an error rather than silently ignored.
fn resolve_timed(
    opts: &ReplayOpts,
    endpoints: &[String],
    seed: u64,
    prefill: Option<usize>,
) -> Result<Option<TimedSettings>, Failure> {
    if opts.timing.unwrap_or(Timing::Off) == Timing::Off {
        if opts.any_timed_only() {
            return Err(Failure::input(
                "engine, arrival and latency settings need the timed replay: add --timing trace",
            ));
        }
        return Ok(None);
    }
    // Durations reach the clock: each must fit within its range.
    let clock_s = MAX_CLOCK_NS as f64 / 1e9;
    if opts
        .think_time_s
        .is_some_and(|t| !(t.is_finite() && (0.0..=clock_s).contains(&t)))
    {
        return Err(Failure::input(format!(
            "--think-time-s must be from 0 to {clock_s:.3e} seconds ({CLOCK_RANGE})"
        )));
    }
    if opts
        .metrics_interval_ms
        .is_some_and(|t| !(t.is_finite() && (0.0..=clock_s * 1e3).contains(&t)))
    {
        return Err(Failure::input(format!(
            "--metrics-interval-ms must be from 0 to {:.3e} ms ({CLOCK_RANGE})",
            clock_s * 1e3
        )));
    }
    if opts
        .kv_event_lag_ms
        .is_some_and(|t| !(t.is_finite() && (0.0..=3_600_000.0).contains(&t)))
    {
        return Err(Failure::input(
            "--kv-event-lag-ms must be from 0 to 3600000 (an hour)",
        ));
    }
    let slo = slo(opts.slo_ttft_ms, opts.slo_tpot_ms)?;
    let arrivals = arrivals(opts.speedup, opts.rate, opts.concurrency)?;
    let model_kv = model_kv_bytes(opts)?;
    let kv_transfer = KvTransfer {
        kv_bytes_per_token: opts.kv_bytes_per_token.or(model_kv).unwrap_or(0),
        bandwidth_gbps: opts.kv_transfer_gbps.unwrap_or(0.0),
        latency_ms: opts.kv_transfer_latency_ms.unwrap_or(0.0),
        mode: opts.kv_transfer_mode.unwrap_or_default(),
    };
    kv_transfer.validate().map_err(|e| {
        Failure::input(format!(
            "{e} (--kv-transfer-gbps, --kv-transfer-latency-ms, --kv-bytes-per-token)"
        ))
    })?;
    let engines = resolve_engines(opts, endpoints, prefill, model_kv)?;
    Ok(Some(TimedSettings {
        engines,
        arrivals,
        respect_parents: opts.respect_parents,
        think_time_ns: (opts.think_time_s.unwrap_or(0.0) * 1e9).round() as u64,
        metrics_interval_ns: (opts.metrics_interval_ms.unwrap_or(0.0) * 1e6).round() as u64,
        kv_event_lag_ns: (opts.kv_event_lag_ms.unwrap_or(0.0) * 1e6).round() as u64,
        slo,
        default_output_tokens: opts.output_tokens.unwrap_or(128),
        seed,
        kv_transfer,
    }))
}

/// The SLO of `--slo-ttft-ms` and `--slo-tpot-ms`, each checked; `None` without either.
pub fn slo(
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
) -> Result<Option<routerlab_report::Slo>, Failure> {
    let most = MAX_CLOCK_NS as f64 / 1e6;
    for (flag, target) in [("--slo-ttft-ms", ttft_ms), ("--slo-tpot-ms", tpot_ms)] {
        if target.is_some_and(|t| !(t.is_finite() && (0.0..=most).contains(&t))) {
            return Err(Failure::input(format!(
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
fn resolve_pools(opts: &ReplayOpts, prefill: Option<usize>) -> Result<Option<Pools>, Failure> {
    let Some(prefill) = prefill else {
        if opts.pd_decision.is_some()
            || opts.kv_transfer_given()
            || opts.prefill_engine.is_some()
            || opts.decode_engine.is_some()
        {
            return Err(Failure::input(
                "P/D decision, KV transfer and pool engine settings need a disaggregated fleet: add --prefill-endpoints N --decode-endpoints M",
            ));
        }
        return Ok(None);
    };
    let decision = match &opts.pd_decision {
        None => PdDecision::Always,
        Some(text) => text
            .parse()
            .map_err(|e: String| Failure::input(format!("--pd-decision: {e}")))?,
    };
    Ok(Some(Pools { prefill, decision }))
}

/// The arrival process of `--speedup`, `--rate` and `--concurrency` (replay and drive
/// alike): at most one of them; none means the trace's own times.
pub(crate) fn arrivals(
    speedup: Option<f64>,
    rate: Option<f64>,
    concurrency: Option<usize>,
) -> Result<Arrivals, Failure> {
    let positive = |name: &str, value: f64| {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(Failure::input(format!(
                "--{name} must be a positive number, not {value}"
            )))
        }
    };
    match (speedup, rate, concurrency) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(
            Failure::input("give at most one of --speedup, --rate and --concurrency"),
        ),
        (_, Some(rate), None) => Ok(Arrivals::Poisson {
            rate: positive("rate", rate)?,
        }),
        (_, None, Some(0)) => Err(Failure::input("--concurrency must be at least 1")),
        (_, None, Some(concurrency)) => Ok(Arrivals::Closed { concurrency }),
        (speedup, None, None) => Ok(Arrivals::Trace {
            speedup: positive("speedup", speedup.unwrap_or(1.0))?,
        }),
    }
}

/// Largest model config read (real ones are a few kilobytes).
const MAX_MODEL_CONFIG_BYTES: u64 = 4 << 20;

/// The text of the model config at `path`, at most [`MAX_MODEL_CONFIG_BYTES`].
pub(crate) fn read_model_config(path: &std::path::Path) -> Result<String, Failure> {
    let fail = |why: String| Failure::input(format!("{}: {why}", path.display()));
    let file =
        std::fs::File::open(path).map_err(|e| fail(format!("cannot read model config: {e}")))?;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_MODEL_CONFIG_BYTES + 1),
        &mut text,
    )
    .map_err(|e| fail(format!("cannot read model config: {e}")))?;
    if text.len() as u64 > MAX_MODEL_CONFIG_BYTES {
        return Err(fail(format!(
            "a model config is at most {MAX_MODEL_CONFIG_BYTES} bytes"
        )));
    }
    Ok(text)
}

/// The KV bytes of one token of `--model-config`'s model, when given.
fn model_kv_bytes(opts: &ReplayOpts) -> Result<Option<u64>, Failure> {
    let Some(path) = &opts.model_config else {
        if opts.kv_cache_dtype.is_some() {
            return Err(Failure::input("--kv-cache-dtype needs --model-config"));
        }
        return Ok(None);
    };
    let text = read_model_config(path)?;
    let fail = |why: String| Failure::input(format!("{}: {why}", path.display()));
    let kv = routerlab_engine::kv_from_model_config(&text, opts.kv_cache_dtype.as_deref())
        .map_err(|e| fail(e.to_string()))?;
    Ok(Some(kv.bytes_per_token))
}

/// One engine per endpoint, each validated here (a bad setting fails before any trace is
/// read). Precedence, later winning: the preset (`--engine`, else the file's
/// `engine.preset`, else dynamo), the KV bytes of `--model-config`, the file's `engine`
/// keys, `--engine-config`, then each endpoint's entry of the file's `engines`.
fn resolve_engines(
    opts: &ReplayOpts,
    endpoints: &[String],
    prefill: Option<usize>,
    model_kv: Option<u64>,
) -> Result<Vec<EngineConfig>, Failure> {
    let file_engine = opts.engine.clone().unwrap_or_default();
    let preset = opts
        .engine_preset
        .or(file_engine.preset)
        .unwrap_or(Preset::Dynamo);
    let mut preset = preset.config();
    if model_kv.is_some() {
        preset.kv_bytes_per_token = model_kv;
    }
    let mut base = preset.with(&Overrides {
        preset: None,
        ..file_engine
    });
    if let Some(text) = &opts.engine_config {
        base = base.with(&engine_overrides(text)?);
    }
    // A disaggregated fleet's pools may have engines of their own (other GPUs).
    let pool_base = |pos: usize| {
        match prefill {
            Some(p) if pos < p => opts.prefill_engine.as_ref().map(|o| base.clone().with(o)),
            Some(_) => opts.decode_engine.as_ref().map(|o| base.clone().with(o)),
            None => None,
        }
        .unwrap_or_else(|| base.clone())
    };
    let engines: Vec<EngineConfig> = match &opts.engines {
        None => (0..endpoints.len()).map(pool_base).collect(),
        Some(list) if list.len() != endpoints.len() => {
            return Err(Failure::input(format!(
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
    for (engine, name) in engines.iter().zip(endpoints) {
        engine
            .validate()
            .map_err(|e| Failure::input(format!("endpoint `{name}`: {e}")))?;
    }
    Ok(engines)
}

/// The text of `--engine-config`, read as overrides.
fn engine_overrides(text: &str) -> Result<Overrides, Failure> {
    serde_yaml::from_str(text)
        .map_err(|e| Failure::input(format!("--engine-config: {}", one_line(&e.to_string()))))
}

/// One engine: the `dynamo` preset with `--engine-config` YAML laid over it (what
/// `routerlab engine` simulates), validated.
pub fn engine_config(text: Option<&str>) -> Result<EngineConfig, Failure> {
    let mut engine = Preset::Dynamo.config();
    if let Some(text) = text {
        engine = engine.with(&engine_overrides(text)?);
    }
    engine
        .validate()
        .map_err(|e| Failure::input(format!("--engine-config: {e}")))?;
    Ok(engine)
}

/// A plugin's config as given (flag text or the experiment file's value), as a mapping;
/// the scenario adds the seed. Errors name the flag.
pub(crate) fn plugin_config(given: Option<TextOrValue>, which: &str) -> Result<Mapping, Failure> {
    let value = match given {
        Some(TextOrValue::Text(text)) if text.trim().is_empty() => Value::Null,
        Some(TextOrValue::Text(text)) => serde_yaml::from_str({
            routerlab_core::config::check_nesting(&text)
                .map_err(|e| Failure::input(format!("--{which}-config: {e}")))?;
            &text
        })
        .map_err(|e| {
            Failure::input(format!(
                "--{which}-config is not valid YAML or JSON: {}",
                one_line(&e.to_string())
            ))
        })?,
        Some(TextOrValue::Value(value)) => value,
        None => Value::Null,
    };
    match value {
        Value::Null => Ok(Mapping::new()),
        Value::Mapping(map) => Ok(map),
        other => Err(Failure::input(format!(
            "--{which}-config must be a mapping of keys, found {}",
            one_line(&serde_yaml::to_string(&other).unwrap_or_default())
        ))),
    }
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

/// Collapses whitespace (serde's messages span lines).
pub fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // The keys serde lists after an unknown one are ours, not the input: all of them stay.
    let (head, keys) = match line.find(", expected one of ") {
        Some(at) => line.split_at(at),
        None => (line.as_str(), ""),
    };
    // A parser's message may quote the input; a message is not the place for a document.
    const MOST: usize = 300;
    match head.char_indices().nth(MOST) {
        Some((cut, _)) => format!(
            "{}… ({} more characters){keys}",
            &head[..cut],
            head[cut..].chars().count()
        ),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> ReplayOpts {
        use clap::Parser;
        let mut all = vec!["routerlab", "replay"];
        all.extend_from_slice(args);
        match crate::Cli::try_parse_from(all)
            .expect("flags parse")
            .command
        {
            crate::Command::Replay(opts) => *opts,
            _ => unreachable!(),
        }
    }

    fn file(yaml: &str) -> ReplayOpts {
        serde_yaml::from_str(yaml).expect("experiment parses")
    }

    fn message(result: Result<RunSpec, Failure>) -> String {
        result.expect_err("an error").to_string()
    }

    #[test]
    fn defaults_fill_what_nobody_set() {
        let spec = resolve(flags(&["--matcher", "lcp", "--trace", "t.jsonl"])).unwrap();
        assert_eq!(spec.endpoints.len(), 10);
        assert_eq!(spec.endpoints[9], "localhost:8009");
        assert_eq!(spec.trace_options.block_size, 128);
        assert_eq!(spec.trace_options.trace_block_size, 512);
        assert_eq!(spec.plugin_configs(0).0, "seed: 0\n");
        assert_eq!(spec.when_unavailable, WhenUnavailable::Reject);
        assert_eq!(spec.timed, None);
    }

    #[test]
    fn flags_override_the_file_and_the_file_fills_the_rest() {
        let from_file = file(
            "matcher: simhash\ntrace: a.jsonl\nendpoints: [x, y]\nseed: 4\nmatcher_config: {virtual_nodes: 7}\n",
        );
        let spec = resolve(flags(&["--matcher", "lcp", "--seed", "9"]).or(from_file)).unwrap();
        assert_eq!(spec.matcher, "lcp");
        assert_eq!(spec.trace, PathBuf::from("a.jsonl"));
        assert_eq!(spec.endpoints, ["x", "y"]);
        assert_eq!(spec.seed, 9);
        assert_eq!(spec.plugin_configs(0).0, "virtual_nodes: 7\nseed: 9\n");
    }

    #[test]
    fn the_engine_preset_flag_wins_over_the_file_and_engine_config_over_both() {
        let from_file =
            file("timing: trace\nengine: {preset: dynamo, num_gpu_blocks: 100, max_num_seqs: 8}\n");
        let opts = flags(&[
            "--matcher",
            "lcp",
            "--trace",
            "t",
            "--engine",
            "dynamo",
            "--engine-config",
            "{max_num_seqs: 3}",
        ])
        .or(from_file);
        let timed = resolve(opts).unwrap().scenario.timed.unwrap();
        let engine = &timed.engines[0];
        assert_eq!(
            engine.num_gpu_blocks, 100,
            "the file's keys apply over the flag's preset"
        );
        assert_eq!(engine.max_num_seqs, 3, "--engine-config over the file");
        assert_eq!(
            engine.engine_block_size,
            EngineConfig::dynamo().engine_block_size
        );
    }

    #[test]
    fn timed_only_settings_need_timing_and_bad_values_name_their_flag() {
        let base = ["--matcher", "lcp", "--trace", "t"];
        let with = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            resolve(flags(&args))
        };
        assert!(message(with(&["--rate", "3"])).contains("add --timing trace"));
        assert!(
            message(resolve(file("matcher: a\ntrace: b\nengines: []\n")))
                .contains("add --timing trace")
        );
        assert_eq!(
            message(with(&["--timing", "trace", "--rate", "0"])),
            "--rate must be a positive number, not 0"
        );
        assert_eq!(
            message(with(&[
                "--timing",
                "trace",
                "--rate",
                "1",
                "--concurrency",
                "2"
            ])),
            "give at most one of --speedup, --rate and --concurrency"
        );
        assert_eq!(
            message(with(&["--endpoints", "a,b,a"])),
            "--endpoints: `a` is listed twice"
        );
        assert_eq!(
            message(with(&["--matcher-config", "[1]"])),
            "--matcher-config must be a mapping of keys, found - 1"
        );
        let queue = with(&["--timing", "trace", "--rate", "1"]).unwrap();
        assert_eq!(queue.when_unavailable, WhenUnavailable::Queue);
    }

    /// `--when-unavailable reject|fail-open` work without a clock (the one vocabulary for
    /// what `--fail-open` says); waiting at the router needs the timed replay.
    #[test]
    fn the_unavailable_policy_outside_the_timed_replay() {
        let base = ["--matcher", "lcp", "--trace", "t"];
        let with = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            resolve(flags(&args))
        };
        let open = with(&["--when-unavailable", "fail-open"]).unwrap();
        assert_eq!(open.when_unavailable, WhenUnavailable::FailOpen);
        assert!(open.timed.is_none());
        assert_eq!(open, with(&["--fail-open"]).unwrap());
        let reject = with(&["--when-unavailable", "reject"]).unwrap();
        assert_eq!(reject.when_unavailable, WhenUnavailable::Reject);
        assert!(message(with(&["--when-unavailable", "queue"])).contains("add --timing trace"));
    }

    /// Every flag under the "Timed replay" heading, taken from clap itself, is refused
    /// without `--timing trace`: a new timed flag cannot be silently ignored.
    #[test]
    fn every_timed_replay_flag_is_rejected_in_time_free_mode() {
        use clap::CommandFactory;
        let cli = crate::Cli::command();
        let replay = cli.find_subcommand("replay").expect("replay");
        let timed: Vec<_> = replay
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some(crate::opts::TIMED))
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
            let mut args = vec!["--matcher", "lcp", "--trace", "t", flag.as_str()];
            if takes_value {
                args.push(value);
            }
            assert!(
                message(resolve(flags(&args))).contains("add --timing trace"),
                "{flag} is accepted without --timing trace"
            );
        }
    }
}
