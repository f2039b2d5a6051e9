//! `routerlab calibrate RUN [--workload FILE]`: fits the engine model to a measured run and
//! writes the engine config (YAML, for `--engine-config` or an experiment file's `engine`),
//! printing how close the fit came. The run is any `validate` reads; without `--workload`
//! it is replayed from its own requests (arrival, prompt and output tokens).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use routerlab_calibrate::{CalibrateError, fit};
use routerlab_engine::EngineConfig;
use routerlab_trace::TraceOptions;

use crate::cmd::runs::{self, RunArgs};
use crate::exit::Failure;

/// `routerlab calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// The measured run: a directory with requests.jsonl, timeseries.csv and meta.json, or
    /// a file a benchmark tool wrote (see --run-format).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
    /// How it is laid out and the engine limits it does not record.
    #[command(flatten)]
    pub run_args: RunArgs,
    /// The workload the measured engine was fed (any trace format with arrival times)
    /// [default: the run's own requests, each with a prefix of its own].
    #[arg(long, value_name = "PATH")]
    pub workload: Option<PathBuf>,
    /// Its format [default: detected].
    #[arg(long, value_name = "FORMAT")]
    pub trace_format: Option<routerlab_trace::TraceFormat>,
    /// Tokens per block id of a Mooncake workload.
    #[arg(long, value_name = "TOKENS", default_value_t = 512)]
    pub trace_block_size: u32,
    /// Seed of the search.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Replays the search may run.
    #[arg(long, value_name = "N", default_value_t = 300)]
    pub budget: usize,
    /// Write the engine config here [default: stdout].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// With --gpu, also write the GPU's profile here (its figures and the efficiencies
    /// fitted): `--gpu FILE` then predicts other models, sizes and loads on that GPU.
    #[arg(long, value_name = "FILE")]
    pub gpu_profile_out: Option<PathBuf>,
}

/// Refuses an `--output` that is one of the files read: the run (any file in its
/// directory), the workload, a request file, the model config, a plugin library loaded.
fn refuse_inputs_as_output(args: &CalibrateArgs) -> Result<(), Failure> {
    let mut inputs: Vec<&Path> = vec![&args.run];
    inputs.extend(args.workload.as_deref());
    inputs.extend(args.run_args.inputs());
    runs::refuse_outputs(
        &inputs,
        &[
            ("--output", &args.output),
            ("--gpu-profile-out", &args.gpu_profile_out),
        ],
    )
}

