//! `serve --decision-log` and `replay --from-log`, end to end: real engines, a real
//! router writing its log, `drive` sending a trace, and the log read back as a trace, a
//! measured run and the basis of another policy's replay.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use support::server::{ROUTERLAB, Server};
use support::{fresh_path, json_lines_when, project_trace, routerlab, scratch_file, texts};

/// The first `n` lines of the sessions trace, as a scratch file.
fn sessions(n: usize, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(project_trace("mooncake-sessions.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().take(n).collect();
    scratch_file(name, (lines.join("\n") + "\n").as_bytes())
}

#[test]
fn serve_logs_every_decision_and_another_policy_replays_from_the_log() {
    let engines: Vec<Server> = (0..2)
        .map(|_| ROUTERLAB.start(&["engine", "--model-speedup", "200"]))
        .collect();
    let endpoints = format!("{},{}", engines[0].addr, engines[1].addr);
    let log = fresh_path("serve-random.decisions.jsonl");
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &endpoints,
        "--matcher",
        "random",
        "--block-size",
        "2048",
        "--decision-log",
        &log.to_string_lossy(),
    ]);
    let trace = sessions(60, "log-sessions-60.jsonl");
    let output = routerlab(&[
        "drive",
        "--url",
        &router.url(),
        "--trace",
        &trace.to_string_lossy(),
        "--concurrency",
        "4",
        "--format",
        "json",
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let driven: Value = serde_json::from_str(&texts(&output).0).unwrap();
    let records = json_lines_when(&log, 60);
    assert_eq!(records.len(), 60);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in &records {
        assert_eq!(r["log"], "routerlab-decisions/1");
        assert_eq!(r["policy"], "random");
        assert_eq!(r["status"], "ok", "{r}");
        // `random` chose uniformly between the two.
        assert_eq!(r["propensity"].as_f64(), Some(0.5), "{r}");
        let seen: Vec<&str> = (r["candidates"].as_array().unwrap().iter())
            .map(|c| c["endpoint"].as_str().unwrap())
            .collect();
        assert_eq!(seen, [engines[0].addr.as_str(), engines[1].addr.as_str()]);
        assert!(seen.contains(&r["endpoint"].as_str().unwrap()));
        assert_eq!(r["block_bytes"].as_u64(), Some(2048));
        // Hashes only, never the text: a whole block of 2,048 bytes is one hash.
        let blocks = r["blocks"].as_array().unwrap().len() as u64;
        assert_eq!(
            blocks,
            r["prompt_tokens"].as_u64().unwrap() * 4 / 2048,
            "{r}"
        );
        let (ttft, e2e) = (
            r["ttft_ms"].as_f64().unwrap(),
            r["e2e_ms"].as_f64().unwrap(),
        );
        assert!(0.0 < ttft && ttft <= e2e, "{r}");
        *counts
            .entry(r["endpoint"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    // Where the log says requests went is where the engines say they were served.
    let served: Vec<u64> = (driven["nreq"]["counts"].as_array().unwrap().iter())
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), served);
    // A session's later request carries its earlier one's blocks first.
    let by_seq: BTreeMap<u64, &Value> = records
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r))
        .collect();
    let child = records
        .iter()
        .find(|r| r["parent"].as_u64() > Some(0))
        .expect("a follow-up");
    let parent = by_seq[&child["parent"].as_u64().unwrap()];
    let (p, c) = (
        parent["blocks"].as_array().unwrap(),
        child["blocks"].as_array().unwrap(),
    );
    assert!(
        c.len() > p.len() && c[..p.len()] == p[..],
        "{parent}\n{child}"
    );

    // The log is a trace, and the basis of another policy's replay.
    let output = routerlab(&[
        "replay",
        "--from-log",
        &log.to_string_lossy(),
        "--matcher",
        "lcp",
        "--format",
        "json",
    ]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("engine fitted on the log (60 requests through `random` over 2 endpoints"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["requests"].as_u64(), Some(60));
    assert_eq!(report["run"]["matcher"]["name"], "lcp");
    let names: Vec<&str> = (report["run"]["endpoints"].as_array().unwrap().iter())
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(names, [engines[0].addr.as_str(), engines[1].addr.as_str()]);
    // Sessions share prefixes in the replay as they did live.
    assert!(
        report["timed"]["hit_ratio"].as_f64().unwrap() > 0.3,
        "{}",
        report["timed"]
    );
}

#[test]
fn a_log_that_exists_or_does_not_read_is_refused_by_name() {
    let taken = scratch_file("taken.decisions.jsonl", b"mine\n");
    let output = routerlab(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--endpoints",
        "127.0.0.1:9",
        "--matcher",
        "random",
        "--decision-log",
        &taken.to_string_lossy(),
    ]);
    let (_, stderr) = texts(&output);
    assert_ne!(output.status.code(), Some(0));
    assert!(
        stderr.contains("exists; the log never writes over a file"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&taken).unwrap(), b"mine\n");
    let broken = scratch_file(
        "broken.decisions.jsonl",
        b"{\"log\":\"routerlab-decisions/1\",\"seq\":1}\n",
    );
    let output = routerlab(&[
        "replay",
        "--from-log",
        &broken.to_string_lossy(),
        "--matcher",
        "lcp",
    ]);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("broken.decisions.jsonl:1: missing field"),
        "{stderr}"
    );
}
