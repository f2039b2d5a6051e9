//! Snapshot tests of the full report: every built-in matcher on the committed chat trace
//! and the small Mooncake fixture, without a detector and with `num-requests`, plus
//! `max-kv-cache` on a finite cache. A policy change that moves a number shows up here in
//! review. CI checks them and never writes them (`CI` set).

use std::path::{Path, PathBuf};

use routerlab_host::{SearchPath, load_detector, load_matcher};
use routerlab_replay::replay::{ReplaySettings, replay};
use routerlab_replay::report::Report;
use routerlab_replay::trace::{TraceOptions, TraceReader};

fn trace(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces")
        .join(name)
}

fn run(
    trace_name: &str,
    matcher: &str,
    detector: Option<(&str, &str)>,
    cache_blocks: Option<u64>,
) -> Report {
    let search = SearchPath::from_env();
    let mut matcher = load_matcher(matcher, "seed: 0", &search).expect("matcher loads");
    let mut detector = detector
        .map(|(name, config)| load_detector(name, config, &search).expect("detector loads"));
    let options = TraceOptions {
        format: None,
        block_size: 128,
        trace_block_size: 512,
        skip_invalid: false,
    };
    let mut reader = TraceReader::open(&trace(trace_name), options).expect("trace opens");
    let settings = ReplaySettings {
        endpoints: (0..10).map(|i| format!("localhost:{}", 8000 + i)).collect(),
        cache_blocks,
        fail_open: false,
    };
    replay(&mut reader, &mut matcher, detector.as_mut(), &settings).expect("replay succeeds")
}

#[test]
fn reports() {
    let traces = [
        ("chat", "chat.jsonl", "max_running: 400"),
        ("mooncake", "mooncake-small.jsonl", "max_running: 40"),
    ];
    for (trace_label, trace_name, detector_config) in traces {
        for matcher in ["lcp", "simhash", "round-robin"] {
            let plain = run(trace_name, matcher, None, None);
            insta::assert_yaml_snapshot!(format!("{matcher}@{trace_label}"), plain);
            let detected = run(
                trace_name,
                matcher,
                Some(("num-requests", detector_config)),
                None,
            );
            insta::assert_yaml_snapshot!(format!("{matcher}+num-requests@{trace_label}"), detected);
        }
    }
    let kv = run("chat.jsonl", "lcp", Some(("max-kv-cache", "")), Some(2000));
    insta::assert_yaml_snapshot!("lcp+max-kv-cache@chat-2000-blocks", kv);
}
