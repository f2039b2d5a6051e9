//! `routerlab replay`: one matcher (and detector) over one trace, time-free or timed.
//!
//! Settings come from three layers, later winning: defaults, an experiment YAML file
//! (`--config`), then flags. Nothing is printed on stdout unless the replay completed.

use std::path::Path;
use std::time::Instant;

use routerlab_report::Report;
use routerlab_report::compare::{Comparison, Entry};
use routerlab_sim::observer::{JsonLines, NoObserver, Observer, Recorder, Tee};
use routerlab_sim::timed::{replay_timed_streamed, streams};
use routerlab_sim::timefree;
use routerlab_trace::Workload;

use routerlab_experiment::{OutputFormat, Run, resolve};

use crate::cmd::OutputFile;
use crate::exit::Failure;
use crate::opts::ReplayArgs;
use crate::progress::Bars;

/// Runs a replay and prints its report.
pub fn run(flags: ReplayArgs) -> Result<(), Failure> {
    let done = replay(flags)?;
    let (report, spec) = (&done.single.policies[0].report, &done.spec);
    print_report(report, spec, &done.single)?;
    if spec.format == OutputFormat::Human {
        eprintln!(
            "replayed {} requests in {:.3} s ({:.0} decisions/s, {:.1} MB/s of trace)",
            report.requests,
            done.elapsed,
            report.requests as f64 / done.elapsed.max(1e-9),
            done.trace_bytes as f64 / 1e6 / done.elapsed.max(1e-9),
        );
    }
    Ok(())
}

/// A finished replay: its report (as the one entry of a comparison, for the CSV and plot
/// writers), its settings, how long it took and how many trace bytes it read.
pub(crate) struct Replayed {
    pub(crate) single: Comparison,
    pub(crate) spec: Run,
    pub(crate) elapsed: f64,
    pub(crate) trace_bytes: u64,
}

/// Runs a replay (plots and per-request records written as asked) and returns its report.
pub(crate) fn replay(flags: ReplayArgs) -> Result<Replayed, Failure> {
    let opts = flags.experiment()?;
    let from_log = flags.from_log.clone();
    if opts.policies.is_some() {
        return Err(Failure::input(
            "experiment `policies` is for `routerlab compare`; replay runs one matcher (`matcher`)",
        ));
    }
    let settings = flags.settings;
    let (quiet, plot, config_file) = (settings.output.quiet, settings.output.plot, settings.config);
    crate::cmd::run::watch_plugins(opts.plugin_timeout_ms);
    let spec = resolve(&opts)?;
    if let Some(kv) = opts.kv_explained()? {
        eprintln!("{kv}");
    }
    let mut replicas = crate::cmd::build_replicas(&spec)?;
    if let Some(dir) = &plot {
        crate::cmd::plot::check_dir(dir, &spec.trace)?;
    }
    if let Some(out) = &spec.requests_out {
        let mut inputs = opts.inputs();
        inputs.extend(config_file.as_deref());
        crate::cmd::refuse_input_as_output("--requests-out", out, &inputs)?;
    }
    let started = Instant::now();
    if let Some(note) = &spec.trace_note {
        eprintln!("{note}");
    }
    let mut reader = spec.reader()?;
    crate::cmd::note_load_only(&spec.trace, reader.format());
    let bars = Bars::new(quiet);
    // Only a plot needs every finished request kept to the end.
    let mut recorder = Recorder::default();
    let mut nothing = NoObserver;
    let keep: &mut dyn Observer = match plot {
        Some(_) => &mut recorder,
        None => &mut nothing,
    };
    let (mut report, skipped, source, block_size) = match &spec.timed {
        // An agentic trace's dependencies are resolved over the whole file: loaded, then
        // replayed in dependency order.
        None if reader.format().is_agentic() => {
            let workload = Workload::load(reader, &[])?;
            let mut bar = bars.bar(&spec.matcher, Some(workload.requests.len() as u64));
            let report = with_records(spec.requests_out.as_deref(), &mut bar, |watchers| {
                timefree::replay_workload(&workload, &mut replicas, spec.cache_blocks, watchers)
            })?;
            bar.finish();
            loaded(report, &workload)
        }
        None => {
            // The time-free replay streams the file: its length in requests is not known.
            let mut bar = bars.bar(&spec.matcher, None);
            let report = with_records(spec.requests_out.as_deref(), &mut bar, |watchers| {
                timefree::replay(&mut reader, &mut replicas, spec.cache_blocks, watchers)
            })?;
            bar.finish();
            (
                report,
                reader.skipped().clone(),
                reader.source(),
                reader.block_size(),
            )
        }
        // A timed replay reads the trace as it goes, unless it is an agentic trace (its
        // requests may wait for others further down the file).
        Some(timed) if streams(reader.format()) && spec.warm_up.is_empty() => {
            let reopen = || spec.reader();
            let mut bar = bars.bar(&spec.matcher, None);
            let mut watchers = Tee(&mut bar, keep);
            let mut read = None;
            let report = with_records(spec.requests_out.as_deref(), &mut watchers, |watchers| {
                let (report, trace) =
                    replay_timed_streamed(reader, &reopen, &mut replicas, timed, watchers)?;
                read = Some(trace);
                Ok(report)
            })?;
            bar.finish();
            let read = read.expect("a finished replay says what it read");
            (report, read.skipped, read.source, read.block_size)
        }
        Some(timed) => {
            let workload = Workload::load(reader, &timed.engine_block_sizes())?;
            let mut bar = bars.bar(&spec.matcher, Some(workload.requests.len() as u64));
            let mut watchers = Tee(&mut bar, keep);
            let report = with_records(spec.requests_out.as_deref(), &mut watchers, |watchers| {
                spec.replay_loaded(&workload, &mut replicas, watchers)
            })?;
            bar.finish();
            loaded(report, &workload)
        }
    };
    let trace_bytes = source.bytes;
    let elapsed = started.elapsed().as_secs_f64();
    if !skipped.is_empty() {
        let total: u64 = skipped.values().sum();
        let reasons: Vec<String> = skipped.iter().map(|(r, n)| format!("{n} {r}")).collect();
        eprintln!(
            "warning: skipped {total} invalid line(s) of {}: {}",
            spec.trace.display(),
            reasons.join(", ")
        );
    }
    report.run = Some(spec.scenario.run_info(source, block_size, &skipped));
    if let (Some(log), Some(timed)) = (&from_log, &mut report.timed) {
        timed.off_policy = off_policy(log, &spec)?;
    }
    let label = match &spec.detector {
        Some(detector) => format!("{} + {detector}", spec.matcher),
        None => spec.matcher.clone(),
    };
    let single = Comparison {
        policies: vec![Entry { label, report }],
    };
    if let Some(dir) = &plot {
        let entry = &single.policies[0];
        let curves = crate::cmd::plot::curves_of(&entry.report, &recorder.records);
        crate::cmd::plot::write_plots(dir, &single, &[(entry.label.clone(), curves)])?;
        crate::cmd::plot::write_scaling(dir, &entry.report)?;
    }
    Ok(Replayed {
        single,
        spec,
        elapsed,
        trace_bytes,
    })
}

