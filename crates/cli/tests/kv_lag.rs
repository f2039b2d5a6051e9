//! The router's view of time: a KV-event-fed router that sees the engines late
//! (`--kv-event-lag-ms`), against NVIDIA Dynamo 1.6.1's replay with the same lag
//! (`run_disagg.py --agg-workers 4 --router-mode kv_router --kv-event-lag-ms L`, mocker
//! defaults, trace block size 512) on Mooncake's conversation trace; and the routing
//! path's own latency in front of the router (`--router-hop-ms`).

mod support;

use support::{Replay, project_trace, within};

#[test]
fn a_late_kv_event_index_agrees_with_dynamos_lagged_router() {
    let trace = project_trace("mooncake-conversation.jsonl");
    // Dynamo: lag 0 reuse 0.1371, TTFT mean 460.6 ms; lag 60 s 0.1136, 473.9 ms.
    for (lag, reuse, ttft) in [("0", 0.1371, 460.6), ("60000", 0.1136, 473.9)] {
        let report = Replay::new("dynamo-kv", &trace)
            .args(&[
                "--timing",
                "trace",
                "--endpoints",
                "4",
                "--kv-event-lag-ms",
                lag,
                "-q",
            ])
            .report();
        within(
            &format!("lag {lag} reuse"),
            &report["hit_ratio"],
            reuse,
            0.10,
        );
        within(
            &format!("lag {lag} TTFT mean"),
            &report["timed"]["ttft"]["mean"],
            ttft,
            0.15,
        );
        let recorded = &report["run"]["timed"]["kv_event_lag_ms"];
        match lag {
            "0" => assert!(recorded.is_null(), "{recorded}"),
            _ => assert_eq!(recorded, 60000.0),
        }
    }
    // The bad value names its flag.
    let output = Replay::new("dynamo-kv", &trace)
        .args(&["--timing", "trace", "--kv-event-lag-ms=-1"])
        .run();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        support::texts(&output)
            .1
            .contains("--kv-event-lag-ms must be from 0")
    );
}

#[test]
fn a_router_hop_adds_its_latency_to_every_request_and_changes_nothing_else() {
    let chat = project_trace("chat.jsonl");
    let run = |hop: &str| {
        Replay::new("lcp", &chat)
            .args(&["--timing", "trace", "--endpoints", "4", "--rate", "20"])
            .args(&["--router-hop-ms", hop, "-q"])
            .report()
    };
    let direct = run("0");
    assert!(direct["run"]["timed"]["router_hop_ms"].is_null());
    // Open loop: every request reaches the router 25 ms later than it was sent, the
    // engines see the same schedule shifted, and each latency counts from the send.
    for (hop, ms) in [("25", 25.0), ("serve", 0.22)] {
        let hopped = run(hop);
        assert_eq!(hopped["run"]["timed"]["router_hop_ms"], ms);
        assert_eq!(hopped["hit_ratio"], direct["hit_ratio"]);
        for latency in ["ttft", "e2e"] {
            let shift = hopped["timed"][latency]["mean"].as_f64().unwrap()
                - direct["timed"][latency]["mean"].as_f64().unwrap();
            assert!(
                (shift - ms).abs() < 1e-3,
                "{hop}: {latency} moved {shift} ms"
            );
        }
        assert_eq!(hopped["timed"]["tpot"], direct["timed"]["tpot"]);
    }
    // A closed loop of one sends the next request when the last finishes: the hop
    // stretches the run.
    let closed = |hop: &str| {
        Replay::new("lcp", &chat)
            .args(&["--timing", "trace", "--concurrency", "1"])
            .args(&["--router-hop-ms", hop, "-q"])
            .report()["timed"]["makespan_s"]
            .as_f64()
            .unwrap()
    };
    let stretch = closed("10") - closed("0");
    // 2,200 requests, each 10 ms later than its predecessor's end.
    assert!(
        (stretch - 22.0).abs() < 0.01,
        "closed loop stretched by {stretch} s"
    );
    // Each routing decision's own time on top: one a request, two in a disaggregated
    // fleet (its prefill and its decode pick).
    let ttft_mean = |args: &[&str]| {
        Replay::new("lcp", &chat)
            .args(&["--timing", "trace", "--rate", "20", "-q"])
            .args(args)
            .report()["timed"]["ttft"]["mean"]
            .as_f64()
            .unwrap()
    };
    let decided = Replay::new("lcp", &chat)
        .args(&[
            "--timing",
            "trace",
            "--endpoints",
            "4",
            "--rate",
            "20",
            "-q",
        ])
        .args(&["--router-hop-ms", "10", "--router-decision-ms", "2"])
        .report();
    assert_eq!(decided["run"]["timed"]["router_decision_ms"], 2.0);
    let shift = decided["timed"]["ttft"]["mean"].as_f64().unwrap()
        - direct["timed"]["ttft"]["mean"].as_f64().unwrap();
    assert!((shift - 12.0).abs() < 1e-3, "aggregated: {shift} ms");
    let pd = ["--prefill-endpoints", "2", "--decode-endpoints", "2"];
    let split = ttft_mean(&[&pd[..], &["--router-decision-ms", "2"]].concat()) - ttft_mean(&pd);
    assert!((split - 4.0).abs() < 1e-3, "disaggregated: {split} ms");
    let unknown = Replay::new("lcp", &chat)
        .args(&[
            "--timing",
            "trace",
            "--rate",
            "20",
            "--router-hop-ms",
            "gateway",
        ])
        .run();
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        support::texts(&unknown)
            .1
            .contains("--router-hop-ms: no preset `gateway`")
    );
}
