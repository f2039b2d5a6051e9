//! Traces as users download them: gzip and zstd files read as they are decompressed, and
//! the Azure and BurstGPT CSVs replayed as load-only traffic, through the real binary.

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
