//! Measured runs as `calibrate` and `validate` take them: a directory in LLMServingSim's
//! layout or a file one of the benchmark tools wrote ([`load`]), the engine limits and KV
//! cache it does not record ([`RunSettings`]), and the run's own length-form workload
//! ([`own_workload`]).

use std::path::{Path, PathBuf};

use routerlab_trace::{TraceFormat, TraceOptions, TraceReader, Workload};

use crate::formats::{self, RunFileFormat};
use crate::{CalibrateError, MeasuredRun};

/// How a measured run is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// A directory is LLMServingSim's layout; a file is told by its first bytes.
    #[default]
    Auto,
    /// LLMServingSim's bench layout: requests.jsonl, meta.json, timeseries.csv.
    Llmservingsim,
    /// A file one benchmark tool wrote.
    File(RunFileFormat),
}

/// What a measured run needs said about it when its files do not say it. Each setting is
/// named in errors by its flag, `--` and the field's name in kebab case.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// How the runs are laid out.
    pub layout: Layout,
    /// fmperf's requests file the runs drew their prompts from.
    pub fmperf_requests: Option<PathBuf>,
    /// LMBench's ShareGPT workload file the runs sent: their conversations.
    pub lmbench_workload: Option<PathBuf>,
    /// LMBench's ShareGPT warm-up file, sent before each run: its warm-up requests.
    pub lmbench_warm_up: Option<PathBuf>,
    /// The engine's `max_num_seqs` [default: the run's].
    pub max_num_seqs: Option<u32>,
    /// The engine's `max_num_batched_tokens` [default: the run's].
    pub max_num_batched_tokens: Option<u32>,
    /// Engines the run's requests were balanced over [default: the run's, else 1].
    pub data_parallel_size: Option<u32>,
    /// The engine's KV cache in blocks, as vLLM logged it.
    pub num_gpu_blocks: Option<u32>,
    /// Tokens per KV block.
    pub kv_block_tokens: u32,
    /// The model's Hugging Face `config.json`, for the KV blocks vLLM would size.
    pub model_config: Option<PathBuf>,
    /// GPUs each engine's model is split over [default: the run's, else 1].
    pub tensor_parallel_size: Option<u32>,
    /// GPUs a mixture of experts' experts are split over.
    pub expert_parallel_size: Option<u32>,
    /// Memory of one GPU, GiB, as CUDA reports it [default: the run's].
    pub gpu_memory_gib: Option<f64>,
    /// The fraction of it vLLM may use.
    pub gpu_memory_utilization: f64,
    /// The KV cache's data type [default: the model's].
    pub kv_cache_dtype: Option<String>,
    /// Memory of one GPU that is not KV cache, GiB.
    pub non_kv_memory_gib: Option<f64>,
    /// The GPU the run ran on: with --model-config, the step time is the analytical
    /// roofline (and the GPU's memory the default for the KV blocks).
    pub gpu: Option<routerlab_engine::Gpu>,
}

impl Default for RunSettings {
    fn default() -> RunSettings {
        RunSettings {
            layout: Layout::Auto,
            fmperf_requests: None,
            lmbench_workload: None,
            lmbench_warm_up: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            data_parallel_size: None,
            num_gpu_blocks: None,
            kv_block_tokens: 16,
            model_config: None,
            tensor_parallel_size: None,
            expert_parallel_size: None,
            gpu_memory_gib: None,
            gpu_memory_utilization: 0.9,
            kv_cache_dtype: None,
            non_kv_memory_gib: None,
            gpu: None,
        }
    }
}

