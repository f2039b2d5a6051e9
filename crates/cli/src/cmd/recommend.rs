//! `routerlab recommend`: search fleet shapes, hardware, policies and their settings for the
//! objective a recommend file states, and rank what was found.
//!
//! The file, its space and the search's rules are `routerlab_experiment::recommend`'s.
//! Here: candidates are drawn in batches of `--batch` (a fixed number, so the search does
//! not depend on how many cores ran it), each batch replayed on `--jobs` threads; with
//! `--rungs R`, successive halving first replays every candidate on the first 1/9 of the
//! trace (R = 3), the best third of them on the first third, and the best ninth on all of
//! it; only those ranked on the whole trace can win.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use clap::Args;
use routerlab_experiment::batch::Prepared;
use routerlab_experiment::recommend::search::{Goal, Measured, Sampler, rungs};
use routerlab_experiment::recommend::space::Pick;
use routerlab_experiment::recommend::{Candidate, Recommend};
use routerlab_report::Report;
use routerlab_trace::Workload;

use crate::cmd::OutputFile;
use crate::cmd::run::prepare;
use crate::exit::Failure;
use crate::progress::Bars;

/// `routerlab recommend`.
#[derive(Args, Debug, Clone)]
pub struct RecommendArgs {
    /// The recommend file: experiment settings, a `search` of ranges and choices, an
    /// `objective`, and optionally a `budget` and GPU `prices`.
    #[arg(value_name = "RECOMMEND.yaml")]
    pub file: PathBuf,
    /// Candidates to draw.
    #[arg(long, value_name = "N", default_value_t = 64, help_heading = "Search")]
    pub trials: usize,
    /// How candidates are drawn: `tpe` (learns from the ones run so far), `random`, or
    /// `grid` (every point of a space without `float` ranges, in order).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "tpe",
        help_heading = "Search"
    )]
    pub sampler: String,
    /// Successive halving's rungs: 1 replays every candidate on the whole trace; 3 replays
    /// all on the first ninth, a third on the first third, a ninth on all of it.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Search")]
    pub rungs: u32,
    /// Candidates drawn before the sampler hears how they did (fixed, so the answer does
    /// not depend on the machine).
    #[arg(long, value_name = "N", default_value_t = 8, help_heading = "Search")]
    pub batch: usize,
    /// Seed of the search's draws (the runs' own `seed` is the file's).
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = "Search")]
    pub search_seed: u64,
    /// Runs at once, on threads [default: the number of cores].
    #[arg(long, value_name = "N", help_heading = "Running")]
    pub jobs: Option<usize>,
    /// Write the winner as an experiment file that `replay`, `compare` and `serve` take.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub winner: Option<PathBuf>,
    /// Rows of the ranked table [default: 20].
    #[arg(long, value_name = "N", default_value_t = 20, help_heading = "Output")]
    pub top: usize,
    /// No progress lines.
    #[arg(long, short, help_heading = "Output")]
    pub quiet: bool,
}

/// Draws of a point already tried before it is taken anyway.
const REDRAWS: usize = 20;

/// One candidate and what became of it.
struct Trial {
    picks: Vec<Option<Pick>>,
    candidate: Candidate,
    /// The last rung it ran on, and what it measured there.
    reached: Option<(usize, Measured)>,
    over_budget: bool,
}

