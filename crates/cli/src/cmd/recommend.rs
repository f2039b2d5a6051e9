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
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use clap::Args;
use routerlab_core::hash::hash64;
use routerlab_experiment::batch::Prepared;
use routerlab_experiment::recommend::Recommend;
use routerlab_experiment::recommend::rank::{Trial, measured, rank, table};
use routerlab_experiment::recommend::search::{Goal, Measured, Metric, Sampler, rungs};
use routerlab_experiment::recommend::space::Pick;
use routerlab_experiment::sweep::{Dealing, Partition};
use routerlab_plot::FrontPoint;
use routerlab_trace::Workload;
use serde::{Deserialize, Serialize};

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
    /// Run only shard I of N of the search (each a seeded slice of its candidates) and
    /// write its candidates as JSON lines; `--merge` ranks the N files.
    #[arg(long, value_name = "I/N", help_heading = "Running")]
    pub partition: Option<String>,
    /// Where the JSON lines of `--partition` go [default: stdout].
    #[arg(long, short, value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,
    /// Rank the candidates of these shards' files (all N of one search, run with the same
    /// file and search flags) instead of searching.
    #[arg(long, value_name = "SHARD.jsonl", num_args = 1.., help_heading = "Running")]
    pub merge: Vec<PathBuf>,
    /// Write the candidates ranked on the whole trace as an SVG plot of cost against the
    /// front's figure (the objective's `against`, else attainment) into DIR.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub plot: Option<PathBuf>,
    /// Rows of the ranked table.
    #[arg(long, value_name = "N", default_value_t = 20, help_heading = "Output")]
    pub top: usize,
    /// No progress lines.
    #[arg(long, short, help_heading = "Output")]
    pub quiet: bool,
}

/// Draws of a point already tried before it is taken anyway.
const REDRAWS: usize = 20;

