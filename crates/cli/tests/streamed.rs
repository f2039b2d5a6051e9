//! The timed replay reads the trace as it goes (`replay`), or has it loaded whole (`compare`,
//! which shares one workload between its policies). Both must give the same report, byte
//! for byte, whatever the trace and the settings: every arrival process, stale metrics,
//! router replicas, disaggregated pools, a host tier, late KV events, parents held, a trace
//! whose times go back or that comes through a pipe (read whole), and the same error where
//! the trace is bad.

mod support;

use std::path::Path;

use support::*;

/// `replay --matcher lcp` and `compare`'s `lcp` entry (with `+ detector`, if given) with
/// the same `flags`, as JSON text.
fn streamed_and_loaded(trace: &Path, detector: Option<&str>, flags: &[&str]) -> (String, String) {
    let trace_arg = trace.to_string_lossy();
    let common = [&["--trace", &trace_arg, "--timing", "trace", "-q"], flags].concat();
    let mut replay = vec!["replay", "--matcher", "lcp", "--format", "json"];
    let policy = match detector {
        Some(name) => {
            replay.extend(["--detector", name]);
            format!("lcp + {name}")
        }
        None => "lcp".to_owned(),
    };
    let replay = routerlab(&[&replay[..], &common[..]].concat());
    let compare = ["compare", "--policy", &policy, "--policy", "round-robin"];
    let compare = routerlab(&[&compare[..], &["--format", "json"], &common[..]].concat());
    for (what, output) in [("replay", &replay), ("compare", &compare)] {
        assert_eq!(
            output.status.code(),
            Some(0),
            "{what} {flags:?}: {}",
            texts(output).1
        );
    }
    let streamed: serde_json::Value = serde_json::from_slice(&replay.stdout).expect("JSON");
    let compared: serde_json::Value = serde_json::from_slice(&compare.stdout).expect("JSON");
    assert_eq!(compared["policies"][0]["label"], policy.as_str());
    let text = |v: &serde_json::Value| serde_json::to_string_pretty(v).expect("serialises");
    (text(&streamed), text(&compared["policies"][0]["report"]))
}

#[test]
fn every_setting_streams_to_the_report_of_the_whole_trace() {
    let conversation = project_trace("mooncake-conversation.jsonl");
    let small = project_trace("mooncake-small.jsonl");
    let cases: [(&Path, &[&str]); 11] = [
        (&conversation, &["--endpoints", "4", "--engine", "dynamo"]),
        (
            &small,
            &[
                "--endpoints",
                "3",
                "--rate",
                "40",
                "--metrics-interval-ms",
                "250",
            ],
        ),
        (
            &small,
            &[
                "--endpoints",
                "3",
                "--concurrency",
                "5",
                "--when-unavailable",
                "queue",
            ],
        ),
        (
            &project_trace("chat.jsonl"),
            &["--endpoints", "3", "--rate", "20", "--seed", "7"],
        ),
        (
            &project_trace("mooncake-sessions.jsonl"),
            &[
                "--endpoints",
                "4",
                "--router-replicas",
                "2",
                "--replica-assign",
                "session",
            ],
        ),
        (
            &conversation,
            &[
                "--prefill-endpoints",
                "1",
                "--decode-endpoints",
                "3",
                "--speedup",
                "2",
            ],
        ),
        (
            &conversation,
            &[
                "--endpoints",
                "2",
                "--engine-config",
                "{num_gpu_blocks: 2000, kv_bytes_per_token: 65536, \
                 host_tier: {blocks: 8192, d2h_gbps: 25, h2d_gbps: 25}}",
            ],
        ),
        (
            &conversation,
            &["--endpoints", "4", "--kv-event-lag-ms", "40"],
        ),
        (
            &project_trace("chat.jsonl"),
            &[
                "--endpoints",
                "2",
                "--rate",
                "30",
                "--respect-parents",
                "--think-time-s",
                "0.5",
            ],
        ),
        (
            &project_trace("mooncake-sessions.jsonl"),
            &["--endpoints", "3", "--respect-parents", "--speedup", "20"],
        ),
        (
            &project_trace("azure-llm-inference-code-2023.csv"),
            &["--endpoints", "5", "--speedup", "8"],
        ),
    ];
    for (trace, flags) in cases {
        let (streamed, loaded) = streamed_and_loaded(trace, None, flags);
        assert!(streamed.contains("\"ttft\""), "{flags:?}: a timed report");
        assert_eq!(streamed, loaded, "{} {flags:?}", trace.display());
    }
}

