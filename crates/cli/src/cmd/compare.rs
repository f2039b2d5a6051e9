//! `routerlab compare`: one trace, one set of replay settings, several policies, one table.
//!
//! The trace is read, checked and hashed once into a shared [`Workload`]; each policy then
//! runs on it on its own thread with its own plugin instances and router, exactly as
//! `replay` would run it alone (the same resolution of settings, the same drivers), so its
//! report is the one `replay` prints. Every plugin is loaded before anything runs, so a
//! typo in the fifth policy fails in a second, not after four replays. If any policy fails,
//! the command fails and prints no table: a comparison with a column missing is not one.

use clap::Args;
use std::path::{Path, PathBuf};

use routerlab_report::compare::{Comparison, Entry, find_metric};
use routerlab_sim::Report;
use routerlab_trace::Workload;

use routerlab_experiment::policy::{self, Policy, PolicyEntry, PolicyParts};
use routerlab_experiment::{Experiment, OutputFormat, one_line};

use crate::cmd::run::{prepare, run_all};
use crate::exit::Failure;
use crate::opts::SettingsArgs;
use crate::progress::Bars;

/// `routerlab compare`: the replay settings, and the policies to run under them (the
/// policies' plugins come from `--policy`: it has no `--matcher` or `--requests-out`).
#[derive(Args, Debug, Default, Clone)]
pub struct CompareOpts {
    /// A policy: 'MATCHER [{CONFIG}] [+ DETECTOR [{CONFIG}]]', e.g. 'lcp + num-requests
    /// {max_running: 32}' (repeatable; two or more, here or in the experiment file).
    #[arg(long = "policy", value_name = "POLICY", help_heading = "Policies")]
    pub policies: Vec<String>,
    /// Policies run at once, on threads [default: the number of cores].
    #[arg(long, value_name = "N", help_heading = "Running")]
    pub jobs: Option<usize>,
    /// Order the policies best first by this metric (a row of the table, e.g.
    /// timed.ttft.p99).
    #[arg(long, value_name = "METRIC", help_heading = "Output")]
    pub sort_by: Option<String>,
    /// Run nothing: build the comparison from saved reports (`replay --format json|yaml`,
    /// or a `compare --format json|yaml` output).
    #[arg(long, value_name = "REPORT", num_args = 1.., help_heading = "Policies")]
    pub from: Vec<PathBuf>,
    /// The replay settings every policy runs under.
    #[command(flatten)]
    pub settings: SettingsArgs,
}

/// Runs the comparison and prints it.
pub fn run(opts: CompareOpts) -> Result<(), Failure> {
    if !opts.from.is_empty() {
        return from_saved(opts);
    }
    let sort_by = opts.sort_by.as_deref().map(find_metric).transpose();
    let sort_by = sort_by.map_err(|e| Failure::input(e.to_string()))?;
    let (mut comparison, format) = compare(opts)?;
    if let Some(metric) = sort_by {
        comparison.sort_by(metric);
    }
    print(&comparison, format)
}