/// Runs the command.
pub fn run(args: CalibrateArgs) -> Result<(), Failure> {
    refuse_inputs_as_output(&args)?;
    if args.gpu_profile_out.is_some() && args.run_args.gpu.is_none() {
        return Err(Failure::input(
            "--gpu-profile-out needs --gpu and --model-config (a roofline to profile)",
        ));
    }
    if args.budget < 10 {
        return Err(Failure::input("--budget must be at least 10 replays"));
    }
    let scheduler = args.run_args.scheduler()?;
    let mut loaded = runs::load(&args.run, &args.run_args, true)?;
    if loaded.len() != 1 {
        return Err(Failure::input(format!(
            "{}: the file holds {} load points: name one as FILE#K (1 to {}), or fit them together with `routerlab validate --fit`",
            args.run.display(),
            loaded.len(),
            loaded.len()
        )));
    }
    let loaded = loaded.remove(0);
    let mut run = loaded.measured;
    if let Some(n) = args.run_args.max_num_seqs {
        run.max_num_seqs = n;
    }
    if let Some(n) = args.run_args.max_num_batched_tokens {
        run.max_num_batched_tokens = n;
    }
    let (blocks, block_size, how) = args.run_args.settings()?.kv_capacity(&run)?;
    let (kv_search, searched) = runs::kv_search(&args.run_args, blocks, &how);
    eprintln!("KV cache: {searched}{blocks} blocks of {block_size} tokens ({how})");
    let workload = match &args.workload {
        Some(path) => {
            let options = TraceOptions {
                format: args.trace_format,
                trace_block_size: args.trace_block_size,
                ..TraceOptions::default()
            };
            routerlab_calibrate::load::fed_workload(path, options, &run, block_size).map_err(
                |e| match e {
                    CalibrateError::Input(message) => {
                        Failure::input(format!("--workload {message}"))
                    }
                    other => other.into(),
                },
            )?
        }
        None => routerlab_calibrate::load::own_workload(&loaded.label, &run, block_size)?,
    };
    let engines = args
        .run_args
        .data_parallel_size
        .unwrap_or(run.data_parallel);
    let mut fleet = crate::cmd::runs::fleet(engines, args.run_args.router.as_deref())?;
    // Again now that the plugin is loaded: its library is an input too.
    refuse_inputs_as_output(&args)?;
    let base = EngineConfig {
        num_gpu_blocks: blocks,
        engine_block_size: block_size,
        max_num_seqs: run.max_num_seqs,
        max_num_batched_tokens: run.max_num_batched_tokens,
        step_time: args.run_args.settings()?.step_time_guess(&run, scheduler)?,
        kv_bytes_per_token: None,
        host_tier: None,
        shared_tier: None,
        scheduler,
        prefix_caching: !args.run_args.no_prefix_caching,
        max_paddings: args.run_args.max_paddings,
        lora: None,
        speculative: None,
        async_scheduling: args.run_args.announce_async_scheduling(&run, scheduler)?,
    };
    let measured = run.samples();
    let fitted = fit(
        &base,
        &measured,
        args.seed,
        args.budget,
        kv_search,
        |engine| fleet.simulate(&workload, engine),
    )
    .ok_or_else(|| {
        Failure::input("the engine model could not replay the workload with the starting guess")
    })?;
    let mut table = format!(
        "{:<16}{:>12}{:>12}{:>10}\n",
        "", "measured", "simulated", "error"
    );
    let (measured, simulated) = (measured.figures(), fitted.samples.figures());
    for ((name, m), (_, s)) in measured.rows().into_iter().zip(simulated.rows()) {
        let error = signed_error(m, s).map_or("n/a".to_owned(), |e| format!("{e:.1}%"));
        let _ = writeln!(table, "{name:<16}{m:>12.2}{s:>12.2}{error:>10}");
    }
    if args.run_args.fit_num_gpu_blocks {
        let _ = writeln!(
            table,
            "KV cache: {} blocks fitted",
            fitted.engine.num_gpu_blocks
        );
    }
    let _ = writeln!(
        table,
        "({} replays, seed {})",
        fitted.evaluations, args.seed
    );
    eprint!("{table}");
    let yaml = format!(
        "# routerlab calibrate {} (seed {}): TTFT p50 {}, p90 {}; TPOT p50 {}\n{}",
        args.run.display(),
        args.seed,
        header_error(measured.ttft_p50, simulated.ttft_p50),
        header_error(measured.ttft_p90, simulated.ttft_p90),
        header_error(measured.tpot_p50, simulated.tpot_p50),
        serde_yaml::to_string(&fitted.engine).expect("an engine config serialises")
    );
    if let Some(path) = &args.gpu_profile_out {
        crate::cmd::runs::write_gpu_profile(path, &fitted.engine, &args.run.display().to_string())?;
    }
    match &args.output {
        Some(path) => crate::cmd::write_output(path, yaml.as_bytes(), "the engine config"),
        None => crate::cmd::print_stdout(&yaml, "the engine config"),
    }
}

/// The simulated value's error against the measured one, in percent; none when the
/// measured value is 0 (no percentage of 0 exists: the table says `n/a`).
fn signed_error(measured: f64, simulated: f64) -> Option<f64> {
    (measured > 0.0).then(|| (simulated - measured) / measured * 100.0)
}

/// [`signed_error`] for the engine config's first line.
fn header_error(measured: f64, simulated: f64) -> String {
    signed_error(measured, simulated).map_or("n/a (measured 0)".to_owned(), |e| format!("{e:+.1}%"))
}
