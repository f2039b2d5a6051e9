//! KV cache tiers end to end: the real binary on Mooncake's conversation trace, 4 engines
//! round robin with 4,096 GPU blocks and 131,072 KV bytes a token, against NVIDIA Dynamo
//! 1.6.1's own replay of the same shape (`run_trace_replay`, mocker defaults with
//! `num_gpu_blocks` 4096, `kv_cache_bytes_per_token` 131072, and for the host tier
//! `native_host_offload` {num_host_blocks 65536, 25 GB/s each way}; trace block size 512).

mod support;

use serde_json::Value;
use support::{Replay, project_trace, within};

fn replay(engine: &str) -> Value {
    Replay::new("round-robin", &project_trace("mooncake-conversation.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--endpoints",
            "4",
            "--engine-config",
            engine,
            "-q",
        ])
        .report()
}

#[test]
fn gpu_only_and_a_host_tier_agree_with_dynamos_replay() {
    let gpu = replay("{num_gpu_blocks: 4096, kv_bytes_per_token: 131072}");
    // Dynamo, GPU only: reuse 0.0474, TTFT mean 1223 ms, p50 457.9 ms.
    within("GPU-only hit ratio", &gpu["hit_ratio"], 0.0474, 0.10);
    within(
        "GPU-only TTFT mean",
        &gpu["timed"]["ttft"]["mean"],
        1223.0,
        0.15,
    );
    within(
        "GPU-only TTFT p50",
        &gpu["timed"]["ttft"]["p50"],
        457.9,
        0.15,
    );
    assert!(
        gpu["timed"].get("tiers").is_none(),
        "one tier: no tiers block"
    );
    let host = replay(
        "{num_gpu_blocks: 4096, kv_bytes_per_token: 131072, \
         host_tier: {blocks: 65536, d2h_gbps: 25, h2d_gbps: 25}}",
    );
    // Dynamo, with the host tier: reuse 0.1527, TTFT mean 1026 ms, p50 404.1 ms.
    within("host-tier hit ratio", &host["hit_ratio"], 0.1527, 0.10);
    within(
        "host-tier TTFT mean",
        &host["timed"]["ttft"]["mean"],
        1026.0,
        0.15,
    );
    within(
        "host-tier TTFT p50",
        &host["timed"]["ttft"]["p50"],
        404.1,
        0.15,
    );
    let tiers = &host["timed"]["tiers"];
    let (gpu_hits, host_hits) = (
        tiers["gpu_hit_ratio"].as_f64().unwrap(),
        tiers["host_hit_ratio"].as_f64().unwrap(),
    );
    let total = host["timed"]["hit_ratio"].as_f64().unwrap();
    assert!(
        (gpu_hits + host_hits - total).abs() < 2e-6,
        "{gpu_hits} + {host_hits} vs {total}"
    );
    assert!(
        host_hits > gpu_hits,
        "most reuse comes back from the host tier here"
    );
    assert!(tiers["loads"].as_u64().unwrap() > 0);
    assert!(tiers["load"]["p50"].as_f64().unwrap() > 0.0);
    let endpoints = tiers["per_endpoint"].as_array().unwrap();
    assert_eq!(endpoints.len(), 4);
    assert!(endpoints.iter().all(|e| e["peak_blocks"] == 65536));
    let engine = &host["run"]["timed"]["engines"][0];
    assert_eq!(engine["host_tier"]["blocks"], 65536);
    assert_eq!(engine["kv_bytes_per_token"], 131072);
}

#[test]
fn a_host_tier_without_the_kv_bytes_is_refused_naming_the_key() {
    let output = Replay::new("round-robin", &project_trace("mooncake-conversation.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--engine-config",
            "{host_tier: {blocks: 16, d2h_gbps: 25, h2d_gbps: 25}}",
        ])
        .run();
    let (stdout, stderr) = support::texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs `kv_bytes_per_token`"), "{stderr}");
    assert!(stdout.is_empty());
    let output = Replay::new("round-robin", &project_trace("mooncake-conversation.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--engine-config",
            "{kv_bytes_per_token: 8, host_tier: {blocks: 16, d2h_gbps: 25, h2d_gbps: 0}}",
        ])
        .run();
    assert_eq!(output.status.code(), Some(2));
    assert!(support::texts(&output).1.contains("host_tier.h2d_gbps"));
}
