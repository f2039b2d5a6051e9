//! What `routerlab serve` adds to a request: small non-streaming requests at 500 and 2,000
//! requests per second, sent by `routerlab drive` straight to a `routerlab engine --instant`,
//! through `routerlab serve --matcher lcp` in front of the same engine, and through the same
//! router with `--plugin-isolation process`. The engine answers at once, so the difference
//! between the latency distributions is the router's decision and proxying, and between the
//! two routers what the plugin host's channel costs; a fourth side routes in process with
//! `--matcher sim-latency`, which asks the engine model's forecast (ABI 1.4 `predict`) of
//! the router's mirror of the engine for each decision. Everything (client, routers, engine)
//! shares this machine's cores, as it would on one host.
//!
//! Each rate sends `SECONDS` seconds of requests to each side in turn, `ROUNDS` times; the
//! table shows each side's p50 and p99 (median over rounds) and the added latency (that
//! side minus direct). Run: `cargo build --release --workspace && cargo bench
//! -p routerlab-cli --bench serve_overhead`.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;

use routerlab_testkit::Program;

/// This build's `routerlab`.
const ROUTERLAB: Program = Program(env!("CARGO_BIN_EXE_routerlab"));

const ROUNDS: usize = 3;
const SECONDS: f64 = 5.0;

/// A chat trace of `n` short prompts, each a little different, 4 output tokens each.
fn small_requests(n: usize) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data");
    std::fs::create_dir_all(&dir).expect("bench data dir");
    let path = dir.join(format!("small-{n}.jsonl"));
    let text: String = (0..n)
        .map(|i| {
            format!("{{\"prompt\": \"request {i}: a short question\", \"output_tokens\": 4}}\n")
        })
        .collect();
    std::fs::write(&path, text).expect("write trace");
    path
}

/// Latencies (ms) of one drive at `rate` against `url`, sorted.
fn drive(url: &str, trace: &Path, rate: f64) -> Vec<f64> {
    let records = trace.with_extension("records.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_routerlab"))
        .args(["drive", "--url", url, "--trace"])
        .arg(trace)
        .args([
            "--rate",
            &rate.to_string(),
            "--no-stream",
            "--format",
            "json",
        ])
        .arg("--requests-out")
        .arg(&records)
        .output()
        .expect("run drive");
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut ms: Vec<f64> = std::fs::read_to_string(&records)
        .expect("records")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            v["e2e_ms"].as_f64().expect("e2e")
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let serve = ["serve", "--endpoints", &engine.addr, "--matcher", "lcp"];
    let in_process = ROUTERLAB.start(&serve);
    let isolated = ROUTERLAB.start(&[&serve[..], &["--plugin-isolation", "process"]].concat());
    let simulating = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        "sim-latency",
    ]);
    let sides = [
        ("direct", format!("http://{}", engine.addr)),
        ("in-process", format!("http://{}", in_process.addr)),
        ("process", format!("http://{}", isolated.addr)),
        ("sim-latency", format!("http://{}", simulating.addr)),
    ];
    println!(
        "{:>6} {:>10} {:>8} {:>8} {:>10} {:>10}",
        "rate/s", "plugins", "p50 ms", "p99 ms", "added p50", "added p99"
    );
    for rate in [500.0, 2000.0] {
        let trace = small_requests((rate * SECONDS) as usize);
        let mut p50 = vec![Vec::new(); sides.len()];
        let mut p99 = vec![Vec::new(); sides.len()];
        for _ in 0..ROUNDS {
            for (side, (_, url)) in sides.iter().enumerate() {
                let latencies = drive(url, &trace, rate);
                p50[side].push(quantile(&latencies, 0.5));
                p99[side].push(quantile(&latencies, 0.99));
            }
        }
        let p50: Vec<f64> = p50.into_iter().map(median).collect();
        let p99: Vec<f64> = p99.into_iter().map(median).collect();
        for (side, (name, _)) in sides.iter().enumerate() {
            let added = |v: &[f64]| {
                if side == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.3}", v[side] - v[0])
                }
            };
            println!(
                "{rate:>6} {name:>10} {:>8.3} {:>8.3} {:>10} {:>10}",
                p50[side],
                p99[side],
                added(&p50),
                added(&p99)
            );
        }
    }
}
