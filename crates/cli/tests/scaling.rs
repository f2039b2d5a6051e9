//! A fleet a scaler sizes, end to end through the real loader and the built-in scalers:
//! hand-computed starts, start-up delay and routing on a constant load, byte-identical
//! reruns, and the settings it refuses.

mod support;

use support::*;

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// 20 requests a second for 30 s (at 0.025 s, 0.075 s, ...), each 64 prompt tokens of a
/// block of its own and 4 output tokens.
fn steady_trace(test: &str) -> std::path::PathBuf {
    let lines: String = (0..600)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 64, \"output_length\": 4, \"hash_ids\": [{i}]}}\n",
                25 + 50 * i
            )
        })
        .collect();
    // One file per test: tests run side by side in one process.
    scratch_file(&format!("steady-{test}.jsonl"), lines.as_bytes())
}

fn planner_run(trace: &std::path::Path) -> Replay {
    Replay::new("round-robin", trace).args(&[
        "--timing",
        "trace",
        "--endpoints",
        "1",
        "--scaler",
        "dynamo-planner",
        "--scaler-config",
        "{optimization_target: sla, throughput_adjustment_interval_s: 10, engine_rps: 4}",
        "--scale-interval-s",
        "10",
        "--startup-s",
        "5",
        "--max-gpus",
        "8",
    ])
}

#[test]
fn the_planner_starts_what_the_load_asks_for_after_the_start_up_delay() {
    let trace = steady_trace("planner");
    let report = planner_run(&trace).report();
    let timed = &report["timed"];
    let scaling = &timed["scaling"];
    // At 10 s: 200 arrivals in 10 s is 20/s, over 4/s an engine: 5 endpoints, 4 started.
    let events: Vec<(f64, String, String)> = scaling["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["t_s"].as_f64().unwrap(),
                e["endpoint"].as_str().unwrap().to_owned(),
                e["what"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    for what in ["start", "ready"] {
        for port in 8001..=8004 {
            let t = if what == "start" { 10.0 } else { 15.0 };
            expected.push((t, format!("localhost:{port}"), what.to_owned()));
        }
    }
    // The tick at 30 s still saw a request running; at 40 s the last 10 s brought none:
    // max(0, min_endpoint 1) is 1. The newest go first, each idle, so each stops at once.
    for port in (8001..=8004).rev() {
        for what in ["drain", "stop"] {
            expected.push((40.0, format!("localhost:{port}"), what.to_owned()));
        }
    }
    assert_eq!(events, expected, "{scaling:#}");
    assert_eq!(scaling["peak_endpoints"], 5);
    assert_eq!(scaling["max_endpoints"], 8);
    // Until 15 s only the first endpoint serves (300 requests); after, round robin deals
    // the other 300 over five.
    let per_endpoint = timed["per_endpoint"].as_array().unwrap();
    let requests: Vec<u64> = per_endpoint
        .iter()
        .map(|e| e["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(requests, [360, 60, 60, 60, 60, 0, 0, 0]);
    // GPU-hours: 1 GPU from 0 to 10 s, 5 from 10 s to the last change at 40 s (after
    // the last finish).
    assert!(timed["makespan_s"].as_f64().unwrap() < 40.0);
    assert_eq!(scaling["gpu_hours"], round6((10.0 + 5.0 * 30.0) / 3600.0));
    assert_eq!(scaling["mean_endpoints"], 160.0 / 40.0);
}

#[test]
fn a_scaled_run_is_byte_identical_when_repeated() {
    let trace = steady_trace("identical");
    let run = planner_run(&trace).args(&["--format", "json"]);
    assert_eq!(run.stdout(), run.stdout());
}

#[test]
fn scaling_settings_that_cannot_work_are_refused_by_flag() {
    let trace = steady_trace("refused");
    let trace = trace.to_string_lossy();
    for (args, says) in [
        (vec!["--timing", "trace", "--scaler", "hpa"], "--max-gpus"),
        (vec!["--timing", "trace", "--max-gpus", "4"], "--scaler"),
        (vec!["--scaler", "hpa", "--max-gpus", "4"], "--timing trace"),
        (
            vec![
                "--timing",
                "trace",
                "--endpoints",
                "4",
                "--scaler",
                "hpa",
                "--max-gpus",
                "2",
            ],
            "--max-gpus 2",
        ),
        (
            vec![
                "--timing",
                "trace",
                "--scaler",
                "round-robin",
                "--max-gpus",
                "16",
            ],
            "round-robin",
        ),
    ] {
        let mut all = vec!["replay", "--matcher", "round-robin", "--trace", &trace];
        all.extend(args.iter().copied());
        let output = routerlab(&all);
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}
