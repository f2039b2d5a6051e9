//! Per-request records, for whoever wants them: `--requests-out` is one observer, a plot of
//! running requests over time would be another. The timed loop calls an observer as each
//! request finishes and never buffers records itself. Both drivers also tell it how far
//! they are, which is all a progress bar needs.

use std::io::Write;
use std::path::PathBuf;

pub use routerlab_report::records::{RequestRecord, RoutedRecord};
use serde::Serialize;

use crate::SimError;

/// How often, in requests, the drivers tell the observer how far they are.
pub const PROGRESS_EVERY: u64 = 1024;

/// Receives each request as it finishes, and how far the run is.
pub trait Observer {
    /// One finished request (timed replay); an error stops the run.
    fn finished(&mut self, record: &RequestRecord) -> Result<(), SimError>;

    /// Whether [`Observer::finished`] wants records (building them costs a little).
    fn wants_finished(&self) -> bool {
        true
    }

    /// One decided request (time-free replay); an error stops the run.
    fn routed(&mut self, _record: &RoutedRecord) -> Result<(), SimError> {
        Ok(())
    }

    /// Whether [`Observer::routed`] wants records (building them costs a little).
    fn wants_routed(&self) -> bool {
        false
    }

    /// `done` requests of the workload are through (decided in the time-free replay,
    /// finished in the timed one); told every so often, for a progress bar.
    fn progress(&mut self, _done: u64) {}

    /// The run will see `requests` requests in all: told once, when a run that reads the
    /// trace as it goes learns it (a first pass over the file), for a progress bar's length.
    fn expected(&mut self, _requests: u64) {}
}

/// Observes nothing.
pub struct NoObserver;

impl Observer for NoObserver {
    fn finished(&mut self, _record: &RequestRecord) -> Result<(), SimError> {
        Ok(())
    }

    fn wants_finished(&self) -> bool {
        false
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

impl<W: Write> JsonLines<W> {
    fn line(&mut self, record: &impl Serialize) -> Result<(), SimError> {
        serde_json::to_writer(&mut self.out, record)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(|e| self.io_error(e))
    }
}

impl<W: Write> Observer for JsonLines<W> {
    fn finished(&mut self, record: &RequestRecord) -> Result<(), SimError> {
        self.line(record)
    }

    fn routed(&mut self, record: &RoutedRecord) -> Result<(), SimError> {
        self.line(record)
    }

    fn wants_routed(&self) -> bool {
        true
    }
}

/// Two observers as one: each record and each progress report goes to both, in order.
pub struct Tee<'a>(pub &'a mut dyn Observer, pub &'a mut dyn Observer);

impl Observer for Tee<'_> {
    fn finished(&mut self, record: &RequestRecord) -> Result<(), SimError> {
        self.0.finished(record)?;
        self.1.finished(record)
    }

    fn progress(&mut self, done: u64) {
        self.0.progress(done);
        self.1.progress(done);
    }

    fn expected(&mut self, requests: u64) {
        self.0.expected(requests);
        self.1.expected(requests);
    }

    fn routed(&mut self, record: &RoutedRecord) -> Result<(), SimError> {
        self.0.routed(record)?;
        self.1.routed(record)
    }

    fn wants_routed(&self) -> bool {
        self.0.wants_routed() || self.1.wants_routed()
    }

    fn wants_finished(&self) -> bool {
        self.0.wants_finished() || self.1.wants_finished()
    }
}

/// Keeps every finished request in memory, for what needs the whole run at the end (plots
/// of running requests and queues over time).
#[derive(Debug, Default)]
pub struct Recorder {
    /// The records, in the order requests finished.
    pub records: Vec<RequestRecord>,
}

impl Observer for Recorder {
    fn finished(&mut self, record: &RequestRecord) -> Result<(), SimError> {
        self.records.push(record.clone());
        Ok(())
    }
}
