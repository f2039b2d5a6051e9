//! Every failure the command line reports, and its exit code: decided here and nowhere
//! else, so the same failure always exits the same way.
//!
//! - 0: success.
//! - 1: the run started and could not finish: a plugin failed while routing.
//! - 2: bad input: flags, experiment file, trace, plugin or plugin config. Nothing ran.
//! - 3: an output (the report, `--requests-out`, a plot, a shard, a generated trace) could
//!   not be written. The run's numbers exist; the disk or the pipe refused them.

use std::fmt;
use std::path::PathBuf;

use routerlab_host::PluginError;
use routerlab_live::LiveError;
use routerlab_route::RouteError;
use routerlab_sim::SimError;
use routerlab_trace::TraceError;

/// Exit code of a run that could not finish.
pub const RUN_FAILED: u8 = 1;
/// Exit code of bad input.
pub const BAD_INPUT: u8 = 2;
/// Exit code of an output that could not be written.
pub const OUTPUT_FAILED: u8 = 3;
/// `snapshot --check` found statistics that moved.
pub const DIFFERS: u8 = 4;

/// A failure, as the user sees it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Failure {
    /// Flags or the experiment file are wrong; the message names the flag or key.
    Input(String),
    /// The trace is bad.
    Trace(TraceError),
    /// A plugin could not be found, loaded or created.
    Plugin(PluginError),
    /// The run failed.
    Run(SimError),
    /// A live command (`serve`, `engine`, `drive`) stopped.
    Live(LiveError),
    /// One run of a comparison or sweep failed.
    InRun {
        /// `policy` (a comparison's column) or `run` (a sweep's row).
        kind: &'static str,
        /// Its label.
        label: String,
        /// What failed.
        failure: Box<Failure>,
    },
    /// A check found differences (the message lists them).
    Differs(String),
    /// The run went through and gave nothing to report (`drive` with every request failed);
    /// the message says why.
    NothingServed(String),
    /// An output could not be written.
    Output {
        /// What was being written.
        what: &'static str,
        /// Where (`-` for stdout).
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl Failure {
    /// Bad flags or settings.
    pub fn input(message: impl Into<String>) -> Failure {
        Failure::Input(message.into())
    }

    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Input(_) | Failure::Trace(_) | Failure::Plugin(_) => BAD_INPUT,
            Failure::Run(e) => match e {
                SimError::Trace(_) | SimError::Input(_) | SimError::NoArrivalTimes { .. } => {
                    BAD_INPUT
                }
                SimError::Io { .. } => OUTPUT_FAILED,
                // A plugin failed mid-run, or a failure added later: the run did not finish.
                _ => RUN_FAILED,
            },
            Failure::Live(e) => match e {
                // The plugins could not be loaded, as for a replay.
                LiveError::Settings(_)
                | LiveError::Trace(_)
                | LiveError::PluginHost(_)
                | LiveError::WithoutKvEvents(_) => BAD_INPUT,
                // Could not listen, a request task failed, or a failure added later.
                _ => RUN_FAILED,
            },
            Failure::InRun { failure, .. } => failure.exit_code(),
            Failure::Output { .. } => OUTPUT_FAILED,
            Failure::Differs(_) => DIFFERS,
            Failure::NothingServed(_) => RUN_FAILED,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Input(message)
            | Failure::Differs(message)
            | Failure::NothingServed(message) => f.write_str(message),
            Failure::Trace(e) => write!(f, "{e}"),
            Failure::Plugin(e) => write!(f, "{e}"),
            // The library names concepts; here they get the flags that set them.
            Failure::Run(SimError::NoArrivalTimes { path, line }) => write!(
                f,
                "{}:{line}: the trace has no arrival times; pass --rate R (Poisson) or --concurrency N (closed loop)",
                path.display()
            ),
            Failure::Run(e) => write!(f, "{e}"),
            Failure::Live(e) => write!(f, "{e}"),
            Failure::InRun {
                kind,
                label,
                failure,
            } => write!(f, "{kind} `{label}`: {failure}"),
            Failure::Output { what, path, source } => {
                write!(f, "{}: cannot write {what}: {source}", path.display())
            }
        }
    }
}

impl From<routerlab_calibrate::CalibrateError> for Failure {
    fn from(e: routerlab_calibrate::CalibrateError) -> Failure {
        match e {
            routerlab_calibrate::CalibrateError::Input(message) => Failure::Input(message),
            routerlab_calibrate::CalibrateError::Trace(e) => e.into(),
            routerlab_calibrate::CalibrateError::Sim(e) => e.into(),
            other => Failure::Input(other.to_string()),
        }
    }
}

impl From<SimError> for Failure {
    fn from(e: SimError) -> Failure {
        match e {
            // A plugin that cannot be loaded is bad input, reported as the host says it.
            SimError::Load(e) => Failure::Plugin(e),
            e => Failure::Run(e),
        }
    }
}

impl From<RouteError> for Failure {
    fn from(e: RouteError) -> Failure {
        Failure::Run(SimError::from(e))
    }
}

impl From<LiveError> for Failure {
    fn from(e: LiveError) -> Failure {
        Failure::Live(e)
    }
}

impl From<TraceError> for Failure {
    fn from(e: TraceError) -> Failure {
        Failure::Trace(e)
    }
}

impl From<PluginError> for Failure {
    fn from(e: PluginError) -> Failure {
        Failure::Plugin(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_failure_always_has_the_same_code() {
        let io = || std::io::Error::other("disk full");
        let written_by_the_run = Failure::Run(SimError::Io {
            what: "per-request records",
            path: "out.jsonl".into(),
            source: io(),
        });
        let written_after = Failure::Output {
            what: "per-request records",
            path: "out.jsonl".into(),
            source: io(),
        };
        assert_eq!(written_by_the_run.exit_code(), OUTPUT_FAILED);
        assert_eq!(written_after.exit_code(), OUTPUT_FAILED);
        assert_eq!(written_by_the_run.to_string(), written_after.to_string());
        assert_eq!(Failure::input("x").exit_code(), BAD_INPUT);
        let no_times = Failure::Run(SimError::NoArrivalTimes {
            path: "t.jsonl".into(),
            line: 3,
        });
        assert_eq!(no_times.exit_code(), BAD_INPUT);
        assert!(no_times.to_string().contains("pass --rate R"));
    }

    #[test]
    fn a_live_failure_exits_by_what_went_wrong() {
        let settings = Failure::from(LiveError::Settings("--speedup must be positive".into()));
        assert_eq!(settings.exit_code(), BAD_INPUT);
        let trace = Failure::from(LiveError::Trace("no arrival times".into()));
        assert_eq!(trace.exit_code(), BAD_INPUT);
        let host = Failure::from(LiveError::PluginHost("exit status 2".into()));
        assert_eq!(host.exit_code(), BAD_INPUT);
        let run = Failure::from(LiveError::Run("a request task failed: panic".into()));
        assert_eq!(run.exit_code(), RUN_FAILED);
        let listen = Failure::from(LiveError::Listen(std::io::Error::other("no")));
        assert_eq!(listen.exit_code(), RUN_FAILED);
        assert_eq!(listen.to_string(), "cannot listen: no");
        let without = Failure::from(LiveError::WithoutKvEvents("--kv-events"));
        assert_eq!(without.exit_code(), BAD_INPUT);
    }
}