#[test]
fn a_detector_streams_to_the_same_report() {
    let small = project_trace("mooncake-small.jsonl");
    let flags = [
        "--endpoints",
        "3",
        "--rate",
        "60",
        "--when-unavailable",
        "queue",
    ];
    let (streamed, loaded) = streamed_and_loaded(&small, Some("max-kv-cache"), &flags);
    assert_eq!(streamed, loaded);
}

#[test]
fn a_trace_whose_times_go_back_is_replayed_whole_in_time_order() {
    // The small Mooncake trace with its first and last hundred lines swapped: the replay
    // cannot read ahead by time, so it loads the trace and replays it as `compare` does.
    let text = std::fs::read_to_string(project_trace("mooncake-small.jsonl")).expect("trace");
    let lines: Vec<&str> = text.lines().collect();
    let (head, rest) = lines.split_at(100);
    let (middle, tail) = rest.split_at(rest.len() - 100);
    let shuffled = [tail, middle, head].concat().join("\n") + "\n";
    let trace = scratch_file("times-go-back.jsonl", shuffled.as_bytes());
    let (streamed, loaded) = streamed_and_loaded(&trace, None, &["--endpoints", "3"]);
    assert_eq!(streamed, loaded);
    // Nothing is lost to the reordering.
    let report: serde_json::Value = serde_json::from_str(&streamed).expect("JSON");
    assert_eq!(
        report["requests"].as_u64(),
        Some(lines.len() as u64),
        "every request counted"
    );
}

#[test]
fn a_bad_line_past_the_start_fails_the_same_way_streamed_or_loaded() {
    let text = std::fs::read_to_string(project_trace("mooncake-small.jsonl")).expect("trace");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[150] = lines[150].replace("\"hash_ids\"", "\"hash_ids\": \"nope\", \"x\"");
    let trace = scratch_file("bad-line-150.jsonl", (lines.join("\n") + "\n").as_bytes());
    let run = |how: &[&str]| {
        let output = routerlab(
            &[
                how,
                &[
                    "--trace",
                    &trace.to_string_lossy(),
                    "--timing",
                    "trace",
                    "-q",
                ],
            ]
            .concat(),
        );
        let (stdout, stderr) = texts(&output);
        (output.status.code(), stdout, stderr)
    };
    let streamed = run(&["replay", "--matcher", "lcp", "--rate", "50"]);
    let loaded = run(&[
        "compare",
        "--policy",
        "lcp",
        "--policy",
        "round-robin",
        "--rate",
        "50",
    ]);
    assert_eq!(streamed.0, Some(2), "{streamed:?}");
    assert!(streamed.1.is_empty(), "no report: {streamed:?}");
    assert!(
        streamed.2.contains(":151"),
        "names the line: {}",
        streamed.2
    );
    assert_eq!((streamed.0, &streamed.2), (loaded.0, &loaded.2));
}

#[test]
fn a_piped_trace_is_replayed_at_its_own_times_as_the_file_is() {
    // A pipe cannot be read twice: it is loaded whole, to the report of the file.
    use std::io::Write;
    use std::process::{Command, Stdio};
    let file = project_trace("mooncake-small.jsonl");
    let flags = ["--matcher", "lcp", "--timing", "trace", "--endpoints", "3"];
    let args = [&["replay", "-q", "--format", "json"], &flags[..]].concat();
    let mut child = Command::new(env!("CARGO_BIN_EXE_routerlab"))
        .args(&args)
        .args(["--trace", "/dev/stdin"])
        .env_remove("ROUTERLAB_PLUGIN_PATH")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run routerlab");
    let text = std::fs::read(&file).expect("trace");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&text));
    let piped = child.wait_with_output().expect("routerlab ends");
    writer
        .join()
        .expect("writer")
        .expect("the trace is written");
    assert_eq!(piped.status.code(), Some(0), "{}", texts(&piped).1);
    let from_file = routerlab(&[&args[..], &["--trace", &file.to_string_lossy()]].concat());
    let report = |bytes: &[u8]| {
        let mut report: serde_json::Value = serde_json::from_slice(bytes).expect("JSON");
        report["run"]["trace"]["path"] = serde_json::Value::Null;
        report
    };
    assert_eq!(report(&piped.stdout), report(&from_file.stdout));
    assert!(report(&piped.stdout)["timed"]["ttft"].is_object());
}
