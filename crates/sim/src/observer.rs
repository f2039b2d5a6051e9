//! Per-request records, for whoever wants them: `--requests-out` is one observer, a plot of
//! running requests over time would be another. The timed loop calls an observer as each
//! request finishes and never buffers records itself.

use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::SimError;

/// One finished request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestRecord {
    /// Request id (1-based position in the trace).
    pub id: u64,
    /// Line in the trace.
    pub line: usize,
    /// Arrival, seconds.
    pub arrival_s: f64,
    /// Endpoint name.
    pub endpoint: Option<String>,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Prompt tokens served from the engine's prefix cache.
    pub hit_tokens: u32,
    /// Arrival to first scheduled, ms.
    pub queue_ms: f64,
    /// Arrival to first token, ms.
    pub ttft_ms: f64,
    /// Finish, seconds.
    pub finish_s: f64,
}

/// Receives each request as it finishes.
pub trait Observer {
    /// One finished request; an error stops the run.
    fn finished(&mut self, record: &RequestRecord) -> Result<(), SimError>;
}

/// Observes nothing.
pub struct NoObserver;

impl Observer for NoObserver {
    fn finished(&mut self, _record: &RequestRecord) -> Result<(), SimError> {
        Ok(())
    }
}

/// Writes one JSON line per finished request.
pub struct JsonLines<W: Write> {
    out: W,
    /// Where `out` goes, for error messages.
    path: PathBuf,
}

impl<W: Write> JsonLines<W> {
    /// Lines to `out`, which writes to `path`.
    pub fn new(out: W, path: PathBuf) -> JsonLines<W> {
        JsonLines { out, path }
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, SimError> {
        match self.out.flush() {
            Ok(()) => Ok(self.out),
            Err(source) => Err(self.io_error(source)),
        }
    }

    fn io_error(&self, source: std::io::Error) -> SimError {
        SimError::Io {
            what: "per-request records",
            path: self.path.clone(),
            source,
        }
    }
}

impl<W: Write> Observer for JsonLines<W> {
    fn finished(&mut self, record: &RequestRecord) -> Result<(), SimError> {
        serde_json::to_writer(&mut self.out, record)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(|e| self.io_error(e))
    }
}
