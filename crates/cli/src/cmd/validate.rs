//! `routerlab validate --fit RUN [--fit RUN] RUN...`: fits the engine model on some measured
//! runs and predicts the others, each replayed from its own requests (arrival, prompt and
//! output tokens), and prints per run TTFT and end-to-end latency measured vs simulated,
//! with absolute percentage errors and, over the predicted runs, their median.
//!
//! With `--gpu` and `--model-config` the engine model is the analytical roofline: without
//! `--fit` every run is predicted zero-shot (no run of that GPU and model used); with it,
//! the fit finds what the GPU achieves of its limits (a profile of the GPU) and the other
//! runs are predicted with it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use routerlab_calibrate::validate::{METRICS, RunCheck, median_errors};
use routerlab_calibrate::{MeasuredRun, Samples, ServingFleet, fit};
use routerlab_engine::EngineConfig;
use routerlab_experiment::OutputFormat;
use routerlab_trace::Workload;

use crate::cmd::runs::{self, RunArgs};
use crate::exit::Failure;

/// `routerlab validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// A run to fit the engine model on (repeat for several; fitted together) [required
    /// unless --gpu: then, without it, every run is predicted zero-shot].
    #[arg(long = "fit", value_name = "RUN")]
    pub fit: Vec<PathBuf>,
    /// Runs to predict with the fitted model.
    #[arg(value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// How the runs are laid out and the engine limits they do not record.
    #[command(flatten)]
    pub run: RunArgs,
    /// Seed of the search.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Replays the search may run (each replays every fitted run once).
    #[arg(long, value_name = "N", default_value_t = 300)]
    pub budget: usize,
    /// Judge each run (each point of --stack) under N seeds of its routers, 0 to N−1 (with
    /// --stack, from each experiment file's `seed` on): a random router spreads one run's
    /// requests differently under each seed, and one seed's latency is one draw of that.
    /// Each simulated metric is then its median over the seeds, printed with its lowest
    /// and highest (the fit itself replays seed 0).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub router_seeds: u32,
    /// Report format: human, json, yaml (the JSON document as YAML) or csv (one row per
    /// run and metric).
    #[arg(long, value_name = "FORMAT", default_value = "human")]
    pub format: OutputFormat,
    /// Also write the fitted engine config (YAML) here.
    #[arg(long, value_name = "FILE")]
    pub engine_out: Option<PathBuf>,
    /// With --gpu and --fit, also write the GPU's profile here (its figures and the
    /// efficiencies fitted), for `--gpu FILE` on other models of that GPU.
    #[arg(long, value_name = "FILE")]
    pub gpu_profile_out: Option<PathBuf>,
    /// Two stacks measured at the same load points, each as DIR=CONFIG (its runs, one file
    /// name per point in both; the experiment file describing its fleet), stack A first:
    /// per point the measured and simulated TTFT p50 ratio B/A, instead of a fit.
    #[arg(long = "stack", value_name = "DIR=CONFIG")]
    pub stacks: Vec<String>,
    /// With --stack: replay each point after the stack's previous one (in the order
    /// launched; by offered load where the runs' clocks do not tell), unmeasured, as a
    /// benchmark's sweep leaves the caches.
    #[arg(long, requires = "stacks")]
    pub warm_up_previous: bool,
    /// With --stack and --lmbench-workload: LMBench's ShareGPT warm-up file (its
    /// `sharegpt/warmup.json`), which its run script sends at the point's rate before each
    /// point, unlogged: replayed before each point (after the previous one with
    /// --warm-up-previous), unmeasured, the point's rounds going on from its prompts.
    #[arg(long, value_name = "FILE", requires_all = ["stacks", "lmbench_workload"])]
    pub lmbench_warm_up: Option<PathBuf>,
}

/// A run as read: its requests, its own length-form workload, and the engine limits it
/// ran with.
struct Run {
    label: String,
    measured: MeasuredRun,
    workload: Workload,
    limits: Limits,
}

