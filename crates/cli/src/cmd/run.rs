//! The run pipeline every command that replays shares: a run resolved from its
//! description and its plugins created (`prepare`), and prepared runs driven over loaded
//! workloads on threads (`run_all`) by the same drivers `replay` uses. `replay`, `compare`,
//! `sweep` and `snapshot` build on it; none of them imports another for it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use routerlab_sim::observer::{Recorder, RequestRecord, Tee};
use routerlab_sim::timed::replay_timed;
use routerlab_sim::{Replicas, Report, timefree};
use routerlab_trace::Workload;

use routerlab_experiment::{Experiment, Run, resolve};

use crate::exit::Failure;
use crate::progress::Bars;

/// One run ready to go: its resolved settings, its router (plugins created), and which of
/// the loaded workloads it replays.
pub(crate) struct Prepared {
    /// `policy` or `run`, for messages.
    pub(crate) kind: &'static str,
    pub(crate) label: String,
    pub(crate) spec: Run,
    pub(crate) replicas: Replicas,
    pub(crate) workload: usize,
}

/// What one policy's run produced.
pub(crate) struct Outcome {
    pub(crate) report: Report,
    /// Finished requests, kept only when plots are asked for.
    pub(crate) records: Vec<RequestRecord>,
}

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

/// Resolves a run's settings and creates its plugins and router; failures name the run.
pub(crate) fn prepare(
    kind: &'static str,
    label: String,
    experiment: &Experiment,
    workload: usize,
) -> Result<Prepared, Failure> {
    let in_run = |failure: Failure| Failure::InRun {
        kind,
        label: label.clone(),
        failure: Box::new(failure),
    };
    let spec = resolve(experiment).map_err(|e| in_run(e.into()))?;
    let replicas = crate::cmd::build_replicas(&spec).map_err(in_run)?;
    Ok(Prepared {
        kind,
        label,
        spec,
        replicas,
        workload,
    })
}

/// Runs every prepared run over its workload, `jobs` at a time, in any order; the
/// outcomes come back in run order. The first failure (in run order) is returned.
pub(crate) fn run_all(
    prepared: &mut [Prepared],
    workloads: &[Workload],
    jobs: usize,
    bars: &Bars,
    keep_records: bool,
) -> Result<Vec<Outcome>, Failure> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<&mut Prepared>>> =
        prepared.iter_mut().map(|p| Mutex::new(Some(p))).collect();
    let results: Vec<Mutex<Option<Result<Outcome, Failure>>>> =
        slots.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(slots.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = slots.get(i) else { break };
                    let job = slot.lock().expect("no panic holds it").take();
                    let Some(job) = job else { continue };
                    let workload = &workloads[job.workload];
                    let total = workload.requests.len() as u64;
                    let mut bar = bars.bar(&job.label, Some(total));
                    let outcome = run_one(job, workload, &mut bar, keep_records);
                    bar.finish();
                    *results[i].lock().expect("no panic holds it") = Some(outcome);
                }
            });
        }
    });
    let mut outcomes = Vec::with_capacity(results.len());
    for (result, p) in results.into_iter().zip(prepared.iter()) {
        let result = result.into_inner().expect("no panic holds it");
        let outcome = result
            .expect("every policy ran")
            .map_err(|failure| Failure::InRun {
                kind: p.kind,
                label: p.label.clone(),
                failure: Box::new(failure),
            })?;
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// One policy's replay, by the same driver `replay` uses for its settings.
fn run_one(
    job: &mut Prepared,
    workload: &Workload,
    bar: &mut crate::progress::Bar<'_>,
    keep_records: bool,
) -> Result<Outcome, Failure> {
    let mut recorder = Recorder::default();
    let report = match &job.spec.timed {
        None => timefree::replay_workload(workload, &mut job.replicas, job.spec.cache_blocks, bar)?,
        Some(timed) if keep_records => replay_timed(
            workload,
            &mut job.replicas,
            timed,
            &mut Tee(bar, &mut recorder),
        )?,
        Some(timed) => replay_timed(workload, &mut job.replicas, timed, bar)?,
    };
    Ok(Outcome {
        report,
        records: recorder.records,
    })
}
