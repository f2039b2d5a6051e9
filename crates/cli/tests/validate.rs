//! `routerlab validate`: fitted on measured runs, the engine model predicts others. The
//! runs are real: DistServe's eight load levels of vLLM serving OPT-13B on one A100-80GB
//! (`traces/distserve/`) and LLMServingSim's Llama-3.1-8B run on an RTX PRO 6000
//! (`traces/llmservingsim/`), each replayed from its own requests.

mod support;

use serde_json::Value;
use support::{project_trace, routerlab, texts};

const DISTSERVE: [&str; 8] = [
    "vllm-100-1.exp",
    "vllm-400-4.exp",
    "vllm-100-2.exp",
    "vllm-150-1.5.exp",
    "vllm-200-2.exp",
    "vllm-250-2.5.exp",
    "vllm-300-3.exp",
    "vllm-350-3.5.exp",
];

/// DistServe's engine: its flags, and the KV blocks vLLM's arithmetic gives OPT-13B in
/// fp16 at 0.95 of an A100-80GB (docs/CALIBRATION.md).
const DISTSERVE_ENGINE: [&str; 6] = [
    "--max-num-seqs",
    "1024",
    "--max-num-batched-tokens",
    "16384",
    "--num-gpu-blocks",
    "3970",
];

fn distserve(scheduler: &str, format: &str) -> (String, String) {
    let paths: Vec<String> = DISTSERVE
        .iter()
        .map(|f| {
            project_trace(&format!("distserve/{f}"))
                .display()
                .to_string()
        })
        .collect();
    let mut args = vec!["validate", "--fit", &paths[0], "--fit", &paths[1]];
    args.extend(paths[2..].iter().map(String::as_str));
    args.extend(DISTSERVE_ENGINE);
    args.extend(["--scheduler", scheduler, "--format", format]);
    let output = routerlab(&args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    (stdout, stderr)
}

fn median(report: &Value, metric: &str) -> f64 {
    report["median_abs_error_pct"][metric].as_f64().unwrap()
}

#[test]
fn fitted_on_two_distserve_load_levels_the_model_predicts_the_other_six() {
    let (stdout, _) = distserve("v0", "json");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    let roles: Vec<&str> = runs.iter().map(|r| r["role"].as_str().unwrap()).collect();
    assert_eq!(roles[..2], ["fitted", "fitted"]);
    assert!(roles[2..].iter().all(|r| *r == "predicted"));
    assert_eq!(runs[1]["requests"], 400);
    assert_eq!(report["median_over_runs"], 6);
    assert_eq!(report["engine"]["scheduler"], "v0");
    // The measured values are DistServe's: the 400-request run's TTFT p50 is 4,174 ms.
    let p50 = runs[1]["metrics"]["ttft_p50_ms"]["measured"]
        .as_f64()
        .unwrap();
    assert!((p50 - 4174.4).abs() < 1.0, "{p50}");
    // Measured at this commit: 10.6% and 13.1% (the issue's aim, 10%, is not yet met).
    let (ttft, e2e) = (
        median(&report, "ttft_p50_ms"),
        median(&report, "e2e_mean_ms"),
    );
    assert!(
        ttft <= 12.0 && e2e <= 14.0,
        "TTFT p50 {ttft:.1}%, E2E mean {e2e:.1}%"
    );
    // vLLM V1's scheduler (mixed steps) on a V0 engine's runs is further off.
    let (stdout, _) = distserve("v1", "json");
    let v1: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        median(&v1, "ttft_p50_ms") > ttft + 2.0,
        "{}",
        median(&v1, "ttft_p50_ms")
    );
}

#[test]
fn an_llmservingsim_run_is_fitted_within_five_percent_and_written_as_csv() {
    let run = project_trace("llmservingsim/RTXPRO6000-Llama-3.1-8B-vllm");
    let output = routerlab(&[
        "validate",
        "--fit",
        run.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("run,role,metric,measured,simulated,abs_error_pct")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 8);
    for row in &rows {
        assert_eq!(row[1], "fitted");
        let error: f64 = row[5].parse().unwrap();
        assert!(error < 5.0, "{row:?}");
    }
    assert_eq!(rows[1][2], "ttft_p50_ms");
    assert!(
        stderr.starts_with("KV cache: 21433 blocks of 16 tokens"),
        "{stderr}"
    );
}

#[test]
fn runs_that_cannot_be_read_are_refused_by_name() {
    let run = project_trace("distserve/vllm-100-1.exp");
    let run = run.to_str().unwrap();
    let output = routerlab(&["validate", "--fit", run]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("vllm-100-1.exp: the run does not record the engine's limits: give --max-num-seqs and --max-num-batched-tokens"),
        "{stderr}"
    );
    let chat = project_trace("chat.jsonl");
    let output = routerlab(&["validate", "--fit", chat.to_str().unwrap()]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("chat.jsonl: not a measured run"),
        "{stderr}"
    );
    let broken = support::scratch_file(
        "validate-broken.exp",
        b"[{'prompt_len': 5, 'output_len': 2, 'issue_time': 1.0, 'first_token_time': 0.5, 'complete_time': 2.0}]\n",
    );
    let mut args = vec!["validate", "--fit", broken.to_str().unwrap()];
    args.extend(DISTSERVE_ENGINE);
    let output = routerlab(&args);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains(
            "validate-broken.exp:1: request 1: field `first_token_time`: is before `issue_time`"
        ),
        "{stderr}"
    );
}

