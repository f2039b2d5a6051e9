//! `routerlab validate --stack DIR=CONFIG --stack DIR=CONFIG`: two serving stacks measured
//! at the same load points (a run of one file name in each directory), each point replayed
//! as each stack's experiment file describes its fleet (policy, engines, tiers, the routing
//! path's hop) on that point's own measured requests. Per point: the measured ratio B/A of
//! a latency, the simulated one, how far apart, and whether they agree in sign (both above
//! 1, both below, or both within 1% of it). A partial run's point is left out unless
//! `--allow-partial`; `--warm-up-previous` replays each point after the stack's previous
//! one of its sweep (the runs whose names differ only in their numbers, in the order they
//! were launched, by offered load where that does not tell), as a benchmark's sweep leaves
//! the caches; `--lmbench-warm-up` then replays LMBench's warm-up before each point;
//! `--router-seeds N` replays each point under N seeds of each stack's routers and takes
//! each stack's median, a random balancer's one seed being one draw of where requests go.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use routerlab_calibrate::as_trace::run_trace;
use routerlab_calibrate::quantile;
use routerlab_experiment::{OutputFormat, resolve};
use routerlab_sim::observer::NoObserver;
use serde::Serialize;
use serde_yaml::{Mapping, Value};

use crate::cmd::validate::ValidateArgs;
use crate::exit::Failure;

/// How far apart the two ratios may be and still count as reproduced.
const WITHIN: f64 = 0.10;

/// One stack: its measured runs and the experiment file that describes it.
struct Stack {
    dir: PathBuf,
    config: PathBuf,
}

/// A measured point of one stack.
struct Point {
    path: PathBuf,
    /// Requests a second it was offered (one over the launches' median interval).
    rate: f64,
    /// Its first launch (the run's clock).
    start: f64,
    measured: f64,
    partial: Option<String>,
}

/// One load point of the comparison.
#[derive(Debug, Serialize)]
struct Row {
    point: String,
    measured_a_ms: f64,
    measured_b_ms: f64,
    simulated_a_ms: Option<f64>,
    simulated_b_ms: Option<f64>,
    measured_ratio: f64,
    /// B over A simulated (under several seeds, of the two stacks' medians over them).
    simulated_ratio: Option<f64>,
    /// Under several seeds: the lowest and highest of each seed's own ratio.
    #[serde(skip_serializing_if = "Option::is_none")]
    simulated_ratio_range: Option<[f64; 2]>,
    /// |simulated − measured| ratio.
    gap: Option<f64>,
    sign_agrees: Option<bool>,
    /// Why it was not simulated (a partial run).
    skipped: Option<String>,
}

