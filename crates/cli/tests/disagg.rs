//! Disaggregated prefill and decode, end to end: the real binary and plugins on Mooncake's
//! conversation trace, 2 prefill + 2 decode endpoints, against NVIDIA Dynamo 1.6.1's own
//! disaggregated replay of the same shape (`run_trace_replay` with `worker_type` prefill
//! and decode, mocker defaults, trace block size 512; no KV transfer time, its default),
//! and the command line's refusals.

mod support;

use serde_json::Value;
use support::{Replay, project_trace, texts, within};

fn disaggregated(matcher: &str, seed: &str) -> Value {
    Replay::new(matcher, &project_trace("mooncake-conversation.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--prefill-endpoints",
            "2",
            "--decode-endpoints",
            "2",
            "--seed",
            seed,
            "-q",
        ])
        .report()
}

/// Dynamo's reuse, TTFT mean and p50, TPOT mean; the bands.
fn agrees(report: &Value, dynamo: [f64; 4]) {
    let timed = &report["timed"];
    within("hit ratio", &report["hit_ratio"], dynamo[0], 0.10);
    within("TTFT mean", &timed["ttft"]["mean"], dynamo[1], 0.15);
    within("TTFT p50", &timed["ttft"]["p50"], dynamo[2], 0.15);
    within("TPOT mean", &timed["tpot"]["mean"], dynamo[3], 0.10);
}

#[test]
fn round_robin_pools_agree_with_dynamos_disaggregated_replay() {
    let report = disaggregated("round-robin", "0");
    // Dynamo: reuse 0.0679, TTFT mean 876.7 ms, p50 687.9 ms, TPOT mean 10.33 ms.
    agrees(&report, [0.0679, 876.7, 687.9, 10.33]);
    let pools = &report["timed"]["pools"];
    assert_eq!(pools["disaggregated"], 12031);
    assert_eq!(pools["local"], 0);
    assert_eq!(pools["prefill"]["requests"], 12031);
    assert_eq!(pools["decode"]["requests"], 12031);
    let run = &report["run"];
    assert_eq!(run["pools"]["prefill_endpoints"], 2);
    assert_eq!(run["pools"]["decode_endpoints"], 2);
    assert_eq!(run["pools"]["decision"], "always");
    assert_eq!(run["timed"]["kv_transfer"]["bandwidth_gbps"], 0.0);
}

#[test]
fn dynamos_kv_router_pools_agree_with_dynamos_disaggregated_replay() {
    let report = disaggregated("dynamo-kv", "0");
    // Dynamo: reuse 0.0856, TTFT mean 771.1 ms, p50 620.3 ms, TPOT mean 10.06 ms.
    agrees(&report, [0.0856, 771.1, 620.3, 10.06]);
    // The KV-aware prefill pool reuses more than round robin's.
    let rr = disaggregated("round-robin", "0");
    assert!(report["hit_ratio"].as_f64() > rr["hit_ratio"].as_f64());
}

#[test]
fn pool_settings_are_refused_where_they_cannot_apply() {
    let trace = project_trace("mooncake-conversation.jsonl");
    let cases: [(&[&str], &str); 6] = [
        (
            &["--timing", "trace", "--prefill-endpoints", "2"],
            "error: a disaggregated fleet needs --decode-endpoints M as well",
        ),
        (
            &[
                "--timing",
                "trace",
                "--prefill-endpoints",
                "0",
                "--decode-endpoints",
                "2",
            ],
            "error: --prefill-endpoints and --decode-endpoints must each be at least 1",
        ),
        (
            &[
                "--timing",
                "trace",
                "--endpoints",
                "4",
                "--prefill-endpoints",
                "2",
                "--decode-endpoints",
                "2",
            ],
            "error: give --decode-endpoints or --endpoints, not both",
        ),
        (
            &["--timing", "trace", "--kv-transfer-gbps", "25"],
            "error: P/D decision, KV transfer and pool engine settings need a disaggregated fleet",
        ),
        (
            &[
                "--timing",
                "trace",
                "--prefill-endpoints",
                "1",
                "--decode-endpoints",
                "1",
                "--pd-decision",
                "sometimes",
            ],
            "error: --pd-decision: unknown P/D decision `sometimes`",
        ),
        (
            &[
                "--timing",
                "trace",
                "--prefill-endpoints",
                "1",
                "--decode-endpoints",
                "1",
                "--kv-transfer-gbps",
                "25",
            ],
            "`kv_bytes_per_token` is 0",
        ),
    ];
    for (args, expected) in cases {
        let output = Replay::new("round-robin", &trace).args(args).run();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: no report on a refusal");
    }
    // The KV transfer's time is the timed replay's.
    let output = Replay::new("round-robin", &trace)
        .args(&[
            "--prefill-endpoints",
            "1",
            "--decode-endpoints",
            "1",
            "--kv-transfer-gbps",
            "25",
        ])
        .run();
    assert_eq!(output.status.code(), Some(2));
    assert!(texts(&output).1.contains("add --timing trace"));
}

/// A KV transfer over a thin link takes as long as its bytes need (it was capped at an
/// hour, so TTFT was understated); one past the simulator's clock is refused, naming the
/// settings.
#[test]
fn a_slow_kv_transfer_takes_its_whole_time_or_is_refused() {
    let trace = project_trace("mooncake-small.jsonl");
    let model = project_trace("models/Llama-3.1-8B.json");
    let args = |gbps: &'static str| -> Vec<String> {
        [
            "--timing",
            "trace",
            "--prefill-endpoints",
            "1",
            "--decode-endpoints",
            "1",
            "--model-config",
            model.to_str().unwrap(),
            "--kv-transfer-gbps",
            gbps,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let thin: Vec<String> = args("0.000001");
    let thin: Vec<&str> = thin.iter().map(String::as_str).collect();
    let report = Replay::new("round-robin", &trace).args(&thin).report();
    // 1,000 bytes a second at 131,072 bytes a token: 36 hours for every 1,000 tokens.
    let ttft_p50 = report["timed"]["ttft"]["p50"].as_f64().unwrap();
    assert!(ttft_p50 > 10.0 * 3_600_000.0, "{ttft_p50} ms");
    let none: Vec<String> = args("1e-30");
    let none: Vec<&str> = none.iter().map(String::as_str).collect();
    let output = Replay::new("round-robin", &trace).args(&none).run();
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("kv_transfer `bandwidth_gbps` 1e-30 and `kv_bytes_per_token` 131072 takes longer than the simulator's range of 146 years"),
        "{stderr}"
    );
}
