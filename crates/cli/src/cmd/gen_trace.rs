//! `routerlab gen-trace`: the synthetic workloads, written to a file or stdout.

use clap::Args;
use std::path::PathBuf;

use routerlab_trace::TraceFormat;
use routerlab_trace::synth::{
    ChatWorkload, MAX_SYNTH_ADAPTERS, MAX_SYNTH_SAMPLES, MooncakeWorkload, RatePattern, write_chat,
    write_mooncake,
};
use routerlab_trace::synth_agentic::{AgenticWorkload, write_agentic};

use crate::cmd::OutputFile;
use crate::exit::Failure;

/// The formats `gen-trace` writes: the prototype's chat workload (chat JSONL), a Mooncake
/// stream with shared prefixes and sessions, or agent plays in Dynamo's agentic_mooncake
/// v2 format (turns that wait for the previous one plus a tool's time, sub-agents spawned
/// and joined, contexts that grow); `agentic` is the old spelling of the last.
fn written_format(name: &str) -> Result<TraceFormat, String> {
    match name {
        "agentic" => Ok(TraceFormat::AgenticMooncake),
        name => match name.parse()? {
            format @ (TraceFormat::Chat | TraceFormat::Mooncake | TraceFormat::AgenticMooncake) => {
                Ok(format)
            }
            other => Err(format!(
                "gen-trace writes chat, mooncake or agentic-mooncake, not {other}"
            )),
        },
    }
}

/// `routerlab gen-trace`.
#[derive(Args, Debug)]
pub struct GenTraceArgs {
    /// Output file [default: stdout].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Which workload to write: chat, mooncake or agentic-mooncake (`--format` and
    /// `agentic` are the old spellings).
    #[arg(
        long,
        alias = "format",
        value_name = "FORMAT",
        default_value = "chat",
        value_parser = written_format
    )]
    pub trace_format: TraceFormat,
    /// Number of requests.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2200,
        help_heading = "Chat and Mooncake traces"
    )]
    pub requests: u64,
    /// Probability that a request continues an earlier conversation.
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.2,
        help_heading = "Chat and Mooncake traces"
    )]
    pub continue_chat_probability: f64,
    /// Words a user types per request (chat format).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100,
        help_heading = "Chat and Mooncake traces"
    )]
    pub tokens_typed_by_user_per_request: u64,
    /// Seed of the generator.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Mooncake format: omit `session_id`, writing only the four canonical fields.
    #[arg(long, help_heading = "Chat and Mooncake traces")]
    pub plain: bool,
    /// Chat and Mooncake formats: each conversation asks for one of N LoRA adapters
    /// (`adapter`: `adapter-1` ... `adapter-N`, adapter k with weight 1/k), its
    /// continuations for the same one; 0 = none, the base model.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Chat and Mooncake traces"
    )]
    pub adapters: u64,
    /// Mooncake format: each prompt is N requests arriving together, the same line but for
    /// each one's output length (an RL rollout step's samples, best-of-N); --requests
    /// counts the requests.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Chat and Mooncake traces"
    )]
    pub samples: u64,
    /// Mooncake format: prompts a second at the peak, Poisson [default: 20].
    #[arg(long, value_name = "R", help_heading = "Chat and Mooncake traces")]
    pub rate: Option<f64>,
    /// Mooncake format: how the rate changes: `constant`, `ramp:TO:SECONDS` (from --rate to
    /// TO prompts/s over SECONDS, then TO) or `diurnal:PERIOD_S:LOW` (a cosine swell from
    /// LOW × --rate up to --rate and back, every PERIOD_S seconds).
    #[arg(
        long,
        value_name = "PATTERN",
        help_heading = "Chat and Mooncake traces"
    )]
    pub rate_pattern: Option<String>,
    /// The agentic format's knobs.
    #[command(flatten)]
    pub agentic: AgenticArgs,
}

/// The agentic format's knobs (defaults in brackets); errors with another format.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Agentic plays (--trace-format agentic-mooncake)")]
pub struct AgenticArgs {
    /// Agentic: agent jobs (plays) [default: 40].
    #[arg(long, value_name = "N")]
    pub plays: Option<u64>,
    /// Agentic: plays started per second, Poisson [default: 0.5].
    #[arg(long, value_name = "RATE")]
    pub play_rate: Option<f64>,
    /// Agentic: mean main turns of a play, each drawing 1 to twice this [default: 6].
    #[arg(long, value_name = "N")]
    pub turns: Option<u64>,
    /// Agentic: mean tool run time between dependent turns, ms, exponential [default: 2000].
    #[arg(long, value_name = "MS")]
    pub tool_ms: Option<f64>,
    /// Agentic: probability that a main turn fans out to sub-agents [default: 0.2].
    #[arg(long, value_name = "P")]
    pub fanout_probability: Option<f64>,
    /// Agentic: most sub-agents of one fan-out, at least 2 [default: 3].
    #[arg(long, value_name = "N")]
    pub fanout_max: Option<u64>,
    /// Agentic: turns of each sub-agent [default: 2].
    #[arg(long, value_name = "N")]
    pub sub_turns: Option<u64>,
    /// Agentic: tokens of the system prompt every play shares [default: 2048].
    #[arg(long, value_name = "N")]
    pub system_tokens: Option<u64>,
    /// Agentic: tokens of a play's task and of a sub-agent's sub-task [default: 512].
    #[arg(long, value_name = "N")]
    pub task_tokens: Option<u64>,
    /// Agentic: tokens a tool's output adds to the context each turn [default: 768].
    #[arg(long, value_name = "N")]
    pub growth_tokens: Option<u64>,
    /// Agentic: mean output tokens of a turn [default: 256].
    #[arg(long, value_name = "N")]
    pub output_tokens: Option<u64>,
}