/// The comparison's summary.
#[derive(Debug, Serialize)]
struct Summary {
    metric: &'static str,
    /// The seeds each point was simulated under (its stacks' files' seed and those after;
    /// left out when one).
    #[serde(skip_serializing_if = "is_one")]
    seeds: u32,
    points: usize,
    compared: usize,
    within: usize,
    sign_agrees: usize,
    rows: Vec<Row>,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn stack(text: &str) -> Result<Stack, Failure> {
    let (dir, config) = text.split_once('=').ok_or_else(|| {
        Failure::input(format!(
            "--stack {text}: give DIR=CONFIG (the stack's runs, its experiment file)"
        ))
    })?;
    let stack = Stack {
        dir: PathBuf::from(dir),
        config: PathBuf::from(config),
    };
    if !stack.dir.is_dir() {
        return Err(Failure::input(format!(
            "--stack {text}: {dir} is not a directory of runs"
        )));
    }
    Ok(stack)
}

/// The median TTFT of the run at `path` (measured), its offered rate and whether it is
/// partial.
fn point(path: &Path, workload: Option<&Path>) -> Result<Point, Failure> {
    let trace = run_trace(path, None, workload, None)
        .map_err(Failure::from)?
        .ok_or_else(|| Failure::input(format!("{}: not a measured run", path.display())))?;
    // The offered rate from the launches' median interval: a partial log's gaps (the
    // requests that failed) do not slow it down.
    let mut gaps: Vec<f64> = (trace.run.measured.requests.windows(2))
        .map(|w| w[1].queued_ts - w[0].queued_ts)
        .collect();
    let median_gap = if gaps.is_empty() {
        0.0
    } else {
        quantile(&mut gaps, 0.5)
    };
    let start = (trace.run.measured.requests.iter())
        .map(|r| r.queued_ts)
        .fold(f64::INFINITY, f64::min);
    let mut ttft = trace.run.measured.samples().ttft_ms;
    Ok(Point {
        path: path.to_owned(),
        rate: if median_gap > 0.0 {
            1.0 / median_gap
        } else {
            f64::INFINITY
        },
        start,
        measured: quantile(&mut ttft, 0.5),
        partial: trace.run.partial,
    })
}

/// The simulated median TTFT of `point` as `stack`'s file describes the fleet, after
/// `warm` when given, with the conversations of LMBench's `workload` when given, after
/// LMBench's warm-up `lmbench_warm_up` when given: one under each of `seeds` seeds, the
/// file's own (0 unless it sets one) and those after it.
fn simulate(
    stack: &Stack,
    point: &Path,
    warm: Option<&Path>,
    workload: Option<&Path>,
    lmbench_warm_up: Option<&Path>,
    seeds: u32,
) -> Result<Vec<f64>, Failure> {
    let mut layer = Mapping::new();
    let text = |p: &Path| Value::from(p.to_string_lossy().into_owned());
    layer.insert("trace".into(), text(point));
    layer.insert("timing".into(), "trace".into());
    if let Some(warm) = warm {
        layer.insert("warm_up".into(), text(warm));
    }
    if let Some(workload) = workload {
        layer.insert("lmbench_workload".into(), text(workload));
    }
    if let Some(warm) = lmbench_warm_up {
        layer.insert("lmbench_warm_up".into(), text(warm));
    }
    let experiment = crate::opts::experiment(Some(&stack.config), layer)?;
    let mut run = resolve(&experiment)?;
    let first = run.scenario.seed;
    let mut each = Vec::with_capacity(seeds as usize);
    for k in 0..seeds {
        run.scenario.seed = first.wrapping_add(u64::from(k));
        let mut replicas = crate::cmd::build_replicas(&run)?;
        let report = run.replay(&mut replicas, &mut NoObserver)?;
        each.push(
            report
                .timed
                .and_then(|t| t.ttft)
                .map(|l| l.p50)
                .ok_or_else(|| {
                    Failure::input(format!("{}: no request finished", point.display()))
                })?,
        );
    }
    Ok(each)
}

/// The median of `values` and their lowest and highest.
fn spread(mut values: Vec<f64>) -> (f64, [f64; 2]) {
    values.sort_by(f64::total_cmp);
    let median = routerlab_calibrate::validate::median_sorted(&values);
    (median, [values[0], values[values.len() - 1]])
}

/// The comparison of `args.stacks`.
pub fn run(args: &ValidateArgs) -> Result<(), Failure> {
    let [a, b] = args.stacks.as_slice() else {
        return Err(Failure::input(
            "--stack: give two (DIR=CONFIG each), stack A then stack B",
        ));
    };
    if !args.fit.is_empty() || !args.runs.is_empty() {
        return Err(Failure::input(
            "--stack compares two stacks' runs through their experiment files: give no --fit or RUN",
        ));
    }
    let (a, b) = (stack(a)?, stack(b)?);
    let mut names: Vec<String> = std::fs::read_dir(&a.dir)
        .map_err(|e| Failure::input(format!("{}: {e}", a.dir.display())))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| b.dir.join(name).is_file() && !name.ends_with(".md"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(Failure::input(format!(
            "no run of one name in both {} and {}",
            a.dir.display(),
            b.dir.display()
        )));
    }
    let load = |stack: &Stack| -> Result<Vec<Point>, Failure> {
        let workload = args.run.lmbench_workload.as_deref();
        names
            .iter()
            .map(|n| point(&stack.dir.join(n), workload))
            .collect()
    };
    let (points_a, points_b) = (load(&a)?, load(&b)?);
    // Each stack's points of one sweep (names alike but for their numbers) in the order
    // launched (by offered load where the runs' clocks do not tell): the one before a
    // point is its warm-up.
    let sweep = |name: &str| -> String {
        name.chars()
            .filter(|c| !c.is_ascii_digit() && *c != '.')
            .collect()
    };
    let previous = |points: &[Point]| -> Vec<Option<PathBuf>> {
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by(|&i, &j| {
            (sweep(&names[i]).cmp(&sweep(&names[j])))
                .then(points[i].start.total_cmp(&points[j].start))
                .then(points[i].rate.total_cmp(&points[j].rate))
        });
        let mut before = vec![None; points.len()];
        for pair in order.windows(2) {
            if sweep(&names[pair[0]]) == sweep(&names[pair[1]]) {
                before[pair[1]] = Some(points[pair[0]].path.clone());
            }
        }
        before
    };
    let (warm_a, warm_b) = (previous(&points_a), previous(&points_b));
    let mut rows = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (pa, pb) = (&points_a[i], &points_b[i]);
        let partial = [&pa.partial, &pb.partial]
            .into_iter()
            .flatten()
            .next()
            .filter(|_| !args.run.allow_partial);
        let simulated = match partial {
            Some(_) => None,
            None => {
                // A stack's point, after the point before it when asked.
                let run = |stack: &Stack, point: &Point, before: &Option<PathBuf>| {
                    let before = before.as_deref().filter(|_| args.warm_up_previous);
                    let workload = args.run.lmbench_workload.as_deref();
                    simulate(
                        stack,
                        &point.path,
                        before,
                        workload,
                        args.lmbench_warm_up.as_deref(),
                        args.router_seeds,
                    )
                };
                Some((run(&a, pa, &warm_a[i])?, run(&b, pb, &warm_b[i])?))
            }
        };
        // Each seed's own ratio, and each stack's median over the seeds.
        let ratio_range = simulated
            .as_ref()
            .filter(|_| args.router_seeds > 1)
            .map(|(sa, sb)| spread(sb.iter().zip(sa).map(|(b, a)| b / a).collect()).1);
        let simulated = simulated.map(|(sa, sb)| (spread(sa).0, spread(sb).0));
        let measured_ratio = pb.measured / pa.measured;
        let simulated_ratio = simulated.map(|(sa, sb)| sb / sa);
        let side = |r: f64| {
            if (r - 1.0).abs() <= 0.01 {
                0
            } else if r > 1.0 {
                1
            } else {
                -1
            }
        };
        rows.push(Row {
            point: name.clone(),
            measured_a_ms: pa.measured,
            measured_b_ms: pb.measured,
            simulated_a_ms: simulated.map(|s| s.0),
            simulated_b_ms: simulated.map(|s| s.1),
            measured_ratio,
            simulated_ratio,
            simulated_ratio_range: ratio_range,
            gap: simulated_ratio.map(|s| (s - measured_ratio).abs()),
            sign_agrees: simulated_ratio.map(|s| side(s) == side(measured_ratio)),
            skipped: partial.map(|p| format!("partial ({p})")),
        });
    }
    let compared: Vec<&Row> = rows
        .iter()
        .filter(|r| r.simulated_ratio.is_some())
        .collect();
    let summary = Summary {
        metric: "ttft_p50",
        seeds: args.router_seeds,
        points: rows.len(),
        compared: compared.len(),
        within: compared
            .iter()
            .filter(|r| r.gap.is_some_and(|g| g <= WITHIN))
            .count(),
        sign_agrees: compared
            .iter()
            .filter(|r| r.sign_agrees == Some(true))
            .count(),
        rows,
    };
    let out = match args.format {
        OutputFormat::Json => serde_json::to_string_pretty(&summary).expect("serialises") + "\n",
        OutputFormat::Yaml => serde_yaml::to_string(&summary).expect("serialises"),
        _ => human(&summary),
    };
    print!("{out}");
    Ok(())
}

