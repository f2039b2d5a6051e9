//! Measured runs as `calibrate` and `validate` take them: a directory in LLMServingSim's
//! layout or a file one of the benchmark tools wrote, the engine limits it does not record,
//! and the run's own length-form workload.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use routerlab_sim::calibrate::MeasuredRun;
use routerlab_sim::calibrate::formats::{self, RunFileFormat};
use routerlab_trace::{TraceFormat, TraceOptions, TraceReader, Workload};

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
}

impl RunFormat {
    fn file_format(self) -> Option<RunFileFormat> {
        match self {
            RunFormat::Auto | RunFormat::Llmservingsim => None,
            RunFormat::Distserve => Some(RunFileFormat::Distserve),
            RunFormat::VllmBench => Some(RunFileFormat::VllmBench),
            RunFormat::Aiperf => Some(RunFileFormat::Aiperf),
            RunFormat::Guidellm => Some(RunFileFormat::Guidellm),
            RunFormat::InferencePerf => Some(RunFileFormat::InferencePerf),
            RunFormat::Lmbench => Some(RunFileFormat::Lmbench),
            RunFormat::Fmperf => Some(RunFileFormat::Fmperf),
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
pub struct RunArgs {
    /// How the runs are laid out.
    #[arg(long, value_name = "FORMAT", default_value = "auto")]
    pub run_format: RunFormat,
    /// fmperf's requests file the runs drew their prompts from (`REQUESTS_FILENAME`):
    /// fmperf's results do not record the prompts' lengths.
    #[arg(long, value_name = "FILE")]
    pub fmperf_requests: Option<PathBuf>,
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
    /// measured queueing and preemption say the cache held.
    #[arg(long)]
    pub fit_num_gpu_blocks: bool,
    /// Tokens per KV block.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub block_size: u32,
    /// The model's Hugging Face config.json: the KV blocks as vLLM sizes them on the GPU
    /// of --gpu-memory-gib (with --tensor-parallel-size, --gpu-memory-utilization).
    #[arg(long, value_name = "FILE")]
    pub model_config: Option<PathBuf>,
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

    /// The search's starting step time for `run`: its guess from aggregates, with the
    /// expert term of a mixture-of-experts --model-config (half the step overhead moved to
    /// the experts a one-token step touches).
    pub fn step_time_guess(
        &self,
        run: &MeasuredRun,
    ) -> Result<routerlab_engine::StepTime, Failure> {
        let mut guess = run.initial_guess();
        let Some(path) = &self.model_config else {
            return Ok(guess);
        };
        let text = crate::spec::read_model_config(path)?;
        let shape = routerlab_engine::experts_of(&text)
            .map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
        if let (
            Some((count, per_token)),
            routerlab_engine::StepTime::Batched {
                overhead_ms,
                experts,
                ..
            },
        ) = (shape, &mut guess)
        {
            let mut term = routerlab_engine::Experts {
                count,
                per_token,
                ms: 0.0,
            };
            term.ms = *overhead_ms * 0.5 / term.touched(1);
            *overhead_ms *= 0.5;
            *experts = Some(term);
        }
        Ok(guess)
    }

    /// The KV cache of the engine that ran `run`, in blocks and tokens a block, and how it
    /// was found. Precedence: --num-gpu-blocks, what the run records, --model-config, an
    /// estimate from the run.
    pub fn kv_capacity(&self, run: &MeasuredRun) -> Result<(u32, u32, String), Failure> {
        if self.block_size == 0 {
            return Err(Failure::input("--block-size must be at least 1"));
        }
        let model = self.model_budget(run)?;
        if let Some(blocks) = self.num_gpu_blocks {
            return Ok((blocks, self.block_size, "--num-gpu-blocks".into()));
        }
        if run.kv_blocks.is_some() {
            return Ok(run.kv_capacity());
        }
        if let Some((blocks, how)) = model {
            return Ok((blocks, self.block_size, how));
        }
        Ok(run.kv_capacity())
    }

    /// The blocks --model-config gives, with how, when it is given; the flags are checked
    /// whether or not another source wins.
    fn model_budget(&self, run: &MeasuredRun) -> Result<Option<(u32, String)>, Failure> {
        let gib_bytes = |flag: &str, g: f64| -> Result<u64, Failure> {
            if g.is_finite() && g > 0.0 && g <= 1e6 {
                Ok((g * (1u64 << 30) as f64) as u64)
            } else {
                Err(Failure::input(format!(
                    "{flag} must be a positive number of GiB, at most a million"
                )))
            }
        };
        let Some(path) = &self.model_config else {
            for (given, flag) in [
                (self.gpu_memory_gib.is_some(), "--gpu-memory-gib"),
                (self.kv_cache_dtype.is_some(), "--kv-cache-dtype"),
                (self.non_kv_memory_gib.is_some(), "--non-kv-memory-gib"),
            ] {
                if given {
                    return Err(Failure::input(format!("{flag} needs --model-config")));
                }
            }
            return Ok(None);
        };
        let gpu_memory_bytes = match (self.gpu_memory_gib, run.gpu_memory_bytes) {
            (Some(gib), _) => gib_bytes("--gpu-memory-gib", gib)?,
            (None, Some(bytes)) => bytes,
            (None, None) => {
                return Err(Failure::input(
                    "--model-config needs --gpu-memory-gib (the run does not record its GPU's memory)",
                ));
            }
        };
        let utilization = self.gpu_memory_utilization;
        if !(utilization > 0.0 && utilization <= 1.0) {
            return Err(Failure::input(
                "--gpu-memory-utilization must be above 0 and at most 1",
            ));
        }
        let tensor_parallel = self
            .tensor_parallel_size
            .or(run.tensor_parallel)
            .unwrap_or(1);
        let data_parallel = self.data_parallel_size.unwrap_or(run.data_parallel);
        let expert_parallel = match self.expert_parallel_size {
            Some(n) => n,
            None if run.expert_parallel => tensor_parallel.saturating_mul(data_parallel),
            None => 1,
        };
        if tensor_parallel == 0 || expert_parallel == 0 {
            return Err(Failure::input(
                "--tensor-parallel-size and --expert-parallel-size must be at least 1",
            ));
        }
        let budget = routerlab_engine::GpuBudget {
            gpu_memory_bytes,
            utilization,
            tensor_parallel,
            expert_parallel,
            max_num_batched_tokens: self
                .max_num_batched_tokens
                .unwrap_or(run.max_num_batched_tokens),
            max_num_seqs: self.max_num_seqs.unwrap_or(run.max_num_seqs),
            block_size: self.block_size,
            kv_dtype: self.kv_cache_dtype.clone(),
            non_kv_bytes: self
                .non_kv_memory_gib
                .map(|g| gib_bytes("--non-kv-memory-gib", g))
                .transpose()?,
        };
        let text = crate::spec::read_model_config(path)?;
        let kv = routerlab_engine::kv_budget(&text, &budget)
            .map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
        let blocks = u32::try_from(kv.num_blocks)
            .unwrap_or(u32::MAX)
            .min(1 << 24);
        if blocks == 0 {
            return Err(Failure::input(format!(
                "{}: no KV block fits in the {:.2} GiB left",
                path.display(),
                kv.available_bytes as f64 / (1u64 << 30) as f64
            )));
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let how = if budget.non_kv_bytes.is_some() {
            format!(
                "--model-config: {:.2} GiB for KV of {:.2} GiB at {utilization}, less the {:.2} GiB given as not KV cache; {} KV bytes a token per GPU",
                gib(kv.available_bytes),
                gib(budget.gpu_memory_bytes),
                self.non_kv_memory_gib.unwrap_or_default(),
                kv.bytes_per_token
            )
        } else {
            format!(
                "--model-config: {:.2} GiB for KV of {:.2} GiB at {utilization}, less weights {:.2} GiB and an activation estimate {:.2} GiB; {} KV bytes a token per GPU",
                gib(kv.available_bytes),
                gib(budget.gpu_memory_bytes),
                gib(kv.weight_bytes),
                gib(kv.activation_bytes),
                kv.bytes_per_token
            )
        };
        Ok(Some((blocks, how)))
    }
}

/// A measured run as read, with what to call it.
pub struct LoadedRun {
    /// The path, with `#K` for the K-th benchmark of a report that holds several.
    pub label: String,
    /// Its requests and engine limits.
    pub measured: MeasuredRun,
}

fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure::input(format!("{}: cannot read: {e}", path.display())))
}

/// `FILE#K` names the K-th (1-based) load point of FILE, unless a file of that very name
/// exists.
fn selector(path: &Path) -> (PathBuf, Option<usize>) {
    if path.exists() {
        return (path.to_owned(), None);
    }
    let text = path.to_string_lossy();
    match text.rsplit_once('#') {
        Some((file, k)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => {
            (PathBuf::from(file), k.parse().ok())
        }
        _ => (path.to_owned(), None),
    }
}

/// The runs `path` holds: one, or one per benchmark of a GuideLLM report.
pub fn load(path: &Path, args: &RunArgs) -> Result<Vec<LoadedRun>, Failure> {
    let (file, pick) = selector(path);
    let directory = std::fs::metadata(&file)
        .map_err(|e| Failure::input(format!("{}: cannot read: {e}", file.display())))?
        .is_dir();
    if args.run_format == RunFormat::Llmservingsim
        || (args.run_format == RunFormat::Auto && directory)
    {
        let part = |name| read(&file.join(name));
        let measured = MeasuredRun::parse(
            &part("requests.jsonl")?,
            &part("meta.json")?,
            &part("timeseries.csv")?,
        )
        .map_err(|e| Failure::input(format!("{}/{e}", file.display())))?;
        return Ok(vec![LoadedRun {
            label: file.display().to_string(),
            measured,
        }]);
    }
    if directory {
        return Err(Failure::input(format!(
            "{}: a directory, not a run file (give --run-format llmservingsim for LLMServingSim's layout)",
            file.display()
        )));
    }
    let text = read(&file)?;
    let name = file.display().to_string();
    let format = match args.run_format.file_format() {
        Some(format) => format,
        None => formats::detect(&text).ok_or_else(|| {
            let kinds: Vec<&str> = RunFileFormat::ALL.iter().map(|f| f.looks_like()).collect();
            Failure::input(format!(
                "{name}: not a measured run: a directory in LLMServingSim's layout (requests.jsonl, meta.json, timeseries.csv), {}; or name it with --run-format",
                kinds.join(", ")
            ))
        })?,
    };
    let parts = if format == RunFileFormat::Fmperf {
        let Some(requests) = &args.fmperf_requests else {
            return Err(Failure::input(format!(
                "{name}: fmperf's results do not record the prompts' lengths: give --fmperf-requests FILE, the requests file the run drew from"
            )));
        };
        let requests_name = requests.display().to_string();
        formats::parse_fmperf(&text, &read(requests)?).map_err(|e| match e {
            Ok(e) => Failure::input(formats::located(&name, &e)),
            Err(e) => Failure::input(formats::located(&requests_name, &e)),
        })?
    } else {
        formats::parse(format, &text).map_err(|e| Failure::input(formats::located(&name, &e)))?
    };
    let count = parts.len();
    let chosen: Vec<(usize, formats::Part)> = match pick {
        Some(k) if k == 0 || k > count => {
            return Err(Failure::input(format!(
                "{path}: the file holds {count} load points: K in FILE#K is 1 to {count}",
                path = path.display()
            )));
        }
        Some(k) => parts
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i + 1 == k)
            .collect(),
        None => parts.into_iter().enumerate().collect(),
    };
    let (Some(max_num_seqs), Some(max_num_batched_tokens)) =
        (args.max_num_seqs, args.max_num_batched_tokens)
    else {
        return Err(Failure::input(format!(
            "{name}: the run does not record the engine's limits: give --max-num-seqs and --max-num-batched-tokens"
        )));
    };
    Ok(chosen
        .into_iter()
        .map(|(i, part)| {
            let label = if count > 1 {
                format!("{name}#{}", i + 1)
            } else {
                name.clone()
            };
            if let Some(note) = &part.left_out {
                eprintln!("{label}: {note}");
            }
            LoadedRun {
                label,
                measured: MeasuredRun {
                    requests: part.requests,
                    samples: Vec::new(),
                    max_num_seqs,
                    max_num_batched_tokens,
                    kv_blocks: None,
                    data_parallel: 1,
                    tensor_parallel: None,
                    expert_parallel: false,
                    gpu_memory_bytes: None,
                },
            }
        })
        .collect())
}

/// The run's own workload: each request's arrival, prompt and output tokens, in Mooncake
/// form with block ids of its own (no prefix is shared).
pub fn own_workload(label: &str, run: &MeasuredRun, block_size: u32) -> Result<Workload, Failure> {
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
    let reader = TraceReader::in_memory(
        Path::new(label),
        TraceFormat::Mooncake,
        text.into_bytes(),
        options,
    );
    Ok(Workload::load(reader, &[block_size])?)
}
