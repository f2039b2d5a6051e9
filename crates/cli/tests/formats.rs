//! Traces as users download them: gzip and zstd files read as they are decompressed, the
//! Azure and BurstGPT CSVs replayed as load-only traffic, and measured runs (every format
//! `validate` reads) replayed as traces, through the real binary.

mod support;

use std::path::{Path, PathBuf};

use support::{Replay, project_trace, routerlab, scratch_file, texts};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The report without its `run` block (which names the file and its stored bytes).
fn statistics(mut report: serde_json::Value) -> serde_json::Value {
    report.as_object_mut().unwrap().remove("run");
    report
}

#[test]
fn gzip_and_zstd_traces_give_the_plain_files_report() {
    let plain = statistics(Replay::new("lcp", &project_trace("mooncake-small.jsonl")).report());
    for name in ["mooncake-small.jsonl.gz", "mooncake-small.jsonl.zst"] {
        let (report, stderr) = Replay::new("lcp", &fixture(name)).json();
        assert_eq!(report["run"]["trace"]["format"], "mooncake", "{name}");
        assert_eq!(statistics(report), plain, "{name}");
        assert!(!stderr.contains("note:"), "{name}: {stderr}");
    }
}

#[test]
fn a_broken_compressed_trace_names_the_line_where_it_broke() {
    let whole = std::fs::read(fixture("mooncake-small.jsonl.gz")).unwrap();
    let cut = scratch_file("cut.jsonl.gz", &whole[..whole.len() / 2]);
    let output = Replay::new("lcp", &cut).run();
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout.is_empty());
    let message = format!("error: {}:", cut.display());
    assert!(stderr.starts_with(&message), "{stderr}");
    assert!(stderr.contains(": cannot decompress: "), "{stderr}");
    // --skip-invalid skips bad lines, never the rest of a broken file.
    let output = Replay::new("lcp", &cut).args(&["--skip-invalid"]).run();
    assert_eq!(output.status.code(), Some(2));

    // A bad line inside a good gzip file: the same error as in a plain file.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(
        &mut encoder,
        b"{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}\n\n{\"timestamp\": 1, \"input_length\": -3, \"hash_ids\": [1]}\n",
    )
    .unwrap();
    let bad = scratch_file("bad.jsonl.gz", &encoder.finish().unwrap());
    let output = Replay::new("lcp", &bad).run();
    let stderr = texts(&output).1;
    assert!(
        stderr.starts_with(&format!("error: {}:3: field `input_length`", bad.display())),
        "{stderr}"
    );
}

#[test]
fn csv_traces_replay_as_load_only_traffic_and_say_so_once() {
    for (name, format, requests) in [
        ("azure-llm-inference-code-2023.csv", "azure-csv", 8819),
        ("burstgpt-sample.csv", "burstgpt", 400),
    ] {
        let (report, stderr) = Replay::new("round-robin", &project_trace(name))
            .args(&["--timing", "trace", "--endpoints", "4"])
            .json();
        assert_eq!(report["run"]["trace"]["format"], format);
        assert_eq!(report["requests"], requests, "{name}");
        assert_eq!(report["hit_ratio"], 0.0, "{name}: nothing can be shared");
        assert!(report["timed"]["ttft"]["p50"].as_f64().unwrap() > 0.0);
        assert_eq!(
            stderr.matches("replayed as load-only traffic").count(),
            1,
            "{name}: {stderr}"
        );
    }
}

