//! `routerlab calibrate`: a "measured" run produced by the engine model itself, with known
//! step-time terms, is fitted back.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{DISTSERVE_ENGINE, routerlab, scratch_file, texts};

/// The truth the synthetic run is made with.
const KNOWN: [(&str, f64); 4] = [
    ("overhead_ms", 8.0),
    ("prefill_ms_per_token", 0.05),
    ("decode_ms_per_seq", 0.5),
    ("context_ms_per_ktoken", 0.1),
];

/// 200 requests in three phases (one every 1.2 s, a burst every 30 ms, one every 300 ms),
/// prompts either short (100-300 tokens) or long (5,000-8,000), 50-300 output tokens:
/// batches of every size and context, so that each term shows in the latencies.
fn workload(name: &str) -> PathBuf {
    let mut state = 11u64;
    let mut next = |below: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % below
    };
    let (mut text, mut at, mut id) = (String::new(), 0u64, 0u64);
    for i in 0..200 {
        at += if i < 50 {
            1200
        } else if i < 130 {
            30
        } else {
            300
        };
        let input = if next(2) == 0 {
            100 + next(200)
        } else {
            5000 + next(3000)
        };
        let output = 50 + next(250);
        let blocks = input.div_ceil(512);
        let ids: Vec<String> = (id..id + blocks).map(|b| b.to_string()).collect();
        id += blocks;
        text.push_str(&format!(
            "{{\"timestamp\": {at}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        ));
    }
    scratch_file(&format!("{name}.jsonl"), text.as_bytes())
}

/// Replays `workload` on one engine with the known terms and writes what it "measured"
/// in the measured-run layout; returns the run's directory.
fn synthetic_run(workload: &Path) -> PathBuf {
    let dir = workload.with_extension("run");
    std::fs::create_dir_all(&dir).expect("run dir");
    let terms: Vec<String> = KNOWN.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let engine = format!(
        "{{num_gpu_blocks: 16384, engine_block_size: 16, max_num_seqs: 32, max_num_batched_tokens: 2048, step_time: {{model: batched, {}}}}}",
        terms.join(", ")
    );
    let records = dir.join("records.jsonl");
    let output = replay_on_one_engine(
        workload,
        &engine,
        &["--requests-out", &records.to_string_lossy()],
    );
    assert!(output.status.success(), "{}", texts(&output).1);
    let trace: Vec<serde_json::Value> = std::fs::read_to_string(workload)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut rows: Vec<serde_json::Value> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows.sort_by_key(|r| r["id"].as_u64());
    let mut requests = String::new();
    for r in &rows {
        let at = r["arrival_s"].as_f64().unwrap();
        let line = serde_json::json!({
            "input_toks": r["prompt_tokens"],
            "output_toks": trace[r["id"].as_u64().unwrap() as usize - 1]["output_length"],
            "queued_ts": at,
            "scheduled_ts": at + r["queue_ms"].as_f64().unwrap() / 1e3,
            "first_token_ts": at + r["ttft_ms"].as_f64().unwrap() / 1e3,
            "last_token_ts": r["finish_s"],
        });
        requests.push_str(&format!("{line}\n"));
    }
    std::fs::write(dir.join("requests.jsonl"), requests).unwrap();
    std::fs::write(
        dir.join("meta.json"),
        r#"{"engine_kwargs": {"max_num_seqs": 32, "max_num_batched_tokens": 2048, "num_gpu_blocks": 16384, "block_size": 16}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("timeseries.csv"),
        "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n",
    )
    .unwrap();
    dir
}

/// The error column of the fit table's row `name`, percent.
fn error_of(table: &str, name: &str) -> f64 {
    let row = table
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} row: {table}"));
    row.split_whitespace()
        .last()
        .and_then(|e| e.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no error in {row}"))
}

/// The fit lands on the known terms: the step overhead and the prompt cost within 5%, the
/// per-sequence and per-context decode costs (which trade off against each other, since
/// bigger batches hold more context) within 10% each, and the cost of a full decode step
/// (32 sequences, 96,000 tokens of context) within 5%. Its latencies match within 3%.
#[test]
fn a_synthetic_run_is_fitted_back_to_its_terms() {
    let workload = workload("calibrate-fit");
    let run = synthetic_run(&workload);
    let fit = run.with_extension("yaml");
    let output = routerlab(&[
        "calibrate",
        &run.to_string_lossy(),
        "--workload",
        &workload.to_string_lossy(),
        "-o",
        &fit.to_string_lossy(),
    ]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("KV cache: 16384 blocks of 16 tokens (from meta.json)"),
        "{stderr}"
    );
    for row in ["TTFT p50", "TTFT p90", "TPOT p50"] {
        assert!(error_of(&stderr, row).abs() < 3.0, "{row}: {stderr}");
    }
    let engine: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&fit).unwrap()).unwrap();
    let term = |name: &str| engine["step_time"][name].as_f64().unwrap();
    assert_eq!(engine["step_time"]["model"], "batched");
    assert_eq!(engine["max_num_seqs"], 32);
    let near = |got: f64, want: f64, tolerance: f64| (got / want - 1.0).abs() < tolerance;
    for ((name, truth), tolerance) in KNOWN.into_iter().zip([0.05, 0.05, 0.10, 0.10]) {
        assert!(near(term(name), truth, tolerance), "{name}: {engine:?}");
    }
    let full_step = |per_seq: f64, per_ktoken: f64| per_seq * 32.0 + per_ktoken * 96.0;
    assert!(
        near(
            full_step(term("decode_ms_per_seq"), term("context_ms_per_ktoken")),
            full_step(KNOWN[2].1, KNOWN[3].1),
            0.05
        ),
        "{engine:?}"
    );
    // The fit's engine runs as written: `--engine-config` takes the file's text.
    let replay = replay_on_one_engine(&workload, &std::fs::read_to_string(&fit).unwrap(), &[]);
    assert!(replay.status.success(), "{}", texts(&replay).1);
}