fn human(summary: &Summary) -> String {
    let mut out = String::new();
    let seeded = summary.seeds > 1;
    let _ = writeln!(
        out,
        "{:<36} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}{} {:>6}  sign",
        "point (TTFT p50, ms)",
        "meas. A",
        "meas. B",
        "sim. A",
        "sim. B",
        "meas. ×",
        "sim. ×",
        if seeded {
            format!(" {:>14}", "seeds' ×")
        } else {
            String::new()
        },
        "gap"
    );
    for r in &summary.rows {
        let cell =
            |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
        let range = match (seeded, r.simulated_ratio_range) {
            (false, _) => String::new(),
            (true, Some([low, high])) => format!(" {:>14}", format!("{low:.2} to {high:.2}")),
            (true, None) => format!(" {:>14}", "-"),
        };
        let _ = writeln!(
            out,
            "{:<36} {:>9.1} {:>9.1} {:>9} {:>9} {:>8.3} {:>8}{range} {:>6}  {}",
            r.point,
            r.measured_a_ms,
            r.measured_b_ms,
            cell(r.simulated_a_ms, 1),
            cell(r.simulated_b_ms, 1),
            r.measured_ratio,
            cell(r.simulated_ratio, 3),
            cell(r.gap, 3),
            match (&r.skipped, r.sign_agrees) {
                (Some(why), _) => why.clone(),
                (None, Some(true)) => "agrees".into(),
                _ => "differs".into(),
            }
        );
    }
    let _ = writeln!(
        out,
        "\n{} of {} points compared: ratio within ±{WITHIN:.2} at {}, sign agrees at {}",
        summary.compared, summary.points, summary.within, summary.sign_agrees
    );
    if seeded {
        let _ = writeln!(
            out,
            "(simulated: each stack's median over {} seeds of its routers; seeds' ×: the lowest and highest of one seed's ratio)",
            summary.seeds
        );
    }
    out
}