/// Runs the search.
pub fn run(args: RecommendArgs) -> Result<(), Failure> {
    let bytes = std::fs::read(&args.file).map_err(|e| {
        Failure::input(format!(
            "{}: cannot read recommend file: {e}",
            args.file.display()
        ))
    })?;
    let rec = Recommend::read(&args.file, &bytes)?;
    if args.trials == 0 || args.trials > 100_000 {
        return Err(Failure::input("--trials must be from 1 to 100,000"));
    }
    if args.batch == 0 || !(1..=6).contains(&args.rungs) {
        return Err(Failure::input(
            "--batch must be at least 1 and --rungs from 1 to 6",
        ));
    }
    let jobs = match args.jobs {
        Some(0) => return Err(Failure::input("--jobs must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    if let Some(path) = &args.winner {
        crate::cmd::refuse_input_as_output("--winner", path, &[args.file.as_path()])?;
    }
    let mut sampler =
        Sampler::new(&args.sampler, &rec.space, args.search_seed).map_err(Failure::input)?;
    let plan = rungs(
        args.trials.min(
            rec.space
                .size()
                .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
                .max(1),
        ),
        3,
        args.rungs,
    );
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let started = std::time::Instant::now();

    // Draw every candidate: in batches, each replayed on the first rung before the next
    // batch is drawn, so the sampler learns as it goes.
    let mut trials: Vec<Trial> = Vec::with_capacity(args.trials);
    let mut data = Data::default();
    let mut max_cost = 0.0f64;
    let mut replays = 0usize;
    let mut exhausted = false;
    let mut tried = std::collections::BTreeSet::new();
    while trials.len() < args.trials && !exhausted {
        let n = args.batch.min(args.trials - trials.len());
        let first = trials.len();
        for _ in 0..n {
            // A point already tried is drawn again (a sampler converging does that), a
            // few times, then uniformly, before it is taken as the next candidate anyway.
            let mut drawn = None;
            for attempt in 0..2 * REDRAWS {
                let picks = if attempt < REDRAWS {
                    sampler.ask(&rec.space)
                } else {
                    sampler.explore(&rec.space)
                };
                let Some(picks) = picks else {
                    break;
                };
                let candidate = rec.candidate(&picks)?;
                let fresh = tried.insert(candidate.label.clone());
                drawn = Some((picks, candidate));
                if fresh {
                    break;
                }
            }
            let Some((picks, candidate)) = drawn else {
                break;
            };
            let over_budget = !rec.affordable(candidate.gpus, candidate.cost);
            max_cost = max_cost.max(candidate.cost);
            trials.push(Trial {
                picks,
                candidate,
                reached: None,
                over_budget,
            });
        }
        exhausted = trials.len() < first + n;
        let batch: Vec<usize> = (first..trials.len())
            .filter(|&i| !trials[i].over_budget)
            .collect();
        replays += data.replay(&mut trials, &batch, 0, plan[0].0, jobs)?;
        for &i in &batch {
            let score = rec.goal.score(
                &trials[i].reached.as_ref().expect("ran").1,
                max_cost.max(1.0),
            );
            let picks = trials[i].picks.clone();
            sampler.tell(&rec.space, &picks, score);
        }
        if progress {
            eprint!(
                "\rrung 1 of {}: {} of {} candidates",
                plan.len(),
                trials.len(),
                args.trials
            );
        }
    }
    // The later rungs: the best of the rung below, on more of the trace.
    for (rung, &(share, keep)) in plan.iter().enumerate().skip(1) {
        let mut alive: Vec<usize> = (0..trials.len())
            .filter(|&i| {
                trials[i]
                    .reached
                    .as_ref()
                    .is_some_and(|(r, _)| *r == rung - 1)
            })
            .collect();
        alive.sort_by(|&a, &b| {
            let score = |i: usize| {
                rec.goal.score(
                    &trials[i].reached.as_ref().expect("ran").1,
                    max_cost.max(1.0),
                )
            };
            score(a).total_cmp(&score(b)).then(a.cmp(&b))
        });
        alive.truncate(keep);
        if progress {
            eprint!(
                "\rrung {} of {}: {} candidates on {:.0}% of the trace      ",
                rung + 1,
                plan.len(),
                alive.len(),
                share * 100.0
            );
        }
        replays += data.replay(&mut trials, &alive, rung, share, jobs)?;
    }
    if progress {
        eprintln!(
            "\r{} candidates, {replays} replays in {:.1} s{}",
            trials.len(),
            started.elapsed().as_secs_f64(),
            " ".repeat(20)
        );
    }

    let last = plan.len() - 1;
    let ranked = rank(&rec, &trials, last, max_cost.max(1.0));
    let table = table(&rec, &trials, &ranked, last, &plan, args.top, replays);
    crate::cmd::print_stdout(&table, "the ranking")?;
    if let (Some(path), Some(&best)) = (&args.winner, ranked.first()) {
        let text = rec.winner_file(&trials[best].candidate)?;
        let fail = |source| Failure::Output {
            what: "the winner",
            path: path.clone(),
            source,
        };
        let file = OutputFile::create(path).map_err(fail)?;
        let mut writer = file.writer().map_err(fail)?;
        std::io::Write::write_all(&mut writer, text.as_bytes()).map_err(fail)?;
        drop(writer);
        file.commit().map_err(fail)?;
    }
    if ranked.is_empty() {
        return Err(Failure::input(
            "no candidate within the budget ran on the whole trace: widen the budget or the space",
        ));
    }
    Ok(())
}

/// The trace, loaded once, and its prefixes by share.
#[derive(Default)]
struct Data {
    full: Option<Workload>,
    sizes: Vec<u32>,
    heads: BTreeMap<u64, Workload>,
}

impl Data {
    /// Replays `which` trials on the first `share` of the trace as rung `rung`; returns
    /// how many replays that was.
    fn replay(
        &mut self,
        trials: &mut [Trial],
        which: &[usize],
        rung: usize,
        share: f64,
        jobs: usize,
    ) -> Result<usize, Failure> {
        if which.is_empty() {
            return Ok(0);
        }
        let mut prepared: Vec<Prepared> = Vec::with_capacity(which.len());
        for &i in which {
            let c = &trials[i].candidate;
            let experiment = c
                .experiment
                .with_policy(&c.policy)
                .map_err(|e| Failure::InRun {
                    kind: "candidate",
                    label: c.label.clone(),
                    failure: Box::new(e.into()),
                })?;
            prepared.push(prepare("candidate", c.label.clone(), &experiment)?);
        }
        let mut sizes = self.sizes.clone();
        for p in &prepared {
            sizes.extend(
                p.run
                    .timed
                    .as_ref()
                    .map(|t| t.engine_block_sizes())
                    .unwrap_or_default(),
            );
            if p.run.timed.is_none() {
                return Err(Failure::input(format!(
                    "{}: recommend judges latency: set `timing` (engine or trace)",
                    p.label
                )));
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        if self.full.is_none() || sizes != self.sizes {
            let run = &prepared[0].run;
            if let Some(note) = &run.trace_note {
                eprintln!("{note}");
            }
            self.full = Some(Workload::load(run.reader()?, &sizes)?);
            self.sizes = sizes;
            self.heads.clear();
        }
        let full = self.full.as_ref().expect("loaded");
        let n = ((full.requests.len() as f64 * share).ceil() as usize)
            .clamp(1, full.requests.len().max(1));
        let head = self.heads.entry(n as u64).or_insert_with(|| full.head(n));
        let outcomes = crate::cmd::run::run_all(
            "candidate",
            &mut prepared,
            std::slice::from_ref(head),
            jobs,
            &Bars::new(true),
            false,
        )?;
        for (&i, outcome) in which.iter().zip(outcomes) {
            let c = &trials[i].candidate;
            trials[i].reached = Some((rung, measured(&outcome.report, c.gpus, c.cost)));
        }
        Ok(which.len())
    }
}

/// What the objective reads of a report.
fn measured(report: &Report, gpus: u64, cost: f64) -> Measured {
    let timed = report.timed.as_ref();
    let slo = timed.and_then(|t| t.slo.as_ref());
    let finished = timed.and_then(|t| t.e2e.as_ref()).map(|_| ());
    let makespan = timed.map_or(0.0, |t| t.makespan_s);
    let good = slo.map_or(0, |s| s.met);
    Measured {
        gpus,
        cost,
        attainment: slo.map(|s| s.attainment),
        ttft_ms: timed
            .and_then(|t| t.ttft.as_ref())
            .map(|l| [l.p50, l.p90, l.p99]),
        e2e_p90_ms: timed.and_then(|t| t.e2e.as_ref()).map(|l| l.p90),
        goodput_per_gpu: if makespan > 0.0 && gpus > 0 && finished.is_some() {
            good as f64 / makespan / gpus as f64
        } else {
            0.0
        },
    }
}

/// The trials that ran on the whole trace, best first (a front first, for `pareto`).
fn rank(rec: &Recommend, trials: &[Trial], last: usize, max_cost: f64) -> Vec<usize> {
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
fn table(
    rec: &Recommend,
    trials: &[Trial],
    ranked: &[usize],
    last: usize,
    plan: &[(f64, usize)],
    top: usize,
    replays: usize,
) -> String {
    let mut out = String::new();
    let head = [
        "rank",
        "cost",
        "GPUs",
        "attain.",
        "TTFT p50",
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
            ms(m.ttft_ms.map(|t| t[0])),
            ms(m.ttft_ms.map(|t| t[1])),
            ms(m.ttft_ms.map(|t| t[2])),
            ms(m.e2e_p90_ms),
            format!("{:.3}", m.goodput_per_gpu),
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
                plan[r].0 * 100.0
            )
        })
        .collect();
    let full_equivalent: f64 = plan.iter().map(|(share, n)| share * *n as f64).sum();
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
        full_equivalent.min(replays as f64),
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