/// With a decision log whose policy chose at random: this run's policy asked in each logged
/// state, and the estimates of its TTFT from the logged decisions it takes alike.
fn off_policy(
    log: &Path,
    spec: &Run,
) -> Result<Option<routerlab_report::off_policy::OffPolicyReport>, Failure> {
    let text = std::fs::read_to_string(log)
        .map_err(|e| Failure::input(format!("--from-log {}: cannot read: {e}", log.display())))?;
    let records = routerlab_calibrate::formats::decision_log::records(&text)
        .map_err(|e| Failure::input(format!("--from-log {}:{e}", log.display())))?;
    if records.iter().all(|r| r.propensity.is_none()) {
        return Ok(None);
    }
    // A router of its own, its plugins fresh (the replay's learned the replay's choices)
    // and seeded apart: plugins seeded alike draw alike, and the new policy's draws must
    // not be the logged policy's own.
    let mut judged = spec.clone();
    judged.scenario.seed ^= 0x4a55_4447_4544_0001;
    let mut replicas = crate::cmd::build_replicas(&judged)?;
    let router = replicas.router_mut(0);
    let chosen = routerlab_sim::logged::judge(&records, router)?;
    let position = |name: &str| (0..router.table().len()).find(|&p| router.table().name(p) == name);
    let decisions: Vec<routerlab_report::off_policy::LoggedDecision> = (records.iter())
        .zip(&chosen)
        .filter(|(r, _)| r.status == "ok")
        .filter_map(|(r, chosen)| {
            Some(routerlab_report::off_policy::LoggedDecision {
                propensity: r.propensity?,
                logged: position(&r.endpoint)?,
                chosen: (*chosen)?,
                value: r.ttft_ms?,
            })
        })
        .collect();
    Ok(routerlab_report::off_policy::estimate(
        "ttft_ms",
        &records[0].policy,
        &decisions,
    ))
}

/// A report of a loaded workload, with what the `run` block takes from the workload.
fn loaded(
    report: Report,
    workload: &Workload,
) -> (
    Report,
    std::collections::BTreeMap<&'static str, u64>,
    routerlab_trace::TraceSource,
    u32,
) {
    (
        report,
        workload.skipped.clone(),
        workload.source.clone(),
        workload.block_size,
    )
}

/// Runs `replay` with `watchers`, and with per-request records written to `path` (through
/// a temporary file renamed into place once the run succeeded) when it is given.
fn with_records(
    path: Option<&Path>,
    watchers: &mut dyn routerlab_sim::observer::Observer,
    replay: impl FnOnce(
        &mut dyn routerlab_sim::observer::Observer,
    ) -> Result<Report, routerlab_sim::SimError>,
) -> Result<Report, Failure> {
    let Some(path) = path else {
        return Ok(replay(watchers)?);
    };
    let fail = |source| Failure::Output {
        what: "per-request records",
        path: path.to_owned(),
        source,
    };
    let file = OutputFile::create(path).map_err(fail)?;
    let writer = std::io::BufWriter::new(file.writer().map_err(fail)?);
    let mut lines = JsonLines::new(writer, path.to_owned());
    let report = replay(&mut Tee(watchers, &mut lines))?;
    drop(lines.finish()?);
    file.commit().map_err(fail)?;
    Ok(report)
}

fn print_report(report: &Report, spec: &Run, single: &Comparison) -> Result<(), Failure> {
    let text = match spec.format {
        OutputFormat::Csv => single.to_csv(),
        OutputFormat::Human => report.to_human(&spec.endpoints),
        OutputFormat::Json => serde_json::to_string_pretty(report)
            .map(|s| s + "\n")
            .expect("report serialises"),
        OutputFormat::Yaml => serde_yaml::to_string(report).expect("report serialises"),
    };
    crate::cmd::print_stdout(&text, "the report")
}
