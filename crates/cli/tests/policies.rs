//! One timed snapshot per routing policy on Mooncake's conversation trace: 4 endpoints, the
//! `dynamo` engine preset, the trace's own timestamps (the setting of the comparison with
//! Dynamo's replay in the README). A change to a policy that moves any figure shows here.

mod support;

use routerlab_host::SearchPath;
use routerlab_sim::Report;
use routerlab_sim::observer::NoObserver;
use routerlab_sim::scenario::Scenario;
use support::project_trace;

/// The timed report of `matcher` (and `detector`) with the given configs.
fn run(matcher: &str, config: &str, detector: Option<(&str, &str)>) -> Report {
    let trace = project_trace("mooncake-conversation.jsonl");
    let mut scenario = Scenario::new(matcher, trace)
        .endpoints(4)
        .matcher_config(config)
        .expect("matcher config");
    if let Some((name, config)) = detector {
        scenario = scenario.detector(name, config).expect("detector config");
    }
    let scenario = scenario.timed_at_trace_times();
    let mut replicas = scenario
        .routers(&SearchPath::from_env())
        .expect("plugins load");
    let mut report = scenario
        .replay(&mut replicas, &mut NoObserver)
        .expect("replay");
    // The snapshots hold the statistics; the run block names this machine's paths.
    report.run = None;
    report
}

/// `policy!(test, "snapshot", "matcher", "config"[, ("detector", "config")])`.
macro_rules! policy {
    ($test:ident, $snapshot:literal, $matcher:literal, $config:literal) => {
        #[test]
        fn $test() {
            insta::assert_yaml_snapshot!($snapshot, run($matcher, $config, None));
        }
    };
    ($test:ident, $snapshot:literal, $matcher:literal, $config:literal, $detector:expr) => {
        #[test]
        fn $test() {
            insta::assert_yaml_snapshot!($snapshot, run($matcher, $config, Some($detector)));
        }
    };
}

policy!(random, "random", "random", "seed: 0");
policy!(
    least_inflight,
    "least-inflight",
    "least-inflight",
    "seed: 0"
);
policy!(power_of_two, "power-of-two", "power-of-two", "seed: 0");
policy!(dynamo_kv, "dynamo-kv", "dynamo-kv", "seed: 0");
policy!(
    dynamo_kv_approximate,
    "dynamo-kv-approximate",
    "dynamo-kv",
    "{seed: 0, mode: approximate}"
);
policy!(
    sglang_cache_aware,
    "sglang-cache-aware",
    "sglang-cache-aware",
    "seed: 0"
);
policy!(
    sglang_cache_aware_struct,
    "sglang-cache-aware-struct",
    "sglang-cache-aware",
    "{seed: 0, defaults: struct}"
);
policy!(gie_default, "gie-default", "gie-default", "seed: 0");
policy!(
    gie_estimate,
    "gie-estimate",
    "gie-default",
    "{seed: 0, variant: estimate}"
);
policy!(
    gie_precise,
    "gie-precise",
    "gie-default",
    "{seed: 0, variant: precise}"
);
policy!(llmd_sticky, "llmd-sticky", "llmd-sticky", "seed: 0");
policy!(
    ps_prefixaware,
    "ps-prefixaware",
    "ps-prefixaware",
    "seed: 0"
);
policy!(ps_session, "ps-session", "ps-session", "seed: 0");
policy!(ps_loadaware, "ps-loadaware", "ps-loadaware", "seed: 0");
policy!(kubeai_chwbl, "kubeai-chwbl", "kubeai-chwbl", "seed: 0");
policy!(
    sglang_prefix_hash,
    "sglang-prefix-hash",
    "sglang-prefix-hash",
    "seed: 0"
);
policy!(
    aibrix_prefix_cache,
    "aibrix-prefix-cache",
    "aibrix-prefix-cache",
    "seed: 0"
);
policy!(dynamo_v01, "dynamo-v01", "dynamo-v01", "seed: 0");
policy!(vllm_precise, "vllm-precise", "vllm-precise", "seed: 0");
policy!(vr_ttft_aware, "vr-ttft-aware", "vr-ttft-aware", "seed: 0");
policy!(vr_smetric, "vr-smetric", "vr-smetric", "seed: 0");
policy!(smg_manual, "smg-manual", "smg-manual", "seed: 0");
policy!(
    vr_least_conn_sticky,
    "vr-least-conn-sticky",
    "vr-least-conn-sticky",
    "seed: 0"
);
policy!(llmd_session, "llmd-session", "llmd-session", "seed: 0");
policy!(llmd_burst, "llmd-burst", "llmd-burst", "seed: 0");
policy!(sim_latency, "sim-latency", "sim-latency", "seed: 0");
policy!(llmd_latency, "llmd-latency", "llmd-latency", "seed: 0");
policy!(
    llmd_latency_slo,
    "llmd-latency-slo",
    "llmd-latency",
    "{seed: 0, ttft_slo_ms: 2000}"
);
policy!(
    vr_sticky_least_loaded,
    "vr-sticky-least-loaded",
    "vr-sticky-least-loaded",
    "seed: 0"
);
policy!(
    lcp_concurrency,
    "lcp+concurrency",
    "lcp",
    "seed: 0",
    ("concurrency", "capacity: 64")
);
policy!(
    lcp_utilization,
    "lcp+utilization",
    "lcp",
    "seed: 0",
    ("utilization", "")
);
policy!(
    lcp_dynamo_busy,
    "lcp+dynamo-busy",
    "lcp",
    "seed: 0",
    ("dynamo-busy", "active_decode_blocks_threshold: 0.85")
);
policy!(
    lcp_sglang_imbalance,
    "lcp+sglang-imbalance",
    "lcp",
    "seed: 0",
    ("sglang-imbalance", "")
);
policy!(
    lcp_aibrix_imbalance,
    "lcp+aibrix-imbalance",
    "lcp",
    "seed: 0",
    ("aibrix-imbalance", "")
);
policy!(
    lcp_bounded_load,
    "lcp+bounded-load",
    "lcp",
    "seed: 0",
    ("bounded-load", "")
);
policy!(
    lcp_waiting_threshold,
    "lcp+waiting-threshold",
    "lcp",
    "seed: 0",
    ("waiting-threshold", "")
);
