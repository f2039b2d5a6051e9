//! The disaggregated timed replay in process, with times worked out by hand.

use std::path::PathBuf;

use routerlab_engine::{EngineConfig, KvTransfer, StepTime, TransferMode};
use routerlab_report::Report;
use routerlab_route::{PdDecision, Pools};

use crate::observer::NoObserver;
use crate::scenario::Scenario;
use crate::test_plugins::{First, routers};
use crate::timed::TimedSettings;

/// Mooncake lines at these times (ms), each four 512-token blocks 1-4 (one shared
/// prompt of 2,048 tokens) and `output` tokens.
fn trace(name: &str, times_ms: &[u64], output: u64) -> PathBuf {
    let text: String = times_ms
        .iter()
        .map(|t| {
            format!(
                "{{\"timestamp\": {t}, \"input_length\": 2048, \"output_length\": {output}, \"hash_ids\": [1, 2, 3, 4]}}\n"
            )
        })
        .collect();
    let path = std::env::temp_dir().join(format!(
        "routerlab-sim-disagg-{name}-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("scratch trace");
    path
}

/// 1 ms a step plus 1 µs a prefilled token; 2 ms a decode step.
fn linear() -> EngineConfig {
    EngineConfig {
        step_time: StepTime::Linear {
            overhead_ms: 1.0,
            prefill_ms_per_token: 0.001,
            decode_ms: 2.0,
        },
        ..EngineConfig::dynamo()
    }
}

/// One prefill and one decode endpoint.
fn replay(trace: PathBuf, decision: PdDecision, transfer: KvTransfer) -> Report {
    let mut settings = TimedSettings::at_trace_times(vec![linear(); 2]);
    settings.kv_transfer = transfer;
    let mut scenario = Scenario::new("first", trace).endpoints(2).timed(settings);
    scenario.pools = Some(Pools {
        prefill: 1,
        decision,
    });
    let mut replicas = routers::<First>(&scenario, "first");
    scenario.replay(&mut replicas, &mut NoObserver).unwrap()
}

#[test]
fn ttft_is_the_prefill_the_transfer_and_the_decode_step_that_takes_the_kv_in() {
    let link = KvTransfer {
        kv_bytes_per_token: 131_072,
        bandwidth_gbps: 25.0,
        latency_ms: 0.5,
        mode: TransferMode::FullPrompt,
    };
    let report = replay(trace("hand", &[0], 3), PdDecision::Always, link);
    let timed = report.timed.as_ref().unwrap();
    // Prefill: one step of 1 ms + 2,048 × 1 µs = 3.048 ms. Transfer: 2,048 tokens ×
    // 131,072 bytes / 25 GB/s = 10.737418 ms, plus 0.5 ms. The decode endpoint's first
    // step (2 ms) takes the KV in and samples the first token: 16.285418 ms (latencies
    // are kept in whole microseconds).
    let ttft = timed.ttft.as_ref().unwrap();
    assert_eq!(ttft.mean, 16.285);
    // Two more tokens, one decode step each.
    assert_eq!(timed.tpot.as_ref().unwrap().mean, 2.0);
    let pools = timed.pools.as_ref().unwrap();
    let split = &pools.ttft_split;
    assert_eq!(split.prefill_queue.as_ref().unwrap().mean, 0.0);
    assert_eq!(split.prefill.as_ref().unwrap().mean, 3.048);
    assert_eq!(split.transfer.as_ref().unwrap().mean, 11.237);
    assert_eq!(split.decode.as_ref().unwrap().mean, 2.0);
    assert_eq!(pools.transfer_tokens, 2048);
    assert_eq!((pools.disaggregated, pools.local), (1, 0));
    assert_eq!((pools.prefill.requests, pools.decode.requests), (1, 1));
    let per_endpoint: Vec<u64> = timed.per_endpoint.iter().map(|e| e.requests).collect();
    assert_eq!(per_endpoint, [1, 1], "one prefill, one decode");
}

#[test]
fn a_prompt_the_decode_endpoint_holds_is_prefilled_there_under_a_threshold() {
    // The second request comes when the first is done: its whole prompt is cached on the
    // decode endpoint the first one's KV moved to.
    let link = |mode| KvTransfer {
        kv_bytes_per_token: 131_072,
        bandwidth_gbps: 25.0,
        latency_ms: 0.0,
        mode,
    };
    let report = replay(
        trace("threshold", &[0, 1000], 2),
        PdDecision::Threshold { tokens: 1024 },
        link(TransferMode::FullPrompt),
    );
    let pools = report.timed.as_ref().unwrap().pools.clone().unwrap();
    // The first: nothing cached, 2,048 uncached > 1,024: prefilled remotely. The second:
    // 0 uncached: prefilled locally, reusing 31 of its 32 blocks (the last token is
    // always computed).
    assert_eq!((pools.disaggregated, pools.local), (1, 1));
    assert_eq!(pools.transfer_tokens, 2048);
    assert_eq!(pools.prefill.requests, 1);
    assert_eq!(pools.decode.requests, 2);
    assert_eq!(pools.decode.hit_tokens, 31 * 64);
    assert_eq!(pools.decision, "threshold:1024");
    // Under `always` with `missing`, the second's KV moves again but nothing is missing.
    let report = replay(
        trace("missing", &[0, 1000], 2),
        PdDecision::Always,
        link(TransferMode::Missing),
    );
    let pools = report.timed.as_ref().unwrap().pools.clone().unwrap();
    assert_eq!((pools.disaggregated, pools.local), (2, 0));
    assert_eq!(pools.transfer_tokens, 2048, "the second moves no token");
}
