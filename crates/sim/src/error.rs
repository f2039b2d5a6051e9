//! Why a run stopped. Messages name concepts (the trace's arrival times, the per-request
//! output file), never command-line flags: the CLI adds those, and maps each variant to an
//! exit code in one place.

use std::path::PathBuf;

use routerlab_host::PluginError;
use routerlab_route::{RequestSeq, RouteError};
use routerlab_trace::TraceError;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The trace is bad.
    #[error("{0}")]
    Trace(#[from] TraceError),
    /// The settings cannot work with this trace or fleet.
    #[error("{0}")]
    Input(String),
    /// A plugin could not be found, loaded or created.
    #[error("{0}")]
    Load(PluginError),
    /// A plugin failed while routing a request.
    #[error("{location}: {source}")]
    Plugin {
        /// Which request, `request N (line L)`, or `start`.
        location: String,
        /// The plugin's failure.
        source: PluginError,
    },
    /// A timed replay that follows the trace's clock met a request without a timestamp.
    #[error("{}:{line}: the trace has no arrival times", path.display())]
    NoArrivalTimes {
        /// The trace.
        path: std::path::PathBuf,
        /// The first line without one.
        line: usize,
    },
    /// An output could not be written.
    #[error("{}: cannot write {what}: {source}", path.display())]
    Io {
        /// What was being written.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl From<RouteError> for SimError {
    /// A fleet or replica count out of range is a settings fault; a matcher that fails
    /// when told the endpoints is a plugin failure at `start`.
    fn from(e: RouteError) -> SimError {
        match e {
            RouteError::Start(source) => SimError::plugin("start", source),
            other => SimError::Input(other.to_string()),
        }
    }
}

impl SimError {
    /// A failure of the scaler, or of a router told of an endpoint the scaler started or
    /// stopped.
    pub fn scaler(source: PluginError) -> SimError {
        SimError::plugin("scaling", source)
    }

    /// A plugin failure at `location`.
    pub fn plugin(location: impl Into<String>, source: PluginError) -> SimError {
        SimError::Plugin {
            location: location.into(),
            source,
        }
    }
}

/// Where request `seq` of `line` sits, for error messages.
pub fn request_location(seq: RequestSeq, line: usize) -> String {
    format!("request {} (line {line})", seq.0)
}
