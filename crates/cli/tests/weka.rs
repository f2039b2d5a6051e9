//! The Weka / AgentX corpus format end to end: a small corpus (`tests/fixtures/weka/`: a
//! `.json` session, a second, and a `.jsonl` one in a sub-directory; forks, a completed
//! and an async sub-agent, relative nested times) replayed on 2 engines, request by
//! request against NVIDIA Dynamo 1.6.1's replay of the same directory
//! (`tests/fixtures/weka-dynamo-1.6.1.json`: `run_trace_replay([dir], num_workers=2,
//! router_mode=round_robin|kv_router, trace_format="weka", execution_model="m")`, each
//! request's suffix, arrival ms, reused tokens, worker and finish ms).

mod support;

use serde_json::Value;
use support::{routerlab, scratch_file, texts, workspace_root};

fn corpus() -> std::path::PathBuf {
    workspace_root().join("crates/cli/tests/fixtures/weka")
}

/// `routerlab replay` of the corpus on 2 engines, timed, with `matcher` and `more`.
fn replay_corpus(matcher: &str, more: &[&str]) -> std::process::Output {
    let corpus = corpus();
    let mut args = vec![
        "replay",
        "--matcher",
        matcher,
        "--trace",
        corpus.to_str().unwrap(),
        "--endpoints",
        "2",
        "--timing",
        "trace",
        "-q",
    ];
    args.extend(more);
    routerlab(&args)
}

#[test]
fn every_request_lands_and_reuses_as_in_dynamos_replay_of_the_corpus() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(
            workspace_root().join("crates/cli/tests/fixtures/weka-dynamo-1.6.1.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for matcher in ["round-robin", "dynamo-kv"] {
        let out = scratch_file(&format!("weka-{matcher}.jsonl"), b"");
        let output = replay_corpus(matcher, &["--requests-out", out.to_str().unwrap()]);
        assert!(output.status.success(), "{}", texts(&output).1);
        let mut ours: Vec<Value> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        ours.sort_by_key(|r| r["line"].as_u64());
        let theirs = expected[matcher].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "{matcher}");
        for (us, them) in ours.iter().zip(theirs) {
            let what = format!("{matcher} {}", them[0]);
            let endpoint = us["endpoint"].as_str().unwrap();
            assert_eq!(
                endpoint,
                format!("localhost:{}", 8000 + them[3].as_u64().unwrap()),
                "{what}"
            );
            assert_eq!(us["hit_tokens"], them[2], "{what}");
            for (ours_ms, dynamo_ms) in [
                (
                    us["arrival_s"].as_f64().unwrap() * 1e3,
                    them[1].as_f64().unwrap(),
                ),
                (
                    us["finish_s"].as_f64().unwrap() * 1e3,
                    them[4].as_f64().unwrap(),
                ),
            ] {
                // The engine models agree within 0.3% here; the graph and the routing
                // decide the rest, exactly.
                assert!(
                    (ours_ms - dynamo_ms).abs() <= 0.01 * dynamo_ms + 1.0,
                    "{what}: {ours_ms:.1} ms vs Dynamo's {dynamo_ms:.1}"
                );
            }
        }
    }
}

#[test]
fn a_directory_is_detected_and_reported_as_weka_with_its_plays() {
    let output = replay_corpus("round-robin", &["--format", "json"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["run"]["trace"]["format"], "weka", "{stdout}");
    assert_eq!(report["requests"], 21, "{stdout}");
    assert_eq!(report["timed"]["agentic"]["plays"], 3, "{stdout}");
}

#[test]
fn a_bad_session_is_refused_with_its_file_line_and_field() {
    let path = scratch_file(
        "bad-weka.jsonl",
        br#"{"id": "a", "block_size": 64, "hash_id_scope": "local", "requests": [{"type": "s", "t": 0, "model": "m", "in": 10, "out": 1}]}
{"id": "b", "block_size": 64, "hash_id_scope": "global", "requests": [{"type": "s", "t": 0, "model": "m", "in": 10, "out": 1}]}
"#,
    );
    let output = routerlab(&[
        "replay",
        "--matcher",
        "lcp",
        "--trace",
        path.to_str().unwrap(),
    ]);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty(), "no partial report: {stdout}");
    assert!(
        stderr.contains(&format!("{}:2: field `hash_id_scope`", path.display())),
        "{stderr}"
    );
}
