//! The flags of a measured run, as `calibrate` and `validate` take it: how it is laid out
//! and what its files do not record. Reading it is `routerlab_calibrate::load`'s.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use routerlab_calibrate::ServingFleet;
use routerlab_calibrate::formats::RunFileFormat;
use routerlab_calibrate::load::{self, Layout, LoadedRun, RunSettings};

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
    /// AIPerf's per-request export (`profile_export.jsonl`).
    Aiperf,
    /// GuideLLM's report (`benchmarks.json`; each benchmark a run, or `FILE#K` for one).
    Guidellm,
    /// inference-perf's `per_request_lifecycle_metrics.json`.
    InferencePerf,
    /// LMBench's multi-round QA summary CSV.
    Lmbench,
    /// fmperf's load-generator results (with --fmperf-requests).
    Fmperf,
    /// `routerlab serve --decision-log`.
    DecisionLog,
}

impl From<RunFormat> for Layout {
    fn from(format: RunFormat) -> Layout {
        match format {
            RunFormat::Auto => Layout::Auto,
            RunFormat::Llmservingsim => Layout::Llmservingsim,
            RunFormat::Distserve => Layout::File(RunFileFormat::Distserve),
            RunFormat::VllmBench => Layout::File(RunFileFormat::VllmBench),
            RunFormat::Aiperf => Layout::File(RunFileFormat::Aiperf),
            RunFormat::Guidellm => Layout::File(RunFileFormat::Guidellm),
            RunFormat::InferencePerf => Layout::File(RunFileFormat::InferencePerf),
            RunFormat::Lmbench => Layout::File(RunFileFormat::Lmbench),
            RunFormat::Fmperf => Layout::File(RunFileFormat::Fmperf),
            RunFormat::DecisionLog => Layout::File(RunFileFormat::DecisionLog),
        }
    }
}

/// `--scheduler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerArg {
    /// vLLM V1.
    V1,
    /// vLLM V0.
    V0,
}

