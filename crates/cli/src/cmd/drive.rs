//! `routerlab drive`: sends a trace to a router or engine at its arrival times (or a rate,
//! or a closed loop), and reports what it measured in the replay's schema.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use routerlab_live::drive::DriveSettings;
use routerlab_report::run::DrivenRun;
use routerlab_sim::scenario::recorded;
use routerlab_trace::{TraceOptions, TraceReader, Workload};

use crate::cmd::live::runtime;
use crate::exit::Failure;
use routerlab_experiment::OutputFormat;
use routerlab_experiment::one_line;

/// `routerlab drive`.
#[derive(Args, Debug)]
pub struct DriveArgs {
    /// Base URL of the router or engine, e.g. http://127.0.0.1:8080.
    #[arg(long, value_name = "URL", help_heading = "Target")]
    pub url: String,
    /// The trace.
    #[arg(long, value_name = "PATH", help_heading = "Trace")]
    pub trace: PathBuf,
    /// Trace format [default: detected].
    #[arg(long, value_name = "FORMAT", help_heading = "Trace")]
    pub trace_format: Option<routerlab_trace::TraceFormat>,
    /// Tokens per block id of Mooncake traces.
    #[arg(
        long,
        value_name = "TOKENS",
        default_value_t = 512,
        help_heading = "Trace"
    )]
    pub trace_block_size: u32,
    /// Send at the trace's timestamps, compressed by F (the default pace, F = 1).
    #[arg(long, value_name = "F", help_heading = "Arrivals")]
    pub speedup: Option<f64>,
    /// Poisson arrivals at R requests/s instead (seeded).
    #[arg(long, value_name = "R", help_heading = "Arrivals")]
    pub rate: Option<f64>,
    /// Closed loop: N requests outstanding instead.
    #[arg(long, value_name = "N", help_heading = "Arrivals")]
    pub concurrency: Option<usize>,
    /// Seed of the Poisson arrivals.
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = "Arrivals")]
    pub seed: u64,
    /// Deprecated (kept until 0.4; hidden): bytes of text per block id for traces without
    /// text. The default, and the rule a replay counts by, is 4 bytes a token of
    /// `--trace-block-size`.
    #[arg(long, value_name = "BYTES", hide = true, help_heading = "Trace")]
    pub block_bytes: Option<usize>,
    /// Output tokens (`max_tokens`) of requests whose trace line gives none
    /// (`--max-tokens` is the old name).
    #[arg(
        long = "output-tokens",
        alias = "max-tokens",
        value_name = "N",
        default_value_t = 128,
        help_heading = "Arrivals"
    )]
    pub output_tokens: u64,
    /// The `model` field sent; a request whose trace line names an `adapter` is sent with
    /// `model` the adapter's name instead, as vLLM serves LoRA adapters.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "routerlab-sim",
        help_heading = "Target"
    )]
    pub model: String,
    /// Seconds to wait for one request.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 600.0,
        help_heading = "Target"
    )]
    pub timeout_s: f64,
    /// SLO: a request meets it with a TTFT of at most MS ms (the report's `timed.slo`).
    #[arg(long, value_name = "MS", help_heading = "Output")]
    pub slo_ttft_ms: Option<f64>,
    /// SLO: a request meets it with a time per output token after the first of at most MS ms.
    #[arg(long, value_name = "MS", help_heading = "Output")]
    pub slo_tpot_ms: Option<f64>,
    /// Report format.
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "human",
        help_heading = "Output"
    )]
    pub format: OutputFormat,
    /// Ask for whole answers instead of server-sent events (TTFT is then the whole time).
    #[arg(long, help_heading = "Target")]
    pub no_stream: bool,
    /// Write one JSON line per request: id, endpoint, error, ttft_ms, e2e_ms.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub requests_out: Option<PathBuf>,
}

/// `routerlab drive`.
pub fn drive(args: DriveArgs) -> Result<(), Failure> {
    let arrivals = routerlab_experiment::arrivals(args.speedup, args.rate, args.concurrency)?;
    let slo = routerlab_experiment::slo(args.slo_ttft_ms, args.slo_tpot_ms)?;
    if !(args.timeout_s.is_finite() && args.timeout_s > 0.0) {
        return Err(Failure::input("--timeout-s must be a positive number"));
    }
    let options = TraceOptions {
        format: args.trace_format,
        trace_block_size: args.trace_block_size,
        ..TraceOptions::default()
    };
    let reader = TraceReader::open(&args.trace, options)?;
    if let Some(out) = &args.requests_out {
        crate::cmd::refuse_input_as_output("--requests-out", out, &[&args.trace])?;
    }
    let source = reader.source();
    let workload = Arc::new(Workload::load(reader, &[])?);
    let measured_arrivals = recorded::arrivals(&arrivals);
    let url = args.url.clone();
    let settings = DriveSettings {
        url: args.url,
        arrivals,
        seed: args.seed,
        block_bytes: args
            .block_bytes
            .unwrap_or(args.trace_block_size as usize * routerlab_core::BYTES_PER_TOKEN as usize)
            .max(1),
        default_max_tokens: args.output_tokens,
        model: args.model,
        timeout: Duration::from_secs_f64(args.timeout_s),
        stream: !args.no_stream,
    };
    let outcomes = runtime()?
        .block_on(routerlab_live::drive::drive(workload.clone(), settings))
        .map_err(Failure::from)?;
    if let Some(path) = &args.requests_out {
        let mut lines = String::new();
        for o in &outcomes {
            let mut line = serde_json::json!({
                "id": o.id,
                "endpoint": o.endpoint,
                "error": o.error,
                "sent_ms": o.sent.as_secs_f64() * 1e3,
                "ttft_ms": o.ttft.as_secs_f64() * 1e3,
                "e2e_ms": o.e2e.as_secs_f64() * 1e3,
            });
            if let Some(prefill) = &o.prefill_endpoint {
                line["prefill_endpoint"] = prefill.clone().into();
            }
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        crate::cmd::write_output(path, lines.as_bytes(), "per-request records")?;
    }
    let failed: Vec<&routerlab_live::drive::Outcome> =
        outcomes.iter().filter(|o| o.error.is_some()).collect();
    if let Some(first) = failed.first()
        && failed.len() == outcomes.len()
    {
        // A report of zeros would pass for a measurement; there is none.
        return Err(Failure::NothingServed(format!(
            "every one of the {} requests failed, so there is nothing to report; request {}: {}",
            outcomes.len(),
            first.id,
            one_line(first.error.as_deref().unwrap_or_default())
        )));
    }
    if let Some(first) = failed.first() {
        eprintln!(
            "warning: {} of {} requests failed (counted as rejected); request {}: {}",
            failed.len(),
            outcomes.len(),
            first.id,
            one_line(first.error.as_deref().unwrap_or_default())
        );
    }
    let (mut report, endpoints) = routerlab_live::drive::report(&workload, &outcomes, slo);
    report.measured = Some(DrivenRun {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        url,
        trace: recorded::trace(source, &Default::default()),
        arrivals: measured_arrivals,
        endpoints: endpoints.clone(),
    });
    let text = match args.format {
        OutputFormat::Json => {
            serde_json::to_string_pretty(&report).expect("a report serialises") + "\n"
        }
        OutputFormat::Yaml => serde_yaml::to_string(&report).expect("a report serialises"),
        OutputFormat::Csv => {
            return Err(Failure::input("drive prints human, json or yaml"));
        }
        OutputFormat::Human => report.to_human(&endpoints),
    };
    crate::cmd::print_stdout(&text, "the report")
}