#[test]
fn a_vllm_bench_serve_result_is_read_as_its_successful_requests() {
    let fixture = support::workspace_root().join("crates/cli/tests/fixtures/vllm-bench-serve.json");
    let mut args = vec![
        "validate",
        "--fit",
        fixture.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend([
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "512",
        "--budget",
        "20",
    ]);
    let output = routerlab(&args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("vllm-bench-serve.json: 1 failed requests left out"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let run = &report["runs"][0];
    assert_eq!(run["requests"], 3);
    let measured = |metric: &str| run["metrics"][metric]["measured"].as_f64().unwrap();
    // TTFTs 52, 71 and 33 ms; end to end, TTFT plus the gaps: 86, 96 and 43 ms.
    assert!((measured("ttft_mean_ms") - 52.0).abs() < 1e-6);
    assert!((measured("ttft_p50_ms") - 52.0).abs() < 1e-6);
    assert!((measured("e2e_mean_ms") - 75.0).abs() < 1e-6);
    assert!((measured("e2e_p99_ms") - 96.0).abs() < 1e-6);
}

/// The same measured run written as `vllm bench serve` writes its results reads the same.
#[test]
fn a_distserve_run_rewritten_as_a_vllm_bench_result_measures_the_same() {
    let source = project_trace("distserve/vllm-150-1.5.exp");
    let text = std::fs::read_to_string(&source).unwrap();
    let rows: Vec<Value> =
        serde_json::from_str(&text.lines().next().unwrap().replace('\'', "\"")).unwrap();
    let field = |key: &str| -> Vec<f64> { rows.iter().map(|r| r[key].as_f64().unwrap()).collect() };
    let (issue, first, done) = (
        field("issue_time"),
        field("first_token_time"),
        field("complete_time"),
    );
    let count = |key: &str| -> Vec<u64> { rows.iter().map(|r| r[key].as_u64().unwrap()).collect() };
    let outputs = count("output_len");
    let itls: Vec<Vec<f64>> = (0..rows.len())
        .map(|i| {
            let gaps = outputs[i] as usize - 1;
            vec![(done[i] - first[i]) / gaps.max(1) as f64; gaps]
        })
        .collect();
    let result = serde_json::json!({
        "backend": "vllm",
        "input_lens": count("prompt_len"),
        "output_lens": outputs,
        "ttfts": (0..rows.len()).map(|i| first[i] - issue[i]).collect::<Vec<_>>(),
        "itls": itls,
        "start_times": issue,
        "errors": vec![""; rows.len()],
    });
    let rewritten = support::scratch_file(
        "distserve-as-vllm-bench.json",
        result.to_string().as_bytes(),
    );
    let measured = |run: &std::path::Path| -> Value {
        let mut args = vec![
            "validate",
            "--fit",
            run.to_str().unwrap(),
            "--format",
            "json",
        ];
        args.extend(DISTSERVE_ENGINE);
        args.extend(["--budget", "10"]);
        let output = routerlab(&args);
        assert!(output.status.success(), "{}", texts(&output).1);
        let report: Value = serde_json::from_str(&texts(&output).0).unwrap();
        report["runs"][0]["metrics"].clone()
    };
    let (a, b) = (measured(&source), measured(&rewritten));
    for (_, key) in [
        ("", "ttft_p50_ms"),
        ("", "ttft_p99_ms"),
        ("", "e2e_mean_ms"),
        ("", "e2e_p90_ms"),
    ] {
        let (x, y) = (
            a[key]["measured"].as_f64().unwrap(),
            b[key]["measured"].as_f64().unwrap(),
        );
        assert!((x - y).abs() < 1e-6 * x.max(1.0), "{key}: {x} vs {y}");
    }
}