/// A quiet timed replay of `workload` on one engine of config `engine`, with `extra` flags.
fn replay_on_one_engine(workload: &Path, engine: &str, extra: &[&str]) -> Output {
    let workload = workload.to_string_lossy();
    let mut args = vec![
        "replay",
        "--matcher",
        "round-robin",
        "--endpoints",
        "1",
        "--timing",
        "trace",
        "--trace",
        &workload,
        "--engine-config",
        engine,
        "--quiet",
    ];
    args.extend_from_slice(extra);
    routerlab(&args)
}

/// A run directory that lacks a file, or a workload of another length, is refused by name.
#[test]
fn a_bad_run_or_workload_is_refused_by_name() {
    let placeholder = scratch_file("calibrate-empty.txt", b"");
    let dir = placeholder.with_extension("dir");
    std::fs::create_dir_all(&dir).unwrap();
    let output = routerlab(&["calibrate", &dir.to_string_lossy(), "--workload", "x.jsonl"]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("requests.jsonl: cannot read"), "{stderr}");

    let workload = workload("calibrate-refused");
    let run = synthetic_run(&workload);
    // `calibrate RUN --workload W` must exit 2; its stderr.
    let refused = |run: &Path, workload: &Path| {
        let output = routerlab(&[
            "calibrate",
            &run.to_string_lossy(),
            "--workload",
            &workload.to_string_lossy(),
        ]);
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        stderr
    };
    let short = scratch_file(
        "calibrate-short.jsonl",
        std::fs::read_to_string(&workload)
            .unwrap()
            .lines()
            .take(10)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .as_bytes(),
    );
    let stderr = refused(&run, &short);
    assert!(
        stderr.contains("has 10 requests, the measured run 200"),
        "{stderr}"
    );
    // As many requests, but not the same ones: the first that differs is named.
    let text = std::fs::read_to_string(&workload).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let longer = lines[4]["input_length"].as_u64().unwrap() + 7;
    lines[4]["input_length"] = longer.into();
    let other: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let other = scratch_file("calibrate-other.jsonl", other.as_bytes());
    let stderr = refused(&run, &other);
    assert!(
        stderr.contains(&format!("request 5 (line 5) has {longer} prompt")),
        "{stderr}"
    );
    // KV usage past 100% and a run that spans past the clock are refused by file and line.
    std::fs::write(
        run.join("timeseries.csv"),
        "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1,0,0,1,0,50\n2,0,0,1,0,200\n",
    )
    .unwrap();
    let stderr = refused(&run, &workload);
    assert!(
        stderr.contains("timeseries.csv:3: field `kv_cache_pct` is 200"),
        "{stderr}"
    );
    std::fs::write(
        run.join("timeseries.csv"),
        "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n",
    )
    .unwrap();
    let requests = std::fs::read_to_string(run.join("requests.jsonl")).unwrap();
    let mut rows: Vec<serde_json::Value> = requests
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows[2]["last_token_ts"] = 1e308.into();
    let rows: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(run.join("requests.jsonl"), rows).unwrap();
    let stderr = refused(&run, &workload);
    assert!(
        stderr.contains("requests.jsonl:3: ends 1.000e308 s after"),
        "{stderr}"
    );
}

