//! The policy's statistics on a trace the crate carries, as an insta snapshot: a change to
//! the policy (a threshold, a tie-break) shows up in review as a diff of load spread and
//! hit ratio. The first run stores the snapshot (`INSTA_UPDATE=always cargo test`); accept
//! an intended change later with `cargo insta review`.

use routerlab_sim::snapshot::{SnapshotRun, plugin_library, redacted, replay_plugin};

#[test]
fn least_tokens_on_a_small_trace() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/trace.jsonl");
    let library = plugin_library("routerlab_least_tokens");
    // Timed (the trace's arrivals, the engine model's `dynamo` preset), 4 endpoints.
    let run = SnapshotRun {
        endpoints: 4,
        config: "{max_running: 8}".into(),
        timed: true,
        ..SnapshotRun::new(trace)
    };
    let report =
        replay_plugin(&library, "least-tokens", &run).expect("the plugin replays the trace");
    insta::assert_yaml_snapshot!(redacted(&report, 3));
}