/// What a measured run needs said about it when its files do not say it.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Measured run")]
pub struct RunArgs {
    /// How the runs are laid out.
    #[arg(long, value_name = "FORMAT", default_value = "auto")]
    pub run_format: RunFormat,
    /// fmperf's requests file the runs drew their prompts from (`REQUESTS_FILENAME`):
    /// fmperf's results do not record the prompts' lengths.
    #[arg(long, value_name = "FILE")]
    pub fmperf_requests: Option<PathBuf>,
    /// LMBench's ShareGPT workload file (its `sharegpt/run.json`) that the LMBench CSVs
    /// sent: each request's conversation, which the CSV does not record, so a round shares
    /// its previous round's prompt.
    #[arg(long, value_name = "FILE")]
    pub lmbench_workload: Option<PathBuf>,
    /// The engine's max_num_seqs [default: the first run's meta.json].
    #[arg(long, value_name = "N")]
    pub max_num_seqs: Option<u32>,
    /// The engine's max_num_batched_tokens [default: the first run's meta.json].
    #[arg(long, value_name = "N")]
    pub max_num_batched_tokens: Option<u32>,
    /// Engines the run's requests were balanced over (vLLM's --data-parallel-size)
    /// [default: the run's meta.json, else 1].
    #[arg(long, value_name = "N")]
    pub data_parallel_size: Option<u32>,
    /// The matcher that spreads the requests over the engines when there are several
    /// (any plugin on the search path) [default: least-inflight, as vLLM's own balancer].
    #[arg(long, value_name = "MATCHER")]
    pub router: Option<String>,
    /// The engine's scheduler: vLLM V1's (chunked prefill, mixed steps) or V0's
    /// (prefill-first steps, whole prompts).
    #[arg(long, value_name = "V", default_value = "v1")]
    pub scheduler: SchedulerArg,
    /// V0 as in vLLM up to 0.3: prompts batched padded to the longest, a batch taking at
    /// most N tokens of padding (vLLM's `--max-paddings`, 256 by default) [default:
    /// unpadded batches, as since vLLM 0.4].
    #[arg(long, value_name = "N")]
    pub max_paddings: Option<u32>,
    /// Whether the engine planned each step while the last one ran (vLLM's async
    /// scheduling: a request arriving during a step joins the step after the next), `true`
    /// or `false` [default: the run's `engine_kwargs.async_scheduling`, else its
    /// `vllm_version` (on from 0.14), else off; always off for V0].
    #[arg(long, value_name = "BOOL")]
    pub async_scheduling: Option<bool>,
    /// The engine kept no prefix cache (vLLM's `--no-enable-prefix-caching`, V0's default):
    /// a workload's repeated prefixes are computed again.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// The engine's KV cache in blocks, as vLLM logged it (`# GPU blocks`) [default: as
    /// the run records it, else from --model-config, else estimated from the run].
    #[arg(long, value_name = "N")]
    pub num_gpu_blocks: Option<u32>,
    /// Search the KV cache's size too, from the blocks the run, the flags or the estimate
    /// give, when the run does not record the engine's: the fit then finds what the
    /// measured queueing and preemption say the cache held (within ±20% of what
    /// --model-config derives, when it does).
    #[arg(long)]
    pub fit_num_gpu_blocks: bool,
    /// Fit on a run whose log falls short of what was offered (rounds missing from its
    /// conversations, gaps in its paced launches): refused by default, the missing
    /// requests being the ones that failed or timed out.
    #[arg(long)]
    pub allow_partial: bool,
    /// Tokens per KV block (`--block-size` is the old name).
    #[arg(
        long,
        alias = "block-size",
        value_name = "TOKENS",
        default_value_t = 16
    )]
    pub kv_block_tokens: u32,
    /// The model's Hugging Face config.json: the KV blocks as vLLM sizes them on the GPU
    /// of --gpu-memory-gib (with --tensor-parallel-size, --gpu-memory-utilization).
    #[arg(long, value_name = "PATH")]
    pub model_config: Option<PathBuf>,
    /// The GPU the engines ran on, one of the table (the guide's list) or a YAML file describing one: with --model-config, the step time is the
    /// analytical roofline of the model on it, not a fit of the run.
    #[arg(long, value_name = "NAME|FILE")]
    pub gpu: Option<String>,
    /// GPUs each engine's model is split over [default: the run's meta.json, else 1].
    #[arg(long, value_name = "N")]
    pub tensor_parallel_size: Option<u32>,
    /// GPUs a mixture of experts' experts are split over [default: tensor × data parallel
    /// when the run's meta.json says `enable_expert_parallel`, else 1].
    #[arg(long, value_name = "N")]
    pub expert_parallel_size: Option<u32>,
    /// Memory of one GPU, GiB, as CUDA reports it (what vLLM reads: deviceQuery's "Total
    /// amount of global memory", a little under the nominal size, 39.39 GiB for an
    /// A100-SXM4-40GB) [default: the run's meta.json].
    #[arg(long, value_name = "G")]
    pub gpu_memory_gib: Option<f64>,
    /// The fraction of it vLLM may use.
    #[arg(long, value_name = "F", default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// The KV cache's data type [default: the model's].
    #[arg(long, value_name = "DTYPE")]
    pub kv_cache_dtype: Option<String>,
    /// Memory of one GPU that is not KV cache, GiB, as vLLM logged it (`Total non KV cache
    /// memory`) [default: the weights and an activation estimate].
    #[arg(long, value_name = "G")]
    pub non_kv_memory_gib: Option<f64>,
}

