//! `routerlab validate --fit RUN [--fit RUN] RUN...`: fits the engine model on some measured
//! runs and predicts the others, each replayed from its own requests (arrival, prompt and
//! output tokens), and prints per run TTFT and end-to-end latency measured vs simulated,
//! with absolute percentage errors and, over the predicted runs, their median.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use routerlab_engine::EngineConfig;
use routerlab_sim::Replicas;
use routerlab_sim::calibrate::validate::{METRICS, RunCheck, median_errors};
use routerlab_sim::calibrate::{MeasuredRun, Samples, distserve, fit, vllm_bench};
use routerlab_trace::{TraceFormat, TraceOptions, TraceReader, Workload};

use crate::cmd::calibrate::simulate;
use crate::exit::Failure;

/// How a measured run is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunFormat {
    /// A directory is LLMServingSim's layout; a file is told by its first bytes.
    Auto,
    /// LLMServingSim's bench layout: requests.jsonl, meta.json, timeseries.csv.
    Llmservingsim,
    /// DistServe's alignment runs (`vllm-N-RATE.exp`).
    Distserve,
    /// `vllm bench serve --save-result --save-detailed` JSON.
    VllmBench,
}

/// `--scheduler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerArg {
    /// vLLM V1.
    V1,
    /// vLLM V0.
    V0,
}

/// Report formats of `validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ValidateFormat {
    /// A table per run and the medians.
    Human,
    /// One JSON object.
    Json,
    /// One row per run and metric.
    Csv,
}

/// `routerlab validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// A run to fit the engine model on (repeat for several; fitted together).
    #[arg(long = "fit", value_name = "RUN", required = true)]
    pub fit: Vec<PathBuf>,
    /// Runs to predict with the fitted model.
    #[arg(value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// How the runs are laid out.
    #[arg(long, value_name = "FORMAT", default_value = "auto")]
    pub run_format: RunFormat,
    /// The engine's max_num_seqs [default: the first fitted run's meta.json].
    #[arg(long, value_name = "N")]
    pub max_num_seqs: Option<u32>,
    /// The engine's max_num_batched_tokens [default: the first fitted run's meta.json].
    #[arg(long, value_name = "N")]
    pub max_num_batched_tokens: Option<u32>,
    /// The engine's KV cache in blocks [default: as the first fitted run records it, or
    /// estimated from it as `calibrate` does].
    #[arg(long, value_name = "N")]
    pub num_gpu_blocks: Option<u32>,
    /// The engine's scheduler: vLLM V1's (chunked prefill, mixed steps) or V0's
    /// (prefill-first steps, whole prompts).
    #[arg(long, value_name = "V", default_value = "v1")]
    pub scheduler: SchedulerArg,
    /// Tokens per KV block (with --num-gpu-blocks).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub block_size: u32,
    /// Seed of the search.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Replays the search may run (each replays every fitted run once).
    #[arg(long, value_name = "N", default_value_t = 300)]
    pub budget: usize,
    /// Report format.
    #[arg(long, value_name = "FORMAT", default_value = "human")]
    pub format: ValidateFormat,
    /// Also write the fitted engine config (YAML) here.
    #[arg(long, value_name = "FILE")]
    pub engine_out: Option<PathBuf>,
}

/// A run as read: its requests and its own length-form workload.
struct Run {
    path: PathBuf,
    measured: MeasuredRun,
    workload: Workload,
}

fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure::input(format!("{}: cannot read: {e}", path.display())))
}

fn load_run(path: &Path, format: RunFormat, args: &ValidateArgs) -> Result<MeasuredRun, Failure> {
    let directory = std::fs::metadata(path)
        .map_err(|e| Failure::input(format!("{}: cannot read: {e}", path.display())))?
        .is_dir();
    let llmservingsim = match format {
        RunFormat::Auto => directory,
        RunFormat::Llmservingsim => true,
        RunFormat::Distserve | RunFormat::VllmBench => false,
    };
    if llmservingsim {
        let file = |name| read(&path.join(name));
        return MeasuredRun::parse(
            &file("requests.jsonl")?,
            &file("meta.json")?,
            &file("timeseries.csv")?,
        )
        .map_err(|e| Failure::input(format!("{}/{e}", path.display())));
    }
    if directory {
        return Err(Failure::input(format!(
            "{}: a directory, not a run file (DistServe's or vllm bench serve's)",
            path.display()
        )));
    }
    let text = read(path)?;
    let format = match format {
        RunFormat::Auto if distserve::detect(&text) => RunFormat::Distserve,
        RunFormat::Auto if vllm_bench::detect(&text) => RunFormat::VllmBench,
        RunFormat::Auto => {
            return Err(Failure::input(format!(
                "{}: not a measured run: a directory in LLMServingSim's layout (requests.jsonl, meta.json, timeseries.csv), a DistServe run file (line 1 a list of dicts starting `[{{'prompt_len':`) or a `vllm bench serve --save-detailed` result (a JSON object with `input_lens` and `ttfts`); or name it with --run-format",
                path.display()
            )));
        }
        other => other,
    };
    let requests = if format == RunFormat::Distserve {
        distserve::parse(&text).map_err(|e| Failure::input(format!("{}:{e}", path.display())))?
    } else {
        let (requests, failed) = vllm_bench::parse(&text)
            .map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
        if failed > 0 {
            eprintln!("{}: {failed} failed requests left out", path.display());
        }
        requests
    };
    let (Some(max_num_seqs), Some(max_num_batched_tokens)) =
        (args.max_num_seqs, args.max_num_batched_tokens)
    else {
        return Err(Failure::input(format!(
            "{}: the run does not record the engine's limits: give --max-num-seqs and --max-num-batched-tokens",
            path.display()
        )));
    };
    Ok(MeasuredRun {
        requests,
        samples: Vec::new(),
        max_num_seqs,
        max_num_batched_tokens,
        kv_blocks: None,
    })
}

