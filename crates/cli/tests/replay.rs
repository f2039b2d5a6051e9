//! The replay tool end to end: the main command, determinism, experiment files, plugin
//! listing, the committed synthetic trace, and the public traces beside the workspace.

mod support;

use routerlab_core::abi::{RL_ABI_MAJOR, RL_ABI_MINOR};
use routerlab_trace::synth::{ChatWorkload, write_chat};
use support::*;

#[test]
fn main_command_prints_the_prototype_lines_then_a_table() {
    let chat = project_trace("chat.jsonl");
    let output = Replay::new("lcp", &chat).run();
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("Nreq distribution: ["), "{stdout}");
    assert!(
        lines[1].starts_with("Cache-miss length: mean: "),
        "{stdout}"
    );
    assert!(
        lines[2].ends_with("share-prefix requests were routed to the same endpoint"),
        "{stdout}"
    );
    assert!(stdout.contains("localhost:8009"), "{stdout}");
    assert!(stdout.contains("hit ratio"), "{stdout}");
    assert!(stderr.starts_with("replayed 2200 requests in "), "{stderr}");
}

#[test]
fn reports_are_byte_identical_for_the_same_inputs_and_seed() {
    let chat = project_trace("chat.jsonl");
    let run = |seed: &str| {
        Replay::new("round-robin", &chat)
            .args(&["--format", "yaml", "--seed", seed])
            .stdout()
    };
    assert_eq!(run("3"), run("3"));
    // The seed reaches the plugins: lcp's random tie-breaks move with it.
    let lcp = |seed: &str| {
        Replay::new("lcp", &chat)
            .args(&[
                "--format",
                "json",
                "--seed",
                seed,
                "--detector",
                "num-requests",
            ])
            .stdout()
    };
    assert_eq!(lcp("1"), lcp("1"));
    assert_ne!(lcp("1"), lcp("2"));
}

#[test]
fn policies_differ_where_they_should() {
    let chat = project_trace("chat.jsonl");
    let lcp = Replay::new("lcp", &chat).report();
    let rr = Replay::new("round-robin", &chat).report();
    let capped = Replay::new("lcp", &chat)
        .args(&[
            "--detector",
            "num-requests",
            "--detector-config",
            "{max_running: 400}",
        ])
        .report();
    let kv = Replay::new("lcp", &chat)
        .args(&["--detector", "max-kv-cache", "--cache-blocks", "2000"])
        .report();
    // lcp herds on the shared system prompt; round-robin spreads evenly.
    assert_eq!(lcp["nreq"]["max_over_mean"], 10.0);
    assert_eq!(rr["nreq"]["max_over_mean"], 1.0);
    assert!(lcp["hit_ratio"].as_f64() > rr["hit_ratio"].as_f64());
    assert_eq!(
        lcp["share_prefix"]["same_endpoint"],
        lcp["share_prefix"]["total"]
    );
    // The detector caps every endpoint just above 400 running requests.
    assert!(
        capped["nreq"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c.as_u64().unwrap() <= 401)
    );
    assert!(capped["constrained_decisions"].as_u64().unwrap() > 0);
    // A finite cache fills past 90% and the KV detector spreads load.
    assert!(kv["nreq"]["max_over_mean"].as_f64().unwrap() < 2.0);
    assert!(kv["constrained_decisions"].as_u64().unwrap() > 0);
    assert_eq!(kv["rejected"], 0);
}

#[test]
fn rejects_when_everything_is_unavailable_unless_fail_open() {
    let trace = project_trace("mooncake-small.jsonl");
    let run = |extra: &[&str]| -> serde_json::Value {
        Replay::new("lcp", &trace)
            .args(&["--endpoints", "2", "--detector", "num-requests"])
            .args(&["--detector-config", "max_running: 9"])
            .args(extra)
            .report()
    };
    let closed = run(&[]);
    assert_eq!(closed["nreq"]["counts"], serde_json::json!([10, 10]));
    assert_eq!(closed["rejected"], 280);
    let open = run(&["--fail-open"]);
    assert_eq!(open["rejected"], 0);
    assert_eq!(open["requests"], 300);
}

