//! What the commands that replay share beyond the library's batch of runs
//! ([`routerlab_experiment::batch`]): the watchdog on plugin calls, and a batch's failures
//! named by their run.

use std::sync::atomic::Ordering;

use routerlab_experiment::Experiment;
use routerlab_experiment::batch::{self, Failed, Outcome, Prepared, RunError};
use routerlab_host::SearchPath;
use routerlab_trace::Workload;

use crate::exit::Failure;
use crate::progress::Bars;

/// The deadline the watchdog was started with, for its message.
static DEADLINE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Starts the watchdog on plugin calls for `timeout_ms` (none for 0): a call that has not
/// returned by then ends the process with exit 1 and one line naming it. The stuck thread
/// cannot be stopped, so nothing else could end the run.
pub(crate) fn watch_plugins(timeout_ms: Option<u64>) {
    let ms = timeout_ms.unwrap_or(routerlab_experiment::DEFAULT_PLUGIN_TIMEOUT_MS);
    if ms == 0 {
        return;
    }
    DEADLINE_MS.store(ms, Ordering::Relaxed);
    routerlab_os::watchdog::start(std::time::Duration::from_millis(ms), |stuck| {
        let line = if stuck.line > 0 {
            format!(", routing the request on trace line {}", stuck.line)
        } else {
            String::new()
        };
        eprintln!(
            "error: plugin `{}` did not return from `{}` within {} ms{line} (--plugin-timeout-ms sets the deadline)",
            stuck.plugin,
            stuck.call,
            DEADLINE_MS.load(Ordering::Relaxed)
        );
        std::process::exit(i32::from(crate::exit::RUN_FAILED));
    });
}

/// Resolves a run's settings and creates its plugins; a failure names the run as `kind`
/// (`policy` in a comparison, `run` in a sweep) and `label`.
pub(crate) fn prepare(
    kind: &'static str,
    label: String,
    experiment: &Experiment,
) -> Result<Prepared, Failure> {
    batch::prepare(label.clone(), experiment, &SearchPath::from_env(), 0)
        .map_err(|error| in_run(kind, label, error))
}

/// Runs every prepared run, `jobs` at a time, under `bars`; a failure names its run.
pub(crate) fn run_all(
    kind: &'static str,
    prepared: &mut [Prepared],
    workloads: &[Workload],
    jobs: usize,
    bars: &Bars,
    keep_records: bool,
) -> Result<Vec<Outcome>, Failure> {
    batch::run_all(prepared, workloads, jobs, bars, keep_records)
        .map_err(|Failed { index, error }| in_run(kind, prepared[index].label.clone(), *error))
}

fn in_run(kind: &'static str, label: String, error: RunError) -> Failure {
    let failure = match error {
        RunError::Described(e) => e.into(),
        RunError::Sim(e) => e.into(),
        other => Failure::Input(other.to_string()),
    };
    Failure::InRun {
        kind,
        label,
        failure: Box::new(failure),
    }
}