/// The run's own workload: each request's arrival, prompt and output tokens, in Mooncake
/// form with block ids of its own (no prefix is shared).
fn own_workload(path: &Path, run: &MeasuredRun, block_size: u32) -> Result<Workload, Failure> {
    let start = run
        .requests
        .iter()
        .map(|r| r.queued_ts)
        .fold(f64::INFINITY, f64::min);
    let mut text = String::new();
    let mut next_id = 0u64;
    for r in &run.requests {
        let blocks = r.input_toks.div_ceil(512);
        let ids: Vec<String> = (next_id..next_id + blocks).map(|i| i.to_string()).collect();
        next_id += blocks;
        let _ = writeln!(
            text,
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{}]}}",
            (r.queued_ts - start) * 1e3,
            r.input_toks,
            r.output_toks,
            ids.join(", ")
        );
    }
    let options = TraceOptions {
        format: Some(TraceFormat::Mooncake),
        trace_block_size: 512,
        ..TraceOptions::default()
    };
    let reader = TraceReader::in_memory(path, TraceFormat::Mooncake, text.into_bytes(), options);
    Ok(Workload::load(reader, &[block_size])?)
}

/// The runs' samples one after another (and their makespans summed): what a fit on several
/// runs at once matches.
fn joined(parts: impl IntoIterator<Item = Samples>) -> Samples {
    let mut all = Samples::default();
    for part in parts {
        all.ttft_ms.extend(part.ttft_ms);
        all.tpot_ms.extend(part.tpot_ms);
        all.e2e_ms.extend(part.e2e_ms);
        all.makespan_s += part.makespan_s;
    }
    all
}

fn simulate_all(runs: &[&Run], replicas: &mut Replicas, engine: &EngineConfig) -> Option<Samples> {
    let mut parts = Vec::with_capacity(runs.len());
    for run in runs {
        parts.push(simulate(&run.workload, replicas, engine)?);
    }
    Some(joined(parts))
}

