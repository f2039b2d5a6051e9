//! What `compare` saves: 8 policies on the Mooncake conversation trace, timed, 8 endpoints,
//! as one `compare --jobs 2` process against 8 `replay` processes one after another (what
//! a shell loop does). Both read the same file; `compare` reads and hashes it once and runs
//! two policies at a time.
//!
//! Each side runs `ROUNDS` times, alternating; the table shows the fastest and the median
//! wall time, and the peak resident memory of the processes (`/usr/bin/time -f %M`, when
//! it exists). Run: `cargo build --release --workspace && cargo bench -p routerlab-cli
//! --bench compare`.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const ROUNDS: usize = 5;

const POLICIES: [&str; 8] = [
    "round-robin",
    "least-inflight",
    "lcp + num-requests {max_running: 32}",
    "dynamo-kv",
    "sglang-cache-aware",
    "gie-default",
    "ps-prefixaware",
    "kubeai-chwbl",
];

const SETTINGS: [&str; 6] = [
    "--timing",
    "trace",
    "--engine",
    "dynamo",
    "--endpoints",
    "8",
];

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/mooncake-conversation.jsonl")
}

/// Runs `routerlab ARGS` to completion (stdout discarded); returns wall seconds and peak
/// resident kilobytes (0 when `/usr/bin/time` is not there to say).
fn timed_run(args: &[String]) -> (f64, u64) {
    let time = Path::new("/usr/bin/time");
    let mut cmd = if time.exists() {
        let mut cmd = Command::new(time);
        cmd.args(["-f", "%M"]).arg(env!("CARGO_BIN_EXE_routerlab"));
        cmd
    } else {
        Command::new(env!("CARGO_BIN_EXE_routerlab"))
    };
    cmd.args(args).arg("--quiet");
    let started = Instant::now();
    let output = cmd.output().expect("run routerlab");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {stderr}");
    let peak = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    (wall, peak)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let trace = trace().to_string_lossy().into_owned();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "compare: {} policies, Mooncake conversation trace, timed, 8 endpoints, {ROUNDS} rounds, {cores} cores",
        POLICIES.len()
    );
    let mut compare_args: Vec<String> = [
        "compare", "--trace", &trace, "--jobs", "2", "--format", "json",
    ]
    .map(str::to_owned)
    .to_vec();
    compare_args.extend(SETTINGS.map(str::to_owned));
    for policy in POLICIES {
        compare_args.extend(["--policy".to_owned(), policy.to_owned()]);
    }
    let replay_args: Vec<Vec<String>> = POLICIES
        .iter()
        .map(|policy| {
            let (matcher, detector) = match policy.split_once(" + ") {
                Some((m, d)) => (m, Some(d)),
                None => (*policy, None),
            };
            let mut args: Vec<String> = [
                "replay",
                "--trace",
                &trace,
                "--matcher",
                matcher,
                "--format",
                "json",
            ]
            .map(str::to_owned)
            .to_vec();
            if let Some(d) = detector {
                let (name, config) = d.split_once(' ').unwrap_or((d, ""));
                args.extend(["--detector".to_owned(), name.to_owned()]);
                if !config.is_empty() {
                    args.extend(["--detector-config".to_owned(), config.to_owned()]);
                }
            }
            args.extend(SETTINGS.map(str::to_owned));
            args
        })
        .collect();

    let (mut together, mut apart) = (Vec::new(), Vec::new());
    let (mut together_peak, mut apart_peak) = (0, 0);
    for _ in 0..ROUNDS {
        let (wall, peak) = timed_run(&compare_args);
        together.push(wall);
        together_peak = together_peak.max(peak);
        let mut sum = 0.0;
        for args in &replay_args {
            let (wall, peak) = timed_run(args);
            sum += wall;
            apart_peak = apart_peak.max(peak);
        }
        apart.push(sum);
    }
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "  8 replay processes, one after another : {:.2} s fastest, {:.2} s median, peak {:.0} MB (largest process)",
        fastest(&apart),
        median(apart.clone()),
        apart_peak as f64 / 1024.0
    );
    println!(
        "  one compare --jobs 2                  : {:.2} s fastest, {:.2} s median, peak {:.0} MB",
        fastest(&together),
        median(together.clone()),
        together_peak as f64 / 1024.0
    );
    let ratios: Vec<f64> = together.iter().zip(&apart).map(|(t, a)| t / a).collect();
    println!(
        "  compare / separate                    : {:.2}x (median of per-round ratios; target at most 0.6x)",
        median(ratios)
    );
}
