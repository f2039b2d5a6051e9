//! `routerlab snapshot FILE.snap [replay flags]`: a replay's report (or a comparison's,
//! with `--policy`) as an insta snapshot,
//! so a policy author's change in load spread, hit ratio or latency shows up in review as
//! a diff, with the workflow insta users know: `--check` compares and leaves
//! `FILE.snap.new` beside a stored snapshot that moved; `--accept` (or `cargo insta
//! review`) takes it.
//!
//! What would differ between machines or releases is redacted: the tool version (unless
//! `--keep-version`) and an absolute trace path (its file name is kept). Latencies and
//! other timed figures are rounded to `--digits` significant digits, so a change in the
//! engine model's last digit does not churn every snapshot while a real change still shows.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use routerlab_report::redact::{redacted_keeping_version, shown};
use serde_yaml::Value;

use crate::exit::Failure;
use crate::opts::ReplayArgs;

/// `routerlab snapshot`.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// The snapshot file (conventionally NAME.snap, beside the plugin's tests).
    #[arg(value_name = "FILE.snap")]
    pub file: PathBuf,
    /// Compare with the stored snapshot instead of writing it: exit 4 and write
    /// FILE.snap.new when a statistic moved.
    #[arg(long, conflicts_with = "accept", help_heading = "Snapshot")]
    pub check: bool,
    /// Take FILE.snap.new as the stored snapshot (after a failed --check).
    #[arg(long, help_heading = "Snapshot")]
    pub accept: bool,
    /// Significant digits kept of the timed figures (latencies, throughput, makespan).
    #[arg(long, value_name = "N", default_value_t = 3, help_heading = "Snapshot")]
    pub digits: u32,
    /// Keep the tool version in the snapshot (it changes with every release).
    #[arg(long, help_heading = "Snapshot")]
    pub keep_version: bool,
    /// Snapshot a comparison instead of one replay: a policy as for `compare`
    /// (repeatable), or `policies` in the experiment file.
    #[arg(long = "policy", value_name = "POLICY", help_heading = "Policies")]
    pub policies: Vec<String>,
    /// The replay to snapshot: the same flags as `routerlab replay`.
    #[command(flatten)]
    pub replay: ReplayArgs,
}

/// The insta file: its header (source and expression), then the YAML body.
fn snapshot_text(expression: &str, body: &Value) -> String {
    let yaml = serde_yaml::to_string(body).expect("a value serialises");
    format!(
        "---\nsource: routerlab snapshot\nexpression: {}\n---\n{yaml}",
        serde_json::to_string(expression).expect("a string serialises")
    )
}

/// The YAML body of an insta file (after the second `---` line).
fn body_of(text: &str, path: &Path) -> Result<Value, Failure> {
    let rest = text
        .strip_prefix("---\n")
        .and_then(|t| t.split_once("\n---\n"))
        .map(|(_, body)| body)
        .ok_or_else(|| {
            Failure::input(format!(
                "{}: not an insta snapshot (a `---` header, then the body)",
                path.display()
            ))
        })?;
    // A parser takes time quadratic in bracket nesting: refuse deep nesting first, as for
    // experiment files (a snapshot this tool wrote nests a handful of levels).
    routerlab_core::config::check_nesting(rest)
        .map_err(|e| Failure::input(format!("{}: body: {e}", path.display())))?;
    serde_yaml::from_str(rest).map_err(|e| Failure::input(format!("{}: body: {e}", path.display())))
}

/// Every scalar of `value` by its dotted path.
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Mapping(map) => {
            for (key, v) in map {
                let key = key
                    .as_str()
                    .map_or_else(|| format!("{key:?}"), str::to_owned);
                let path = if prefix.is_empty() {
                    key
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, v, out);
            }
        }
        Value::Sequence(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}.{i}"), v, out);
            }
        }
        // Strings quoted (a config's lines stay on one line of the diff).
        Value::String(text) => {
            let quoted = serde_json::to_string(text).expect("a string serialises");
            out.insert(prefix.to_owned(), quoted);
        }
        other => {
            let text = serde_yaml::to_string(other).unwrap_or_default();
            out.insert(prefix.to_owned(), text.trim().to_owned());
        }
    }
}

/// The statistics that moved: `path: old -> new`, one a line.
fn differences(stored: &Value, fresh: &Value) -> Vec<String> {
    let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
    flatten("", stored, &mut old);
    flatten("", fresh, &mut new);
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| match (old.get(key), new.get(key)) {
            (Some(a), Some(b)) if a == b => None,
            (a, b) => Some(format!(
                "{key}: {} -> {}",
                a.map_or("(absent)", String::as_str),
                b.map_or("(absent)", String::as_str)
            )),
        })
        .collect()
}

