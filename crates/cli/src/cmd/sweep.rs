//! `routerlab sweep` and `routerlab merge`: a grid of runs, run whole or in shards.
//!
//! The grid, the dealing of runs to shards and the gathering of shards back are
//! `routerlab_experiment::sweep`'s. Here: `--partition I/N` runs the runs of shard I and
//! writes one self-describing JSON line per run (which sweep, which run of how many, its
//! settings, its report, its curves); the batch system the user already has runs the N
//! shards; `merge` gathers them and prints what the whole sweep would have printed, byte
//! for byte, because both print from the same data.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use routerlab_experiment::OutputFormat;
use routerlab_experiment::sweep::{GridRun, Partition, ShardSet, SweepId, expand};
use routerlab_plot::Curves;
use routerlab_report::Report;
use routerlab_report::compare::{Comparison, Entry};
use routerlab_trace::Workload;
use serde::{Deserialize, Serialize};

use crate::cmd::OutputFile;
use crate::cmd::run::{prepare, run_all};
use crate::exit::Failure;
use crate::progress::Bars;
use routerlab_experiment::batch::Prepared;

/// `routerlab sweep`.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// The sweep file: experiment settings plus a `grid` of values to combine.
    #[arg(value_name = "SWEEP.yaml")]
    pub file: PathBuf,
    /// Run only shard I of N and write its runs as JSON lines: `I/N` or `count:I/N` (run k
    /// goes to shard k mod N + 1), or `hash:I/N` (by a hash of the run's name).
    #[arg(long, value_name = "I/N", help_heading = "Running")]
    pub partition: Option<String>,
    /// Where the JSON lines of `--partition` go [default: stdout].
    #[arg(long, short, value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,
    /// Runs at once, on threads [default: the number of cores].
    #[arg(long, value_name = "N", help_heading = "Running")]
    pub jobs: Option<usize>,
    /// Output format of the whole sweep [default: human].
    #[arg(long, value_name = "FORMAT", help_heading = "Output")]
    pub format: Option<OutputFormat>,
    /// Write SVG plots of the whole sweep into DIR.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub plot: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short, help_heading = "Output")]
    pub quiet: bool,
}

/// `routerlab merge`.
#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' JSON-lines files (all N of them).
    #[arg(value_name = "SHARD.jsonl", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format [default: human].
    #[arg(long, value_name = "FORMAT", help_heading = "Output")]
    pub format: Option<OutputFormat>,
    /// Write SVG plots of the whole sweep into DIR.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub plot: Option<PathBuf>,
}

/// One line of a shard's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SweepLine {
    sweep: SweepId,
    label: String,
    /// The grid values of this run.
    settings: BTreeMap<String, serde_json::Value>,
    report: Report,
    /// Present for timed runs.
    curves: Option<Curves>,
}

/// Runs a sweep, whole or one shard.
pub fn run(args: SweepArgs) -> Result<(), Failure> {
    let bytes = std::fs::read(&args.file).map_err(|e| {
        Failure::input(format!(
            "{}: cannot read sweep file: {e}",
            args.file.display()
        ))
    })?;
    let runs: Vec<GridRun> = expand(&args.file, &bytes)?;
    let partition = args
        .partition
        .as_deref()
        .map(Partition::parse)
        .transpose()
        .map_err(Failure::from)?;
    if partition.is_none() && args.output.is_some() {
        return Err(Failure::input(
            "--output is where --partition writes its JSON lines; a whole sweep prints to stdout",
        ));
    }
    if partition.is_some() && (args.plot.is_some() || args.format.is_some()) {
        return Err(Failure::input(
            "a shard writes JSON lines; --format and --plot belong to `routerlab merge`",
        ));
    }
    let jobs = match args.jobs {
        Some(0) => return Err(Failure::input("--jobs must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let total = runs.len();
    let selected: Vec<(usize, GridRun)> = runs
        .into_iter()
        .enumerate()
        .filter(|(index, run)| partition.is_none_or(|p| p.holds(*index, &run.label)))
        .collect();
    if let Some(dir) = &args.plot {
        crate::cmd::plot::check_dir(dir, &args.file)?;
    }
    // One deadline for the sweep: the first run's (the grid may not vary it).
    crate::cmd::run::watch_plugins(
        selected
            .first()
            .and_then(|(_, r)| r.experiment.plugin_timeout_ms),
    );
    // Resolve and create everything before running anything; one workload per trace.
    let mut prepared: Vec<Prepared> = Vec::with_capacity(selected.len());
    let mut settings = Vec::with_capacity(selected.len());
    for (_, run) in &selected {
        let experiment = run
            .experiment
            .with_policy(&run.policy)
            .map_err(|e| Failure::InRun {
                kind: "run",
                label: run.label.clone(),
                failure: Box::new(e.into()),
            })?;
        prepared.push(prepare("run", run.label.clone(), &experiment)?);
        settings.push(run.settings.clone());
    }
    // After the plugins are loaded: their libraries are inputs too.
    if let Some(path) = &args.output {
        let mut inputs: Vec<&Path> = selected
            .iter()
            .flat_map(|(_, r)| r.experiment.inputs())
            .collect();
        inputs.push(&args.file);
        crate::cmd::refuse_input_as_output("--output", path, &inputs)?;
    }
    let workloads = load_workloads(&mut prepared)?;
    let bars = Bars::new(args.quiet);
    let keep = partition.is_some() || args.plot.is_some();
    let outcomes = run_all("run", &mut prepared, &workloads, jobs, &bars, keep)?;

    let mut lines = Vec::with_capacity(outcomes.len());
    for (((index, _), p), (outcome, settings)) in selected
        .iter()
        .zip(&prepared)
        .zip(outcomes.into_iter().zip(settings))
    {
        let workload = &workloads[p.workload];
        let mut report = outcome.report;
        let curves = crate::cmd::plot::curves_of(&report, &outcome.records);
        report.run = Some(p.run.run_info(
            workload.source.clone(),
            workload.block_size,
            &workload.skipped,
        ));
        lines.push(SweepLine {
            sweep: partition
                .unwrap_or_default()
                .id(&args.file, &bytes, total, *index),
            label: p.label.clone(),
            settings,
            report,
            curves: if keep { curves } else { None },
        });
    }
    match partition {
        Some(_) => write_lines(&lines, args.output.as_deref()),
        None => finish(lines, args.format, args.plot.as_deref()),
    }
}

/// Merges shard files into the whole sweep's output.
pub fn merge(args: MergeArgs) -> Result<(), Failure> {
    let mut shards = ShardSet::default();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::input(format!("{}: cannot read shard: {e}", path.display())))?;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let line: SweepLine = serde_json::from_str(line).map_err(|e| {
                Failure::input(format!(
                    "{}: line {}: not a sweep shard line: {}",
                    path.display(),
                    n + 1,
                    routerlab_experiment::one_line(&e.to_string())
                ))
            })?;
            let (id, label) = (line.sweep.clone(), line.label.clone());
            shards.add(path, n + 1, &id, &label, line)?;
        }
    }
    finish(shards.finish()?, args.format, args.plot.as_deref())
}