impl RunSettings {
    /// The search's starting step time for `run`: its guess from aggregates, with the
    /// expert term of a mixture-of-experts --model-config (half the step overhead moved to
    /// the experts a one-token step touches).
    pub fn step_time_guess(
        &self,
        run: &MeasuredRun,
        scheduler: routerlab_engine::Scheduler,
    ) -> Result<routerlab_engine::StepTime, CalibrateError> {
        if let Some(roofline) = self.roofline(run, scheduler)? {
            return Ok(routerlab_engine::StepTime::Roofline(Box::new(roofline)));
        }
        let mut guess = run.initial_guess();
        let Some(path) = &self.model_config else {
            return Ok(guess);
        };
        let text = routerlab_engine::read_model_config(path).map_err(CalibrateError::Input)?;
        let shape = routerlab_engine::experts_of(&text)
            .map_err(|e| CalibrateError::input(format!("{}: {e}", path.display())))?;
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

    /// The analytical step time of --gpu and --model-config (`None` without --gpu), at the
    /// run's tensor- and expert-parallel sizes unless the flags say, at the efficiencies of
    /// the GPU's profile when --gpu is one (its overhead `scheduler`'s when fitted under
    /// another), else those typical of an engine of `scheduler`.
    pub fn roofline(
        &self,
        run: &MeasuredRun,
        scheduler: routerlab_engine::Scheduler,
    ) -> Result<Option<routerlab_engine::Roofline>, CalibrateError> {
        let Some(gpu) = &self.gpu else {
            return Ok(None);
        };
        let Some(path) = &self.model_config else {
            return Err(CalibrateError::input(
                "--gpu needs --model-config (the model's config.json)",
            ));
        };
        let text = routerlab_engine::read_model_config(path).map_err(CalibrateError::Input)?;
        let at = |e: routerlab_engine::ModelConfigError| {
            CalibrateError::input(format!("{}: {e}", path.display()))
        };
        let shape = routerlab_engine::ModelShape::from_config(&text).map_err(at)?;
        let kv = routerlab_engine::kv_from_model_config(&text, self.kv_cache_dtype.as_deref())
            .map_err(at)?;
        let (tensor_parallel, expert_parallel) = self.parallel(run)?;
        let mut roofline = routerlab_engine::Roofline::new(
            gpu.clone(),
            shape,
            tensor_parallel,
            expert_parallel,
            kv.dtype_bytes as u32,
        );
        roofline.efficiency =
            routerlab_engine::Efficiency::for_engine(gpu.efficiency, scheduler, gpu.link);
        roofline
            .validate()
            .map_err(|e| CalibrateError::input(format!("{}: {e}", path.display())))?;
        Ok(Some(roofline))
    }

    /// The tensor- and expert-parallel sizes: the flags, else the run's.
    fn parallel(&self, run: &MeasuredRun) -> Result<(u32, u32), CalibrateError> {
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
            return Err(CalibrateError::input(
                "--tensor-parallel-size and --expert-parallel-size must be at least 1",
            ));
        }
        Ok((tensor_parallel, expert_parallel))
    }

    /// The KV cache of the engine that ran `run`, in blocks and tokens a block, and how it
    /// was found. Precedence: --num-gpu-blocks, what the run records, --model-config, an
    /// estimate from the run.
    pub fn kv_capacity(&self, run: &MeasuredRun) -> Result<(u32, u32, String), CalibrateError> {
        if self.kv_block_tokens == 0 {
            return Err(CalibrateError::input(
                "--kv-block-tokens must be at least 1",
            ));
        }
        let model = self.model_budget(run)?;
        if let Some(blocks) = self.num_gpu_blocks {
            return Ok((blocks, self.kv_block_tokens, "--num-gpu-blocks".into()));
        }
        if run.kv_blocks.is_some() {
            return Ok(run.kv_capacity());
        }
        if let Some((blocks, how)) = model {
            return Ok((blocks, self.kv_block_tokens, how));
        }
        Ok(run.kv_capacity())
    }

