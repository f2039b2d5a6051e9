//! What router replicas cost: the same replay with 1 and with 8 replicas (round robin and
//! session-sticky balancers), time-free over the Mooncake conversation trace ×8 and timed
//! over the conversation trace on 8 endpoints (Dynamo preset, metrics refreshed every
//! 100 ms, so each replica keeps its own scrape schedule). The target: 8 replicas at most
//! 1.3× the single router's time.
//!
//! Two matchers: `lcp`, whose 8 instances each keep their own prefix trie and whose
//! different picks change the work the caches and engines do; and `random`, whose picks
//! are alike in distribution with 1 or 8 replicas, so its ratio is what the replicas'
//! own bookkeeping costs.
//!
//! Each case is timed inside this process from plugin creation to report, reading the
//! trace included. Eleven runs, each timing every case once (starting from a different
//! case each run), so a slow moment of a noisy machine lands on the cases of one run alike;
//! "vs 1" is the median over runs of each run's ratio to its single-router case.
//!
//! Run: `cargo bench -p routerlab-sim --bench replicas` (after `cargo build --release
//! --workspace`, so the plugin libraries exist).

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use routerlab_engine::EngineConfig;
use routerlab_host::SearchPath;
use routerlab_sim::observer::NoObserver;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::{TimedSettings, replay_timed};
use routerlab_sim::{ReplicaAssign, Replicas, timefree};

const RUNS: usize = 11;
const ENDPOINTS: usize = 8;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The conversation trace 8 times back to back (the throughput bench's input).
fn repeated() -> PathBuf {
    let path = root().join("target/bench-data/repeated-8.jsonl");
    if !path.exists() {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("bench data dir");
        let text =
            std::fs::read(root().join("traces/mooncake-conversation.jsonl")).expect("read trace");
        std::fs::write(&path, text.repeat(8)).expect("write repeated trace");
    }
    path
}

/// `count` replicas of `matcher` behind `assign` (replica `r` seeded `r`), each with its
/// own instance, over `ENDPOINTS` endpoints.
fn scenario(trace: &Path, matcher: &str, count: usize, assign: ReplicaAssign) -> Scenario {
    Scenario {
        router_replicas: count,
        replica_assign: assign,
        ..Scenario::new(matcher, trace).endpoints(ENDPOINTS)
    }
}

fn replicas(scenario: &Scenario) -> Replicas {
    scenario
        .routers(&SearchPath::from_env())
        .expect("plugin built (cargo build --release --workspace)")
}

/// Seconds for one time-free replay of `trace`, and its hit ratio.
fn time_free(trace: &Path, matcher: &str, count: usize, assign: ReplicaAssign) -> (f64, f64) {
    let scenario = scenario(trace, matcher, count, assign);
    let start = Instant::now();
    let mut replicas = replicas(&scenario);
    let mut reader = scenario.reader().expect("trace opens");
    let report =
        timefree::replay(&mut reader, &mut replicas, None, &mut NoObserver).expect("replay");
    (start.elapsed().as_secs_f64(), report.hit_ratio)
}

/// Seconds for one timed replay of the conversation trace, and its hit ratio.
fn timed(matcher: &str, count: usize, assign: ReplicaAssign) -> (f64, f64) {
    let settings = TimedSettings {
        metrics_interval_ns: 100_000_000,
        ..TimedSettings::at_trace_times(vec![EngineConfig::dynamo(); ENDPOINTS])
    };
    let trace = root().join("traces/mooncake-conversation.jsonl");
    let scenario = scenario(&trace, matcher, count, assign).timed(settings.clone());
    let start = Instant::now();
    let mut replicas = replicas(&scenario);
    let reader = scenario.reader().expect("trace opens");
    let workload = scenario.workload(reader).expect("loads");
    let report =
        replay_timed(&workload, &mut replicas, &settings, &mut NoObserver).expect("replay");
    (start.elapsed().as_secs_f64(), report.hit_ratio)
}

fn median(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

fn main() {
    let trace = repeated();
    let cases = [
        (1, ReplicaAssign::RoundRobin),
        (8, ReplicaAssign::RoundRobin),
        (8, ReplicaAssign::Session),
    ];
    println!(
        "{:<10} {:<8} {:>8} {:<12} {:>10} {:>10} {:>9}",
        "mode", "matcher", "replicas", "assign", "median s", "vs 1", "hit ratio"
    );
    for (mode, matcher) in [
        ("time-free", "lcp"),
        ("time-free", "random"),
        ("timed", "lcp"),
        ("timed", "random"),
    ] {
        let mut seconds = vec![Vec::new(); cases.len()];
        let mut hit = vec![0.0; cases.len()];
        for run in 0..RUNS {
            // Each run times every case once, starting from a different one each time.
            for step in 0..cases.len() {
                let i = (run + step) % cases.len();
                let (count, assign) = cases[i];
                let (s, h) = match mode {
                    "time-free" => time_free(&trace, matcher, count, assign),
                    _ => timed(matcher, count, assign),
                };
                seconds[i].push(s);
                hit[i] = h;
            }
        }
        for (i, (count, assign)) in cases.iter().enumerate() {
            // The ratio within each run, then the median: a slow stretch of a shared
            // machine slows the cases of one run alike.
            let ratios = seconds[i]
                .iter()
                .zip(&seconds[0])
                .map(|(s, one)| s / one)
                .collect();
            println!(
                "{mode:<10} {matcher:<8} {count:>8} {:<12} {:>10.3} {:>9.2}x {:>9.4}",
                assign.name(),
                median(seconds[i].clone()),
                median(ratios),
                hit[i]
            );
        }
    }
}