#[test]
fn csv_arrivals_count_from_the_first_request_and_bad_cells_are_named() {
    let azure = scratch_file(
        "azure.csv",
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.5,100,10\n2023-11-16 18:17:04.75,200,20\n",
    );
    let output = routerlab(&[
        "replay",
        "--matcher",
        "round-robin",
        "--trace",
        &azure.to_string_lossy(),
        "--timing",
        "trace",
        "--requests-out",
        &azure.with_extension("out.jsonl").to_string_lossy(),
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let records = std::fs::read_to_string(azure.with_extension("out.jsonl")).unwrap();
    let arrivals: Vec<f64> = records
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["arrival_s"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(arrivals, [0.0, 1.25]);

    let bad = scratch_file(
        "bad-azure.csv",
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,100,10\n2023-11-16 18:17:04,lots,20\n",
    );
    let output = Replay::new("round-robin", &bad).run();
    assert_eq!(output.status.code(), Some(2));
    let stderr = texts(&output).1;
    assert!(
        stderr.contains(":3: field `ContextTokens`: `lots` is not a whole number of tokens"),
        "{stderr}"
    );

    // Forcing the wrong CSV format is refused at the header, not read into wrong fields.
    let output = Replay::new("round-robin", &project_trace("burstgpt-sample.csv"))
        .args(&["--trace-format", "azure-csv"])
        .run();
    assert_eq!(output.status.code(), Some(2));
    assert!(texts(&output).1.contains(
        ":1: azure-csv traces start with the header `TIMESTAMP,ContextTokens,GeneratedTokens`"
    ));
}

/// An LMBench multi-round QA run replays as its conversations: each round shares its
/// previous round's prompt blocks (the documented token model), so one endpoint's hit
/// ratio is what that model computes from the file itself, at the replay's block size.
#[test]
fn a_measured_lmbench_run_replays_with_its_conversations() {
    let run = project_trace("llm-d-benchmark/vllm-70b-2replicas/LMBench_short_input_qps10.csv");
    let text = std::fs::read_to_string(&run).unwrap();
    let mut rows: Vec<(f64, u64, u64)> = text
        .lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            let number = |i: usize| cells[i].parse::<f64>().unwrap();
            (number(6), number(4) as u64, number(0) as u64)
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let expected = |block: u64| {
        let mut last = std::collections::HashMap::new();
        let (mut shared, mut total) = (0, 0);
        for &(_, user, prompt) in &rows {
            if let Some(previous) = last.insert(user, prompt) {
                shared += (previous / 16).min(prompt / 16) * 16 / block * block;
            }
            total += prompt;
        }
        shared as f64 / total as f64
    };
    // Time-free: 16-token blocks; timed: the engine's 64-token blocks.
    for (timing, block) in [("off", 16), ("trace", 64)] {
        let (report, stderr) = Replay::new("lcp", &run)
            .args(&["--endpoints", "1", "--timing", timing, "-q"])
            .json();
        assert_eq!(report["requests"], rows.len() as u64, "{stderr}");
        let hit = report["hit_ratio"].as_f64().unwrap();
        assert!((hit - expected(block)).abs() < 1e-6, "{timing}: {hit}");
        assert!(hit > 0.3, "{timing}: {hit}");
    }
    // Its arrivals are the run's launches: 100 s of them.
    let timed = Replay::new("lcp", &run)
        .args(&["--endpoints", "2", "--timing", "trace", "-q"])
        .report();
    let makespan = timed["timed"]["makespan_s"].as_f64().unwrap();
    assert!((100.0..101.0).contains(&makespan), "{makespan}");
}

/// LLMServingSim's run directory and its `requests.jsonl` replay as the same run (its
/// requests, not a chat trace), and a log short of what was offered is named partial,
/// replayed with a note, and refused for fitting unless asked.
#[test]
fn measured_runs_replay_directly_and_a_partial_one_says_so() {
    let dir = project_trace("llmservingsim/RTXPRO6000-Llama-3.1-8B-vllm");
    let args = ["--endpoints", "1", "--timing", "trace", "-q"];
    let whole = Replay::new("lcp", &dir).args(&args).report();
    let file = Replay::new("lcp", &dir.join("requests.jsonl"))
        .args(&args)
        .report();
    assert_eq!(whole["requests"], 300);
    assert_eq!(whole["run"]["trace"]["format"], "mooncake");
    assert_eq!(statistics(whole), statistics(file));

    let partial =
        project_trace("llm-d-benchmark/llm-d-70b-2replicas/LMBench_sharegpt_output_2.csv");
    let (report, stderr) = Replay::new("lcp", &partial).args(&args).json();
    assert_eq!(report["requests"], 203);
    assert!(
        stderr.contains(
            "LMBench_sharegpt_output_2.csv: partial: 203 requests logged, at least 33 more were offered"
        ),
        "{stderr}"
    );
    let fit = |extra: &[&str]| {
        let mut args = vec!["validate", "--fit", partial.to_str().unwrap()];
        args.extend(["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]);
        args.extend(["--budget", "10", "--format", "json"]);
        args.extend(extra);
        routerlab(&args)
    };
    let refused = fit(&[]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        texts(&refused).1.contains("not fitted on"),
        "{}",
        texts(&refused).1
    );
    let allowed = fit(&["--allow-partial"]);
    assert!(allowed.status.success(), "{}", texts(&allowed).1);

    // A report of several load points replays one of them, named.
    let guidellm = fixture("guidellm-benchmarks.json");
    let several = Replay::new("lcp", &guidellm).args(&args).run();
    assert_eq!(several.status.code(), Some(2));
    assert!(
        texts(&several).1.contains("replay one as FILE#K"),
        "{}",
        texts(&several).1
    );
    let one = PathBuf::from(format!("{}#1", guidellm.display()));
    assert_eq!(Replay::new("lcp", &one).args(&args).report()["requests"], 3);
}

/// An LMBench ShareGPT CSV does not record which request continues which; read with the
/// workload file it sent (`--lmbench-workload`), each round shares its previous round's
/// prompt, a round lost from a conversation makes the run partial, and a workload that is
/// not the run's is refused naming the request.
#[test]
fn an_lmbench_sharegpt_run_replays_its_conversations_from_its_workload() {
    let workload = scratch_file("lmbench-run.json", support::lmbench_workload().as_bytes());
    let run = scratch_file(
        "lmbench-sharegpt.csv",
        support::lmbench_csv(None).as_bytes(),
    );
    let with = ["--endpoints", "1", "--timing", "off", "-q"];
    let flag = ["--lmbench-workload", workload.to_str().unwrap()];
    let alone = Replay::new("lcp", &run).args(&with).report();
    assert_eq!(alone["hit_ratio"], 0.0);
    let (report, stderr) = Replay::new("lcp", &run).args(&with).args(&flag).json();
    // a2 shares a1's 25 whole blocks of 16 tokens, b2 b1's 18, a3 a2's 35.
    let shared = (25 + 18 + 35) * 16;
    let total: u64 = support::LMBENCH_LOGGED.iter().map(|(p, _)| p).sum();
    let hit = report["hit_ratio"].as_f64().unwrap();
    assert!(
        (hit - shared as f64 / total as f64).abs() < 1e-6,
        "{hit} {stderr}"
    );
    // `replay --trace TRACE --lmbench-workload WORKLOAD`: its exit code and stderr.
    let replay = |trace: &Path, workload: &Path| {
        let workload = ["--lmbench-workload", workload.to_str().unwrap()];
        let output = Replay::new("lcp", trace)
            .args(&["--endpoints", "1"])
            .args(&workload)
            .run();
        (output.status.code(), texts(&output).1)
    };

    // a2 failed: a's rounds 1 and 3 are logged, and the run says it is partial.
    let lost = scratch_file("lmbench-lost.csv", support::lmbench_csv(Some(3)).as_bytes());
    let (code, stderr) = replay(&lost, &workload);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("partial: 5 requests logged, at least 1 more were offered (rounds missing from its conversations)"),
        "{stderr}"
    );

    // A workload with fewer entries than the run has requests is not the run's.
    let other = scratch_file(
        "lmbench-other.json",
        br#"[{"input": "x", "output_length": 40}, {"input": "y", "output_length": 10}]"#,
    );
    let (code, stderr) = replay(&run, &other);
    assert_eq!(code, Some(2), "{stderr}");
    let expected = format!(
        "{}: --lmbench-workload {}: the run logged 6 requests, more than its 2 entries: not this run's workload",
        run.display(),
        other.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    // A trace that is not a measured run has no requests to give conversations to.
    let (code, stderr) = replay(&project_trace("chat.jsonl"), &workload);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("chat.jsonl is not a measured run"),
        "{stderr}"
    );
    // Nor is one whose entry asks for fewer tokens than its request generated.
    let short = scratch_file(
        "lmbench-short.json",
        workload_text_with_output(&support::lmbench_workload(), 50, 5).as_bytes(),
    );
    let output = routerlab(&[
        "validate",
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "512",
        "--fit",
        run.to_str().unwrap(),
        "--lmbench-workload",
        short.to_str().unwrap(),
    ]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("request 4 generated 50 tokens, more than entry 4 asks for (5)"),
        "{stderr}"
    );
}

/// LMBench's run script sends its warm-up file before each point and logs none of it:
/// replayed first (`--lmbench-warm-up`, timed), the run's rounds that continue its prompts
/// find them cached; it needs the workload, and a timed replay.
#[test]
fn an_lmbench_sharegpt_runs_warm_up_is_replayed_before_it() {
    let rounds = [
        ("Tell me about tides.\nThe moon.\nWhy two a day?", 50),
        ("Write a haiku.\nAn old pond.\nAnother one?", 60),
        (
            "Tell me about tides.\nThe moon.\nWhy two a day?\nThe far side.\nAnd spring tides?",
            70,
        ),
    ];
    let entries = |rounds: &[(&str, u64)]| -> Vec<u8> {
        let list: Vec<serde_json::Value> = (rounds.iter())
            .map(|(input, n)| serde_json::json!({"input": input, "output_length": n}))
            .collect();
        serde_json::to_vec(&list).unwrap()
    };
    let workload = scratch_file("lmbench-later.json", &entries(&rounds));
    let warm_up = scratch_file(
        "lmbench-warmup.json",
        &entries(&[
            ("Tell me about tides.", 40),
            ("Write a haiku.", 30),
            ("What is 2 + 2?", 20),
        ]),
    );
    let logged = [(560u64, 50u64), (420, 60), (700, 70)];
    let mut csv = String::from(
        "prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time\n",
    );
    for (i, (prompt, generated)) in logged.iter().enumerate() {
        let launch = 1_700_000_000.0 + i as f64;
        csv += &format!("{prompt},{generated},0.2,1.0,{launch},{}\n", launch + 1.2);
    }
    let run = scratch_file("lmbench-later.csv", csv.as_bytes());
    // vLLM's 16-token blocks, as the run's trace.
    let timed = [
        "--endpoints",
        "1",
        "--timing",
        "trace",
        "--engine-config",
        "{engine_block_size: 16}",
        "-q",
    ];
    let flag = ["--lmbench-workload", workload.to_str().unwrap()];
    let warm = ["--lmbench-warm-up", warm_up.to_str().unwrap()];
    let total: u64 = logged.iter().map(|(p, _)| p).sum();
    let hit = |args: &[&str]| {
        let (report, stderr) = Replay::new("lcp", &run).args(&timed).args(args).json();
        report["hit_ratio"]
            .as_f64()
            .unwrap_or_else(|| panic!("{stderr}"))
    };
    // Without the warm-up, the third request shares the first's 35 whole blocks.
    let alone = hit(&flag);
    assert!(
        (alone - (35 * 16) as f64 / total as f64).abs() < 1e-6,
        "{alone}"
    );
    // With it, the first two also share their warm-up rounds' whole blocks: each round's
    // tokens are its continuation's for each byte of input.
    let tokens = |prompt: u64, warm: &str, run: &str| {
        (prompt as f64 * warm.len() as f64 / run.len() as f64).round() as u64
    };
    let first = tokens(560, "Tell me about tides.", rounds[0].0) / 16;
    let second = tokens(420, "Write a haiku.", rounds[1].0) / 16;
    let both = [&flag[..], &warm[..]].concat();
    let warmed = hit(&both);
    let expected = ((first + second + 35) * 16) as f64 / total as f64;
    assert!((warmed - expected).abs() < 1e-6, "{warmed} {expected}");

    // `replay --trace RUN` with `args`: its exit code and stderr.
    let refused = |args: &[&str]| {
        let output = Replay::new("lcp", &run).args(args).run();
        (output.status.code(), texts(&output).1)
    };
    // The warm-up goes on in the run's conversations: it needs the workload.
    let (code, stderr) = refused(&[&timed[..], &warm[..]].concat());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--lmbench-workload"), "{stderr}");
    // Only a timed replay replays a warm-up.
    let (code, stderr) = refused(&[&["--timing", "off"][..], &both[..]].concat());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--lmbench-warm-up") && stderr.contains("needs the timed replay"),
        "{stderr}"
    );
}

/// `workload` with the entry that asks for `from` tokens asking for `to`.
fn workload_text_with_output(workload: &str, from: u64, to: u64) -> String {
    workload.replace(
        &format!("\"output_length\":{from}"),
        &format!("\"output_length\":{to}"),
    )
}
