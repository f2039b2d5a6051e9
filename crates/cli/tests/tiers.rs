//! KV cache tiers end to end: the real binary on Mooncake's conversation trace, 4 engines
//! round robin with 4,096 GPU blocks and 131,072 KV bytes a token, against NVIDIA Dynamo
//! 1.6.1's own replay of the same shape (`run_trace_replay`, mocker defaults with
//! `num_gpu_blocks` 4096, `kv_cache_bytes_per_token` 131072, and for the host tier
//! `native_host_offload` {num_host_blocks 65536, 25 GB/s each way}; trace block size 512).

mod support;

use serde_json::Value;
use support::{Replay, project_trace, within};

fn replay(engine: &str) -> Value {
    replay_with("round-robin", engine)
}

fn replay_with(matcher: &str, engine: &str) -> Value {
    Replay::new(matcher, &project_trace("mooncake-conversation.jsonl"))
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
fn slow_links_agree_with_dynamos_replay() {
    // Host to device at 2 GB/s (8 MiB blocks take 4.2 ms each, one after another), a
    // smaller host tier; device to host at 25 GB/s.
    let slow = replay(
        "{num_gpu_blocks: 4096, kv_bytes_per_token: 131072, \
         host_tier: {blocks: 16384, d2h_gbps: 25, h2d_gbps: 2}}",
    );
    // Dynamo: reuse 0.0834, TTFT mean 1190.0 ms, p50 453.7 ms.
    within("slow-load hit ratio", &slow["hit_ratio"], 0.0834, 0.10);
    within(
        "slow-load TTFT mean",
        &slow["timed"]["ttft"]["mean"],
        1190.0,
        0.15,
    );
    within(
        "slow-load TTFT p50",
        &slow["timed"]["ttft"]["p50"],
        453.7,
        0.15,
    );
    // Device to host at 2 GB/s instead: the stores queue, and an engine given GPU blocks a
    // store still reads waits for it. Dynamo: 0.0830, 2018.0 ms, p50 534.0 ms, TPOT 34.67.
    let slow = replay(
        "{num_gpu_blocks: 4096, kv_bytes_per_token: 131072, \
         host_tier: {blocks: 16384, d2h_gbps: 2, h2d_gbps: 25}}",
    );
    within("slow-store hit ratio", &slow["hit_ratio"], 0.0830, 0.10);
    within(
        "slow-store TTFT mean",
        &slow["timed"]["ttft"]["mean"],
        2018.0,
        0.15,
    );
    within(
        "slow-store TTFT p50",
        &slow["timed"]["ttft"]["p50"],
        534.0,
        0.15,
    );
    within(
        "slow-store TPOT mean",
        &slow["timed"]["tpot"]["mean"],
        34.67,
        0.15,
    );
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

/// Dynamo's KV router with its default settings weighs a host-tier block 0.75 of a GPU
/// one; `dynamo-kv`'s defaults are the same, and so is what they give (Dynamo 1.6.1,
/// `run_trace_replay` with the KV router, the host tier above: reuse 0.2270, TTFT mean
/// 536.7 ms, p50 397.5 ms).
#[test]
fn dynamos_kv_router_with_a_host_tier_agrees_with_its_defaults() {
    let host = replay_with(
        "dynamo-kv",
        "{num_gpu_blocks: 4096, kv_bytes_per_token: 131072, \
         host_tier: {blocks: 65536, d2h_gbps: 25, h2d_gbps: 25}}",
    );
    within("KV router reuse", &host["hit_ratio"], 0.2270, 0.10);
    within(
        "KV router TTFT mean",
        &host["timed"]["ttft"]["mean"],
        536.7,
        0.15,
    );
    within(
        "KV router TTFT p50",
        &host["timed"]["ttft"]["p50"],
        397.5,
        0.15,
    );
}

#[test]
fn a_shared_tier_serves_every_endpoint_what_any_of_them_computed() {
    // Round robin spreads a conversation's turns over the four engines, so a host tier of
    // its own serves an engine only the turns it saw; the fleet's shared store serves all.
    let engine = "{num_gpu_blocks: 4096, kv_bytes_per_token: 131072, \
                  shared_tier: {blocks: 262144, d2h_gbps: 10, h2d_gbps: 10}}";
    let shared = replay(engine);
    let tiers = &shared["timed"]["tiers"];
    let ratio = |key: &str| tiers[key].as_f64().unwrap();
    let total = shared["timed"]["hit_ratio"].as_f64().unwrap();
    assert!(
        (ratio("gpu_hit_ratio") + ratio("host_hit_ratio") + ratio("shared_hit_ratio") - total)
            .abs()
            < 3e-6,
        "{tiers}"
    );
    assert_eq!(ratio("host_hit_ratio"), 0.0, "no host tier");
    // GPU only, Dynamo measured 0.0474 (the test above); the shared store more than
    // triples it, and more than the host tiers' 0.1527.
    assert!(
        ratio("shared_hit_ratio") > 0.2 && total > 0.1527 * 1.5,
        "{tiers}"
    );
    assert_eq!(tiers["shared"]["name"], "shared");
    assert_eq!(tiers["shared"]["blocks"], 262144);
    assert!(tiers["per_endpoint"].as_array().unwrap().is_empty());
    assert_eq!(
        shared["run"]["timed"]["engines"][3]["shared_tier"]["h2d_gbps"],
        10.0
    );
    let ttft = |r: &Value| r["timed"]["ttft"]["mean"].as_f64().unwrap();
    assert!(ttft(&shared) < 1223.0 * 0.85, "{}", ttft(&shared));
}

#[test]
fn a_shared_tier_of_two_sizes_is_refused_naming_both_endpoints() {
    let yaml = format!(
        "matcher: round-robin\ntrace: {}\ntiming: trace\nendpoints: [a, b]\n\
         engine: {{kv_bytes_per_token: 1024}}\nengines:\n  \
         - {{shared_tier: {{blocks: 64, d2h_gbps: 1, h2d_gbps: 1}}}}\n  \
         - {{shared_tier: {{blocks: 32, d2h_gbps: 1, h2d_gbps: 1}}}}\n",
        project_trace("mooncake-small.jsonl").display()
    );
    let path = support::scratch_file("two-shared-sizes.yaml", yaml.as_bytes());
    let output = support::routerlab(&["replay", "--config", path.to_str().unwrap()]);
    let (stdout, stderr) = support::texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`a` has 64, `b` has 32") && stderr.contains("shared_tier.blocks"),
        "{stderr}"
    );
    assert!(stdout.is_empty());
}

#[test]
fn a_live_engine_refuses_a_shared_tier_before_it_listens() {
    let output = support::routerlab(&[
        "engine",
        "--listen",
        "127.0.0.1:0",
        "--engine-config",
        "{kv_bytes_per_token: 8, shared_tier: {blocks: 4, d2h_gbps: 1, h2d_gbps: 1}}",
    ]);
    let (_, stderr) = support::texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("only the timed replay models"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
}

#[test]
fn a_models_config_json_sizes_the_kv_of_engines_and_transfers() {
    let trace = project_trace("mooncake-small.jsonl");
    let llama = project_trace("models/Llama-3.1-8B.json");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--timing",
            "trace",
            "--model-config",
            llama.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Replay::new("round-robin", &trace).args(&args).report()
    };
    let tier = "host_tier: {blocks: 64, d2h_gbps: 25, h2d_gbps: 25}";
    let from_model = run(&[
        "--engine-config",
        &format!("{{num_gpu_blocks: 512, {tier}}}"),
    ]);
    assert_eq!(
        from_model["run"]["timed"]["engines"][0]["kv_bytes_per_token"],
        131072
    );
    // The same as the bytes given by hand.
    let by_hand = Replay::new("round-robin", &trace)
        .args(&[
            "--timing",
            "trace",
            "--engine-config",
            &format!("{{num_gpu_blocks: 512, kv_bytes_per_token: 131072, {tier}}}"),
        ])
        .report();
    assert_eq!(from_model["timed"], by_hand["timed"]);
    // An engine setting wins; fp8 halves the model's bytes, for the KV transfer too.
    let explicit = run(&["--engine-config", "{kv_bytes_per_token: 7}"]);
    assert_eq!(
        explicit["run"]["timed"]["engines"][0]["kv_bytes_per_token"],
        7
    );
    let split = run(&[
        "--kv-cache-dtype",
        "fp8",
        "--prefill-endpoints",
        "1",
        "--decode-endpoints",
        "1",
    ]);
    assert_eq!(
        split["run"]["timed"]["kv_transfer"]["kv_bytes_per_token"],
        65536
    );
    assert_eq!(
        split["run"]["timed"]["engines"][1]["kv_bytes_per_token"],
        65536
    );
    // A file that is not a model config is named, with the field.
    let bad = support::scratch_file("no-layers.json", br#"{"torch_dtype": "bfloat16"}"#);
    let output = Replay::new("round-robin", &trace)
        .args(&["--timing", "trace", "--model-config", bad.to_str().unwrap()])
        .run();
    let (stdout, stderr) = support::texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no-layers.json: field `num_hidden_layers`: missing"),
        "{stderr}"
    );
    assert!(stdout.is_empty());
}

/// The hit-ratio plot's groups: with tiers, where the reuse came from.
#[test]
fn the_hit_ratio_plot_shows_each_tier() {
    let trace = project_trace("mooncake-small.jsonl");
    let labels = |engine: &str, name: &str| {
        let dir = std::env::temp_dir().join(format!(
            "routerlab-tier-plots-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let output = support::routerlab(&[
            "compare",
            "--trace",
            trace.to_str().unwrap(),
            "--timing",
            "trace",
            "--endpoints",
            "2",
            "--engine-config",
            engine,
            "--policy",
            "round-robin",
            "--policy",
            "dynamo-kv",
            "-q",
            "--plot",
            dir.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", support::texts(&output).1);
        let text = std::fs::read_to_string(dir.join("hit-ratios.svg")).unwrap();
        let svg = roxmltree::Document::parse(&text).unwrap();
        let labels: Vec<String> = svg
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_owned())
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        labels
    };
    let tiered = labels(
        "{num_gpu_blocks: 256, kv_bytes_per_token: 1024, \
         host_tier: {blocks: 512, d2h_gbps: 25, h2d_gbps: 25}, \
         shared_tier: {blocks: 4096, d2h_gbps: 10, h2d_gbps: 10}}",
        "tiered",
    );
    for group in ["GPU-tier hit", "host-tier hit", "shared-tier hit"] {
        assert!(
            tiered.iter().any(|t| t == group),
            "no `{group}`: {tiered:?}"
        );
    }
    let host_only = labels(
        "{kv_bytes_per_token: 1024, host_tier: {blocks: 512, d2h_gbps: 25, h2d_gbps: 25}}",
        "host",
    );
    assert!(host_only.iter().any(|t| t == "host-tier hit"));
    assert!(!host_only.iter().any(|t| t == "shared-tier hit"));
    let one_tier = labels("{num_gpu_blocks: 256}", "one");
    assert!(
        !one_tier.iter().any(|t| t.contains("tier hit")),
        "{one_tier:?}"
    );
}

/// The experiment file's `model_config` is relative to the file, as its `trace` is.
#[test]
fn an_experiment_files_model_config_is_relative_to_it() {
    let model = std::fs::read(project_trace("models/Qwen3-32B.json")).unwrap();
    let config = support::scratch_file("qwen3-32b.json", &model);
    let yaml = format!(
        "matcher: round-robin\ntrace: {}\ntiming: trace\nformat: json\nmodel_config: {}\n",
        project_trace("mooncake-small.jsonl").display(),
        config.file_name().unwrap().to_str().unwrap()
    );
    let experiment = support::scratch_file("model-config.yaml", yaml.as_bytes());
    let output = support::routerlab(&["replay", "--config", experiment.to_str().unwrap()]);
    let (stdout, stderr) = support::texts(&output);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["run"]["timed"]["engines"][0]["kv_bytes_per_token"],
        262144
    );
}