/// Runs the search, a shard of it, or the ranking of shards' lines.
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
    if let Some(path) = &args.winner {
        crate::cmd::refuse_input_as_output("--winner", path, &[args.file.as_path()])?;
    }
    if let Some(path) = &args.output {
        let mut inputs = vec![args.file.as_path()];
        inputs.extend(args.merge.iter().map(PathBuf::as_path));
        crate::cmd::refuse_input_as_output("--output", path, &inputs)?;
    }
    let id = SearchId {
        file: args.file.display().to_string(),
        hash: format!("{:016x}", hash64(&bytes, 0)),
        trials: args.trials,
        sampler: args.sampler.clone(),
        rungs: args.rungs,
        batch: args.batch,
        search_seed: args.search_seed,
        shard: String::new(),
    };
    if !args.merge.is_empty() {
        if args.partition.is_some() || args.output.is_some() {
            return Err(Failure::input(
                "--merge ranks shards' lines: it takes no --partition or --output",
            ));
        }
        let (trials, replays) = merge(&rec, &id, &args.merge)?;
        return finish(&rec, &args, &trials, replays);
    }
    let partition = args
        .partition
        .as_deref()
        .map(Partition::parse)
        .transpose()
        .map_err(Failure::from)?;
    if partition.is_some_and(|p| p.dealing != Dealing::Count) {
        return Err(Failure::input(
            "--partition I/N: a search is dealt by count (each shard a seeded slice of it)",
        ));
    }
    if partition.is_none() && args.output.is_some() {
        return Err(Failure::input(
            "--output is where --partition writes its JSON lines; a whole search prints its ranking",
        ));
    }
    if partition.is_some() && args.winner.is_some() {
        return Err(Failure::input(
            "a shard writes JSON lines; --winner belongs to `recommend --merge`",
        ));
    }
    let jobs = match args.jobs {
        Some(0) => return Err(Failure::input("--jobs must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let (shard, of) = partition.map_or((1, 1), |p| (p.shard, p.of));
    if of > args.trials {
        return Err(Failure::input(format!(
            "--partition {shard}/{of}: more shards than --trials {}",
            args.trials
        )));
    }
    // Shard I of N: its share of the candidates, from a seed of its own (a grid's points
    // are dealt instead: point k to shard k mod N + 1).
    let here = args.trials / of + usize::from(shard <= args.trials % of);
    let seed = if of == 1 {
        args.search_seed
    } else {
        hash64(&args.search_seed.to_le_bytes(), shard as u64)
    };
    let mut sampler = Sampler::new(&args.sampler, &rec.space, seed).map_err(Failure::input)?;
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let (trials, replays) = search(&rec, &args, &mut sampler, here, (shard, of), jobs, progress)?;
    match partition {
        None => finish(&rec, &args, &trials, replays),
        Some(_) => {
            let id = SearchId {
                shard: format!("{shard}/{of}"),
                ..id
            };
            write_lines(&id, &trials, args.output.as_deref())
        }
    }
}

/// Draws `count` candidates and replays them rung by rung; returns them and the replays.
fn search(
    rec: &Recommend,
    args: &RecommendArgs,
    sampler: &mut Sampler,
    count: usize,
    (shard, of): (usize, usize),
    jobs: usize,
    progress: bool,
) -> Result<(Vec<Trial>, usize), Failure> {
    let size = rec
        .space
        .size()
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let plan = rungs(count.min(size).max(1), 3, args.rungs);
    let started = std::time::Instant::now();
    let grid = args.sampler == "grid";
    let mut dealt = 0usize;
    let mut next = |sampler: &mut Sampler, explore: bool| {
        if grid {
            // A grid's points in turn, those of this shard only.
            loop {
                let point = sampler.ask(&rec.space)?;
                dealt += 1;
                if (dealt - 1) % of + 1 == shard {
                    return Some(point);
                }
            }
        }
        if explore {
            sampler.explore(&rec.space)
        } else {
            sampler.ask(&rec.space)
        }
    };

    // Draw every candidate: in batches, each replayed on the first rung before the next
    // batch is drawn, so the sampler learns as it goes.
    let mut trials: Vec<Trial> = Vec::with_capacity(count);
    let mut data = Data::default();
    let mut max_cost = 0.0f64;
    let mut replays = 0usize;
    let mut exhausted = false;
    let mut tried = std::collections::BTreeSet::new();
    while trials.len() < count && !exhausted {
        let n = args.batch.min(count - trials.len());
        let first = trials.len();
        for _ in 0..n {
            // A point already tried is drawn again (a sampler converging does that), a
            // few times, then uniformly, before it is taken as the next candidate anyway.
            let mut drawn = None;
            for attempt in 0..2 * REDRAWS {
                let Some(picks) = next(sampler, attempt >= REDRAWS) else {
                    break;
                };
                let candidate = rec.candidate(&picks)?;
                let fresh = tried.insert(candidate.label.clone());
                drawn = Some((picks, candidate));
                if fresh || grid {
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
                count
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
    Ok((trials, replays))
}

/// The ranking of `trials`, printed, and the winner written when asked.
fn finish(
    rec: &Recommend,
    args: &RecommendArgs,
    trials: &[Trial],
    replays: usize,
) -> Result<(), Failure> {
    let last = args.rungs.max(1) as usize - 1;
    let max_cost = trials
        .iter()
        .map(|t| t.candidate.cost)
        .fold(1.0f64, f64::max);
    let ranked = rank(rec, trials, last, max_cost);
    let shares: Vec<f64> = rungs(1, 3, args.rungs).iter().map(|r| r.0).collect();
    let table = table(rec, trials, &ranked, &shares, args.top, replays);
    crate::cmd::print_stdout(&table, "the ranking")?;
    if let Some(dir) = &args.plot {
        plot(dir, rec, trials, &ranked)?;
    }
    if let (Some(path), Some(&best)) = (&args.winner, ranked.first()) {
        let candidate = &trials[best].candidate;
        let mut inputs = candidate.experiment.inputs();
        inputs.push(&rec.path);
        crate::cmd::refuse_input_as_output("--winner", path, &inputs)?;
        let text = rec.winner_file(candidate)?;
        crate::cmd::write_output(path, text.as_bytes(), "the winner")?;
    }
    if ranked.is_empty() {
        return Err(Failure::input(
            "no candidate within the budget ran on the whole trace: widen the budget or the space",
        ));
    }
    Ok(())
}

/// The front plot of the ranked candidates.
fn plot(dir: &Path, rec: &Recommend, trials: &[Trial], ranked: &[usize]) -> Result<(), Failure> {
    crate::cmd::plot::check_dir(dir, &rec.path)?;
    std::fs::create_dir_all(dir).map_err(|e| {
        Failure::input(format!(
            "--plot {}: cannot create the directory: {e}",
            dir.display()
        ))
    })?;
    let metric = match rec.goal {
        Goal::Pareto(metric) => metric,
        _ => Metric::Attainment,
    };
    let measured: Vec<&Measured> = ranked
        .iter()
        .map(|&i| &trials[i].reached.as_ref().expect("ranked").1)
        .collect();
    let points: Vec<FrontPoint> = measured
        .iter()
        .enumerate()
        .filter_map(|(n, m)| {
            let others: Vec<&Measured> = measured
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != n)
                .map(|(_, o)| *o)
                .collect();
            Some(FrontPoint {
                cost: m.cost,
                value: metric.value(m)?,
                on_front: Goal::on_front(metric, m, &others),
                winner: n == 0,
            })
        })
        .collect();
    let cost = if rec.prices.is_empty() {
        "GPUs"
    } else {
        "cost per hour"
    };
    routerlab_plot::write_front(dir, &points, cost, metric.title())
        .map_err(|e| Failure::input(e.to_string()))?;
    Ok(())
}

/// Which search a shard's line comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SearchId {
    file: String,
    /// Of the recommend file's bytes.
    hash: String,
    trials: usize,
    sampler: String,
    rungs: u32,
    batch: usize,
    search_seed: u64,
    /// `I/N`.
    shard: String,
}

/// One candidate of a shard, as a JSON line.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    recommend: SearchId,
    label: String,
    picks: Vec<Option<Pick>>,
    over_budget: bool,
    /// The last rung it ran on, and what it measured there (absent: never ran).
    rung: Option<usize>,
    measured: Option<Measured>,
}

/// A shard's candidates as JSON lines, to `path` or stdout.
fn write_lines(id: &SearchId, trials: &[Trial], path: Option<&Path>) -> Result<(), Failure> {
    let mut text = String::new();
    for t in trials {
        let line = Line {
            recommend: id.clone(),
            label: t.candidate.label.clone(),
            picks: t.picks.clone(),
            over_budget: t.over_budget,
            rung: t.reached.as_ref().map(|r| r.0),
            measured: t.reached.as_ref().map(|r| r.1.clone()),
        };
        text.push_str(&serde_json::to_string(&line).expect("a line serialises"));
        text.push('\n');
    }
    match path {
        None => crate::cmd::print_stdout(&text, "the shard's candidates"),
        Some(path) => crate::cmd::write_output(path, text.as_bytes(), "the shard's candidates"),
    }
}

/// The candidates of every shard of the search `id` describes, from their files: each
/// shard once, all of one search.
fn merge(
    rec: &Recommend,
    id: &SearchId,
    files: &[PathBuf],
) -> Result<(Vec<Trial>, usize), Failure> {
    let mut by_shard: BTreeMap<usize, (PathBuf, Vec<Line>)> = BTreeMap::new();
    let mut of = None;
    for path in files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::input(format!("{}: cannot read shard: {e}", path.display())))?;
        let mut shard = None;
        let mut lines = Vec::new();
        for (n, raw) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let at = |what: String| {
                Failure::input(format!("{}: line {}: {what}", path.display(), n + 1))
            };
            let line: Line = serde_json::from_str(raw).map_err(|e| {
                at(format!(
                    "not a recommend shard line: {}",
                    routerlab_experiment::one_line(&e.to_string())
                ))
            })?;
            let (i, total) = line
                .recommend
                .shard
                .split_once('/')
                .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
                .filter(|(i, n)| (1..=*n).contains(i))
                .ok_or_else(|| at(format!("shard `{}` is not I/N", line.recommend.shard)))?;
            let same = SearchId {
                shard: String::new(),
                file: id.file.clone(),
                ..line.recommend.clone()
            };
            if same != *id {
                return Err(at("from another search (its file, trials, sampler, rungs, batch or seed differ from these flags')".into()));
            }
            if *of.get_or_insert(total) != total || *shard.get_or_insert(i) != i {
                return Err(at("shards of other partitions mixed in one search".into()));
            }
            lines.push(line);
        }
        let Some(i) = shard else {
            return Err(Failure::input(format!("{}: no candidates", path.display())));
        };
        if let Some((other, _)) = by_shard.insert(i, (path.clone(), lines)) {
            return Err(Failure::input(format!(
                "{}: shard {i} is also {}",
                path.display(),
                other.display()
            )));
        }
    }
    let of = of.unwrap_or(1);
    if by_shard.len() != of {
        let missing: Vec<String> = (1..=of)
            .filter(|i| !by_shard.contains_key(i))
            .map(|i| i.to_string())
            .collect();
        return Err(Failure::input(format!(
            "shards missing: {} of {of}",
            missing.join(", ")
        )));
    }
    let shares: Vec<f64> = rungs(1, 3, id.rungs).iter().map(|r| r.0).collect();
    let mut trials = Vec::new();
    let mut replays = 0;
    for (_, (_, lines)) in by_shard {
        for line in lines {
            let candidate = rec.candidate(&line.picks)?;
            if let Some(rung) = line.rung {
                replays += rung.min(shares.len() - 1) + 1;
            }
            trials.push(Trial {
                picks: line.picks,
                candidate,
                reached: line.rung.zip(line.measured),
                over_budget: line.over_budget,
            });
        }
    }
    Ok((trials, replays))
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
                    "{}: recommend judges latency: set `timing: trace`",
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