#[test]
fn experiment_file_holds_settings_and_flags_override_it() {
    let yaml = format!(
        "matcher: round-robin\ntrace: {}\nendpoints: [a, b, c]\nformat: json\nmatcher_config: {{}}\n",
        project_trace("mooncake-small.jsonl").display()
    );
    let path = scratch_file("experiment.yaml", yaml.as_bytes());
    let from_file: serde_json::Value =
        serde_json::from_slice(&routerlab(&["replay", "--config", path.to_str().unwrap()]).stdout)
            .unwrap();
    assert_eq!(from_file["endpoints"], 3);
    assert_eq!(
        from_file["nreq"]["counts"],
        serde_json::json!([100, 100, 100])
    );
    let overridden = routerlab(&[
        "replay",
        "--config",
        path.to_str().unwrap(),
        "--endpoints",
        "4",
        "--format",
        "yaml",
    ]);
    let text = String::from_utf8(overridden.stdout).unwrap();
    assert!(text.contains("endpoints: 4\n"), "{text}");
}

#[test]
fn plugins_subcommand_lists_builtins() {
    let output = routerlab(&["plugins"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.starts_with("NAME "), "{stdout}");
    for (name, kind) in [
        ("lcp", "matcher"),
        ("simhash", "matcher"),
        ("round-robin", "matcher"),
        ("num-requests", "detector"),
        ("max-kv-cache", "detector"),
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing: {stdout}"));
        let abi = format!(" {RL_ABI_MAJOR}.{RL_ABI_MINOR} ");
        assert!(row.contains(kind) && row.contains(&abi), "{row}");
    }
}

#[test]
fn committed_chat_trace_is_the_generators_default_output() {
    let mut generated = Vec::new();
    write_chat(&ChatWorkload::default(), &mut generated).unwrap();
    let committed = std::fs::read(project_trace("chat.jsonl")).unwrap();
    assert!(
        generated == committed,
        "traces/chat.jsonl differs from `routerlab gen-trace` output with the defaults: regenerate it \
         with `cargo xtask gen-trace -o traces/chat.jsonl`"
    );
}

#[test]
fn committed_sessions_trace_is_the_generators_mooncake_output() {
    let committed = project_trace("mooncake-sessions.jsonl");
    let generated = scratch_file("mooncake-sessions.jsonl", b"");
    let output = routerlab(&[
        "gen-trace",
        "--format",
        "mooncake",
        "-o",
        &generated.to_string_lossy(),
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    assert!(
        std::fs::read(&generated).unwrap() == std::fs::read(&committed).unwrap(),
        "traces/mooncake-sessions.jsonl differs from `routerlab gen-trace --trace-format mooncake`: \
         regenerate it with `cargo xtask gen-trace --trace-format mooncake -o traces/mooncake-sessions.jsonl`"
    );
}

#[test]
fn committed_lora_trace_is_the_generators_output_with_adapters() {
    let committed = project_trace("lora-mooncake.jsonl");
    let generated = scratch_file("lora-mooncake.jsonl", b"");
    let output = routerlab(&[
        "gen-trace",
        "--format",
        "mooncake",
        "--requests",
        "1000",
        "--adapters",
        "8",
        "--seed",
        "0",
        "-o",
        &generated.to_string_lossy(),
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    assert!(
        std::fs::read(&generated).unwrap() == std::fs::read(&committed).unwrap(),
        "traces/lora-mooncake.jsonl differs from `routerlab gen-trace`: regenerate it with \
         `cargo xtask gen-trace --trace-format mooncake --requests 1000 --adapters 8 --seed 0 -o traces/lora-mooncake.jsonl`"
    );
}

#[test]
fn mooncake_conversation_trace_in_tokens_shows_the_hot_spot() {
    let trace = project_trace("mooncake-conversation.jsonl");
    let report = Replay::new("lcp", &trace)
        .args(&["--trace-block-size", "512"])
        .report();
    assert_eq!(report["unit"], "tokens");
    assert_eq!(report["requests"], 12031);
    // Every request starts with the same block, so lcp sends all of them to one endpoint,
    // and the hit ratio is that of one unbounded cache. Compute it independently.
    assert_eq!(report["nreq"]["max_over_mean"], 10.0);
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut cached = std::collections::HashSet::new();
    let (mut hits, mut prompt) = (0u64, 0u64);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let len = v["input_length"].as_u64().unwrap();
        let ids: Vec<u64> = v["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let ids = &ids[..len.div_ceil(512) as usize];
        let k = ids.iter().take_while(|id| cached.contains(*id)).count() as u64;
        hits += (k * 512).min(len);
        prompt += len;
        cached.extend(ids.iter().copied());
    }
    let expected = ((hits as f64 / prompt as f64) * 1e6).round() / 1e6;
    assert_eq!(report["hit_ratio"].as_f64().unwrap(), expected);
}

#[test]
fn other_public_traces_replay() {
    for name in ["mooncake-synthetic.jsonl", "mooncake-arxiv-1000.jsonl"] {
        let (report, _) = Replay::new("simhash", &project_trace(name)).json();
        assert_eq!(report["unit"], "tokens", "{name}");
        let lines = std::fs::read_to_string(project_trace(name))
            .unwrap()
            .lines()
            .count();
        assert_eq!(report["requests"], lines as u64, "{name}");
        assert!(
            report["hit_ratio"].as_f64().unwrap() > 0.0,
            "{name}: shared prefixes"
        );
    }
}

#[test]
fn reports_say_what_produced_them_and_read_back() {
    let trace = project_trace("mooncake-small.jsonl");
    let (report, _) = Replay::new("lcp", &trace)
        .args(&[
            "--seed",
            "3",
            "--detector",
            "num-requests",
            "--endpoints",
            "4",
        ])
        .json();
    let run = &report["run"];
    assert_eq!(run["tool_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        run["matcher"],
        serde_json::json!({"name": "lcp", "config": "seed: 3\n"})
    );
    assert_eq!(run["detector"]["name"], "num-requests");
    assert_eq!(run["seed"], 3);
    assert_eq!(run["trace"]["format"], "mooncake");
    assert_eq!(
        run["trace"]["bytes"],
        std::fs::metadata(&trace).unwrap().len()
    );
    assert_eq!(run["trace"]["content_hash"].as_str().unwrap().len(), 16);
    assert_eq!(run["block_size"], 512);
    assert_eq!(run["endpoints"].as_array().unwrap().len(), 4);
    assert_eq!(run["when_unavailable"], "reject");
    assert!(run.get("timed").is_none());
    let back: routerlab_sim::Report = serde_json::from_value(report.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), report);

    let (timed, _) = Replay::new("round-robin", &trace)
        .args(&[
            "--timing",
            "trace",
            "--rate",
            "50",
            "--engine-config",
            "{num_gpu_blocks: 900}",
        ])
        .json();
    assert_eq!(
        timed["run"]["timed"]["arrivals"],
        serde_json::json!({"process": "poisson", "rate": 50.0})
    );
    assert_eq!(timed["run"]["timed"]["engines"][9]["num_gpu_blocks"], 900);
    assert_eq!(timed["run"]["when_unavailable"], "queue");
    let back: routerlab_sim::Report = serde_json::from_value(timed.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), timed);
}

/// Decision quality on a trace small enough to work out by hand (4-byte blocks, two
/// endpoints, round-robin sends requests to 0, 1, 0, 1):
///
/// | request | prompt | caches before (blocks held of it) | best | chosen | achieved |
/// | 1 | AAAABBBB | -, - | 0 | 0 | 0 |
/// | 2 | AAAACCCC | e0: 1 (A), e1: 0 | 1 | 1 | 0 |
/// | 3 | AAAABBBBDDDD, parent 1 | e0: 2 (A, AB), e1: 1 | 2 | 0 | 2 |
/// | 4 | AAAACCCCEEEE, parent 2 | e0: 1, e1: 2 (A, AC) | 2 | 1 | 2 |
///
/// best 5, achieved 4, optimal in 3 of 4 decisions, both follow-ups where their parent went.
#[test]
fn decision_quality_by_hand() {
    let trace = scratch_file(
        "quality.jsonl",
        br#"{"id": "1", "prompt": "AAAABBBB"}
{"id": "2", "prompt": "AAAACCCC"}
{"id": "3", "prompt": "AAAABBBBDDDD", "parent": "1"}
{"id": "4", "prompt": "AAAACCCCEEEE", "parent": "2"}
"#,
    );
    let report = Replay::new("round-robin", &trace)
        .args(&["--endpoints", "2", "--block-size", "4"])
        .report();
    assert_eq!(
        report["quality"],
        serde_json::json!({
            "best_hit_blocks": 5,
            "achieved_hit_blocks": 4,
            "achieved_over_best": 0.8,
            "kv_optimal_share": 0.75,
            "followup_precision": 1.0,
        })
    );
}

/// Third-party traces in `traces/` are the unmodified files their sources published.
#[test]
fn third_party_traces_are_the_published_bytes() {
    use sha2::{Digest, Sha256};
    // The SHA-256 of each file as its source publishes it (traces/README.md).
    for (name, published) in [
        (
            "mooncake-conversation.jsonl",
            "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
        ),
        (
            "mooncake-synthetic.jsonl",
            "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
        ),
        (
            "mooncake-arxiv-1000.jsonl",
            "e2bec9bccd21978f69a2ace7886ee2e5192a64839f7aa2c4dd5d8766fd392510",
        ),
        (
            "azure-llm-inference-code-2023.csv",
            "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas/LMBench_short_input_qps10.csv",
            "2b9842bdbbe7208ad40f11479437fec6a64554ed49a16a68ccd70da86cfa3966",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas/LMBench_short_input_qps9.5.csv",
            "96ce412c2c2ab5906391a558f9e6a877913fc63dadeb853a4541185398390631",
        ),
        (
            "llm-d-benchmark/llm-d-70b-2replicas/LMBench_short_input_qps9.5.csv",
            "9f70f7bb6abc611417377acdf434ef7f45f77844363961d8501528f9025e6c01",
        ),
        (
            "llm-d-benchmark/llm-d-70b-2replicas/LMBench_sharegpt_output_2.csv",
            "51428f0ce02b5c8da0fefd8caafaa429f70e5a021fc06d27cad91ce0d11aabd0",
        ),
        (
            "llm-d-benchmark/llm-d-70b-2replicas/LMBench_short_input_qps10.csv",
            "dfc6068e0cfb9cca91e530be196bf8b1d353d72443aa476d9c4d635731d1c2a0",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_0.5.csv",
            "9208d7a359de624f2fc5f8dbe8899bd8fe3d7164a0a5271d60d86fd6a979b050",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_1.csv",
            "3ca1070ce01570a7f08cb588fba068b87840d200b06b2feefce0bd00b487a01e",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_2.csv",
            "9da704ac21f0945105b9f99a22c87e62b68edea9897c8af1ef132bf468ee053a",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_8.csv",
            "b1d44a3a57123fee78ab076cda6d691d98c4e7ab9f0bdcee049b7b382e99b7f2",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_10.csv",
            "30be1e00b46f53e45b6914a25f831c88737a519321b02653b3c672cbee9270e5",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_0.67.csv",
            "32b52a3952d98b39218f4e716e6ffba1817f19b90c888f871c443c692fe35e6c",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_0.84.csv",
            "98c5fdfdd14fbf25ef80de5559cefc5ef2a82c052573f010f83db4d1db36ea9e",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_1.17.csv",
            "58c6b19cc1e5728425fb0e132fa8e39c37ebe87b187494fa81c688b52e607068",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_1.34.csv",
            "6dc00c2ae2a4fec5a4284b67f3d589d772f96176f1944a8e7dc189849c0b35c3",
        ),
        (
            "llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_1.5.csv",
            "cf4a956e8fa67cfb202405ab688d1f48089eebc3c185248ec892319810b22c41",
        ),
        (
            "llm-d-benchmark/llm-d-70b-2replicas-sharegpt/LMBench_sharegpt_output_0.5.csv",
            "ad4ffcec01c17177a9e0b3e4437151b11ae3f06f3bc2cacecc4744174f2ae10e",
        ),
        (
            "llm-d-benchmark/llm-d-70b-2replicas-sharegpt/LMBench_sharegpt_output_1.csv",
            "9fa85d8634a65c83b4998c0871c51e1cebda75fcccf8570f3f465a284a735398",
        ),
        (
            "llm-d-benchmark/llm-d-70b-2replicas-sharegpt/LMBench_sharegpt_output_1.5.csv",
            "80021259717447106b7f40cdf3ca11f819ae649c9fa06ee08e6e7cf5331f522a",
        ),
        (
            "lmbench/sharegpt/run.json",
            "ceb2357a2df06eda02875faca5191986bc9e98cf59f3d2608f06532bf0dbcc23",
        ),
        (
            "lmbench/sharegpt/warmup.json",
            "d4baf6c028544927bf61169f11a8ac4cf92d42abf0b6bdb751b747f895f874db",
        ),
        (
            "models/OPT-13B.json",
            "bbc7bf98c71f3187f9d3d2db4973fb7cd86c72e0b72bab879d2222136e0cb77f",
        ),
        (
            "models/Llama-3.1-70B.json",
            "26738542ebe0f45dab3d138460883943763ef03126797a92e70301957d039410",
        ),
        (
            "models/Llama-3.1-8B.json",
            "54acfad3cffe057640904ca8a1e83525e6551c70c7a04c641f5a9eda0bbf64bd",
        ),
        (
            "models/Qwen3-32B.json",
            "855a9d23f97f8771c84280619ae156c8f73c9cd64a5d53a059125b4aecab12d4",
        ),
        (
            "models/DeepSeek-V3.2-Exp-16L64E.json",
            "cbde50a16b78830e9e49ee9e8caab7e39f43e4cd16a6f85d4cdb673cc30e024d",
        ),
        (
            "models/Qwen3.8-27B.json",
            "72c59b456c787ac14ac1063d9e065f37a2772f9d8e76f86de7e2c828cdcbc72c",
        ),
        (
            "models/Qwen3-30B-A3B-Instruct-2507.json",
            "0736f3bafb95cc658776c92ab34f5f98d8169634a3a36b84892d71448a1f19d3",
        ),
        (
            "llmservingsim/RTX4090-Llama-3.1-8B-vllm/requests.jsonl",
            "5a6f2a0b09d5eb84bd75b30ed625d883c22b4bcc0a839cd1128ae42f74ecc90d",
        ),
        (
            "llmservingsim/RTX4090-Llama-3.1-8B-vllm/meta.json",
            "56cbcb2a08e9fe6f67d60cad8ee545f86c874f82b46ab413da484f331417b2fc",
        ),
        (
            "llmservingsim/RTX4090-Llama-3.1-8B-vllm/timeseries.csv",
            "f99d474f8d8a2c52f986fb27e46832a1627fc908d7570852b016573b89ab3173",
        ),
        (
            "llmservingsim/RTXPRO6000-Qwen3-32B-vllm/requests.jsonl",
            "7751686bb9f927f5cd39adf901b2d0755b8f1a1182561c3df5446c927f95342f",
        ),
        (
            "llmservingsim/RTXPRO6000-Qwen3-32B-vllm/meta.json",
            "9b56098c6e028d17417a392d041af32cf0cfa741dff07fdd1d0ea9ecba5c0236",
        ),
        (
            "llmservingsim/RTXPRO6000-Qwen3-32B-vllm/timeseries.csv",
            "4f90a78ec503e25ecf08660cb573af403ed10bd2c51a1f6d80adda00ea3ed010",
        ),
        (
            "llmservingsim/RTXPRO6000-Qwen3-30B-A3B-vllm/requests.jsonl",
            "bde98fa878f59f1b3b8b8f9b3b09f8e1ae36be6a8f56040b9a80a97d00a7dc7b",
        ),
        (
            "llmservingsim/RTXPRO6000-Qwen3-30B-A3B-vllm/meta.json",
            "ae871638b83fbf81bb8b6ac83b5fca00e1e40e5babd46612c0a9368bbcc05fe8",
        ),
        (
            "llmservingsim/RTXPRO6000-Qwen3-30B-A3B-vllm/timeseries.csv",
            "320c75df0c57efd4c12c0dae59078c40718e74573974ac3ed286ec3f2e10387f",
        ),
    ] {
        let bytes = std::fs::read(project_trace(name)).unwrap();
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, published, "{name}");
    }
}
