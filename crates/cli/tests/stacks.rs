//! Two serving stacks measured at the same load points, compared through their experiment
//! files (`validate --stack DIR=CONFIG`): llm-d-benchmark's exp-2, two A100 replicas of
//! Llama-3.1-70B behind a plain Service and behind llm-d's gateway, on its multi-round
//! points at 9.5 and 10 requests/s (`traces/llm-d-benchmark/`, the stacks in
//! `examples/exp-2/`);
//! and, on a small made-up run, the conversations an LMBench workload gives both stacks.

mod support;

use serde_json::Value;
use support::{routerlab, texts, workspace_root};

fn stacks(extra: &[&str]) -> std::process::Output {
    stacks_of("", extra)
}

/// The two stacks' directories `traces/llm-d-benchmark/{vllm,llm-d}-70b-2replicas{suffix}`.
fn stacks_of(suffix: &str, extra: &[&str]) -> std::process::Output {
    let root = workspace_root();
    let stack = |dir: &str, config: &str| {
        format!(
            "{}={}",
            root.join("traces/llm-d-benchmark")
                .join(format!("{dir}{suffix}"))
                .display(),
            root.join("examples/exp-2").join(config).display()
        )
    };
    let (a, b) = (
        stack("vllm-70b-2replicas", "service.yaml"),
        stack("llm-d-70b-2replicas", "llm-d.yaml"),
    );
    let mut args = vec!["validate", "--stack", &a, "--stack", &b];
    args.extend(extra);
    routerlab(&args)
}

#[test]
fn the_gateways_cost_on_short_prompts_is_reproduced_point_by_point() {
    // The two points both directories hold (the llm-d ShareGPT run has no Service twin),
    // the 10/s one starting from the caches the 9.5/s one left, as each stack ran them;
    // each stack's TTFT p50 the median over nine seeds of its routers.
    let output = stacks(&[
        "--warm-up-previous",
        "--router-seeds",
        "9",
        "--format",
        "json",
    ]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["points"], 2);
    assert_eq!(summary["seeds"], 9);
    let rows = summary["rows"].as_array().unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["point"] == name)
            .unwrap_or_else(|| panic!("no row {name}: {summary}"))
    };
    // Measured TTFT p50 behind the Service and behind llm-d: 103.8 and 118.8 ms at 9.5/s
    // (1.145), 102.2 and 121.6 ms at 10/s (1.190).
    for (name, ratio) in [
        ("LMBench_short_input_qps9.5.csv", 1.145),
        ("LMBench_short_input_qps10.csv", 1.190),
    ] {
        let row = row(name);
        let measured = row["measured_ratio"].as_f64().unwrap();
        assert!((measured - ratio).abs() < 0.001, "{name}: {measured}");
        // Simulated from the two experiment files: llm-d slower by its hop, as measured.
        let simulated = row["simulated_ratio"].as_f64().unwrap();
        assert!(simulated > 1.0, "{name}: {simulated}");
        assert!(
            (simulated - measured).abs() <= 0.10,
            "{name}: {simulated} vs {measured}"
        );
        assert_eq!(row["sign_agrees"], true);
        // Every seed's own ratio has llm-d the slower.
        assert!(
            row["simulated_ratio_range"][0].as_f64().unwrap() > 1.0,
            "{row}"
        );
    }
    assert_eq!(summary["within"], 2);
    // The human table says the same.
    let human = texts(&stacks(&["--warm-up-previous", "--router-seeds", "9"])).0;
    assert!(
        human.contains("2 of 2 points compared: ratio within ±0.10 at 2, sign agrees at 2"),
        "{human}"
    );
}