/// A benchmark tool's file is a run too: without `--workload` it is replayed from its own
/// requests.
#[test]
fn a_run_file_is_fitted_from_its_own_requests() {
    let run = support::project_trace("distserve/vllm-100-1.exp");
    let limits: Vec<&str> = DISTSERVE_ENGINE
        .into_iter()
        .chain(["--budget", "30"])
        .collect();
    let mut args = vec!["calibrate", run.to_str().unwrap()];
    args.extend(&limits);
    let output = routerlab(&args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.starts_with("KV cache: 3970 blocks of 16 tokens (--num-gpu-blocks)"),
        "{stderr}"
    );
    let engine: serde_json::Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(engine["num_gpu_blocks"], 3970);
    assert_eq!(engine["max_num_seqs"], 1024);
    assert!(engine["step_time"]["decode_ms_per_seq"].as_f64().unwrap() > 0.0);
    // Prefix caching is on unless the engine ran without it.
    assert!(engine.get("prefix_caching").is_none(), "{stdout}");
    let mut args = vec!["calibrate", run.to_str().unwrap(), "--no-prefix-caching"];
    args.extend(&limits);
    let output = routerlab(&args);
    assert!(output.status.success(), "{}", texts(&output).1);
    let engine: serde_json::Value = serde_yaml::from_str(&texts(&output).0).unwrap();
    assert_eq!(engine["prefix_caching"], false);
    // The 4 requests/s run, V0 with padded prompt batches, its cache searched from 3,970
    // blocks: the scheduler settings reach the written engine, and the cache moves.
    let loaded = support::project_trace("distserve/vllm-400-4.exp");
    let mut args = vec!["calibrate", loaded.to_str().unwrap()];
    args.extend(&limits);
    args.extend([
        "--scheduler",
        "v0",
        "--max-paddings",
        "256",
        "--fit-num-gpu-blocks",
    ]);
    let output = routerlab(&args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let engine: serde_json::Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(engine["scheduler"], "v0");
    assert_eq!(engine["max_paddings"], 256);
    let blocks = engine["num_gpu_blocks"].as_u64().unwrap();
    assert_ne!(blocks, 3970, "{stderr}");
    assert!(
        stderr.starts_with("KV cache: searched from 3970 blocks")
            && stderr.contains(&format!("KV cache: {blocks} blocks fitted")),
        "{stderr}"
    );
    // A report of several load points is one run only when one is named.
    let sweep =
        support::workspace_root().join("crates/cli/tests/fixtures/guidellm-benchmarks.json");
    let mut args = vec!["calibrate", sweep.to_str().unwrap()];
    args.extend(&limits);
    let output = routerlab(&args);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        texts(&output).1.contains(
            "guidellm-benchmarks.json: the file holds 2 load points: name one as FILE#K (1 to 2)"
        ),
        "{}",
        texts(&output).1
    );
}

/// LLMServingSim's run records vLLM 0.19, which plans each step while the last one runs:
/// the fitted engine does too, and says so; `--async-scheduling false` turns it off, and a
/// DistServe run (no release recorded) leaves it off. V0 refuses it by name.
#[test]
fn a_run_of_vllm_0_14_or_later_schedules_ahead() {
    let run = support::project_trace("llmservingsim/RTX4090-Llama-3.1-8B-vllm");
    let calibrate = |extra: &[&str]| {
        let mut args = vec!["calibrate", run.to_str().unwrap(), "--budget", "10"];
        args.extend(extra);
        let output = routerlab(&args);
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{extra:?}: {stderr}");
        let engine: serde_json::Value = serde_yaml::from_str(&stdout).unwrap();
        (engine, stderr)
    };
    let (engine, stderr) = calibrate(&[]);
    assert_eq!(engine["async_scheduling"], true, "{engine}");
    assert!(
        stderr.contains("Async scheduling: each step planned while the last one runs (the run's vLLM release or engine arguments)"),
        "{stderr}"
    );
    let (engine, stderr) = calibrate(&["--async-scheduling", "false"]);
    assert!(engine.get("async_scheduling").is_none(), "{engine}");
    assert!(!stderr.contains("Async scheduling"), "{stderr}");
    let distserve = support::project_trace("distserve/vllm-100-1.exp");
    let distserve = |extra: &[&str]| {
        let mut args = vec!["calibrate", distserve.to_str().unwrap(), "--budget", "10"];
        args.extend(DISTSERVE_ENGINE);
        args.extend(extra);
        routerlab(&args)
    };
    let output = distserve(&[]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(!stdout.contains("async_scheduling"), "{stdout}");
    let output = distserve(&["--scheduler", "v0", "--async-scheduling", "true"]);
    assert_eq!(output.status.code(), Some(2), "{}", texts(&output).1);
    assert!(
        texts(&output)
            .1
            .contains("--async-scheduling true needs --scheduler v1"),
        "{}",
        texts(&output).1
    );
}
