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

/// Bursts a second apart, each between 0.3 s and 0.7 s into its second (after one request
/// at 0, which starts the clocks), of `sizes[k]` requests in second `k`: counts per second
/// that neither a replay's ticks nor a live router's, a second apart, can split differently.
fn bursts(sizes: &[usize], name: &str) -> std::path::PathBuf {
    let mut lines = vec![
        "{\"timestamp\": 0, \"input_length\": 64, \"output_length\": 2, \"hash_ids\": [0]}"
            .to_owned(),
    ];
    let mut id = 1;
    for (second, &n) in sizes.iter().enumerate() {
        for i in 0..n {
            let ms = second * 1000 + 300 + 400 * i / n.max(1);
            lines.push(format!(
                "{{\"timestamp\": {ms}, \"input_length\": 64, \"output_length\": 2, \"hash_ids\": [{id}]}}"
            ));
            id += 1;
        }
    }
    scratch_file(name, (lines.join("\n") + "\n").as_bytes())
}

/// The step function of `(time, value)` changes at `t`.
fn value_at(changes: &[(f64, u64)], t: f64) -> Option<u64> {
    changes
        .iter()
        .rev()
        .find(|(at, _)| *at <= t + 1e-9)
        .map(|(_, v)| *v)
}

/// The same scaler, the Planner's throughput rule (a decision from the arrivals alone),
/// wants the same endpoint counts at the same ticks in a replay and under `serve` in front
/// of `routerlab engine`s driven by the same trace at its own pace.
#[test]
fn serve_runs_the_scaler_a_replay_runs_and_wants_what_it_wanted() {
    use support::server::ROUTERLAB;
    let trace = bursts(&[3, 3, 9, 9, 5, 1], "bursts.jsonl");
    let scaler = [
        "--scaler",
        "dynamo-planner",
        "--scaler-config",
        "{optimization_target: sla, throughput_adjustment_interval_s: 1, engine_rps: 2}",
        "--scale-interval-s",
        "1",
        "--max-gpus",
        "8",
    ];
    let mut args = vec!["--timing", "trace", "--endpoints", "2"];
    args.extend_from_slice(&scaler);
    let report = Replay::new("round-robin", &trace).args(&args).report();
    let replayed: Vec<(f64, u64)> = report["timed"]["scaling"]["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["t_s"].as_f64().unwrap(), p["desired"].as_u64().unwrap()))
        .collect();

    let engines: Vec<_> = (0..2)
        .map(|_| ROUTERLAB.start(&["engine", "--model-speedup", "200"]))
        .collect();
    let endpoints = format!("{},{}", engines[0].addr, engines[1].addr);
    let mut serve = vec![
        "serve",
        "--endpoints",
        &endpoints,
        "--matcher",
        "round-robin",
    ];
    serve.extend_from_slice(&scaler);
    let router = ROUTERLAB.start(&serve);
    let trace_arg = trace.to_string_lossy();
    let output = routerlab(&["drive", "--url", &router.url(), "--trace", &trace_arg]);
    assert!(output.status.success(), "{}", texts(&output).1);
    // The last burst is in second 5: its tick is at 6 s from the first request.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let log = router.stderr();
    let live: Vec<(f64, u64)> = log
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("scaler dynamo-planner: at ")?;
            let (at, rest) = rest.split_once(" s desired ")?;
            let (desired, _) = rest.split_once(' ')?;
            Some((at.parse().ok()?, desired.parse().ok()?))
        })
        .collect();
    assert!(!live.is_empty(), "{log}");
    // 1 + 3 in second 0: 2; 3: 2; 9: 5; 9: 5; 5: 3; 1: 1.
    let wanted = [2, 2, 5, 5, 3, 1];
    for (k, want) in wanted.iter().enumerate() {
        let t = (k + 1) as f64;
        assert_eq!(
            value_at(&replayed, t),
            Some(*want),
            "replay at {t} s: {replayed:?}"
        );
        assert_eq!(
            value_at(&live, t),
            Some(*want),
            "serve at {t} s: {live:?}\n{log}"
        );
    }
    let (_, metrics) = http(&router.addr, "GET", "/metrics", "");
    assert!(
        metrics.contains("routerlab_scaler_desired_endpoints{scaler=\"dynamo-planner\"} 1"),
        "{metrics}"
    );
}

