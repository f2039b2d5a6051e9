//! A search's candidates, what became of each, and their ranking: the table `recommend`
//! prints, best first, saying what made each other candidate lose.

use std::fmt::Write as _;

use routerlab_report::Report;

use super::Candidate;
use super::Recommend;
use super::search::{Goal, Measured, Metric};
use super::space::Pick;

/// One candidate and what became of it.
pub struct Trial {
    /// What was drawn.
    pub picks: Vec<Option<Pick>>,
    /// The run it describes.
    pub candidate: Candidate,
    /// The last rung it ran on, and what it measured there.
    pub reached: Option<(usize, Measured)>,
    /// Over the budget, so never run.
    pub over_budget: bool,
}

/// What the objective reads of a report of a candidate of `gpus` GPUs costing `cost`. A
/// scaled fleet costs the GPUs it held on average over its run, and its goodput is per those
/// (`gpus` is then its ceiling).
pub fn measured(report: &Report, gpus: u64, cost: f64) -> Measured {
    let timed = report.timed.as_ref();
    let held = match timed.and_then(|t| t.scaling.as_ref()) {
        Some(s) if gpus > 0 => s.mean_endpoints * f64::from(s.gpus_per_endpoint),
        _ => gpus as f64,
    };
    let cost = if gpus > 0 {
        cost * held / gpus as f64
    } else {
        cost
    };
    let slo = timed.and_then(|t| t.slo.as_ref());
    let makespan = timed.map_or(0.0, |t| t.makespan_s);
    let good = slo.map_or(0, |s| s.met);
    Measured {
        gpus,
        cost,
        attainment: slo.map(|s| s.attainment),
        ttft_ms: timed
            .and_then(|t| t.ttft.as_ref())
            .map(|l| [l.p50, l.p90, l.p99]),
        ttft_mean_ms: timed.and_then(|t| t.ttft.as_ref()).map(|l| l.mean),
        e2e_p90_ms: timed.and_then(|t| t.e2e.as_ref()).map(|l| l.p90),
        goodput_per_gpu: if makespan > 0.0 && held > 0.0 && timed.is_some_and(|t| t.e2e.is_some()) {
            good as f64 / makespan / held
        } else {
            0.0
        },
    }
}

/// The trials that ran on the whole trace, best first (a front first, for `pareto`).
pub fn rank(rec: &Recommend, trials: &[Trial], last: usize, max_cost: f64) -> Vec<usize> {
    let mut finalists: Vec<usize> = (0..trials.len())
        .filter(|&i| trials[i].reached.as_ref().is_some_and(|(r, _)| *r == last))
        .collect();
    // The same settings drawn twice ran twice with the same result: keep the first.
    let mut seen = std::collections::BTreeSet::new();
    finalists.retain(|&i| seen.insert(trials[i].candidate.label.clone()));
    let m = |i: usize| &trials[i].reached.as_ref().expect("finalist").1;
    let front: Vec<bool> = match rec.goal {
        Goal::Pareto(metric) => finalists
            .iter()
            .map(|&i| {
                let others: Vec<&Measured> = finalists
                    .iter()
                    .filter(|&&j| j != i)
                    .map(|&j| m(j))
                    .collect();
                Goal::on_front(metric, m(i), &others)
            })
            .collect(),
        _ => vec![false; finalists.len()],
    };
    let mut order: Vec<(bool, usize)> = front.into_iter().zip(finalists).collect();
    order.sort_by(|&(fa, a), &(fb, b)| {
        fb.cmp(&fa)
            .then(
                rec.goal
                    .score(m(a), max_cost)
                    .total_cmp(&rec.goal.score(m(b), max_cost)),
            )
            .then(m(a).cost.total_cmp(&m(b).cost))
            .then(ties(m(a), m(b)))
            .then(a.cmp(&b))
    });
    order.into_iter().map(|(_, i)| i).collect()
}

/// Between equals on the objective: the higher attainment, then the lower TTFT p90.
fn ties(a: &Measured, b: &Measured) -> std::cmp::Ordering {
    let p90 = |m: &Measured| m.ttft_ms.map_or(f64::MAX, |t| t[1]);
    b.attainment
        .unwrap_or(0.0)
        .total_cmp(&a.attainment.unwrap_or(0.0))
        .then(p90(a).total_cmp(&p90(b)))
}

