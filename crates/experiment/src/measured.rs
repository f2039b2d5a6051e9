//! A measured run given as a run's trace (`--trace RUN`): every format `validate` reads
//! replays directly, as the calibrate crate makes it a trace.

use std::sync::Arc;

use routerlab_calibrate::as_trace::{RUN_TRACE_BLOCK_TOKENS, run_trace};
use routerlab_trace::TraceFormat;

use crate::ExperimentError;
use crate::resolve::Run;

impl Run {
    /// This run with its trace made from the measured run it names, if it names one (a
    /// directory in LLMServingSim's layout, or a file a benchmark tool wrote), unless a
    /// trace format was given (`forced`).
    pub(crate) fn measured_run_as_trace(mut self, forced: bool) -> Result<Run, ExperimentError> {
        if forced {
            return Ok(self);
        }
        let Some(trace) = run_trace(&self.scenario.trace, None)
            .map_err(|e| ExperimentError::invalid(e.to_string()))?
        else {
            return Ok(self);
        };
        let options = &mut self.scenario.trace_options;
        options.format = Some(TraceFormat::Mooncake);
        options.trace_block_size = RUN_TRACE_BLOCK_TOKENS;
        self.scenario.trace_text = Some(Arc::from(trace.text));
        let notes: Vec<String> = [trace.run.left_out, trace.run.partial]
            .into_iter()
            .flatten()
            .collect();
        self.trace_note =
            (!notes.is_empty()).then(|| format!("{}: {}", trace.run.label, notes.join("; ")));
        Ok(self)
    }
}
