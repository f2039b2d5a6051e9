//! Router replicas sharing their state (`--replica-sync`), through the real binary and the
//! real plugin libraries: per strategy, the staleness the report gives against the one
//! computed by hand from each request's own times, what sharing changes in the decisions,
//! and the settings refused.

mod support;

use serde_json::Value;
use support::*;

/// Eight requests `gap` ms apart (from 10 ms), 64 prompt tokens of blocks of their own and
/// 50 output tokens each (each takes 84 ms alone).
fn trace(test: &str, gap: u64) -> std::path::PathBuf {
    let lines: String = (0..8)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 64, \"output_length\": 50, \"hash_ids\": [{i}]}}\n",
                10 + gap * i
            )
        })
        .collect();
    scratch_file(&format!("sync-{test}.jsonl"), lines.as_bytes())
}

/// The run of `trace` by two replicas over two endpoints with `sync`: its report and each
/// request's changes (routed, first token, finished) as (replica, time in µs).
fn run(test: &str, gap: u64, matcher: &str, sync: &[&str]) -> (Value, Vec<(u64, u64)>) {
    let out = scratch_file(&format!("sync-{test}.requests.jsonl"), b"");
    std::fs::remove_file(&out).unwrap();
    let (report, _) = Replay::new(matcher, &trace(test, gap))
        .args(&[
            "--timing",
            "trace",
            "--endpoints",
            "2",
            "--router-replicas",
            "2",
            // 1 ms a step plus 0.5 ms a prompt token, 1 ms a decoded token.
            "--engine-config",
            "{step_time: {model: linear, overhead_ms: 1, prefill_ms_per_token: 0.5, decode_ms: 1}}",
            "--requests-out",
            out.to_str().unwrap(),
        ])
        .args(sync)
        .json();
    let text = std::fs::read_to_string(&out).unwrap();
    let mut changes = Vec::new();
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let us = |s: f64| (s * 1e6).round() as u64;
        let replica = r["replica"].as_u64().unwrap();
        let arrival = us(r["arrival_s"].as_f64().unwrap());
        changes.push((replica, arrival));
        changes.push((replica, arrival + us(r["ttft_ms"].as_f64().unwrap() / 1e3)));
        changes.push((replica, us(r["finish_s"].as_f64().unwrap())));
    }
    (report, changes)
}

/// The staleness by hand: each change reaches the other replica at `arrives(replica, t)`
/// (µs), if that is by the run's last event and the change came before it (nothing is
/// delivered after the last event); (delivered, mean ms, max ms).
fn by_hand(changes: &[(u64, u64)], arrives: impl Fn(u64, u64) -> u64) -> (u64, f64, f64) {
    let end = changes.iter().map(|c| c.1).max().unwrap();
    let lags: Vec<u64> = changes
        .iter()
        .map(|&(r, t)| arrives(r, t) - t)
        .zip(changes)
        .filter(|(lag, c)| c.1 < end && c.1 + lag <= end)
        .map(|(lag, _)| lag)
        .collect();
    let mean = lags.iter().sum::<u64>() as f64 / lags.len() as f64 / 1e3;
    let max = *lags.iter().max().unwrap() as f64 / 1e3;
    (lags.len() as u64, mean, max)
}

fn check(sync: &Value, expected: (u64, f64, f64)) {
    assert_eq!(sync["delivered"].as_u64(), Some(expected.0), "{sync}");
    let close = |key: &str, want: f64| {
        let got = sync[key].as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-3,
            "{key}: {got} against {want} by hand: {sync}"
        );
    };
    close("mean_lag_ms", expected.1);
    close("max_lag_ms", expected.2);
}

/// The first of `phase + k * interval` (µs) strictly after `t`, or at or after it.
fn next_tick(phase: u64, interval: u64, t: u64, strictly: bool) -> u64 {
    let from = if strictly { t + 1 } else { t };
    if from <= phase {
        return phase;
    }
    phase + (from - phase).div_ceil(interval) * interval
}

#[test]
fn a_broadcast_arrives_after_its_delay() {
    let (report, changes) = run(
        "broadcast",
        130,
        "least-inflight",
        &["--replica-sync", "broadcast", "--sync-delay-ms", "25"],
    );
    let sync = &report["timed"]["sync"];
    assert_eq!(sync["strategy"], "broadcast");
    assert_eq!(
        sync["messages"].as_u64(),
        Some(24),
        "a message a change: {sync}"
    );
    check(sync, by_hand(&changes, |_, t| t + 25_000));
}

#[test]
fn a_periodic_snapshot_is_read_at_the_readers_phase() {
    // Replica 0 publishes at 0, 300, 600 … ms, replica 1 at 150, 450 …; a reader sees a
    // snapshot once it is 40 ms old.
    let (report, changes) = run(
        "periodic",
        130,
        "least-inflight",
        &[
            "--replica-sync",
            "periodic",
            "--sync-interval-ms",
            "300",
            "--sync-delay-ms",
            "40",
        ],
    );
    let phase = |r: u64| r * 150_000;
    let expected = by_hand(&changes, |r, t| {
        let published = next_tick(phase(r), 300_000, t, true);
        next_tick(phase(1 - r), 300_000, published + 40_000, false)
    });
    check(&report["timed"]["sync"], expected);
}

#[test]
fn a_delta_goes_at_its_senders_next_publication() {
    let (report, changes) = run(
        "delta",
        130,
        "least-inflight",
        &[
            "--replica-sync",
            "delta",
            "--sync-interval-ms",
            "300",
            "--sync-delay-ms",
            "40",
        ],
    );
    let expected = by_hand(&changes, |r, t| {
        next_tick(r * 150_000, 300_000, t, true) + 40_000
    });
    check(&report["timed"]["sync"], expected);
}