fn new_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// Runs the command.
pub fn run(args: SnapshotArgs) -> Result<(), Failure> {
    let pending = new_path(&args.file);
    if args.accept {
        // Onto what the name points to: a snapshot kept behind a link stays a link.
        let target =
            crate::cmd::output::resolve_links(&args.file).unwrap_or_else(|_| args.file.clone());
        std::fs::rename(&pending, &target).map_err(|e| {
            Failure::input(format!(
                "--accept: cannot take {} as {}: {e}",
                pending.display(),
                args.file.display()
            ))
        })?;
        eprintln!("accepted {}", args.file.display());
        return Ok(());
    }
    if args.digits == 0 || args.digits > 17 {
        return Err(Failure::input("--digits must be from 1 to 17"));
    }
    // Every file the run reads (whatever flag or key named it), and the experiment file.
    let described = args.replay.experiment()?;
    let config = args.replay.settings.config.clone();
    let mut inputs: Vec<&Path> = described.inputs();
    inputs.extend(config.as_deref());
    crate::cmd::refuse_input_as_output("the snapshot", &args.file, &inputs)?;
    let expression = expression_of(&args.replay, &args.policies);
    let mut replay = args.replay;
    replay.settings.output.quiet = true;
    let in_file = match &replay.settings.config {
        Some(path) => routerlab_experiment::Layers::new()
            .file(path)?
            .experiment()?
            .policies
            .is_some(),
        None => false,
    };
    let fresh = if args.policies.is_empty() && !in_file {
        let done = crate::cmd::replay::replay(replay)?;
        redacted_keeping_version(
            &done.single.policies[0].report,
            args.digits,
            args.keep_version,
        )
    } else {
        // Every policy's report, in the order given, under its label.
        if let Some(flag) = one_policys_flag(&replay) {
            return Err(Failure::input(format!(
                "a comparison takes its plugins from --policy (or `policies` in the experiment file), not {flag}"
            )));
        }
        let (comparison, _) = crate::cmd::compare::compare(crate::cmd::compare::CompareOpts {
            policies: args.policies,
            jobs: None,
            sort_by: None,
            from: Vec::new(),
            settings: replay.settings,
        })?;
        let entries: Vec<Value> = comparison
            .policies
            .iter()
            .map(|entry| {
                let mut map = serde_yaml::Mapping::new();
                map.insert("label".into(), entry.label.clone().into());
                map.insert(
                    "report".into(),
                    redacted_keeping_version(&entry.report, args.digits, args.keep_version),
                );
                Value::Mapping(map)
            })
            .collect();
        let mut body = serde_yaml::Mapping::new();
        body.insert("policies".into(), Value::Sequence(entries));
        Value::Mapping(body)
    };
    // Again now that the plugins are loaded: their libraries are inputs too.
    crate::cmd::refuse_input_as_output("the snapshot", &args.file, &inputs)?;
    let text = snapshot_text(&expression, &fresh);
    if !args.check {
        crate::cmd::write_output(&args.file, text.as_bytes(), "the snapshot")?;
        eprintln!("wrote {}", args.file.display());
        return Ok(());
    }
    let stored_text = std::fs::read_to_string(&args.file).map_err(|e| {
        Failure::input(format!(
            "{}: cannot read the stored snapshot ({e}); write it first, without --check",
            args.file.display()
        ))
    })?;
    let stored = body_of(&stored_text, &args.file)?;
    let moved = differences(&stored, &fresh);
    if moved.is_empty() {
        let _ = std::fs::remove_file(&pending);
        eprintln!("{} matches", args.file.display());
        return Ok(());
    }
    crate::cmd::write_output(&pending, text.as_bytes(), "the new snapshot")?;
    let mut message = format!(
        "{} differs in {} value(s); the new one is {} (accept with `routerlab snapshot {} --accept` or `cargo insta review`):",
        args.file.display(),
        moved.len(),
        pending.display(),
        args.file.display()
    );
    for line in &moved {
        let _ = write!(message, "\n  {line}");
    }
    Err(Failure::Differs(message))
}

/// The first flag given that names one policy's plugins or records, which a comparison
/// has no place for.
fn one_policys_flag(replay: &ReplayArgs) -> Option<&'static str> {
    let policy = &replay.policy;
    [
        (policy.matcher.is_some(), "--matcher"),
        (policy.matcher_config.is_some(), "--matcher-config"),
        (policy.detector.is_some(), "--detector"),
        (policy.detector_config.is_some(), "--detector-config"),
        (replay.requests_out.is_some(), "--requests-out"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag))
}

/// The run's command line as the snapshot's `expression`, paths as `shown`.
fn expression_of(opts: &ReplayArgs, policies: &[String]) -> String {
    let command = if policies.is_empty() {
        "replay"
    } else {
        "compare"
    };
    let mut parts = vec![command.to_owned()];
    for policy in policies {
        parts.push(format!("--policy '{policy}'"));
    }
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            parts.push(format!("{flag} {value}"));
        }
    };
    push("--matcher", opts.policy.matcher.clone());
    push("--detector", opts.policy.detector.clone());
    push("--trace", opts.settings.trace.trace.as_deref().map(shown));
    push("--config", opts.settings.config.as_deref().map(shown));
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_paths_that_moved() {
        let a: Value = serde_yaml::from_str("a: 1\nb: {c: 2, d: [1, 2]}\n").unwrap();
        let b: Value = serde_yaml::from_str("a: 1\nb: {c: 3, d: [1, 5]}\ne: x\n").unwrap();
        assert_eq!(
            differences(&a, &b),
            ["b.c: 2 -> 3", "b.d.1: 2 -> 5", "e: (absent) -> \"x\""]
        );
    }
}
