//! `--plot DIR` for `replay` and `compare`: where the pictures go, checked before anything
//! runs, and the one call that draws them after.

use std::path::Path;

use routerlab_plot::{Curves, Series, write_all};
use routerlab_report::Report;
use routerlab_report::compare::Comparison;
use routerlab_report::records::RequestRecord;

use crate::exit::Failure;

/// Creates `dir` if missing; refuses a plot directory that is the trace file itself or a
/// file, before any run starts.
pub fn check_dir(dir: &Path, trace: &Path) -> Result<(), Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(Failure::input(format!(
            "--plot {}: exists and is not a directory",
            dir.display()
        )));
    }
    if same_file(dir, trace) {
        return Err(Failure::input(format!(
            "--plot {}: is the trace; plots go into a directory",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        Failure::input(format!(
            "--plot {}: cannot create the directory: {e}",
            dir.display()
        ))
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The curves of a timed run's records (`None` for a time-free run, which has none).
pub fn curves_of(report: &Report, records: &[RequestRecord]) -> Option<Curves> {
    let timed = report.timed.as_ref()?;
    let names: Vec<String> = timed.per_endpoint.iter().map(|e| e.name.clone()).collect();
    Some(Curves::from_records(records, &names))
}

/// Draws a scaled run's endpoints over time into `dir` (nothing for a fixed fleet) and
/// says on stderr where.
pub fn write_scaling(dir: &Path, report: &Report) -> Result<(), Failure> {
    let Some(timed) = &report.timed else {
        return Ok(());
    };
    let Some(scaling) = &timed.scaling else {
        return Ok(());
    };
    let path = routerlab_plot::write_scaling(dir, scaling, timed.makespan_s).map_err(|e| {
        Failure::Output {
            what: "a plot",
            path: e.path.clone(),
            source: std::io::Error::other(e.cause),
        }
    })?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Draws the comparison's plots into `dir` and says on stderr what was written; `curves`
/// are by label.
pub fn write_plots(
    dir: &Path,
    comparison: &Comparison,
    curves: &[(String, Option<Curves>)],
) -> Result<(), Failure> {
    let series: Vec<Series<'_>> = comparison
        .policies
        .iter()
        .map(|entry| Series {
            label: &entry.label,
            report: &entry.report,
            curves: curves
                .iter()
                .find(|(label, _)| *label == entry.label)
                .and_then(|(_, c)| c.as_ref()),
        })
        .collect();
    let written = write_all(dir, &series).map_err(|e| Failure::Output {
        what: "a plot",
        path: e.path.clone(),
        source: std::io::Error::other(e.cause),
    })?;
    if series.iter().all(|s| s.curves.is_none()) {
        eprintln!(
            "note: a time-free run has no clock, so only {} is plotted (add --timing trace for latencies and queues)",
            routerlab_plot::HITS
        );
    }
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    write_sync(dir, comparison)
}

/// With replicas sharing state in any run (a sweep over sync settings), what it bought:
/// `sync.svg`.
fn write_sync(dir: &Path, comparison: &Comparison) -> Result<(), Failure> {
    let reports = comparison.policies.iter().map(|entry| &entry.report);
    if !reports
        .clone()
        .any(|r| r.timed.as_ref().is_some_and(|t| t.sync.is_some()))
    {
        return Ok(());
    }
    let points: Vec<routerlab_plot::SyncPoint> = reports
        .filter_map(|report| {
            let timed = report.timed.as_ref()?;
            Some(routerlab_plot::SyncPoint {
                replicas: (report.run.as_ref())
                    .and_then(|run| run.router_replicas.as_ref())
                    .map_or(1, |r| r.count),
                lag_ms: timed.sync.as_ref().map(|s| s.mean_lag_ms),
                hit_ratio: timed.hit_ratio,
                ttft_p50_ms: timed.ttft.as_ref().map_or(0.0, |l| l.p50),
                imbalance: report.nreq.max_over_mean,
            })
        })
        .collect();
    let path = routerlab_plot::write_sync(dir, &points).map_err(|e| Failure::Output {
        what: "a plot",
        path: e.path.clone(),
        source: std::io::Error::other(e.cause),
    })?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