#[test]
fn one_shared_store_is_seen_at_once_and_balances_the_fleet_as_one_router_would() {
    // Every request is still running when the last arrives: one picture of the fleet puts
    // four on each endpoint; replicas alone may pile up.
    let (shared, changes) = run("shared", 5, "least-inflight", &["--replica-sync", "shared"]);
    let sync = &shared["timed"]["sync"];
    check(sync, by_hand(&changes, |_, t| t));
    assert_eq!(sync["mean_unseen_requests"].as_f64(), Some(0.0), "{sync}");
    // In arrival order, the most one endpoint ever had over the other.
    let worst = |test: &str, sync: &[&str]| -> i64 {
        run(test, 5, "least-inflight", sync);
        let out = (std::env::temp_dir())
            .join(format!("routerlab-replay-tests-{}", std::process::id()))
            .join(format!("sync-{test}.requests.jsonl"));
        let text = std::fs::read_to_string(&out).unwrap();
        let mut rows: Vec<(u64, bool)> = (text.lines())
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| {
                (
                    v["line"].as_u64().unwrap(),
                    v["endpoint"] == "localhost:8000",
                )
            })
            .collect();
        rows.sort();
        let mut gap = 0i64;
        rows.iter()
            .map(|(_, first)| {
                gap += if *first { 1 } else { -1 };
                gap.abs()
            })
            .max()
            .unwrap()
    };
    assert_eq!(worst("shared-order", &["--replica-sync", "shared"]), 1);
    // Alone (with this seed), both replicas send their first request to the same endpoint.
    assert_eq!(worst("alone-order", &[]), 2);
    // The llm-d preset shares loads every 200 ms: a replica misses its peer's latest.
    let (llmd, _) = run("llm-d", 5, "least-inflight", &["--replica-sync", "llm-d"]);
    let sync = &llmd["timed"]["sync"];
    assert_eq!(
        (sync["strategy"].as_str(), sync["scope"].as_str()),
        (Some("periodic"), Some("loads"))
    );
    assert_eq!(
        (sync["interval_ms"].as_f64(), sync["ttl_ms"].as_f64()),
        (Some(200.0), Some(2000.0))
    );
    assert!(
        sync["mean_unseen_requests"].as_f64().unwrap() > 0.0,
        "{sync}"
    );
}

#[test]
fn the_matcher_learns_its_peers_picks_only_when_decisions_are_shared() {
    // lcp learns where prefixes went through `update`: a second request of the same prefix
    // at the other replica follows the first only if that replica heard of it.
    let lines = "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 4, \"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 8]}\n\
                 {\"timestamp\": 500, \"input_length\": 512, \"output_length\": 4, \"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 9]}\n";
    let path = scratch_file("sync-lcp.jsonl", lines.as_bytes());
    let endpoints = |sync: &[&str]| -> Vec<String> {
        let out = scratch_file(&format!("sync-lcp-{}.requests.jsonl", sync.join("")), b"");
        std::fs::remove_file(&out).unwrap();
        Replay::new("lcp", &path)
            .args(&[
                "--timing",
                "trace",
                "--endpoints",
                "16",
                "--router-replicas",
                "2",
                "--requests-out",
                out.to_str().unwrap(),
            ])
            .args(sync)
            .json();
        let text = std::fs::read_to_string(&out).unwrap();
        let mut rows: Vec<(u64, String)> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["line"].as_u64().unwrap(),
                    v["endpoint"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|r| r.1).collect()
    };
    let told = endpoints(&["--replica-sync", "broadcast"]);
    assert_eq!(told[0], told[1], "the second follows the first's prefix");
    // Loads only: the matcher of replica 1 has never heard of the prefix, and with 16
    // endpoints and this seed its pick is elsewhere.
    let counts_only = endpoints(&["--replica-sync", "broadcast", "--sync-scope", "loads"]);
    assert_ne!(counts_only[0], counts_only[1]);
}

#[test]
fn sync_settings_that_cannot_be_run_are_refused_by_flag() {
    let path = trace("refused", 130);
    for (args, message) in [
        (
            &["--timing", "trace", "--replica-sync", "shared"][..],
            "--replica-sync shared needs 2 or more --router-replicas, not 1",
        ),
        (
            &["--router-replicas", "2", "--replica-sync", "shared"][..],
            "timed replay",
        ),
        (
            &[
                "--timing",
                "trace",
                "--router-replicas",
                "2",
                "--replica-sync",
                "broadcast",
                "--sync-interval-ms",
                "100",
            ][..],
            "--sync-interval-ms has no meaning",
        ),
        (
            &[
                "--timing",
                "trace",
                "--router-replicas",
                "2",
                "--replica-sync",
                "delta",
                "--sync-loss",
                "1",
            ][..],
            "--sync-loss is a chance from 0 to below 1, not 1",
        ),
        (
            &[
                "--timing",
                "trace",
                "--router-replicas",
                "2",
                "--sync-delay-ms",
                "5",
            ][..],
            "need a --replica-sync strategy",
        ),
        (
            &[
                "--timing",
                "trace",
                "--router-replicas",
                "2",
                "--replica-sync",
                "broadcast",
                "--sync-delay-ms=-1",
            ][..],
            "--sync-delay-ms must be 0 or more",
        ),
    ] {
        let output = Replay::new("least-inflight", &path).args(args).run();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}
