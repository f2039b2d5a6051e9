//! `routerlab inspect TRACE`: what is in a trace, and how much prefix reuse any router
//! could win on it, before a single decision is made.

use routerlab_trace::inspect::inspect;
use routerlab_trace::{TraceOptions, TraceReader};

use crate::exit::Failure;
use crate::opts::{InspectArgs, OutputFormat};

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