impl RunArgs {
    /// The engine's scheduler, as `--scheduler` and `--max-paddings` say.
    pub fn scheduler(&self) -> Result<routerlab_engine::Scheduler, Failure> {
        match self.scheduler {
            SchedulerArg::V1 if self.max_paddings.is_some() => Err(Failure::input(
                "--max-paddings needs --scheduler v0: only V0 batched prompts padded",
            )),
            SchedulerArg::V1 => Ok(routerlab_engine::Scheduler::V1),
            SchedulerArg::V0 => Ok(routerlab_engine::Scheduler::V0),
        }
    }

    /// Whether the engine that ran `run` scheduled ahead: the flag, else what the run
    /// says when the scheduler is V1.
    pub fn async_scheduling(
        &self,
        run: &routerlab_calibrate::MeasuredRun,
        scheduler: routerlab_engine::Scheduler,
    ) -> bool {
        self.async_scheduling
            .or(run.async_scheduling.filter(|_| scheduler.is_v1()))
            .unwrap_or(false)
    }

    /// [`RunArgs::async_scheduling`] for the first run, said on stderr when on.
    pub fn announce_async_scheduling(
        &self,
        run: &routerlab_calibrate::MeasuredRun,
        scheduler: routerlab_engine::Scheduler,
    ) -> Result<bool, Failure> {
        if self.async_scheduling == Some(true) && !scheduler.is_v1() {
            return Err(Failure::input(
                "--async-scheduling true needs --scheduler v1 (vLLM V0 plans each step after the last)",
            ));
        }
        let on = self.async_scheduling(run, scheduler);
        if on {
            let why = match self.async_scheduling {
                Some(_) => "--async-scheduling",
                None => "the run's vLLM release or engine arguments",
            };
            eprintln!("Async scheduling: each step planned while the last one runs ({why})");
        }
        Ok(on)
    }

    /// The files these flags name that a command reads: fmperf's requests, the model
    /// config, a GPU described in a file.
    pub fn inputs(&self) -> Vec<&Path> {
        let mut inputs: Vec<&Path> = [
            &self.fmperf_requests,
            &self.lmbench_workload,
            &self.model_config,
        ]
        .into_iter()
        .filter_map(|p| p.as_deref())
        .collect();
        inputs.extend(self.gpu.as_deref().map(Path::new).filter(|p| p.is_file()));
        inputs
    }

    /// What the calibrate crate reads runs with; an unknown --gpu is refused.
    pub fn settings(&self) -> Result<RunSettings, Failure> {
        let gpu = self
            .gpu
            .as_deref()
            .map(routerlab_engine::Gpu::resolve)
            .transpose()
            .map_err(|e| Failure::input(format!("--gpu: {e}")))?;
        Ok(RunSettings {
            layout: self.run_format.into(),
            fmperf_requests: self.fmperf_requests.clone(),
            lmbench_workload: self.lmbench_workload.clone(),
            // Fits read each run as logged: its warm-up is replayed by `replay` and
            // `validate --stack` (`--lmbench-warm-up`).
            lmbench_warm_up: None,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            data_parallel_size: self.data_parallel_size,
            num_gpu_blocks: self.num_gpu_blocks,
            kv_block_tokens: self.kv_block_tokens,
            model_config: self.model_config.clone(),
            tensor_parallel_size: self.tensor_parallel_size,
            expert_parallel_size: self.expert_parallel_size,
            gpu_memory_gib: self.gpu_memory_gib,
            gpu_memory_utilization: self.gpu_memory_utilization,
            kv_cache_dtype: self.kv_cache_dtype.clone(),
            non_kv_memory_gib: self.non_kv_memory_gib,
            gpu,
        })
    }
}

