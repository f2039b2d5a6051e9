//! The policy's statistics on a committed trace, as an insta snapshot: a change to the
//! policy (a threshold, a tie-break) shows up in review as a diff of load spread and hit
//! ratio. Accept an intended change with `cargo insta review`.

use routerlab_sim::snapshot::{SnapshotRun, plugin_library, redacted, replay_plugin};

#[test]
fn least_tokens_on_the_chat_trace() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/chat.jsonl");
    let library = plugin_library("routerlab_least_tokens");
    let report = replay_plugin(&library, "least-tokens", &SnapshotRun::new(trace))
        .expect("the plugin replays the trace");
    insta::assert_yaml_snapshot!(redacted(&report, 3));
}
