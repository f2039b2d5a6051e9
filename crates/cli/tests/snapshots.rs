//! Snapshot tests of the full report: every built-in matcher on the committed chat trace
//! and the small Mooncake fixture, without a detector and with `num-requests`, plus
//! `max-kv-cache` on a finite cache. One test per case, so one mismatch hides no other. A
//! policy change that moves a number shows up here in review. CI checks them and never
//! writes them (`CI` set).

use std::path::{Path, PathBuf};

use routerlab_host::SearchPath;
use routerlab_sim::Report;
use routerlab_sim::scenario::Scenario;

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
    let mut scenario = Scenario::new(matcher, trace(trace_name));
    if let Some((name, config)) = detector {
        scenario = scenario.detector(name, config).expect("detector config");
    }
    scenario.cache_blocks = cache_blocks;
    let mut replicas = scenario
        .routers(&SearchPath::from_env())
        .expect("plugins load");
    let mut report = scenario
        .replay(&mut replicas, &mut routerlab_sim::observer::NoObserver)
        .expect("replay succeeds");
    // The snapshots hold the statistics; the run block names this machine's paths.
    report.run = None;
    report
}

/// `case!(test_name, "snapshot name", trace, matcher, detector, cache)`.
macro_rules! case {
    ($test:ident, $snapshot:literal, $trace:literal, $matcher:literal, $detector:expr, $cache:expr) => {
        #[test]
        fn $test() {
            insta::assert_yaml_snapshot!($snapshot, run($trace, $matcher, $detector, $cache));
        }
    };
}

case!(lcp_chat, "lcp@chat", "chat.jsonl", "lcp", None, None);
case!(
    simhash_chat,
    "simhash@chat",
    "chat.jsonl",
    "simhash",
    None,
    None
);
case!(
    round_robin_chat,
    "round-robin@chat",
    "chat.jsonl",
    "round-robin",
    None,
    None
);
case!(
    lcp_num_requests_chat,
    "lcp+num-requests@chat",
    "chat.jsonl",
    "lcp",
    Some(("num-requests", "max_running: 400")),
    None
);
case!(
    simhash_num_requests_chat,
    "simhash+num-requests@chat",
    "chat.jsonl",
    "simhash",
    Some(("num-requests", "max_running: 400")),
    None
);
case!(
    round_robin_num_requests_chat,
    "round-robin+num-requests@chat",
    "chat.jsonl",
    "round-robin",
    Some(("num-requests", "max_running: 400")),
    None
);
case!(
    lcp_mooncake,
    "lcp@mooncake",
    "mooncake-small.jsonl",
    "lcp",
    None,
    None
);
case!(
    simhash_mooncake,
    "simhash@mooncake",
    "mooncake-small.jsonl",
    "simhash",
    None,
    None
);
case!(
    round_robin_mooncake,
    "round-robin@mooncake",
    "mooncake-small.jsonl",
    "round-robin",
    None,
    None
);
case!(
    lcp_num_requests_mooncake,
    "lcp+num-requests@mooncake",
    "mooncake-small.jsonl",
    "lcp",
    Some(("num-requests", "max_running: 40")),
    None
);
case!(
    simhash_num_requests_mooncake,
    "simhash+num-requests@mooncake",
    "mooncake-small.jsonl",
    "simhash",
    Some(("num-requests", "max_running: 40")),
    None
);
case!(
    round_robin_num_requests_mooncake,
    "round-robin+num-requests@mooncake",
    "mooncake-small.jsonl",
    "round-robin",
    Some(("num-requests", "max_running: 40")),
    None
);
case!(
    lcp_max_kv_cache_chat_2000_blocks,
    "lcp+max-kv-cache@chat-2000-blocks",
    "chat.jsonl",
    "lcp",
    Some(("max-kv-cache", "")),
    Some(2000)
);