/// The whole sweep's output, from its lines in run order: the same for `sweep` and `merge`.
fn finish(
    lines: Vec<SweepLine>,
    format: Option<OutputFormat>,
    plot: Option<&Path>,
) -> Result<(), Failure> {
    let mut curves = Vec::new();
    let mut comparison = Comparison::default();
    for line in lines {
        curves.push((line.label.clone(), line.curves));
        comparison.policies.push(Entry {
            label: line.label,
            report: line.report,
        });
    }
    if let Some(dir) = plot {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::input(format!(
                "--plot {}: cannot create the directory: {e}",
                dir.display()
            ))
        })?;
        crate::cmd::plot::write_plots(dir, &comparison, &curves)?;
    }
    match format.unwrap_or(OutputFormat::Human) {
        OutputFormat::Human => crate::cmd::print_stdout(&comparison.to_run_table(), "the sweep"),
        other => crate::cmd::compare::print(&comparison, other),
    }
}

/// Writes a shard's lines to `path` (temporary file, renamed when complete) or stdout.
fn write_lines(lines: &[SweepLine], path: Option<&Path>) -> Result<(), Failure> {
    let mut text = String::new();
    for line in lines {
        text.push_str(&serde_json::to_string(line).expect("a sweep line serialises"));
        text.push('\n');
    }
    let Some(path) = path else {
        return crate::cmd::print_stdout(&text, "the shard's runs");
    };
    let fail = |source| Failure::Output {
        what: "the shard's runs",
        path: path.to_owned(),
        source,
    };
    let file = OutputFile::create(path).map_err(fail)?;
    let mut writer = file.writer().map_err(fail)?;
    writer.write_all(text.as_bytes()).map_err(fail)?;
    drop(writer);
    file.commit().map_err(fail)
}

/// One workload per distinct trace (and reading options), with the engine block sizes of
/// every run that reads it; sets each run's `workload`.
fn load_workloads(prepared: &mut [Prepared]) -> Result<Vec<Workload>, Failure> {
    let mut keys: Vec<(PathBuf, String, Vec<u32>)> = Vec::new();
    for p in prepared.iter_mut() {
        let key = (p.run.trace.clone(), format!("{:?}", p.run.trace_options));
        let sizes = p
            .run
            .timed
            .as_ref()
            .map(|t| t.engine_block_sizes())
            .unwrap_or_default();
        match keys.iter().position(|(t, o, _)| (t, o) == (&key.0, &key.1)) {
            Some(i) => {
                keys[i].2.extend(sizes);
                p.workload = i;
            }
            None => {
                p.workload = keys.len();
                keys.push((key.0, key.1, sizes));
            }
        }
    }
    let mut workloads = Vec::with_capacity(keys.len());
    for (trace, _, sizes) in keys {
        let run = &prepared
            .iter()
            .find(|p| p.run.trace == trace)
            .expect("a run reads it")
            .run;
        if let Some(note) = &run.trace_note {
            eprintln!("{note}");
        }
        let reader = run.reader()?;
        crate::cmd::note_load_only(&trace, reader.format());
        workloads.push(Workload::load(reader, &sizes)?);
    }
    Ok(workloads)
}
