//! Runs described by experiments, driven over loaded workloads on threads: what
//! `replay`'s comparisons and sweeps share. A run is resolved and its plugins created
//! ([`prepare`]), then every prepared run is replayed by the same drivers one replay uses
//! ([`run_all`]), `jobs` at a time; the outcomes come back in run order whatever order they
//! finished in, so a batch's reports are the same for any `jobs`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use routerlab_host::SearchPath;
use routerlab_sim::observer::{NoObserver, Observer, Recorder, RequestRecord, Tee};
use routerlab_sim::{Replicas, Report, SimError, timefree};
use routerlab_trace::Workload;

use crate::{Experiment, ExperimentError, Run, resolve};

/// Why one run of a batch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Its description does not make a run.
    #[error(transparent)]
    Described(#[from] ExperimentError),
    /// Its plugins could not be created, or its replay failed.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// One run ready to go: its resolved settings, its router replicas (plugins created), and
/// which of the loaded workloads it replays.
pub struct Prepared {
    /// The run's name in messages and reports.
    pub label: String,
    /// Its resolved settings.
    pub run: Run,
    replicas: Replicas,
    /// The index of its workload in the slice given to [`run_all`].
    pub workload: usize,
}

/// Resolves `experiment` into a run and creates its routers from the plugin search path.
pub fn prepare(
    label: String,
    experiment: &Experiment,
    search: &SearchPath,
    workload: usize,
) -> Result<Prepared, RunError> {
    let run = resolve(experiment)?;
    let replicas = run.routers(search)?;
    Ok(Prepared {
        label,
        run,
        replicas,
        workload,
    })
}

/// What one run produced.
pub struct Outcome {
    /// Its report.
    pub report: Report,
    /// Its finished requests, kept only when asked for.
    pub records: Vec<RequestRecord>,
}

/// Watches runs go: one observer per run, made when the run starts and given back when
/// it ends (a terminal's progress bars; [`Unwatched`] for none).
pub trait Watch: Sync {
    /// The observer of one run.
    type Run<'a>: Observer
    where
        Self: 'a;
    /// The observer of the run `label`, of `requests` requests.
    fn start(&self, label: &str, requests: u64) -> Self::Run<'_>;
    /// The run is over.
    fn end(&self, run: Self::Run<'_>);
}

/// No watching.
pub struct Unwatched;

impl Watch for Unwatched {
    type Run<'a> = NoObserver;
    fn start(&self, _label: &str, _requests: u64) -> NoObserver {
        NoObserver
    }
    fn end(&self, _run: NoObserver) {}
}

/// The run of a batch that failed first, in run order, and why.
#[derive(Debug)]
pub struct Failed {
    /// Its index among the prepared runs.
    pub index: usize,
    /// Why.
    pub error: Box<RunError>,
}

/// Replays every prepared run over its workload, `jobs` at a time (at least one), keeping
/// each run's finished requests when `keep_records`. The first failure in run order is
/// returned.
pub fn run_all<W: Watch>(
    prepared: &mut [Prepared],
    workloads: &[Workload],
    jobs: usize,
    watch: &W,
    keep_records: bool,
) -> Result<Vec<Outcome>, Failed> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<&mut Prepared>>> =
        prepared.iter_mut().map(|p| Mutex::new(Some(p))).collect();
    let results: Vec<Mutex<Option<Result<Outcome, RunError>>>> =
        slots.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, slots.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = slots.get(i) else { break };
                    let job = slot.lock().expect("no panic holds it").take();
                    let Some(job) = job else { continue };
                    let workload = &workloads[job.workload];
                    let mut observer = watch.start(&job.label, workload.requests.len() as u64);
                    let outcome = run_one(job, workload, &mut observer, keep_records);
                    watch.end(observer);
                    *results[i].lock().expect("no panic holds it") = Some(outcome);
                }
            });
        }
    });
    let mut outcomes = Vec::with_capacity(results.len());
    for (index, result) in results.into_iter().enumerate() {
        let result = result.into_inner().expect("no panic holds it");
        match result.expect("every run ran") {
            Ok(outcome) => outcomes.push(outcome),
            Err(error) => {
                return Err(Failed {
                    index,
                    error: Box::new(error),
                });
            }
        }
    }
    Ok(outcomes)
}

/// One run's replay, by the driver its settings call for.
fn run_one(
    job: &mut Prepared,
    workload: &Workload,
    observer: &mut dyn Observer,
    keep_records: bool,
) -> Result<Outcome, RunError> {
    let mut recorder = Recorder::default();
    let report = match &job.run.timed {
        None => {
            timefree::replay_workload(workload, &mut job.replicas, job.run.cache_blocks, observer)?
        }
        Some(_) if keep_records => job.run.replay_loaded(
            workload,
            &mut job.replicas,
            &mut Tee(observer, &mut recorder),
        )?,
        Some(_) => job
            .run
            .replay_loaded(workload, &mut job.replicas, observer)?,
    };
    Ok(Outcome {
        report,
        records: recorder.records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Layers, parse_mapping};

    fn experiment(yaml: &str) -> Experiment {
        Layers::new()
            .over(parse_mapping(yaml).unwrap())
            .experiment()
            .unwrap()
    }

    #[test]
    fn a_run_that_cannot_be_prepared_says_why_by_kind() {
        let empty = SearchPath::new(vec![]);
        let described = prepare(
            "a".into(),
            &experiment("{matcher: lcp, trace: t, rate: 3}"),
            &empty,
            0,
        );
        assert!(matches!(described, Err(RunError::Described(_))));
        let missing = prepare(
            "b".into(),
            &experiment("{matcher: no-such-plugin, trace: t}"),
            &empty,
            0,
        );
        match missing {
            Err(RunError::Sim(e)) => assert!(e.to_string().contains("no-such-plugin"), "{e}"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a plugin found on an empty search path"),
        }
    }

    #[test]
    fn an_empty_batch_has_no_outcomes() {
        let outcomes = run_all(&mut [], &[], 4, &Unwatched, false).unwrap();
        assert!(outcomes.is_empty());
    }
}
