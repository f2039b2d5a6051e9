//! `routerlab sweep` and `routerlab merge`: a grid of runs, run whole or in shards.
//!
//! A sweep file is an experiment file plus a `grid`: each grid key (any experiment
//! setting, or `policy`) takes each of its values, and the runs are every combination, in
//! file order with the last key varying fastest. Each run's settings are the experiment
//! settings with its grid values laid over them, resolved by the very code `replay` uses.
//!
//! Sharding is how a sweep outgrows one machine without routerlab knowing any cluster:
//! `--partition I/N` runs the runs of shard I and writes one self-describing JSON line per
//! run (which sweep, which run of how many, its settings, its report, its curves); the
//! batch system the user already has runs the N shards; `merge` checks that every run is
//! there exactly once and prints what the whole sweep would have printed, byte for byte,
//! because both print from the same data.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use routerlab_core::hash::hash64;
use routerlab_plot::Curves;
use routerlab_report::Report;
use routerlab_report::compare::{Comparison, Entry};
use routerlab_trace::{TraceReader, Workload};
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

use crate::cmd::OutputFile;
use crate::cmd::run::{Prepared, prepare, run_all, with_policy};
use crate::exit::Failure;
use crate::opts::{OutputFormat, ReplayOpts};
use crate::policy::PolicyEntry;
use crate::progress::Bars;
use crate::spec::one_line;

/// `routerlab sweep`.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// The sweep file: experiment settings plus a `grid` of values to combine.
    #[arg(value_name = "SWEEP.yaml")]
    pub file: PathBuf,
    /// Run only shard I of N and write its runs as JSON lines: `I/N` or `count:I/N` (run k
    /// goes to shard k mod N + 1), or `hash:I/N` (by a hash of the run's name).
    #[arg(long, value_name = "I/N")]
    pub partition: Option<String>,
    /// Where the JSON lines of `--partition` go [default: stdout].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Runs at once, on threads [default: the number of cores].
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Output format of the whole sweep [default: human].
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
    /// Write SVG plots of the whole sweep into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `routerlab merge`.
#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' JSON-lines files (all N of them).
    #[arg(value_name = "SHARD.jsonl", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format [default: human].
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
    /// Write SVG plots of the whole sweep into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// How runs are dealt to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Dealing {
    /// Run k to shard k mod N + 1.
    Count,
    /// By a hash of the run's name.
    Hash,
}

/// One shard of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Partition {
    dealing: Dealing,
    shard: usize,
    of: usize,
}

impl Partition {
    fn parse(text: &str) -> Result<Partition, Failure> {
        let bad = |why: &str| Failure::input(format!("--partition {text}: {why}"));
        let (dealing, rest) = match text.split_once(':') {
            Some(("count", rest)) => (Dealing::Count, rest),
            Some(("hash", rest)) => (Dealing::Hash, rest),
            Some((other, _)) => {
                return Err(bad(&format!("`{other}` is neither `count` nor `hash`")));
            }
            None => (Dealing::Count, text),
        };
        let (i, n) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected I/N, e.g. 2/8"))?;
        let (shard, of): (usize, usize) = match (i.trim().parse(), n.trim().parse()) {
            (Ok(i), Ok(n)) => (i, n),
            _ => return Err(bad("I and N must be whole numbers")),
        };
        if of == 0 || shard == 0 || shard > of {
            return Err(bad(&format!("shard must be between 1 and N (N = {of})")));
        }
        Ok(Partition { dealing, shard, of })
    }

    /// The shard (1-based) that run `index` named `label` belongs to.
    fn shard_of(dealing: Dealing, of: usize, index: usize, label: &str) -> usize {
        match dealing {
            Dealing::Count => index % of + 1,
            Dealing::Hash => (hash64(label.as_bytes(), 0) % of as u64) as usize + 1,
        }
    }
}

/// The most runs a sweep may have (a grid, and what a shard line may claim).
const MAX_RUNS: usize = 100_000;

/// What is wrong with a shard line's `sweep` block, if anything: every field checked
/// against the others before anything is allocated from them.
fn shard_line_fault(id: &SweepId, label: &str) -> Option<String> {
    if !(1..=MAX_RUNS).contains(&id.runs) {
        return Some(format!("`sweep.runs` {} is not 1 to {MAX_RUNS}", id.runs));
    }
    if id.index >= id.runs {
        return Some(format!(
            "`sweep.index` {} is outside the sweep's {} runs",
            id.index, id.runs
        ));
    }
    let Some((i, n)) = id
        .shard
        .split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|(i, n)| (1..=*n).contains(i))
    else {
        return Some(format!(
            "`sweep.shard` `{}` is not I/N with 1 <= I <= N",
            id.shard
        ));
    };
    if Partition::shard_of(id.dealing, n, id.index, label) != i {
        return Some(format!(
            "run {} is not dealt to shard {} by {} dealing",
            id.index,
            id.shard,
            match id.dealing {
                Dealing::Count => "count",
                Dealing::Hash => "hash",
            }
        ));
    }
    None
}