impl AgenticArgs {
    fn any(&self) -> bool {
        let AgenticArgs {
            plays,
            play_rate,
            turns,
            tool_ms,
            fanout_probability,
            fanout_max,
            sub_turns,
            system_tokens,
            task_tokens,
            growth_tokens,
            output_tokens,
        } = self;
        plays.is_some()
            || play_rate.is_some()
            || turns.is_some()
            || tool_ms.is_some()
            || fanout_probability.is_some()
            || fanout_max.is_some()
            || sub_turns.is_some()
            || system_tokens.is_some()
            || task_tokens.is_some()
            || growth_tokens.is_some()
            || output_tokens.is_some()
    }

    fn workload(&self, seed: u64) -> AgenticWorkload {
        let d = AgenticWorkload::default();
        AgenticWorkload {
            plays: self.plays.unwrap_or(d.plays),
            play_rate: self.play_rate.unwrap_or(d.play_rate),
            turns: self.turns.unwrap_or(d.turns),
            tool_ms: self.tool_ms.unwrap_or(d.tool_ms),
            fanout_probability: self.fanout_probability.unwrap_or(d.fanout_probability),
            fanout_max: self.fanout_max.unwrap_or(d.fanout_max),
            sub_turns: self.sub_turns.unwrap_or(d.sub_turns),
            system_tokens: self.system_tokens.unwrap_or(d.system_tokens),
            task_tokens: self.task_tokens.unwrap_or(d.task_tokens),
            growth_tokens: self.growth_tokens.unwrap_or(d.growth_tokens),
            output_tokens: self.output_tokens.unwrap_or(d.output_tokens),
            seed,
        }
    }
}

/// Writes the requested synthetic trace.
pub fn run(args: GenTraceArgs) -> Result<(), Failure> {
    if !(0.0..=1.0).contains(&args.continue_chat_probability) {
        return Err(Failure::input(
            "--continue-chat-probability must be within 0..=1",
        ));
    }
    if args.adapters > MAX_SYNTH_ADAPTERS {
        return Err(Failure::input(format!(
            "--adapters {}: a trace may name at most {MAX_SYNTH_ADAPTERS} adapters",
            args.adapters
        )));
    }
    if args.adapters > 0 && args.trace_format == TraceFormat::AgenticMooncake {
        return Err(Failure::input(
            "--adapters needs --trace-format chat or mooncake (agentic lines name a `model` of their own)",
        ));
    }
    if !(1..=MAX_SYNTH_SAMPLES).contains(&args.samples) {
        return Err(Failure::input(format!(
            "--samples {}: give 1 to {MAX_SYNTH_SAMPLES}",
            args.samples
        )));
    }
    if args.samples > 1 && args.trace_format != TraceFormat::Mooncake {
        return Err(Failure::input("--samples needs --trace-format mooncake"));
    }
    if (args.rate.is_some() || args.rate_pattern.is_some())
        && args.trace_format != TraceFormat::Mooncake
    {
        return Err(Failure::input(
            "--rate and --rate-pattern need --trace-format mooncake (agentic plays have --play-rate)",
        ));
    }
    let rate = args.rate.unwrap_or(20.0);
    if !(rate.is_finite() && rate > 0.0 && rate <= 1e6) {
        return Err(Failure::input(format!(
            "--rate {rate}: give prompts a second above 0, at most 1,000,000"
        )));
    }
    let pattern = match &args.rate_pattern {
        None => RatePattern::Constant,
        Some(text) => {
            RatePattern::parse(text).map_err(|e| Failure::input(format!("--rate-pattern {e}")))?
        }
    };
    let agentic = args.agentic.workload(args.seed);
    match args.trace_format {
        TraceFormat::AgenticMooncake => agentic.validate().map_err(Failure::input)?,
        _ if args.agentic.any() => {
            return Err(Failure::input(
                "--plays, --turns, --tool-ms and the other agentic knobs need --trace-format agentic-mooncake",
            ));
        }
        _ => {}
    }
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
    let fail = |source| Failure::Output {
        what: "the trace",
        path: output.clone(),
        source,
    };
    let file = match &args.output {
        Some(path) => Some(OutputFile::create(path).map_err(fail)?),
        None => None,
    };
    let mut sink: Box<dyn std::io::Write> = match &file {
        Some(file) => Box::new(std::io::BufWriter::new(file.writer().map_err(fail)?)),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let written = match args.trace_format {
        TraceFormat::Chat => write_chat(
            &ChatWorkload {
                requests: args.requests,
                continue_chat_probability: args.continue_chat_probability,
                tokens_typed_by_user_per_request: args.tokens_typed_by_user_per_request,
                seed: args.seed,
                adapters: args.adapters,
            },
            &mut sink,
        ),
        TraceFormat::Mooncake => write_mooncake(
            &MooncakeWorkload {
                requests: args.requests,
                continue_chat_probability: args.continue_chat_probability,
                seed: args.seed,
                sessions: !args.plain,
                adapters: args.adapters,
                samples: args.samples,
                rate,
                pattern,
            },
            &mut sink,
        ),
        _ => write_agentic(&agentic, &mut sink),
    };
    match written.and_then(|()| sink.flush()) {
        // `gen-trace | head`: the reader has what it wanted.
        Err(e) if file.is_none() && e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        other => other.map_err(fail)?,
    }
    drop(sink);
    match file {
        Some(file) => file.commit().map_err(fail),
        None => Ok(()),
    }
}