/// Runs the command.
pub fn run(args: ValidateArgs) -> Result<(), Failure> {
    if args.budget < 10 {
        return Err(Failure::input("--budget must be at least 10 replays"));
    }
    if args.block_size == 0 {
        return Err(Failure::input("--block-size must be at least 1"));
    }
    let mut fitted = Vec::new();
    let mut predicted = Vec::new();
    let mut block_size = args.block_size;
    let mut base: Option<EngineConfig> = None;
    for (path, fit_on) in args
        .fit
        .iter()
        .map(|p| (p, true))
        .chain(args.runs.iter().map(|p| (p, false)))
    {
        let measured = load_run(path, args.run_format, &args)?;
        if base.is_none() {
            let (blocks, size, how) = match args.num_gpu_blocks {
                Some(blocks) => (blocks, args.block_size, "--num-gpu-blocks".to_owned()),
                None => measured.kv_capacity(),
            };
            eprintln!("KV cache: {blocks} blocks of {size} tokens ({how})");
            block_size = size;
            base = Some(EngineConfig {
                num_gpu_blocks: blocks,
                engine_block_size: size,
                max_num_seqs: args.max_num_seqs.unwrap_or(measured.max_num_seqs),
                max_num_batched_tokens: args
                    .max_num_batched_tokens
                    .unwrap_or(measured.max_num_batched_tokens),
                step_time: measured.initial_guess(),
                kv_bytes_per_token: None,
                host_tier: None,
                shared_tier: None,
                scheduler: match args.scheduler {
                    SchedulerArg::V1 => routerlab_engine::Scheduler::V1,
                    SchedulerArg::V0 => routerlab_engine::Scheduler::V0,
                },
            });
        }
        let workload = own_workload(path, &measured, block_size)?;
        let run = Run {
            path: path.clone(),
            measured,
            workload,
        };
        if fit_on {
            fitted.push(run);
        } else {
            predicted.push(run);
        }
    }
    let base = base.expect("--fit is required");
    if let Some(out) = &args.engine_out {
        let inputs: Vec<&Path> = args
            .fit
            .iter()
            .chain(&args.runs)
            .map(PathBuf::as_path)
            .collect();
        crate::cmd::refuse_input_as_output("--engine-out", out, &inputs)?;
    }
    let mut replicas = crate::cmd::calibrate::one_engine()?;
    let fit_runs: Vec<&Run> = fitted.iter().collect();
    let measured = joined(fit_runs.iter().map(|r| r.measured.samples()));
    let result = fit(&base, &measured, args.seed, args.budget, |engine| {
        simulate_all(&fit_runs, &mut replicas, engine)
    })
    .ok_or_else(|| {
        Failure::input("the engine model could not replay the fitted runs with the starting guess")
    })?;
    let engine = result.engine;
    let mut checks = Vec::new();
    for (run, fit_on) in fitted
        .iter()
        .map(|r| (r, true))
        .chain(predicted.iter().map(|r| (r, false)))
    {
        let simulated = simulate(&run.workload, &mut replicas, &engine).ok_or_else(|| {
            Failure::input(format!(
                "{}: the fitted engine could not replay every request of this run",
                run.path.display()
            ))
        })?;
        checks.push(RunCheck::new(
            run.path.display().to_string(),
            fit_on,
            &run.measured.samples(),
            &simulated,
        ));
    }
    let engine_yaml = serde_yaml::to_string(&engine).expect("an engine config serialises");
    if let Some(out) = &args.engine_out {
        let yaml = format!(
            "# routerlab validate (seed {}), fitted on {}\n{engine_yaml}",
            args.seed,
            args.fit
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        crate::cmd::write_output(out, yaml.as_bytes(), "the engine config")?;
    }
    let text = match args.format {
        ValidateFormat::Human => human(&checks, result.evaluations, args.seed),
        ValidateFormat::Json => json(&checks, &engine),
        ValidateFormat::Csv => csv(&checks),
    };
    crate::cmd::print_stdout(&text, "the validation report")
}

fn human(checks: &[RunCheck], evaluations: usize, seed: u64) -> String {
    let mut out = String::new();
    for check in checks {
        let role = if check.fitted { "fitted" } else { "predicted" };
        let _ = writeln!(out, "{} ({role}, {} requests)", check.run, check.requests);
        let _ = writeln!(
            out,
            "  {:<16}{:>12}{:>12}{:>9}",
            "", "measured", "simulated", "error"
        );
        let errors = check.errors();
        for (i, (name, _)) in METRICS.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {name:<16}{:>12.1}{:>12.1}{:>8.1}%",
                check.measured[i], check.simulated[i], errors[i]
            );
        }
    }
    let (medians, judged) = median_errors(checks);
    let over = if checks.iter().any(|c| !c.fitted) {
        "predicted"
    } else {
        "fitted (none predicted)"
    };
    let _ = writeln!(out, "median absolute error over {judged} {over} runs:");
    for (i, (name, _)) in METRICS.iter().enumerate() {
        let _ = writeln!(out, "  {name:<16}{:>8.1}%", medians[i]);
    }
    let _ = writeln!(out, "({evaluations} fit replays, seed {seed})");
    out
}

fn json(checks: &[RunCheck], engine: &EngineConfig) -> String {
    let metrics = |check: &RunCheck| -> serde_json::Value {
        let errors = check.errors();
        METRICS
            .iter()
            .enumerate()
            .map(|(i, (_, key))| {
                (
                    (*key).to_owned(),
                    serde_json::json!({
                        "measured": check.measured[i],
                        "simulated": check.simulated[i],
                        "abs_error_pct": errors[i],
                    }),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let (medians, judged) = median_errors(checks);
    let value = serde_json::json!({
        "engine": engine,
        "runs": checks.iter().map(|c| serde_json::json!({
            "run": c.run,
            "role": if c.fitted { "fitted" } else { "predicted" },
            "requests": c.requests,
            "metrics": metrics(c),
        })).collect::<Vec<_>>(),
        "median_abs_error_pct": METRICS.iter().enumerate()
            .map(|(i, (_, key))| ((*key).to_owned(), serde_json::json!(medians[i])))
            .collect::<serde_json::Map<_, _>>(),
        "median_over_runs": judged,
    });
    serde_json::to_string_pretty(&value).expect("a report serialises") + "\n"
}

fn csv(checks: &[RunCheck]) -> String {
    let mut out = String::from("run,role,metric,measured,simulated,abs_error_pct\n");
    for check in checks {
        let errors = check.errors();
        let role = if check.fitted { "fitted" } else { "predicted" };
        let run = if check.run.contains([',', '"', '\n']) {
            format!("\"{}\"", check.run.replace('"', "\"\""))
        } else {
            check.run.clone()
        };
        for (i, (_, key)) in METRICS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{run},{role},{key},{},{},{}",
                check.measured[i], check.simulated[i], errors[i]
            );
        }
    }
    out
}
