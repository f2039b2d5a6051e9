//! Two serving stacks measured at the same load points, compared through their experiment
//! files (`validate --stack DIR=CONFIG`): llm-d-benchmark's exp-2, two A100 replicas of
//! Llama-3.1-70B behind a plain Service and behind llm-d's gateway, on its multi-round
//! point at 10 requests/s (`traces/llm-d-benchmark/`, the stacks in `examples/exp-2/`).

mod support;

use serde_json::Value;
use support::{routerlab, texts, workspace_root};

fn stacks(extra: &[&str]) -> std::process::Output {
    let root = workspace_root();
    let stack = |dir: &str, config: &str| {
        format!(
            "{}={}",
            root.join("traces/llm-d-benchmark").join(dir).display(),
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
    let output = stacks(&["--format", "json"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    // The one point both directories hold (the llm-d ShareGPT run has no Service twin).
    assert_eq!(summary["points"], 1);
    let row = &summary["rows"][0];
    assert_eq!(row["point"], "LMBench_short_input_qps10.csv");
    // Measured: TTFT p50 102.2 ms behind the Service, 121.6 ms behind llm-d (1.190).
    let measured = row["measured_ratio"].as_f64().unwrap();
    assert!((measured - 1.190).abs() < 0.001, "{measured}");
    // Simulated from the two experiment files: llm-d slower by its hop, as measured.
    let simulated = row["simulated_ratio"].as_f64().unwrap();
    assert!(simulated > 1.0, "{simulated}");
    assert!(
        (simulated - measured).abs() <= 0.10,
        "{simulated} vs {measured}"
    );
    assert_eq!(row["sign_agrees"], true);
    assert_eq!(summary["within"], 1);
    // The human table says the same.
    let human = texts(&stacks(&[])).0;
    assert!(
        human.contains("1 of 1 points compared: ratio within ±0.10 at 1, sign agrees at 1"),
        "{human}"
    );
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