    /// The blocks --model-config gives, with how, when it is given; the flags are checked
    /// whether or not another source wins.
    fn model_budget(&self, run: &MeasuredRun) -> Result<Option<(u32, String)>, CalibrateError> {
        let gib_bytes = |flag: &str, g: f64| -> Result<u64, CalibrateError> {
            if g.is_finite() && g > 0.0 && g <= 1e6 {
                Ok((g * (1u64 << 30) as f64) as u64)
            } else {
                Err(CalibrateError::input(format!(
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
                    return Err(CalibrateError::input(format!(
                        "{flag} needs --model-config"
                    )));
                }
            }
            return Ok(None);
        };
        let gpu_memory_bytes = match (self.gpu_memory_gib, run.gpu_memory_bytes, &self.gpu) {
            (Some(gib), _, _) => gib_bytes("--gpu-memory-gib", gib)?,
            (None, Some(bytes), _) => bytes,
            (None, None, Some(gpu)) => gpu.memory_bytes(),
            (None, None, None) => {
                return Err(CalibrateError::input(
                    "--model-config needs --gpu or --gpu-memory-gib (the run does not record its GPU's memory)",
                ));
            }
        };
        let utilization = self.gpu_memory_utilization;
        if !(utilization > 0.0 && utilization <= 1.0) {
            return Err(CalibrateError::input(
                "--gpu-memory-utilization must be above 0 and at most 1",
            ));
        }
        let (tensor_parallel, expert_parallel) = self.parallel(run)?;
        let budget = routerlab_engine::GpuBudget {
            gpu_memory_bytes,
            utilization,
            tensor_parallel,
            expert_parallel,
            max_num_batched_tokens: self
                .max_num_batched_tokens
                .unwrap_or(run.max_num_batched_tokens),
            max_num_seqs: self.max_num_seqs.unwrap_or(run.max_num_seqs),
            block_size: self.kv_block_tokens,
            kv_dtype: self.kv_cache_dtype.clone(),
            non_kv_bytes: self
                .non_kv_memory_gib
                .map(|g| gib_bytes("--non-kv-memory-gib", g))
                .transpose()?,
        };
        let text = routerlab_engine::read_model_config(path).map_err(CalibrateError::Input)?;
        let kv = routerlab_engine::kv_budget(&text, &budget)
            .map_err(|e| CalibrateError::input(format!("{}: {e}", path.display())))?;
        let blocks = u32::try_from(kv.num_blocks)
            .unwrap_or(u32::MAX)
            .min(1 << 24);
        if blocks == 0 {
            return Err(CalibrateError::input(format!(
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
                "--model-config: {:.2} GiB for KV of {:.2} GiB at {utilization}, less {}; {} KV bytes a token per GPU",
                gib(kv.available_bytes),
                gib(budget.gpu_memory_bytes),
                kv.deductions(),
                kv.bytes_per_token
            )
        };
        Ok(Some((blocks, how)))
    }
}

/// A measured run as read, with what to call it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedRun {
    /// The path, with `#K` for the K-th benchmark of a report that holds several.
    pub label: String,
    /// Its requests and engine limits.
    pub measured: MeasuredRun,
    /// Requests the file records but the run is read without (failed, cancelled, warm-up),
    /// and why, for the user to be told.
    pub left_out: Option<String>,
    /// How its log falls short of what was offered, when it shows
    /// ([`crate::as_trace::shortfall`]): such a run is not fitted unless asked.
    pub partial: Option<String>,
    /// Requests sent before it and not logged (LMBench's warm-up), times from the first.
    pub warm_up: Vec<crate::MeasuredRequest>,
}

fn read(path: &Path) -> Result<String, CalibrateError> {
    std::fs::read_to_string(path)
        .map_err(|e| CalibrateError::input(format!("{}: cannot read: {e}", path.display())))
}

/// `FILE#K` names the K-th (1-based) load point of FILE, unless a file of that very name
/// exists.
pub(crate) fn selector(path: &Path) -> (PathBuf, Option<usize>) {
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
pub fn load(path: &Path, args: &RunSettings) -> Result<Vec<LoadedRun>, CalibrateError> {
    let (file, pick) = selector(path);
    let directory = std::fs::metadata(&file)
        .map_err(|e| CalibrateError::input(format!("{}: cannot read: {e}", file.display())))?
        .is_dir();
    if let Some(workload) = args.lmbench_workload.as_ref().filter(|_| directory) {
        return Err(CalibrateError::input(format!(
            "{}: --lmbench-workload {}: the workload of an LMBench CSV, not of a directory",
            file.display(),
            workload.display()
        )));
    }
    if args.layout == Layout::Llmservingsim || (args.layout == Layout::Auto && directory) {
        let part = |name| read(&file.join(name));
        let measured = MeasuredRun::parse(
            &part("requests.jsonl")?,
            &part("meta.json")?,
            &part("timeseries.csv")?,
        )
        .map_err(|e| CalibrateError::input(format!("{}/{e}", file.display())))?;
        return Ok(vec![LoadedRun {
            label: file.display().to_string(),
            left_out: None,
            partial: crate::as_trace::shortfall(&measured.requests),
            warm_up: Vec::new(),
            measured,
        }]);
    }
    if directory {
        return Err(CalibrateError::input(format!(
            "{}: a directory, not a run file (give --run-format llmservingsim for LLMServingSim's layout)",
            file.display()
        )));
    }
    let text = read(&file)?;
    let name = file.display().to_string();
    let format = match args.layout {
        Layout::File(format) => format,
        Layout::Auto | Layout::Llmservingsim => formats::detect(&text).ok_or_else(|| {
            let kinds: Vec<&str> = RunFileFormat::ALL.iter().map(|f| f.looks_like()).collect();
            CalibrateError::input(format!(
                "{name}: not a measured run: a directory in LLMServingSim's layout (requests.jsonl, meta.json, timeseries.csv), {}; or name it with --run-format",
                kinds.join(", ")
            ))
        })?,
    };
    let parts = if format == RunFileFormat::Fmperf {
        let Some(requests) = &args.fmperf_requests else {
            return Err(CalibrateError::input(format!(
                "{name}: fmperf's results do not record the prompts' lengths: give --fmperf-requests FILE, the requests file the run drew from"
            )));
        };
        let requests_name = requests.display().to_string();
        formats::parse_fmperf(&text, &read(requests)?).map_err(|e| match e {
            Ok(e) => CalibrateError::input(formats::located(&name, &e)),
            Err(e) => CalibrateError::input(formats::located(&requests_name, &e)),
        })?
    } else {
        formats::parse(format, &text)
            .map_err(|e| CalibrateError::input(formats::located(&name, &e)))?
    };
    let parts = match &args.lmbench_workload {
        Some(workload) => follow_workload(
            parts,
            format,
            &name,
            workload,
            args.lmbench_warm_up.as_deref(),
        )?,
        None => match &args.lmbench_warm_up {
            Some(warm) => {
                return Err(CalibrateError::input(format!(
                    "{name}: --lmbench-warm-up {}: give the workload it warms up for too (--lmbench-workload)",
                    warm.display()
                )));
            }
            None => parts,
        },
    };
    let count = parts.len();
    let chosen: Vec<(usize, formats::Part)> = match pick {
        Some(k) if k == 0 || k > count => {
            return Err(CalibrateError::input(format!(
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
        return Err(CalibrateError::input(format!(
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
            LoadedRun {
                label,
                left_out: part.left_out,
                partial: crate::as_trace::shortfall(&part.requests),
                warm_up: part.warm_up,
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
                    async_scheduling: None,
                },
            }
        })
        .collect())
}

/// `parts` of the run `name` (a file of `format`) with their conversations from LMBench's
/// ShareGPT workload file at `workload`, and their warm-up from its file at `warm_up`.
fn follow_workload(
    mut parts: Vec<formats::Part>,
    format: RunFileFormat,
    name: &str,
    workload: &Path,
    warm_up: Option<&Path>,
) -> Result<Vec<formats::Part>, CalibrateError> {
    let flag = format!("--lmbench-workload {}", workload.display());
    if format != RunFileFormat::Lmbench {
        return Err(CalibrateError::input(format!(
            "{name}: {flag}: the workload of an LMBench CSV, not of {}",
            format.looks_like()
        )));
    }
    let recorded = parts
        .iter()
        .any(|p| p.requests.iter().any(|r| r.session.is_some()));
    if recorded {
        return Err(CalibrateError::input(format!(
            "{name}: {flag}: the run records its conversations (`user_id`, `question_id`) itself"
        )));
    }
    // An LMBench workload file (the run's or its warm-up's); an error names its line.
    let read_workload = |path: &Path| {
        formats::lmbench_workload::read(&read(path)?)
            .map_err(|e| CalibrateError::input(formats::located(&path.display().to_string(), &e)))
    };
    let entries = read_workload(workload)?;
    let warm = warm_up.map(read_workload).transpose()?;
    for part in &mut parts {
        part.warm_up =
            formats::lmbench_workload::follow(&mut part.requests, &entries, warm.as_ref())
                .map_err(|e| CalibrateError::input(format!("{name}: {flag}: {e}")))?;
    }
    Ok(parts)
}

/// The workload at `path` the measured engine was fed, checked to be the run's: as many
/// requests, the same lengths where the trace has them in tokens, and every one with an
/// arrival time. Its messages start with the file.
pub fn fed_workload(
    path: &Path,
    options: TraceOptions,
    run: &MeasuredRun,
    block_size: u32,
) -> Result<Workload, CalibrateError> {
    let reader = TraceReader::open(path, options).map_err(CalibrateError::Trace)?;
    let workload = Workload::load(reader, &[block_size]).map_err(CalibrateError::Trace)?;
    if workload.requests.len() != run.requests.len() {
        return Err(CalibrateError::Input(format!(
            "{} has {} requests, the measured run {}: give the workload the run was fed",
            path.display(),
            workload.requests.len(),
            run.requests.len()
        )));
    }
    // The same requests, not just as many: lengths in tokens match request by request.
    if workload.unit == routerlab_core::Unit::Tokens {
        for (i, (fed, measured)) in workload.requests.iter().zip(&run.requests).enumerate() {
            let output_differs = fed.output_tokens.is_some_and(|o| o != measured.output_toks);
            if u64::from(fed.prompt_tokens) != measured.input_toks || output_differs {
                return Err(CalibrateError::Input(format!(
                    "{}: request {} (line {}) has {} prompt and {} output tokens, the measured run's request {} {} and {}: give the workload the run was fed",
                    path.display(),
                    i + 1,
                    fed.line,
                    fed.prompt_tokens,
                    fed.output_tokens
                        .map_or("unknown".into(), |o| o.to_string()),
                    i + 1,
                    measured.input_toks,
                    measured.output_toks,
                )));
            }
        }
    }
    if workload.requests.iter().any(|r| r.arrival_ns.is_none()) {
        return Err(CalibrateError::Input(format!(
            "{}: every request needs an arrival time",
            path.display()
        )));
    }
    Ok(workload)
}

/// The run's own workload: each request's arrival, prompt and output tokens, as
/// [`crate::as_trace::mooncake_text`] makes it (conversations, where the tool records
/// them, sharing their previous rounds' prompts; nothing else shared).
pub fn own_workload(
    label: &str,
    run: &MeasuredRun,
    block_size: u32,
) -> Result<Workload, CalibrateError> {
    let options = TraceOptions {
        format: Some(TraceFormat::Mooncake),
        trace_block_size: crate::as_trace::RUN_TRACE_BLOCK_TOKENS,
        ..TraceOptions::default()
    };
    let reader = TraceReader::in_memory(
        Path::new(label),
        TraceFormat::Mooncake,
        crate::as_trace::mooncake_text(&run.requests),
        options,
    );
    Ok(Workload::load(reader, &[block_size])?)
}