/// A run's own engine limits: each run is replayed with its own, never another's.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Limits {
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    /// Its KV cache in blocks, when it is the run's own (not given by a flag or fitted).
    num_gpu_blocks: Option<u32>,
    /// Whether its engine scheduled ahead.
    async_scheduling: bool,
}

impl Limits {
    /// `engine` with these limits.
    fn on(&self, engine: &EngineConfig) -> EngineConfig {
        let mut engine = engine.clone();
        engine.max_num_seqs = self.max_num_seqs;
        engine.max_num_batched_tokens = self.max_num_batched_tokens;
        if let Some(blocks) = self.num_gpu_blocks {
            engine.num_gpu_blocks = blocks;
        }
        engine.async_scheduling = self.async_scheduling;
        engine
    }
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

/// `workload` replayed on `fleet` of `engine`s under the routers' seeds 0 to `seeds` − 1,
/// one result each (the fleet left at seed 0, as the fit replays it).
fn under_seeds(
    fleet: &mut ServingFleet,
    seeds: u32,
    workload: &Workload,
    engine: &EngineConfig,
) -> Option<Vec<Samples>> {
    let each = (0..seeds)
        .map(|seed| {
            fleet.set_seed(u64::from(seed));
            fleet.simulate(workload, engine)
        })
        .collect();
    fleet.set_seed(0);
    each
}

fn simulate_all(runs: &[&Run], fleet: &mut ServingFleet, engine: &EngineConfig) -> Option<Samples> {
    let mut parts = Vec::with_capacity(runs.len());
    for run in runs {
        let own = if runs.len() > 1 {
            run.limits.on(engine)
        } else {
            engine.clone()
        };
        parts.push(fleet.simulate(&run.workload, &own)?);
    }
    Some(joined(parts))
}

/// Refuses an `--engine-out` that is one of the files read: a run (any file of a run
/// directory), a request file, the model config, a plugin library loaded so far.
fn refuse_inputs_as_output(args: &ValidateArgs) -> Result<(), Failure> {
    let mut inputs: Vec<&Path> = args
        .fit
        .iter()
        .chain(&args.runs)
        .map(PathBuf::as_path)
        .collect();
    inputs.extend(args.run.inputs());
    inputs.extend(args.lmbench_warm_up.as_deref());
    runs::refuse_outputs(
        &inputs,
        &[
            ("--engine-out", &args.engine_out),
            ("--gpu-profile-out", &args.gpu_profile_out),
        ],
    )
}

/// Runs the command.
pub fn run(args: ValidateArgs) -> Result<(), Failure> {
    if !args.stacks.is_empty() {
        return crate::cmd::stacks::run(&args);
    }
    if args.budget < 10 {
        return Err(Failure::input("--budget must be at least 10 replays"));
    }
    let scheduler = args.run.scheduler()?;
    if args.fit.is_empty() && (args.run.gpu.is_none() || args.runs.is_empty()) {
        return Err(Failure::input(
            "give --fit RUN, or --gpu and --model-config with the runs to predict zero-shot",
        ));
    }
    if args.gpu_profile_out.is_some() && (args.run.gpu.is_none() || args.fit.is_empty()) {
        return Err(Failure::input(
            "--gpu-profile-out needs --gpu, --model-config and --fit (a roofline fitted to profile)",
        ));
    }
    refuse_inputs_as_output(&args)?;
    let mut fitted = Vec::new();
    let mut predicted = Vec::new();
    let mut block_size = args.run.kv_block_tokens;
    let mut base: Option<EngineConfig> = None;
    let mut data_parallel = 1;
    let mut kv_search = routerlab_calibrate::KvSearch::Fixed;
    for (path, fit_on) in args
        .fit
        .iter()
        .map(|p| (p, true))
        .chain(args.runs.iter().map(|p| (p, false)))
    {
        for loaded in runs::load(path, &args.run, fit_on)? {
            let measured = loaded.measured;
            if base.is_none() {
                data_parallel = measured.data_parallel;
                let (blocks, size, how) = args.run.settings()?.kv_capacity(&measured)?;
                let searched;
                (kv_search, searched) = runs::kv_search(&args.run, blocks, &how);
                eprintln!("KV cache: {searched}{blocks} blocks of {size} tokens ({how})");
                block_size = size;
                base = Some(EngineConfig {
                    num_gpu_blocks: blocks,
                    engine_block_size: size,
                    max_num_seqs: args.run.max_num_seqs.unwrap_or(measured.max_num_seqs),
                    max_num_batched_tokens: args
                        .run
                        .max_num_batched_tokens
                        .unwrap_or(measured.max_num_batched_tokens),
                    step_time: args.run.settings()?.step_time_guess(&measured, scheduler)?,
                    kv_bytes_per_token: None,
                    host_tier: None,
                    shared_tier: None,
                    scheduler,
                    prefix_caching: !args.run.no_prefix_caching,
                    max_paddings: args.run.max_paddings,
                    lora: None,
                    speculative: None,
                    async_scheduling: args.run.announce_async_scheduling(&measured, scheduler)?,
                });
            }
            // This run's own limits, said when they are not the first run's.
            let (blocks, size, how) = args.run.settings()?.kv_capacity(&measured)?;
            if size != block_size {
                return Err(Failure::input(format!(
                    "{}: KV blocks of {size} tokens, the first run's {block_size}: validate runs of one block size together",
                    loaded.label
                )));
            }
            if measured.data_parallel != data_parallel && args.run.data_parallel_size.is_none() {
                return Err(Failure::input(format!(
                    "{}: {} engines (data parallel), the first run's {data_parallel}: validate them apart, or give --data-parallel-size",
                    loaded.label, measured.data_parallel
                )));
            }
            let limits = Limits {
                max_num_seqs: args.run.max_num_seqs.unwrap_or(measured.max_num_seqs),
                max_num_batched_tokens: args
                    .run
                    .max_num_batched_tokens
                    .unwrap_or(measured.max_num_batched_tokens),
                num_gpu_blocks: (args.run.num_gpu_blocks.is_none() && !args.run.fit_num_gpu_blocks)
                    .then_some(blocks),
                async_scheduling: args.run.async_scheduling(&measured, scheduler),
            };
            let first = base.as_ref().expect("the first run made the base");
            if limits.max_num_seqs != first.max_num_seqs
                || limits.max_num_batched_tokens != first.max_num_batched_tokens
                || limits
                    .num_gpu_blocks
                    .is_some_and(|b| b != first.num_gpu_blocks)
                || limits.async_scheduling != first.async_scheduling
            {
                eprintln!(
                    "{}: replayed with its own limits: max_num_seqs {}, max_num_batched_tokens {}, KV cache {blocks} blocks ({how}), async scheduling {}",
                    loaded.label,
                    limits.max_num_seqs,
                    limits.max_num_batched_tokens,
                    if limits.async_scheduling { "on" } else { "off" }
                );
            }
            let workload =
                routerlab_calibrate::load::own_workload(&loaded.label, &measured, block_size)?;
            let run = Run {
                label: loaded.label,
                measured,
                workload,
                limits,
            };
            if fit_on {
                fitted.push(run);
            } else {
                predicted.push(run);
            }
        }
    }
    let base = base.expect("a run was read");
    let engines = args.run.data_parallel_size.unwrap_or(data_parallel);
    let mut fleet = runs::fleet(engines, args.run.router.as_deref())?;
    let ranks = base.step_time.lockstep_ranks();
    if ranks > 1 {
        eprintln!(
            "The experts span {ranks} data-parallel engines: each group of {ranks} steps together"
        );
    }
    // Again now that the router's plugin is loaded: its library is an input too.
    refuse_inputs_as_output(&args)?;
    let fit_runs: Vec<&Run> = fitted.iter().collect();
    let (engine, evaluations) = if fit_runs.is_empty() {
        (base, 0)
    } else {
        let measured = joined(fit_runs.iter().map(|r| r.measured.samples()));
        let result = fit(
            &base,
            &measured,
            args.seed,
            args.budget,
            kv_search,
            |engine| simulate_all(&fit_runs, &mut fleet, engine),
        )
        .ok_or_else(|| {
            Failure::input(
                "the engine model could not replay the fitted runs with the starting guess",
            )
        })?;
        (result.engine, result.evaluations)
    };
    if args.run.fit_num_gpu_blocks {
        eprintln!("KV cache: {} blocks fitted", engine.num_gpu_blocks);
    }
    // Beside a fitted or profiled roofline, what the table's figures alone predict.
    let zero_shot = match &engine.step_time {
        routerlab_engine::StepTime::Roofline(r) => {
            let typical = routerlab_engine::Efficiency::typical(engine.scheduler, r.gpu.link);
            (r.efficiency != typical).then(|| {
                let mut plain = engine.clone();
                let mut roofline = r.clone();
                roofline.efficiency = typical;
                plain.step_time = routerlab_engine::StepTime::Roofline(roofline);
                plain
            })
        }
        _ => None,
    };
    let mut checks = Vec::new();
    let mut zero_shot_errors = Vec::new();
    for (run, fit_on) in fitted
        .iter()
        .map(|r| (r, true))
        .chain(predicted.iter().map(|r| (r, false)))
    {
        // The run on `engine` (the `which` one) under each of the routers' seeds.
        let mut judge = |engine: &EngineConfig, which: &str| {
            let simulated = under_seeds(&mut fleet, args.router_seeds, &run.workload, engine)
                .ok_or_else(|| {
                    Failure::input(format!(
                        "{}: the {which} engine could not replay every request of this run",
                        run.label
                    ))
                })?;
            let measured = run.measured.samples();
            Ok::<_, Failure>(RunCheck::over_seeds(
                run.label.clone(),
                fit_on,
                &measured,
                &simulated,
            ))
        };
        let check = judge(&run.limits.on(&engine), "fitted")?;
        if let Some(metric) = check.measured_zero() {
            return Err(Failure::input(format!(
                "{}: the measured {metric} is 0: no request is served in no time, and an error against 0 is no percentage",
                run.label
            )));
        }
        if let Some(plain) = &zero_shot {
            zero_shot_errors.push(judge(&run.limits.on(plain), "zero-shot")?.errors());
        }
        checks.push(check);
    }
    if let Some(path) = &args.gpu_profile_out {
        crate::cmd::runs::write_gpu_profile(
            path,
            &engine,
            &args
                .fit
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )?;
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
        OutputFormat::Human => human(
            &checks,
            &zero_shot_errors,
            evaluations,
            args.seed,
            args.router_seeds,
        ),
        OutputFormat::Json => {
            serde_json::to_string_pretty(&document(&checks, &zero_shot_errors, &engine))
                .expect("a report serialises")
                + "\n"
        }
        OutputFormat::Yaml => serde_yaml::to_string(&document(&checks, &zero_shot_errors, &engine))
            .expect("a report serialises"),
        OutputFormat::Csv => csv(&checks),
    };
    crate::cmd::print_stdout(&text, "the validation report")
}

/// The report for people; with `zero_shot` (one row of errors per check), a column of
/// what the GPU's published figures alone gave beside the fitted or profiled ones; under
/// several of the routers' `seeds`, the simulated median's range over them.
fn human(
    checks: &[RunCheck],
    zero_shot: &[[f64; 8]],
    evaluations: usize,
    seed: u64,
    seeds: u32,
) -> String {
    let mut out = String::new();
    for (k, check) in checks.iter().enumerate() {
        let role = if check.fitted { "fitted" } else { "predicted" };
        let _ = writeln!(out, "{} ({role}, {} requests)", check.run, check.requests);
        let plain = zero_shot.get(k);
        let _ = write!(
            out,
            "  {:<16}{:>12}{:>12}{:>9}",
            "", "measured", "simulated", "error"
        );
        if check.range.is_some() {
            let _ = write!(out, "{:>22}", "seeds' range");
        }
        let _ = writeln!(out, "{}", if plain.is_some() { "  zero-shot" } else { "" });
        let errors = check.errors();
        for (i, (name, _)) in METRICS.iter().enumerate() {
            let _ = write!(
                out,
                "  {name:<16}{:>12.1}{:>12.1}{:>8.1}%",
                check.measured[i], check.simulated[i], errors[i]
            );
            if let Some(range) = &check.range {
                let [low, high] = range[i];
                let _ = write!(out, "{:>22}", format!("{low:.1} to {high:.1}"));
            }
            match plain {
                Some(row) => {
                    let _ = writeln!(out, "{:>10.1}%", row[i]);
                }
                None => out.push('\n'),
            }
        }
    }
    let (medians, judged) = median_errors(checks);
    let over = if checks.iter().any(|c| !c.fitted) {
        "predicted"
    } else {
        "fitted (none predicted)"
    };
    let runs = if judged == 1 { "run" } else { "runs" };
    let _ = writeln!(out, "median absolute error over {judged} {over} {runs}:");
    for (i, (name, _)) in METRICS.iter().enumerate() {
        let _ = writeln!(out, "  {name:<16}{:>8.1}%", medians[i]);
    }
    if seeds > 1 {
        let _ = writeln!(
            out,
            "({evaluations} fit replays, seed {seed}; simulated: the median over the routers' seeds 0 to {})",
            seeds - 1
        );
    } else {
        let _ = writeln!(out, "({evaluations} fit replays, seed {seed})");
    }
    out
}

/// The report as one document (`--format json` and `yaml`); with `zero_shot`, each
/// metric's `zero_shot_abs_error_pct` beside its error.
fn document(
    checks: &[RunCheck],
    zero_shot: &[[f64; 8]],
    engine: &EngineConfig,
) -> serde_json::Value {
    let metrics = |k: usize, check: &RunCheck| -> serde_json::Value {
        let errors = check.errors();
        METRICS
            .iter()
            .enumerate()
            .map(|(i, (_, key))| {
                let mut entry = serde_json::json!({
                    "measured": check.measured[i],
                    "simulated": check.simulated[i],
                    "abs_error_pct": errors[i],
                });
                if let Some(row) = zero_shot.get(k) {
                    entry["zero_shot_abs_error_pct"] = serde_json::json!(row[i]);
                }
                if let Some(range) = &check.range {
                    entry["simulated_range"] = serde_json::json!(range[i]);
                }
                ((*key).to_owned(), entry)
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let (medians, judged) = median_errors(checks);
    serde_json::json!({
        "engine": engine,
        "runs": checks.iter().enumerate().map(|(k, c)| serde_json::json!({
            "run": c.run,
            "role": if c.fitted { "fitted" } else { "predicted" },
            "requests": c.requests,
            "metrics": metrics(k, c),
        })).collect::<Vec<_>>(),
        "median_abs_error_pct": METRICS.iter().enumerate()
            .map(|(i, (_, key))| ((*key).to_owned(), serde_json::json!(medians[i])))
            .collect::<serde_json::Map<_, _>>(),
        "median_over_runs": judged,
    })
}

/// The report as CSV, a row per run and metric; under several seeds, with the simulated
/// median's lowest and highest over them.
fn csv(checks: &[RunCheck]) -> String {
    let ranged = checks.iter().any(|c| c.range.is_some());
    let mut out = String::from("run,role,metric,measured,simulated,abs_error_pct");
    out.push_str(if ranged {
        ",simulated_low,simulated_high\n"
    } else {
        "\n"
    });
    for check in checks {
        let errors = check.errors();
        let role = if check.fitted { "fitted" } else { "predicted" };
        let run = if check.run.contains([',', '"', '\n']) {
            format!("\"{}\"", check.run.replace('"', "\"\""))
        } else {
            check.run.clone()
        };
        for (i, (_, key)) in METRICS.iter().enumerate() {
            let _ = write!(
                out,
                "{run},{role},{key},{},{},{}",
                check.measured[i], check.simulated[i], errors[i]
            );
            let _ = match &check.range {
                Some(range) => writeln!(out, ",{},{}", range[i][0], range[i][1]),
                None => writeln!(out),
            };
        }
    }
    out
}
