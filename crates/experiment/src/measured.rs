//! The run's traces as files or measured runs: a measured run given as the trace
//! (`--trace RUN`) or the warm-up (`--warm-up RUN`) is made a trace by the calibrate crate,
//! so every format `validate` reads replays directly.

use std::path::Path;
use std::sync::Arc;

use routerlab_calibrate::as_trace::{RUN_TRACE_BLOCK_TOKENS, RunTrace, run_trace};
use routerlab_sim::scenario::WarmUp;
use routerlab_trace::{TraceFormat, TraceOptions};

use crate::ExperimentError;
use crate::file::Experiment;
use crate::resolve::Run;

/// `path` as a measured run's trace (with its LMBench workload, when `opts` gives one),
/// unless a trace format was given or it is not one.
fn measured(path: &Path, opts: &Experiment) -> Result<Option<RunTrace>, ExperimentError> {
    if opts.trace_format.is_some() {
        return Ok(None);
    }
    run_trace(
        path,
        None,
        opts.lmbench_workload.as_deref(),
        opts.lmbench_warm_up.as_deref(),
    )
    .map_err(|e| ExperimentError::invalid(e.to_string()))
}

/// How a measured run's trace is read: Mooncake's form in its own blocks.
fn as_run(options: &mut TraceOptions) {
    options.format = Some(TraceFormat::Mooncake);
    options.trace_block_size = RUN_TRACE_BLOCK_TOKENS;
}

/// What reading `trace` has to say: requests left out, a partial log.
fn note(trace: &RunTrace) -> Option<String> {
    let notes: Vec<&str> = [&trace.run.left_out, &trace.run.partial]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    (!notes.is_empty()).then(|| format!("{}: {}", trace.run.label, notes.join("; ")))
}

impl Run {
    /// This run with its trace, and its warm-up trace when `opts` gives one, each made from
    /// the measured run it names if it names one (a directory in LLMServingSim's layout,
    /// or a file a benchmark tool wrote), unless a trace format was given.
    pub(crate) fn read_traces(mut self, opts: &Experiment) -> Result<Run, ExperimentError> {
        let mut notes = Vec::new();
        // The run's own warm-up, replayed after the one given (`warm_up`).
        let mut own_warm_up = None;
        match measured(&self.scenario.trace, opts)? {
            Some(trace) => {
                as_run(&mut self.scenario.trace_options);
                notes.extend(note(&trace));
                self.scenario.trace_text = Some(Arc::from(trace.text));
                own_warm_up = trace.warm_up.map(|text| WarmUp {
                    trace: self.scenario.trace.clone(),
                    options: self.scenario.trace_options.clone(),
                    text: Some(Arc::from(text)),
                });
            }
            None => {
                let lmbench = [
                    ("--lmbench-workload", &opts.lmbench_workload),
                    ("--lmbench-warm-up", &opts.lmbench_warm_up),
                ];
                if let Some((flag, Some(file))) = lmbench.iter().find(|(_, f)| f.is_some()) {
                    return Err(ExperimentError::invalid(format!(
                        "{flag} {}: {} is not a measured run read as one (an LMBench CSV)",
                        file.display(),
                        self.scenario.trace.display()
                    )));
                }
            }
        }
        if let Some(path) = &opts.warm_up {
            let mut warm = WarmUp {
                trace: path.clone(),
                options: self.scenario.trace_options.clone(),
                text: None,
            };
            warm.options.format = opts.trace_format;
            // A run given as the warm-up is replayed as logged, without its own warm-up.
            if let Some(trace) = measured(path, opts)? {
                as_run(&mut warm.options);
                notes.extend(note(&trace).map(|n| format!("warm-up {n}")));
                warm.text = Some(Arc::from(trace.text));
            }
            self.scenario.warm_up.push(warm);
        }
        self.scenario.warm_up.extend(own_warm_up);
        self.trace_note = (!notes.is_empty()).then(|| notes.join("\n"));
        Ok(self)
    }
}