/// ShareGPT's conversations at 0.5, 1 and 1.5 requests/s, where the llm-d stack logged all
/// but a few of its requests: llm-d answers sooner than the Service, by its picker's reuse,
/// less LMCache's transfers, which its connector makes within the engine's steps. The
/// Service's random balancer makes one seed's ratio one draw (0.50 to 0.88 at 0.5/s over
/// nine seeds): each stack's TTFT p50 is its median over nine.
#[test]
fn lmcaches_transfers_within_the_step_reproduce_the_sharegpt_points() {
    let root = workspace_root();
    let workload = root.join("traces/lmbench/sharegpt");
    let (run, warm_up) = (
        workload.join("run.json").display().to_string(),
        workload.join("warmup.json").display().to_string(),
    );
    let args = [
        "--allow-partial",
        "--warm-up-previous",
        "--lmbench-workload",
        &run,
        "--lmbench-warm-up",
        &warm_up,
        "--router-seeds",
        "9",
        "--format",
        "json",
    ];
    let output = stacks_of("-sharegpt", &args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["compared"], 3, "{summary}");
    // Measured llm-d over Service: 250.4 / 350.0, 272.3 / 300.8, 274.1 / 287.2 ms.
    for (point, measured) in [("0.5", 0.715), ("1", 0.906), ("1.5", 0.954)] {
        let name = format!("LMBench_sharegpt_output_{point}.csv");
        let row = summary["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["point"] == name.as_str())
            .unwrap_or_else(|| panic!("no row {name}: {summary}"));
        assert!((row["measured_ratio"].as_f64().unwrap() - measured).abs() < 0.001);
        let simulated = row["simulated_ratio"].as_f64().unwrap();
        assert!((simulated - measured).abs() <= 0.10, "{name}: {simulated}");
        assert!(simulated < 1.0, "{name}: llm-d the faster, as measured");
    }
    assert_eq!(summary["within"], 3);
}

#[test]
fn a_stack_comparison_needs_two_stacks_each_a_directory_and_a_config() {
    let root = workspace_root();
    for (args, expected) in [
        (
            vec![
                "validate".to_owned(),
                "--stack".to_owned(),
                "x=y".to_owned(),
            ],
            "give two (DIR=CONFIG each)",
        ),
        (
            vec![
                "validate".to_owned(),
                "--stack".to_owned(),
                root.join("traces").display().to_string(),
                "--stack".to_owned(),
                "b=c".to_owned(),
            ],
            "give DIR=CONFIG",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = routerlab(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(texts(&output).1.contains(expected), "{}", texts(&output).1);
    }
}

/// Given LMBench's ShareGPT workload (`--lmbench-workload`), both stacks' points are read
/// with their conversations: the simulated rounds reuse their previous rounds' prompts (and
/// those of its warm-up, `--lmbench-warm-up`), and a point whose run lost a round is
/// partial, left out unless `--allow-partial`.
#[test]
fn a_stack_comparison_reads_each_points_conversations_from_the_workload() {
    let root = support::fresh_path("stacks-lmbench");
    let engine = "timing: trace\nendpoints: 2\nengine:\n  max_num_seqs: 8\n  \
                  max_num_batched_tokens: 4096\n  num_gpu_blocks: 1000\n  step_time: {model: \
                  batched, overhead_ms: 1, prefill_ms_per_token: 1.0, decode_ms_per_seq: 0.1, \
                  context_ms_per_ktoken: 0}\n";
    for (dir, lost) in [("a", None), ("b", None), ("lost", Some(3))] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("run.csv"), support::lmbench_csv(lost)).unwrap();
    }
    std::fs::write(root.join("wl.json"), support::lmbench_workload()).unwrap();
    std::fs::write(root.join("a.yaml"), format!("{engine}matcher: random\n")).unwrap();
    std::fs::write(root.join("b.yaml"), format!("{engine}matcher: lcp\n")).unwrap();
    let path = |name: &str| root.join(name).display().to_string();
    let compare = |b: &str, extra: &[&str]| -> Value {
        let (a, b) = (
            format!("{}={}", path("a"), path("a.yaml")),
            format!("{}={}", path(b), path("b.yaml")),
        );
        let mut args = vec!["validate", "--stack", &a, "--stack", &b, "--format", "json"];
        args.extend(extra);
        let output = routerlab(&args);
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{stderr}");
        serde_json::from_str(&stdout).unwrap()
    };
    let workload = path("wl.json");
    let flag = ["--lmbench-workload", workload.as_str()];
    let simulated = |summary: &Value, key: &str| summary["rows"][0][key].as_f64().unwrap();
    // Without the workload nothing is shared: both stacks prefill every prompt alike.
    let alone = compare("b", &[]);
    assert_eq!(alone["rows"][0]["simulated_ratio"], 1.0);
    // With it the rounds reuse, and `lcp` brings each back to its previous round's engine.
    let shared = compare("b", &flag);
    assert!(simulated(&shared, "simulated_a_ms") < simulated(&alone, "simulated_a_ms"));
    assert!(simulated(&shared, "simulated_b_ms") < simulated(&shared, "simulated_a_ms"));
    // LMBench's warm-up before the point (`--lmbench-warm-up`): its round that the run's
    // fourth request continues (and the first begins) is cached, and `lcp` finds it.
    std::fs::write(
        root.join("warm.json"),
        r#"[{"input": "Tell me about tides.\nThe moon.", "output_length": 40}]"#,
    )
    .unwrap();
    let warm = path("warm.json");
    let warmed = compare(
        "b",
        &[&flag[..], &["--lmbench-warm-up", warm.as_str()][..]].concat(),
    );
    assert!(simulated(&warmed, "simulated_b_ms") < simulated(&shared, "simulated_b_ms"));
    // A lost round shows only through the conversations.
    assert_eq!(compare("lost", &[])["compared"], 1);
    let lost = compare("lost", &flag);
    assert_eq!(lost["compared"], 0);
    let skipped = lost["rows"][0]["skipped"].as_str().unwrap();
    assert!(skipped.contains("rounds missing"), "{skipped}");
    let allowed = ["--lmbench-workload", workload.as_str(), "--allow-partial"];
    assert_eq!(compare("lost", &allowed)["compared"], 1);
}

/// `--warm-up-previous` warms each point with the one launched before it in its sweep,
/// whatever their offered loads: here the faster point ran first.
#[test]
fn a_point_is_warmed_by_the_one_launched_before_it() {
    let root = support::fresh_path("stacks-order");
    let engine = "timing: trace\nendpoints: 1\nmatcher: lcp\nengine:\n  max_num_seqs: 8\n  \
                  max_num_batched_tokens: 4096\n  num_gpu_blocks: 1000\n  step_time: {model: \
                  batched, overhead_ms: 1, prefill_ms_per_token: 1.0, decode_ms_per_seq: 0.1, \
                  context_ms_per_ktoken: 0}\n";
    // The 2-a-second point launched an hour before the 1-a-second one.
    let csv = |start: f64, every: f64| -> String {
        let mut text = String::from(
            "prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time\n",
        );
        for (i, (prompt, generated)) in support::LMBENCH_LOGGED.iter().enumerate() {
            let launch = start + i as f64 * every;
            text += &format!("{prompt},{generated},0.2,1.0,{launch},{}\n", launch + 1.2);
        }
        text
    };
    for dir in ["a", "b"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("qps_1.csv"), csv(1_700_003_600.0, 1.0)).unwrap();
        std::fs::write(root.join(dir).join("qps_2.csv"), csv(1_700_000_000.0, 0.5)).unwrap();
    }
    std::fs::write(root.join("wl.json"), support::lmbench_workload()).unwrap();
    std::fs::write(root.join("fleet.yaml"), engine).unwrap();
    let path = |name: &str| root.join(name).display().to_string();
    let (a, b, workload) = (
        format!("{}={}", path("a"), path("fleet.yaml")),
        format!("{}={}", path("b"), path("fleet.yaml")),
        path("wl.json"),
    );
    let simulated = |extra: &[&str]| -> Vec<f64> {
        let mut args = vec!["validate", "--stack", &a, "--stack", &b, "--format", "json"];
        args.extend(["--lmbench-workload", workload.as_str()]);
        args.extend(extra);
        let output = routerlab(&args);
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{stderr}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        let rows = summary["rows"].as_array().unwrap();
        assert_eq!(rows[0]["point"], "qps_1.csv");
        rows.iter()
            .map(|r| r["simulated_a_ms"].as_f64().unwrap())
            .collect()
    };
    let cold = simulated(&[]);
    let warm = simulated(&["--warm-up-previous"]);
    // The later (1 a second) point starts with the earlier one's prompts cached; the
    // earlier point has none before it.
    assert!(warm[0] < cold[0], "{warm:?} {cold:?}");
    assert_eq!(warm[1], cold[1]);
}