/// The HPA on a step in load, worked out by hand from its documented rule: 2 requests a
/// second for 30 s, then 20. The metric is the arrival rate per endpoint, target 4.
#[test]
fn the_hpa_follows_a_step_in_load_as_its_rule_says() {
    let mut lines = Vec::new();
    for i in 0..60u64 {
        lines.push(25 + 500 * i);
    }
    for i in 0..600u64 {
        lines.push(30_025 + 50 * i);
    }
    let text: String = lines
        .iter()
        .enumerate()
        .map(|(id, ms)| {
            format!("{{\"timestamp\": {ms}, \"input_length\": 64, \"output_length\": 2, \"hash_ids\": [{id}]}}\n")
        })
        .collect();
    let trace = scratch_file("step.jsonl", text.as_bytes());
    let report = Replay::new("round-robin", &trace)
        .args(&[
            "--timing",
            "trace",
            "--endpoints",
            "1",
            "--scaler",
            "hpa",
            "--scaler-config",
            "{metric: arrival_rate, target: 4}",
            "--startup-s",
            "10",
            "--max-gpus",
            "16",
        ])
        .report();
    let scaling = &report["timed"]["scaling"];
    let points: Vec<(f64, u64, u64, u64)> = scaling["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap();
            (
                p["t_s"].as_f64().unwrap(),
                n("desired"),
                n("ready"),
                n("starting"),
            )
        })
        .collect();
    // 15 s and 30 s: 2/s over 1 endpoint is 0.5 of the target: ceil(0.5 × 1) = 1, no
    // change. 45 s: 20/s is 5 times it: ceil(5 × 1) = 5, within the first scale-up's limit
    // (max(2 × 1, 1 + 4) = 5); four start, ready 10 s later. 60 s: 20/s over 5 is on
    // target.
    assert_eq!(
        points[..3],
        [(0.0, 1, 1, 0), (45.0, 5, 1, 4), (55.0, 5, 5, 0)],
        "{scaling:#}"
    );
    let starts = (scaling["events"].as_array().unwrap().iter())
        .filter(|e| e["what"] == "start" && e["t_s"] == 45.0)
        .count();
    assert_eq!(starts, 4);
}

/// A disaggregated fleet's pools scale apart within the GPU ceiling they share: the
/// Planner's throughput rule sizes each by its own engine rate and shrinks both to its budget.
#[test]
fn prefill_and_decode_pools_scale_apart_within_one_ceiling() {
    let trace = steady_trace("pools");
    let report = Replay::new("round-robin", &trace)
        .args(&[
            "--timing",
            "trace",
            "--prefill-endpoints",
            "1",
            "--decode-endpoints",
            "1",
            "--scaler",
            "dynamo-planner",
            "--scaler-config",
            "{optimization_target: sla, throughput_adjustment_interval_s: 10, prefill_engine_rps: 2, decode_engine_rps: 4}",
            "--scale-interval-s",
            "10",
            "--max-gpus",
            "8",
        ])
        .report();
    let scaling = &report["timed"]["scaling"];
    // At 10 s: 20 requests/s asks for 10 prefill and 5 decode endpoints, 15 GPUs over the
    // budget of 8: prefill floor(10 × 8/15) = 5, decode the 3 left.
    let at_10 = scaling["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["t_s"] == 10.0)
        .unwrap_or_else(|| panic!("{scaling:#}"));
    let pools: Vec<(String, u64, u64)> = at_10["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap();
            (
                p["pool"].as_str().unwrap().to_owned(),
                n("desired"),
                n("ready") + n("starting"),
            )
        })
        .collect();
    assert_eq!(
        pools,
        [("prefill".to_owned(), 5, 5), ("decode".to_owned(), 3, 3)],
        "{scaling:#}"
    );
    let started: Vec<&str> = (scaling["events"].as_array().unwrap().iter())
        .filter(|e| e["what"] == "start")
        .map(|e| e["endpoint"].as_str().unwrap())
        .collect();
    assert_eq!(
        started,
        [
            "prefill-1",
            "prefill-2",
            "prefill-3",
            "prefill-4",
            "decode-1",
            "decode-2"
        ]
    );
    // Every request was served, by both pools.
    assert_eq!(report["timed"]["pools"]["decode"]["requests"], 600);
}

/// Saved runs of one policy under two scalers compare side by side, each labelled by its
/// scaler, with the GPU-hours each fleet held.
#[test]
fn compare_puts_two_scalers_side_by_side_with_their_gpu_hours() {
    let trace = steady_trace("compare");
    let mut saved = Vec::new();
    for (scaler, config) in [
        (
            "dynamo-planner",
            "{optimization_target: sla, throughput_adjustment_interval_s: 10, engine_rps: 4}",
        ),
        ("hpa", "{metric: arrival_rate, target: 10}"),
    ] {
        let report = Replay::new("round-robin", &trace)
            .args(&["--timing", "trace", "--endpoints", "1", "--max-gpus", "8"])
            .args(&[
                "--scale-interval-s",
                "10",
                "--scaler",
                scaler,
                "--scaler-config",
                config,
            ])
            .args(&["--format", "json"])
            .stdout();
        saved.push(scratch_file(&format!("compare-{scaler}.json"), &report));
    }
    let (a, b) = (saved[0].to_string_lossy(), saved[1].to_string_lossy());
    let output = routerlab(&["compare", "--from", &a, &b]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let header = stdout.lines().next().unwrap_or_default();
    assert!(
        header.contains("round-robin ~ dynamo-planner") && header.contains("round-robin ~ hpa"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("GPU-hours")),
        "{stdout}"
    );
}
