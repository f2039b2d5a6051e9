//! Timed replay speed, whole process: the Mooncake conversation trace (12,031 requests)
//! over 4 endpoints with the Dynamo preset, per matcher. The target is under 0.5 s on one
//! core and under 150 MB peak memory.
//!
//! Each run is a child process (this executable with `--child`); the parent times it from
//! spawn to exit, so plugin loading and trace reading are included, and the child reports
//! its own peak memory (`VmHWM`). Best of five.
//!
//! Run: `cargo bench -p routerlab-sim --bench timed` (after `cargo build --release
//! --workspace`); reads `traces/mooncake-conversation.jsonl`.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use routerlab_host::SearchPath;
use routerlab_sim::observer::NoObserver;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::replay_timed;

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/mooncake-conversation.jsonl")
}

fn child(matcher: &str) {
    let scenario = Scenario::new(matcher, trace())
        .endpoints(4)
        .timed_at_trace_times();
    let reader = scenario.reader().expect("trace");
    let workload = scenario.workload(reader).expect("trace loads");
    let mut replicas = scenario
        .routers(&SearchPath::from_env())
        .expect("plugin built");
    let settings = scenario.timed.as_ref().expect("timed");
    let report = replay_timed(&workload, &mut replicas, settings, &mut NoObserver).expect("replay");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap_or("0 kB")
        .trim()
        .to_owned();
    println!("{} {}", report.requests, peak.trim_end_matches(" kB"));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2]);
        return;
    }
    assert!(trace().is_file(), "{} is committed", trace().display());
    println!("timed replay, conversation_trace, 4 endpoints, dynamo preset (best of 5)");
    println!(
        "{:<12} {:>9} {:>10} {:>9}",
        "matcher", "requests", "seconds", "peak MB"
    );
    let exe = std::env::current_exe().expect("own path");
    for matcher in ["round-robin", "lcp", "simhash", "dynamo-kv", "sim-latency"] {
        let mut best: Option<(f64, String)> = None;
        for _ in 0..5 {
            let start = Instant::now();
            let out = Command::new(&exe)
                .arg("--child")
                .arg(matcher)
                .output()
                .expect("child");
            let seconds = start.elapsed().as_secs_f64();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            if best.as_ref().is_none_or(|b| seconds < b.0) {
                best = Some((seconds, String::from_utf8(out.stdout).expect("utf-8")));
            }
        }
        let (seconds, text) = best.expect("ran");
        let fields: Vec<&str> = text.split_whitespace().collect();
        let peak_kb: f64 = fields[1].parse().unwrap_or(0.0);
        println!(
            "{matcher:<12} {:>9} {seconds:>10.3} {:>9.1}",
            fields[0],
            peak_kb / 1024.0
        );
    }
}