/// One run of the grid, before it is resolved.
struct GridRun {
    label: String,
    settings: BTreeMap<String, serde_json::Value>,
    opts: ReplayOpts,
    policy: crate::policy::Policy,
}

/// Which sweep and which run a JSON line is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SweepId {
    /// The sweep file as given.
    file: String,
    /// xxh3-64 of the sweep file's bytes, hex.
    hash: String,
    /// Runs in the whole sweep.
    runs: usize,
    /// This run's position (0-based) in the grid.
    index: usize,
    /// `I/N`.
    shard: String,
    /// How runs were dealt.
    dealing: Dealing,
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
    let runs = expand(&args.file, &bytes)?;
    let partition = args
        .partition
        .as_deref()
        .map(Partition::parse)
        .transpose()?;
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
        .filter(|(index, run)| {
            partition
                .is_none_or(|p| Partition::shard_of(p.dealing, p.of, *index, &run.label) == p.shard)
        })
        .collect();
    if let Some(dir) = &args.plot {
        crate::cmd::plot::check_dir(dir, &args.file)?;
    }
    // One deadline for the sweep: the first run's (the grid may not vary it).
    crate::cmd::run::watch_plugins(selected.first().and_then(|(_, r)| r.opts.plugin_timeout_ms));
    // Resolve and create everything before running anything; one workload per trace.
    let mut prepared: Vec<Prepared> = Vec::with_capacity(selected.len());
    let mut settings = Vec::with_capacity(selected.len());
    for (_, run) in &selected {
        prepared.push(prepare(
            "run",
            run.label.clone(),
            with_policy(&run.opts, &run.policy),
            0,
        )?);
        settings.push(run.settings.clone());
    }
    // After the plugins are loaded: their libraries are inputs too.
    if let Some(path) = &args.output {
        let traces: Vec<PathBuf> = selected
            .iter()
            .filter_map(|(_, r)| r.opts.trace.clone())
            .collect();
        let mut inputs: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
        inputs.push(&args.file);
        crate::cmd::refuse_input_as_output("--output", path, &inputs)?;
    }
    let workloads = load_workloads(&mut prepared)?;
    let bars = Bars::new(args.quiet);
    let keep = partition.is_some() || args.plot.is_some();
    let outcomes = run_all(&mut prepared, &workloads, jobs, &bars, keep)?;

    let mut lines = Vec::with_capacity(outcomes.len());
    for (((index, _), p), (outcome, settings)) in selected
        .iter()
        .zip(&prepared)
        .zip(outcomes.into_iter().zip(settings))
    {
        let workload = &workloads[p.workload];
        let mut report = outcome.report;
        let curves = crate::cmd::plot::curves_of(&report, &outcome.records);
        report.run = Some(p.spec.run_info(
            workload.source.clone(),
            workload.block_size,
            &workload.skipped,
        ));
        let p_of = partition.unwrap_or(Partition {
            dealing: Dealing::Count,
            shard: 1,
            of: 1,
        });
        lines.push(SweepLine {
            sweep: SweepId {
                file: args.file.display().to_string(),
                hash: format!("{:016x}", hash64(&bytes, 0)),
                runs: total,
                index: *index,
                shard: format!("{}/{}", p_of.shard, p_of.of),
                dealing: p_of.dealing,
            },
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
    let mut by_index: BTreeMap<usize, (PathBuf, SweepLine)> = BTreeMap::new();
    let mut first: Option<(PathBuf, SweepId)> = None;
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
                    one_line(&e.to_string())
                ))
            })?;
            if let Some(fault) = shard_line_fault(&line.sweep, &line.label) {
                return Err(Failure::input(format!(
                    "{}: line {}: {fault}",
                    path.display(),
                    n + 1
                )));
            }
            match &first {
                None => first = Some((path.clone(), line.sweep.clone())),
                Some((first_path, id)) => {
                    let same = id.hash == line.sweep.hash
                        && id.runs == line.sweep.runs
                        && id.dealing == line.sweep.dealing
                        && shard_count(&id.shard) == shard_count(&line.sweep.shard);
                    if !same {
                        return Err(Failure::input(format!(
                            "{}: line {}: from another sweep or partitioning than {} ({} of {} runs, {} shards) ",
                            path.display(),
                            n + 1,
                            first_path.display(),
                            id.file,
                            id.runs,
                            shard_count(&id.shard)
                        )
                        .trim_end()
                        .to_owned()));
                    }
                }
            }
            if let Some((earlier, _)) = by_index.get(&line.sweep.index) {
                return Err(Failure::input(format!(
                    "run {} (`{}`) is in both {} and {}: shard {} was given twice",
                    line.sweep.index,
                    line.label,
                    earlier.display(),
                    path.display(),
                    line.sweep.shard
                )));
            }
            by_index.insert(line.sweep.index, (path.clone(), line));
        }
    }
    let Some((_, id)) = first else {
        return Err(Failure::input("the shard files hold no runs"));
    };
    let of = shard_count(&id.shard);
    let missing: Vec<usize> = (0..id.runs).filter(|i| !by_index.contains_key(i)).collect();
    if !missing.is_empty() {
        // Which shards: by dealing, from the indices (hash dealing needs the labels, which a
        // missing run does not have; then say which runs).
        let shards: std::collections::BTreeSet<usize> = match id.dealing {
            Dealing::Count => missing.iter().map(|i| i % of + 1).collect(),
            Dealing::Hash => std::collections::BTreeSet::new(),
        };
        let runs: Vec<String> = missing.iter().map(ToString::to_string).collect();
        let which = if shards.is_empty() {
            "a shard is missing".to_owned()
        } else {
            let names: Vec<String> = shards.iter().map(|s| format!("{s}/{of}")).collect();
            format!("shard {} missing", names.join(", "))
        };
        let plural = if runs.len() == 1 { "run" } else { "runs" };
        return Err(Failure::input(format!(
            "{}: {which}: no file holds {plural} {} (of {} runs)",
            id.file,
            runs.join(", "),
            id.runs
        )));
    }
    let lines = by_index.into_values().map(|(_, line)| line).collect();
    finish(lines, args.format, args.plot.as_deref())
}

