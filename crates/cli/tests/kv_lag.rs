//! A KV-event-fed router that sees the engines late (`--kv-event-lag-ms`), against NVIDIA
//! Dynamo 1.6.1's replay with the same lag (`run_disagg.py --agg-workers 4 --router-mode
//! kv_router --kv-event-lag-ms L`, mocker defaults, trace block size 512) on Mooncake's
//! conversation trace.

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
