//! `routerlab gen-trace`: the synthetic workloads, written to a file or stdout.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

use routerlab_trace::synth::{ChatWorkload, MooncakeWorkload, write_chat, write_mooncake};

use crate::cmd::OutputFile;
use crate::exit::Failure;

/// What `gen-trace` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GenFormat {
    /// The prototype's chat workload (chat JSONL).
    Chat,
    /// A Mooncake-format stream with shared prefixes and sessions.
    Mooncake,
}

/// `routerlab gen-trace`.
#[derive(Args, Debug)]
pub struct GenTraceArgs {
    /// Output file [default: stdout].
    #[arg(long, short, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Which workload to write.
    #[arg(long, value_name = "FORMAT", default_value = "chat")]
    pub format: GenFormat,
    /// Number of requests.
    #[arg(long, value_name = "N", default_value_t = 2200)]
    pub requests: u64,
    /// Probability that a request continues an earlier conversation.
    #[arg(long, value_name = "P", default_value_t = 0.2)]
    pub continue_chat_probability: f64,
    /// Words a user types per request (chat format).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub tokens_typed_by_user_per_request: u64,
    /// Seed of the generator.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Mooncake format: omit `session_id`, writing only the four canonical fields.
    #[arg(long)]
    pub plain: bool,
}

/// Writes the requested synthetic trace.
pub fn run(args: GenTraceArgs) -> Result<(), Failure> {
    if !(0.0..=1.0).contains(&args.continue_chat_probability) {
        return Err(Failure::input(
            "--continue-chat-probability must be within 0..=1",
        ));
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