/// `N` of a shard's `I/N`.
fn shard_count(shard: &str) -> usize {
    shard
        .split_once('/')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
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
        let key = (p.spec.trace.clone(), format!("{:?}", p.spec.trace_options));
        let sizes = p
            .spec
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
        let options = prepared
            .iter()
            .find(|p| p.spec.trace == trace)
            .map(|p| p.spec.trace_options.clone())
            .expect("a run reads it");
        let reader = TraceReader::open(&trace, options)?;
        crate::cmd::note_load_only(&trace, reader.format());
        workloads.push(Workload::load(reader, &sizes)?);
    }
    Ok(workloads)
}

/// The runs of a sweep file, in grid order.
fn expand(path: &Path, bytes: &[u8]) -> Result<Vec<GridRun>, Failure> {
    let at = |what: String| Failure::input(format!("{}: {what}", path.display()));
    let text = std::str::from_utf8(bytes).map_err(|_| at("not UTF-8 text".into()))?;
    routerlab_core::config::check_nesting(text).map_err(at)?;
    let root: Value = serde_yaml::from_str(text).map_err(|e| at(one_line(&e.to_string())))?;
    let Value::Mapping(mut base) = root else {
        return Err(at("expected a mapping of settings with a `grid`".into()));
    };
    let grid = match base.remove("grid") {
        Some(Value::Mapping(grid)) if !grid.is_empty() => grid,
        Some(_) => return Err(at("`grid` must map settings to lists of values".into())),
        None => {
            return Err(at(
                "no `grid`: list the values to sweep, e.g. `grid: {endpoints: [4, 8]}`".into(),
            ));
        }
    };
    let base_policy = base.remove("policy");
    for key in [
        "policies",
        "matcher",
        "detector",
        "matcher_config",
        "detector_config",
        "requests_out",
    ] {
        if base.contains_key(key) || grid.contains_key(key) {
            return Err(at(format!(
                "`{key}` has no place in a sweep: a run's plugins come from `policy` (in the grid or beside it)"
            )));
        }
    }
    let dir = path.parent().map(Path::to_owned).unwrap_or_default();
    let mut axes: Vec<(String, Vec<Value>)> = Vec::new();
    for (key, values) in grid {
        let Value::String(key) = key else {
            return Err(at("grid keys are setting names".into()));
        };
        let Value::Sequence(values) = values else {
            return Err(at(format!("grid `{key}`: expected a list of values")));
        };
        if values.is_empty() {
            return Err(at(format!(
                "grid `{key}`: the list is empty, so the sweep has no runs"
            )));
        }
        axes.push((key, values));
    }
    if base_policy.is_none() && !axes.iter().any(|(k, _)| k == "policy") {
        return Err(at(
            "no policy: put `policy` in the grid (or one `policy` beside it)".into(),
        ));
    }
    let count = axes
        .iter()
        .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()));
    let Some(count) = count.filter(|n| *n <= MAX_RUNS) else {
        return Err(at("the grid has more than 100,000 runs".into()));
    };
    let mut runs = Vec::with_capacity(count);
    for index in 0..count {
        // The odometer: the last axis turns fastest.
        let mut rest = index;
        let mut choice = vec![0; axes.len()];
        for (slot, (_, values)) in choice.iter_mut().zip(&axes).rev() {
            *slot = rest % values.len();
            rest /= values.len();
        }
        let mut settings_yaml = base.clone();
        let mut policy = base_policy.clone();
        let mut label_parts = Vec::new();
        let mut settings = BTreeMap::new();
        for ((key, values), pick) in axes.iter().zip(&choice) {
            let value = values[*pick].clone();
            label_parts.push(format!("{key}={}", compact(&value)));
            settings.insert(
                key.clone(),
                serde_json::to_value(&value).unwrap_or_default(),
            );
            if key == "policy" {
                policy = Some(value);
                continue;
            }
            let merged = match (settings_yaml.get(key.as_str()), &value) {
                (Some(Value::Mapping(under)), Value::Mapping(over)) if key == "engine" => {
                    let mut m: Mapping = under.clone();
                    for (k, v) in over {
                        m.insert(k.clone(), v.clone());
                    }
                    Value::Mapping(m)
                }
                _ => value,
            };
            settings_yaml.insert(Value::String(key.clone()), merged);
        }
        let label = label_parts.join(", ");
        let in_run = |what: String| at(format!("run {index} ({label}): {what}"));
        let mut opts: ReplayOpts = serde_yaml::from_value(Value::Mapping(settings_yaml))
            .map_err(|e| in_run(one_line(&e.to_string())))?;
        opts.trace = opts.trace.map(|t| dir.join(t));
        let policy: PolicyEntry = serde_yaml::from_value(policy.expect("checked above"))
            .map_err(|e| in_run(format!("policy: {}", one_line(&e.to_string()))))?;
        let policy = policy.resolve().map_err(in_run)?;
        runs.push(GridRun {
            label,
            settings,
            opts,
            policy,
        });
    }
    Ok(runs)
}

