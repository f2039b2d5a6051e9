//! Snapshot tests of the full report: every built-in matcher on the committed chat trace
//! and the small Mooncake fixture, without a detector and with `num-requests`, plus
//! `max-kv-cache` on a finite cache. One test per case, so one mismatch hides no other. A
//! policy change that moves a number shows up here in review. CI checks them and never
//! writes them (`CI` set).

use std::path::{Path, PathBuf};

use routerlab_host::{EndpointTable, SearchPath, load_detector, load_matcher};
use routerlab_sim::{Replicas, Report, Router, WhenUnavailable, timefree};
use routerlab_trace::{TraceOptions, TraceReader};

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
    let matcher = load_matcher(matcher, "seed: 0", &search).expect("matcher loads");
    let detector = detector
        .map(|(name, config)| load_detector(name, config, &search).expect("detector loads"));
    let options = TraceOptions {
        format: None,
        block_size: 128,
        trace_block_size: 512,
        skip_invalid: false,
    };
    let mut reader = TraceReader::open(&trace(trace_name), options).expect("trace opens");
    let table = EndpointTable::new((0..10).map(|i| format!("localhost:{}", 8000 + i)));
    let mut replicas = Replicas::from(
        Router::new(matcher, detector, table, WhenUnavailable::Reject).expect("router"),
    );
    timefree::replay(
        &mut reader,
        &mut replicas,
        cache_blocks,
        &mut routerlab_sim::observer::NoObserver,
    )
    .expect("replay succeeds")
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