/// The ranked table, and why the others lost.
pub fn table(
    rec: &Recommend,
    trials: &[Trial],
    ranked: &[usize],
    shares: &[f64],
    top: usize,
    replays: usize,
) -> String {
    let last = shares.len() - 1;
    let mut out = String::new();
    let head = [
        "rank",
        "cost",
        "GPUs",
        "attain.",
        "TTFT mean",
        "p50",
        "p90",
        "p99",
        "E2E p90",
        "good/s/GPU",
        "why",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| (*s).to_owned()).collect()];
    let best = ranked
        .first()
        .map(|&i| &trials[i].reached.as_ref().expect("ranked").1);
    for (n, &i) in ranked.iter().enumerate().take(top) {
        let m = &trials[i].reached.as_ref().expect("ranked").1;
        let ms = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.0}"));
        let why = match (n, rec.goal, best) {
            (0, _, _) => "best".to_owned(),
            (_, Goal::LeastCost(target), _) if m.attainment.unwrap_or(0.0) + 1e-12 < target => {
                format!(
                    "misses the SLO: {:.3} < {target}",
                    m.attainment.unwrap_or(0.0)
                )
            }
            (_, Goal::LeastCost(_), Some(b)) if m.cost > b.cost => {
                format!("costs {} more", fmt_cost(m.cost - b.cost))
            }
            (_, Goal::LeastCost(_), Some(b)) if m.attainment < b.attainment => {
                "same cost, lower attainment".to_owned()
            }
            (_, Goal::LeastCost(_), _) => "same cost and attainment, higher TTFT p90".to_owned(),
            (_, Goal::GoodputPerGpu, Some(b)) => format!(
                "{:.1}% less goodput per GPU",
                100.0 * (1.0 - m.goodput_per_gpu / b.goodput_per_gpu.max(f64::MIN_POSITIVE))
            ),
            (_, Goal::Lowest(metric), Some(b)) => match (metric.value(m), metric.value(b)) {
                (Some(v), Some(w)) if metric == Metric::Attainment => {
                    format!("{:.3} lower attainment", w - v)
                }
                (Some(v), Some(w)) => format!(
                    "{} {:.1} ms higher",
                    metric.title().trim_end_matches(" (ms)"),
                    v - w
                ),
                _ => format!("no {}", metric.name()),
            },
            (_, Goal::Pareto(metric), _) => {
                let others: Vec<&Measured> = ranked
                    .iter()
                    .filter(|&&j| j != i)
                    .map(|&j| &trials[j].reached.as_ref().expect("ranked").1)
                    .collect();
                if Goal::on_front(metric, m, &others) {
                    "on the front".to_owned()
                } else {
                    "beaten on cost and the metric".to_owned()
                }
            }
            _ => String::new(),
        };
        rows.push(vec![
            (n + 1).to_string(),
            fmt_cost(m.cost),
            m.gpus.to_string(),
            m.attainment.map_or("-".to_owned(), |a| format!("{a:.3}")),
            ms(m.ttft_mean_ms),
            ms(m.ttft_ms.map(|t| t[0])),
            ms(m.ttft_ms.map(|t| t[1])),
            ms(m.ttft_ms.map(|t| t[2])),
            ms(m.e2e_p90_ms),
            // Goodput counts requests meeting the SLO: none without one.
            m.attainment
                .map_or("-".to_owned(), |_| format!("{:.3}", m.goodput_per_gpu)),
            format!("{why}  {}", trials[i].candidate.label),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == head.len() - 1 {
                    cell.clone()
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    let over = trials.iter().filter(|t| t.over_budget).count();
    let stopped: Vec<String> = (0..last)
        .map(|r| {
            let n = trials
                .iter()
                .filter(|t| t.reached.as_ref().is_some_and(|(x, _)| *x == r))
                .count();
            format!(
                "{n} stopped on the first {:.0}% of the trace",
                shares[r] * 100.0
            )
        })
        .collect();
    // Each replay as the share of the trace it read.
    let full_equivalent: f64 = trials
        .iter()
        .filter_map(|t| t.reached.as_ref())
        .map(|(r, _)| shares[..=(*r).min(last)].iter().sum::<f64>())
        .sum();
    let _ = writeln!(
        out,
        "\n{} candidates: {} ranked on the whole trace{}{}; {replays} replays, {:.1} whole-trace equivalents",
        trials.len(),
        ranked.len(),
        if stopped.is_empty() {
            String::new()
        } else {
            format!(", {}", stopped.join(", "))
        },
        if over > 0 {
            format!(", {over} over the budget (not run)")
        } else {
            String::new()
        },
        full_equivalent,
    );
    out
}

fn fmt_cost(cost: f64) -> String {
    if cost.fract() == 0.0 {
        format!("{cost:.0}")
    } else {
        format!("{cost:.2}")
    }
}
