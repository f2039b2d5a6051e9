//! Replay throughput: decisions per second and input MB/s for `lcp` and `simhash` on the
//! committed chat trace, the public Mooncake conversation trace (`traces/`) and a generated Mooncake-format trace of 1,000,000 requests; plus the peak
//! memory of each run.
//!
//! Each case runs five times, each in a child process (this executable, re-run with
//! `--child`), so its peak resident memory (`VmHWM`) is its own; the table shows the fastest
//! run and the median rate. Everything is single-threaded: the numbers are for one core.
//!
//! Run: `cargo bench -p routerlab-sim --bench throughput` (after `cargo build --release
//! --workspace`, so the plugin libraries exist).

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use routerlab_host::SearchPath;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timefree;
use routerlab_trace::synth::{MooncakeWorkload, write_mooncake};

/// Child runs per case.
const RUNS: usize = 5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Generates (once) a Mooncake-format trace of `requests` requests under target/bench-data,
/// with `session_id`s or (`plain`) only the four canonical fields.
fn generated(requests: u64, sessions: bool) -> PathBuf {
    let dir = root().join("target/bench-data");
    std::fs::create_dir_all(&dir).expect("bench data dir");
    let kind = if sessions { "sessions" } else { "plain" };
    let path = dir.join(format!("mooncake-{requests}-{kind}.jsonl"));
    if !path.exists() {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create trace"));
        let workload = MooncakeWorkload {
            requests,
            continue_chat_probability: 0.3,
            seed: 7,
            sessions,
            adapters: 0,
            samples: 1,
            rate: 20.0,
            pattern: routerlab_trace::synth::RatePattern::Constant,
        };
        write_mooncake(&workload, &mut out).expect("write trace");
    }
    path
}

/// `times` copies of a trace back to back: 8x the requests and bytes, the same distinct
/// blocks. Peak memory should stay close to the single copy's.
fn repeated(trace: &Path, times: usize) -> PathBuf {
    let path = root().join(format!("target/bench-data/repeated-{times}.jsonl"));
    if !path.exists() {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("bench data dir");
        let text = std::fs::read(trace).expect("read trace");
        std::fs::write(&path, text.repeat(times)).expect("write repeated trace");
    }
    path
}

/// A `/proc/self/status` figure in kB (Linux; 0 elsewhere).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The child: one replay, one line of numbers.
fn child(trace: &Path, matcher_name: &str) {
    let scenario = Scenario::new(matcher_name, trace);
    let mut replicas = scenario
        .routers(&SearchPath::from_env())
        .expect("plugin built (cargo build --release --workspace)");
    let start = Instant::now();
    let mut reader = scenario.reader().expect("trace opens");
    let report = timefree::replay(
        &mut reader,
        &mut replicas,
        None,
        &mut routerlab_sim::observer::NoObserver,
    )
    .expect("replay");
    let seconds = start.elapsed().as_secs_f64();
    // VmHWM counts the mapped trace pages too; RssAnon (at the end, when the tables are
    // largest) is the memory the replay itself allocated.
    println!(
        "{} {} {seconds} {} {}",
        report.requests,
        reader.len_bytes(),
        status_kb("VmHWM:"),
        status_kb("RssAnon:")
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(Path::new(&args[2]), &args[3]);
        return;
    }
    let mut traces = vec![("traces/chat.jsonl", root().join("traces/chat.jsonl"))];
    let conversation = root().join("traces/mooncake-conversation.jsonl");
    traces.push(("mooncake conversation_trace", conversation.clone()));
    traces.push((
        "conversation_trace x8 (same blocks)",
        repeated(&conversation, 8),
    ));
    traces.push((
        "generated mooncake 250k, sessions",
        generated(250_000, true),
    ));
    traces.push((
        "generated mooncake 1M, sessions",
        generated(1_000_000, true),
    ));
    traces.push(("generated mooncake 1M, plain", generated(1_000_000, false)));
    println!(
        "{:<36} {:<8} {:>9} {:>8} {:>9} {:>12} {:>12} {:>8} {:>9} {:>8}",
        "trace",
        "matcher",
        "requests",
        "MB",
        "seconds",
        "decisions/s",
        "median d/s",
        "MB/s",
        "peak MB",
        "anon MB"
    );
    let exe = std::env::current_exe().expect("own path");
    for (label, path) in &traces {
        for matcher in ["lcp", "simhash"] {
            // Best of five, the least disturbed run, beside the median, the typical one: on a
            // shared VM the two can differ by half.
            let mut runs: Vec<(u64, u64, f64, u64, u64)> = Vec::new();
            for _ in 0..RUNS {
                let out = Command::new(&exe)
                    .arg("--child")
                    .arg(path)
                    .arg(matcher)
                    .output()
                    .expect("run child");
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let text = String::from_utf8(out.stdout).expect("utf-8");
                let f: Vec<&str> = text.split_whitespace().collect();
                let run = (
                    f[0].parse().unwrap(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    f[4].parse().unwrap(),
                );
                runs.push(run);
            }
            runs.sort_by(|a, b| a.2.total_cmp(&b.2));
            let (requests, bytes, seconds, peak, anon) = runs[0];
            let median = runs[RUNS / 2].2;
            println!(
                "{:<36} {:<8} {:>9} {:>8.1} {:>9.3} {:>12.0} {:>12.0} {:>8.1} {:>9.1} {:>8.1}",
                label,
                matcher,
                requests,
                bytes as f64 / 1e6,
                seconds,
                requests as f64 / seconds,
                requests as f64 / median,
                bytes as f64 / 1e6 / seconds,
                peak as f64 / 1024.0,
                anon as f64 / 1024.0
            );
        }
    }
}