/// A grid value as it appears in a run's name.
fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_owned(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_parse_like_nextest_and_refuse_nonsense() {
        let p = Partition::parse("2/3").unwrap();
        assert_eq!((p.dealing, p.shard, p.of), (Dealing::Count, 2, 3));
        assert_eq!(Partition::parse("hash:1/1").unwrap().dealing, Dealing::Hash);
        for bad in ["0/3", "4/3", "1/0", "x/3", "2", "modulo:1/2"] {
            assert!(Partition::parse(bad).is_err(), "{bad}");
        }
        // Count dealing: every shard gets every N-th run.
        let shards: Vec<usize> = (0..7)
            .map(|i| Partition::shard_of(Dealing::Count, 3, i, ""))
            .collect();
        assert_eq!(shards, [1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn the_grid_expands_last_key_fastest_with_names_and_merged_engines() {
        let file = b"timing: trace\nengine: {preset: dynamo, max_num_seqs: 64}\ntrace: t.jsonl\ngrid:\n  policy: [lcp, 'lcp + num-requests {max_running: 8}']\n  endpoints: [4, 8]\n  engine: [{num_gpu_blocks: 1024}]\n";
        let runs = expand(Path::new("dir/sweep.yaml"), file).unwrap();
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "policy=lcp, endpoints=4, engine={\"num_gpu_blocks\":1024}",
                "policy=lcp, endpoints=8, engine={\"num_gpu_blocks\":1024}",
                "policy=lcp + num-requests {max_running: 8}, endpoints=4, engine={\"num_gpu_blocks\":1024}",
                "policy=lcp + num-requests {max_running: 8}, endpoints=8, engine={\"num_gpu_blocks\":1024}",
            ]
        );
        let engine = runs[0].opts.engine.clone().unwrap();
        assert_eq!(
            engine.max_num_seqs,
            Some(64),
            "the file's engine stays under the grid's"
        );
        assert_eq!(engine.num_gpu_blocks, Some(1024));
        assert_eq!(
            runs[0].opts.trace.as_deref(),
            Some(Path::new("dir/t.jsonl"))
        );
        assert_eq!(runs[3].policy.detector.as_deref(), Some("num-requests"));
    }

    #[test]
    fn bad_sweep_files_say_what_is_wrong() {
        let err = |text: &str| {
            expand(Path::new("s.yaml"), text.as_bytes())
                .err()
                .unwrap()
                .to_string()
        };
        assert!(err("trace: t\n").contains("no `grid`"));
        assert!(err("grid: {endpoints: [4]}\n").contains("no policy"));
        assert!(err("grid: {policy: [lcp], endpoints: []}\n").contains("the list is empty"));
        assert!(err("matcher: lcp\ngrid: {endpoints: [4]}\n").contains("`matcher` has no place"));
        let e = err("grid: {policy: [lcp], endpoints: [4], speedup: [fast]}\n");
        assert!(
            e.starts_with("s.yaml: run 0 (policy=lcp, endpoints=4, speedup=fast): "),
            "{e}"
        );
    }
}
