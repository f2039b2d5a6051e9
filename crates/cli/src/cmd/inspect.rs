//! `routerlab inspect TRACE`: what is in a trace, and how much prefix reuse any router
//! could win on it, before a single decision is made.

use std::path::PathBuf;

use clap::Args;
use routerlab_trace::inspect::inspect;
use routerlab_trace::{TraceOptions, TraceReader};

use crate::exit::Failure;
use routerlab_experiment::OutputFormat;

/// `routerlab inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The trace (any format `replay` reads, compressed or not).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Trace format [default: detected from the first line].
    #[arg(long, value_name = "FORMAT", help_heading = "Trace")]
    pub trace_format: Option<routerlab_trace::TraceFormat>,
    /// Block size for text prompts, in bytes [default: 128].
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 128,
        help_heading = "Trace"
    )]
    pub block_size: u32,
    /// Tokens per hash id in Mooncake traces [default: 512].
    #[arg(
        long,
        value_name = "TOKENS",
        default_value_t = 512,
        help_heading = "Trace"
    )]
    pub trace_block_size: u32,
    /// Skip malformed lines instead of failing.
    #[arg(long, help_heading = "Trace")]
    pub skip_invalid: bool,
    /// The longest trace line read, bytes; a longer one is an error naming it.
    #[arg(long, value_name = "BYTES", default_value_t = routerlab_trace::reader::DEFAULT_MAX_LINE_BYTES, help_heading = "Trace")]
    pub max_line_bytes: usize,
    /// Output format: human, json or yaml [default: human].
    #[arg(long, value_name = "FORMAT", help_heading = "Output")]
    pub format: Option<OutputFormat>,
}

/// Prints the summary of `args.trace`.
pub fn run(args: InspectArgs) -> Result<(), Failure> {
    if args.block_size == 0 || args.trace_block_size == 0 {
        return Err(Failure::input(
            "--block-size and --trace-block-size must be at least 1",
        ));
    }
    let reader = TraceReader::open(
        &args.trace,
        TraceOptions {
            format: args.trace_format,
            block_size: args.block_size,
            trace_block_size: args.trace_block_size,
            skip_invalid: args.skip_invalid,
            max_line_bytes: args.max_line_bytes.max(1),
        },
    )?;
    let skipped = reader.skipped().clone();
    let summary = inspect(reader)?;
    if !skipped.is_empty() {
        eprintln!(
            "warning: skipped invalid line(s) of {}",
            args.trace.display()
        );
    }
    let text = match args.format.unwrap_or(OutputFormat::Human) {
        OutputFormat::Human => summary.to_human(),
        OutputFormat::Json => serde_json::to_string_pretty(&summary).expect("serialises") + "\n",
        OutputFormat::Yaml => serde_yaml::to_string(&summary).expect("serialises"),
        OutputFormat::Csv => {
            return Err(Failure::input(
                "inspect prints human, json or yaml, not csv",
            ));
        }
    };
    crate::cmd::print_stdout(&text, "the summary")
}
