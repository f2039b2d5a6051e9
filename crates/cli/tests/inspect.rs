//! `routerlab inspect` through the real binary: the reuse ceilings by hand, the ceiling as
//! what one endpoint realises on the conversation trace, and the machine-readable forms.

mod support;

use support::{Replay, project_trace, routerlab, scratch_file, texts};

fn inspect_json(path: &std::path::Path) -> serde_json::Value {
    let output = routerlab(&["inspect", &path.to_string_lossy(), "--format", "json"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

/// Three requests, blocks of 512: session a sends [1,2] (1,024 tokens) then [1,2,3]
/// (1,536); session b sends [1,5] (1,024). Anywhere: 0 + 1,024 + 512 hit tokens; within
/// conversations: 0 + 1,024 + 0; of 3,584 prompt tokens.
#[test]
fn the_ceilings_by_hand() {
    let trace = scratch_file(
        "inspect.jsonl",
        concat!(
            "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 10, \"hash_ids\": [1, 2], \"session_id\": \"a\"}\n",
            "{\"timestamp\": 1000, \"input_length\": 1536, \"output_length\": 20, \"hash_ids\": [1, 2, 3], \"session_id\": \"a\"}\n",
            "{\"timestamp\": 4000, \"input_length\": 1024, \"output_length\": 30, \"hash_ids\": [1, 5], \"session_id\": \"b\"}\n",
        )
        .as_bytes(),
    );
    let s = inspect_json(&trace);
    assert_eq!(s["requests"], 3);
    assert_eq!(
        (s["conversations"].as_u64(), s["follow_ups"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(s["distinct_blocks"], 4);
    assert_eq!(s["reuse_ceiling"], 0.428571, "1,536 of 3,584");
    assert_eq!(s["conversation_reuse_ceiling"], 0.285714, "1,024 of 3,584");
    assert_eq!(s["arrivals"]["span_s"], 4.0);
    assert_eq!(s["arrivals"]["rate_per_s"], 0.75);
    assert_eq!(s["input"]["max"], 1536);
    assert_eq!(s["output"]["p50"], 20);
}

/// No router beats one infinite cache, and on the conversation trace everything on one
/// endpoint realises exactly it.
#[test]
fn the_ceiling_is_what_one_endpoint_realises_and_bounds_every_policy() {
    let trace = project_trace("mooncake-conversation.jsonl");
    let ceiling = inspect_json(&trace)["reuse_ceiling"].as_f64().unwrap();
    let one = Replay::new("lcp", &trace)
        .args(&["--endpoints", "1"])
        .report();
    assert_eq!(one["hit_ratio"].as_f64().unwrap(), ceiling);
    for matcher in ["round-robin", "simhash", "lcp"] {
        let hit = Replay::new(matcher, &trace).report()["hit_ratio"]
            .as_f64()
            .unwrap();
        assert!(hit <= ceiling, "{matcher}: {hit} > {ceiling}");
    }
}

#[test]
fn the_human_form_has_a_histogram_and_csv_traces_have_no_ceiling() {
    let output = routerlab(&[
        "inspect",
        &project_trace("burstgpt-sample.csv").to_string_lossy(),
    ]);
    let (stdout, _) = texts(&output);
    assert!(output.status.success());
    assert!(
        stdout.starts_with("requests                400 (burstgpt trace"),
        "{stdout}"
    );
    assert!(
        stdout.contains("burstgpt traces say nothing about shared prefixes"),
        "{stdout}"
    );
    let bars = stdout.lines().filter(|l| l.starts_with("  from ")).count();
    assert_eq!(bars, 20, "{stdout}");
    let yaml = routerlab(&[
        "inspect",
        &project_trace("chat.jsonl").to_string_lossy(),
        "--format",
        "yaml",
    ]);
    let summary: serde_yaml::Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(
        summary["arrivals"],
        serde_yaml::Value::Null,
        "chat.jsonl has no times"
    );
}