/// Runs every policy of a comparison (plots written as asked) and returns their reports in
/// the order given, and the output format asked for.
pub(crate) fn compare(opts: CompareOpts) -> Result<(Comparison, OutputFormat), Failure> {
    let merged = opts.settings.experiment()?;
    crate::cmd::run::watch_plugins(merged.plugin_timeout_ms);
    if merged.given("requests_out") {
        return Err(Failure::input(
            "compare keeps no requests: --requests-out belongs to replay",
        ));
    }
    for (key, flag) in [
        ("detector", "--detector (`detector`)"),
        ("matcher_config", "--matcher-config"),
        ("detector_config", "--detector-config"),
    ] {
        if merged.given(key) && !merged.given("matcher") {
            return Err(Failure::input(format!(
                "{flag} without a matcher: compare's policies come from --policy (or `policies`), and a run's own `matcher` is one more"
            )));
        }
    }
    let policies = policies_of(&opts, &merged)?;
    let format = merged.format.unwrap_or(OutputFormat::Human);
    let jobs = match opts.jobs {
        Some(0) => return Err(Failure::input("--jobs must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let (quiet, plot_dir) = (
        opts.settings.output.quiet,
        opts.settings.output.plot.clone(),
    );

    // Resolve every policy's settings and create its plugins before running anything.
    let mut prepared = Vec::with_capacity(policies.len());
    for policy in policies {
        let experiment = merged.with_policy(&policy).map_err(|e| Failure::InRun {
            kind: "policy",
            label: policy.label.clone(),
            failure: Box::new(e.into()),
        })?;
        prepared.push(prepare("policy", policy.label, &experiment)?);
    }
    let first = &prepared[0].run;
    if let Some(dir) = &plot_dir {
        crate::cmd::plot::check_dir(dir, &first.trace)?;
    }
    if let Some(note) = &first.trace_note {
        eprintln!("{note}");
    }
    let reader = first.reader()?;
    crate::cmd::note_load_only(&first.trace, reader.format());
    let sizes = first
        .timed
        .as_ref()
        .map(|t| t.engine_block_sizes())
        .unwrap_or_default();
    let workload = Workload::load(reader, &sizes)?;
    if !workload.skipped.is_empty() {
        let total: u64 = workload.skipped.values().sum();
        eprintln!(
            "warning: skipped {total} invalid line(s) of {}",
            first.trace.display()
        );
    }

    let bars = Bars::new(quiet);
    let workloads = [workload];
    let outcomes = run_all(
        "policy",
        &mut prepared,
        &workloads,
        jobs,
        &bars,
        plot_dir.is_some(),
    )?;
    let [workload] = workloads;
    let mut comparison = Comparison::default();
    let mut records = Vec::new();
    for (p, outcome) in prepared.iter().zip(outcomes) {
        let mut report = outcome.report;
        let curves = crate::cmd::plot::curves_of(&report, &outcome.records);
        report.run = Some(p.run.run_info(
            workload.source.clone(),
            workload.block_size,
            &workload.skipped,
        ));
        comparison.policies.push(Entry {
            label: p.label.clone(),
            report,
        });
        records.push((p.label.clone(), curves));
    }
    // Plotted in the order given, so a policy keeps its colour whatever the table's order.
    if let Some(dir) = &plot_dir {
        crate::cmd::plot::write_plots(dir, &comparison, &records)?;
    }
    Ok((comparison, format))
}

/// The policies from the flags, else the experiment file; at least two, labels distinct.
fn policies_of(opts: &CompareOpts, merged: &Experiment) -> Result<Vec<Policy>, Failure> {
    let policies: Vec<Policy> = if !opts.policies.is_empty() {
        opts.policies
            .iter()
            .map(|text| policy::parse(text))
            .collect::<Result<_, _>>()
            .map_err(Failure::input)?
    } else {
        merged
            .policies
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(PolicyEntry::resolve)
            .collect::<Result<_, _>>()
            .map_err(|e| Failure::input(format!("experiment `policies`: {e}")))?
    };
    // A described run's own policy (an experiment file's `matcher`, as `recommend`'s winner
    // has) is compared first, beside the others.
    let mut policies = policies;
    if let Some(matcher) = merged.matcher.clone().filter(|_| merged.given("matcher")) {
        let own = PolicyEntry::Parts(PolicyParts {
            matcher,
            matcher_config: merged.matcher_config.clone(),
            detector: merged.detector.clone(),
            detector_config: merged.detector_config.clone(),
            label: None,
        })
        .resolve()
        .map_err(|e| Failure::input(format!("the run's own matcher: {e}")))?;
        policies.insert(0, own);
    }
    if policies.len() < 2 {
        return Err(Failure::input(format!(
            "compare needs two or more policies (got {}): pass --policy once per policy, or list them under `policies` in the experiment file",
            policies.len()
        )));
    }
    for (i, p) in policies.iter().enumerate() {
        if policies[..i].iter().any(|q| q.label == p.label) {
            return Err(Failure::input(format!(
                "policy `{}` is given twice",
                p.label
            )));
        }
    }
    Ok(policies)
}

/// `compare --from`: the comparison of saved reports.
fn from_saved(opts: CompareOpts) -> Result<(), Failure> {
    let settings = &opts.settings;
    let runs_something = !opts.policies.is_empty()
        || settings.trace.trace.is_some()
        || settings.config.is_some()
        || settings.timed.timing.is_some()
        || opts.jobs.is_some();
    if runs_something {
        return Err(Failure::input(
            "compare --from reads saved reports and runs nothing: drop --policy, --trace, --config and the other replay settings",
        ));
    }
    if settings.output.plot.is_some() {
        return Err(Failure::input(
            "compare --from has no per-request records to plot over time; plot when running the comparison",
        ));
    }
    let mut comparison = Comparison::default();
    for path in &opts.from {
        for entry in read_saved(path)? {
            if comparison.policies.iter().any(|e| e.label == entry.label) {
                return Err(Failure::input(format!(
                    "{}: policy `{}` is already in an earlier report",
                    path.display(),
                    entry.label
                )));
            }
            comparison.policies.push(entry);
        }
    }
    let hashes: std::collections::BTreeSet<&str> = comparison
        .policies
        .iter()
        .filter_map(|e| e.report.run.as_ref())
        .map(|r| r.trace.content_hash.as_str())
        .collect();
    if hashes.len() > 1 {
        eprintln!("warning: these reports come from different traces");
    }
    if let Some(metric) = opts.sort_by.as_deref() {
        comparison.sort_by(find_metric(metric).map_err(|e| Failure::input(e.to_string()))?);
    }
    print(
        &comparison,
        settings.output.format.unwrap_or(OutputFormat::Human),
    )
}

/// The entries of one saved file: a comparison's, or one report labelled by its run.
fn read_saved(path: &Path) -> Result<Vec<Entry>, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::input(format!("{}: cannot read report: {e}", path.display())))?;
    let bad = |e: serde_yaml::Error| {
        Failure::input(format!(
            "{}: not a routerlab report or comparison: {}",
            path.display(),
            one_line(&e.to_string())
        ))
    };
    let tree: serde_yaml::Value = serde_yaml::from_str(&text).map_err(bad)?;
    if tree.get("policies").is_some() {
        let comparison: Comparison = serde_yaml::from_value(tree).map_err(bad)?;
        return Ok(comparison.policies);
    }
    let report: Report = serde_yaml::from_value(tree).map_err(bad)?;
    let mut label = report.run.as_ref().map_or_else(
        || {
            path.file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
        },
        label_of_run,
    );
    // A fleet a scaler sized is that scaler's as much as the policy's.
    if let Some(scaling) = report.timed.as_ref().and_then(|t| t.scaling.as_ref()) {
        label = format!("{label} ~ {}", scaling.scaler);
    }
    Ok(vec![Entry { label, report }])
}

/// The label of a saved run: its matcher, `+ detector` when it had one, and its pools
/// (`2P+2D`) when its fleet was disaggregated.
fn label_of_run(run: &routerlab_report::RunInfo) -> String {
    let policy = match &run.detector {
        Some(d) => format!("{} + {}", run.matcher.name, d.name),
        None => run.matcher.name.clone(),
    };
    match &run.pools {
        Some(pools) => format!(
            "{policy} {}P+{}D",
            pools.prefill_endpoints, pools.decode_endpoints
        ),
        None => policy,
    }
}

/// Prints the comparison in `format`.
pub(crate) fn print(comparison: &Comparison, format: OutputFormat) -> Result<(), Failure> {
    let text = match format {
        OutputFormat::Human => comparison.to_table(),
        OutputFormat::Json => serde_json::to_string_pretty(comparison)
            .map(|s| s + "\n")
            .expect("a comparison serialises"),
        OutputFormat::Yaml => serde_yaml::to_string(comparison).expect("a comparison serialises"),
        OutputFormat::Csv => comparison.to_csv(),
    };
    crate::cmd::print_stdout(&text, "the comparison")
}