/// A Service spreads requests at random, so one seed's simulated latency is one draw:
/// `--router-seeds N` replays each run under seeds 0 to N−1 and reports each metric's
/// median over them with its lowest and highest. A router that draws nothing (round robin)
/// gives every seed the same answer.
#[test]
fn a_random_routers_run_is_judged_over_its_seeds() {
    let root = workspace_root();
    let run = root
        .join("traces/llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_0.5.csv")
        .display()
        .to_string();
    let model = root
        .join("traces/models/Llama-3.1-70B.json")
        .display()
        .to_string();
    let workload = root
        .join("traces/lmbench/sharegpt/run.json")
        .display()
        .to_string();
    let validate = |router: &str, seeds: &str, format: &str| {
        routerlab(&[
            "validate",
            "--gpu",
            "A100-80GB",
            "--model-config",
            &model,
            "--tensor-parallel-size",
            "2",
            "--data-parallel-size",
            "2",
            "--router",
            router,
            "--gpu-memory-utilization",
            "0.95",
            "--max-num-seqs",
            "256",
            "--max-num-batched-tokens",
            "8192",
            "--lmbench-workload",
            &workload,
            &run,
            "--router-seeds",
            seeds,
            "--format",
            format,
        ])
    };
    let report = |router: &str, seeds: &str| -> Value {
        let output = validate(router, seeds, "json");
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{stderr}");
        serde_json::from_str(&stdout).unwrap()
    };
    let random = report("random", "5");
    let ttft = &random["runs"][0]["metrics"]["ttft_p50_ms"];
    let simulated = ttft["simulated"].as_f64().unwrap();
    let [low, high] = [0, 1].map(|i| ttft["simulated_range"][i].as_f64().unwrap());
    assert!(low <= simulated && simulated <= high, "{ttft}");
    // The Service's random draws differ: seed 0 alone is one of five values, not all.
    assert!(high > low * 1.02, "{ttft}");
    let seed_0 = report("random", "1");
    let alone = &seed_0["runs"][0]["metrics"]["ttft_p50_ms"];
    assert!(alone.get("simulated_range").is_none(), "{alone}");
    let alone = alone["simulated"].as_f64().unwrap();
    assert!(
        low <= alone && alone <= high,
        "seed 0 ({alone}) is one of the five"
    );
    // Round robin draws nothing: every seed gives the same latencies.
    let fixed = report("round-robin", "3");
    for metric in ["ttft_p50_ms", "e2e_mean_ms"] {
        let m = &fixed["runs"][0]["metrics"][metric];
        let range = [0, 1].map(|i| m["simulated_range"][i].as_f64().unwrap());
        assert_eq!(
            range,
            [m["simulated"].as_f64().unwrap(); 2],
            "{metric}: {m}"
        );
    }
    // The CSV gains the two columns; the human report says what the value is.
    let csv = texts(&validate("random", "5", "csv")).0;
    assert!(
        csv.starts_with(
            "run,role,metric,measured,simulated,abs_error_pct,simulated_low,simulated_high\n"
        ),
        "{csv}"
    );
    let human = texts(&validate("random", "5", "human")).0;
    assert!(human.contains("seeds' range"), "{human}");
    assert!(
        human.contains("the median over the routers' seeds 0 to 4"),
        "{human}"
    );
    let refused = validate("random", "0", "json");
    assert_eq!(refused.status.code(), Some(2));
    assert!(texts(&refused).1.contains("--router-seeds"));
}