/// The runs `path` holds (one, or one per benchmark of a GuideLLM report), each load point
/// that left requests out or is partial said so on stderr; a partial run to `fit` is
/// refused unless `--allow-partial`.
pub fn load(path: &Path, args: &RunArgs, fit: bool) -> Result<Vec<LoadedRun>, Failure> {
    let runs = load::load(path, &args.settings()?).map_err(Failure::from)?;
    for run in &runs {
        if let Some(note) = &run.left_out {
            eprintln!("{}: {note}", run.label);
        }
        match &run.partial {
            Some(note) if fit && !args.allow_partial => {
                return Err(Failure::input(format!(
                    "{}: {note}: not fitted on (its missing requests are the slow ones); give --allow-partial to fit on it anyway",
                    run.label
                )));
            }
            Some(note) => eprintln!("{}: {note}", run.label),
            None => {}
        }
    }
    Ok(runs)
}

/// The fleet that replays a run: `engines` behind `router`, said on stderr when several.
pub fn fleet(engines: u32, router: Option<&str>) -> Result<ServingFleet, Failure> {
    let fleet = ServingFleet::new(engines, router).map_err(Failure::from)?;
    if fleet.engines() > 1 {
        eprintln!(
            "{} engines (data parallel), requests routed by {}",
            fleet.engines(),
            fleet.matcher()
        );
    }
    Ok(fleet)
}

/// Writes the GPU profile of `engine`'s roofline step time (the GPU and the efficiencies
/// fitted) to `path`, `fitted_on` said in its first line; refused when the step time is no
/// roofline (no `--gpu`).
pub fn write_gpu_profile(
    path: &Path,
    engine: &routerlab_engine::EngineConfig,
    fitted_on: &str,
) -> Result<(), Failure> {
    let routerlab_engine::StepTime::Roofline(roofline) = &engine.step_time else {
        return Err(Failure::input(
            "--gpu-profile-out needs --gpu and --model-config (a roofline to profile)",
        ));
    };
    // The scheduler it was fitted under goes with it: the overhead is that engine's.
    let mut profile = roofline.profile();
    if let Some(efficiency) = &mut profile.efficiency {
        efficiency.scheduler = Some(engine.scheduler);
    }
    let yaml = format!(
        "# routerlab GPU profile, fitted on {fitted_on} (TP {}); give it to --gpu\n{}",
        roofline.tensor_parallel,
        serde_yaml::to_string(&profile).expect("a GPU serialises")
    );
    crate::cmd::write_output(path, yaml.as_bytes(), "the GPU profile")
}

/// How far `--fit-num-gpu-blocks` may move a KV cache derived from `--model-config`: the
/// model's arithmetic leaves the activation peak and what lies outside PyTorch estimated,
/// not the weights, so the fit refines it, no more.
pub const KV_BAND: f64 = 0.2;

/// Whether and how far the fit searches the KV cache of `blocks` found as `how`, and what
/// to say of it before the blocks: searched freely from a guess, within [`KV_BAND`] of
/// what the model config derives, or not at all.
pub fn kv_search(
    args: &RunArgs,
    blocks: u32,
    how: &str,
) -> (routerlab_calibrate::KvSearch, String) {
    use routerlab_calibrate::KvSearch;
    if !args.fit_num_gpu_blocks {
        (KvSearch::Fixed, String::new())
    } else if how.starts_with("--model-config") {
        (
            KvSearch::around(blocks, KV_BAND),
            format!("searched within ±{:.0}% of ", KV_BAND * 100.0),
        )
    } else {
        (KvSearch::Free, "searched from ".into())
    }
}

/// Refuses each output (its flag, its path when given) that is one of `inputs`, and two
/// outputs that name one file.
pub fn refuse_outputs(
    inputs: &[&Path],
    outputs: &[(&str, &Option<PathBuf>)],
) -> Result<(), Failure> {
    for (flag, out) in outputs {
        if let Some(out) = out {
            crate::cmd::refuse_input_as_output(flag, out, inputs)?;
        }
    }
    for (i, (flag, out)) in outputs.iter().enumerate() {
        for (other, then) in &outputs[i + 1..] {
            if out.is_some() && *out == *then {
                return Err(Failure::input(format!(
                    "{flag} and {other} name the same file"
                )));
            }
        }
    }
    Ok(())
}
