//! Router replicas (`--router-replicas`, `--replica-assign`), through the real binary, the
//! real plugin libraries and real or generated traces.

mod support;

use std::collections::BTreeMap;

use support::{Replay, fixture_plugin, project_trace, scratch_file, texts};

/// One replica is the single router: the same report, byte for byte, in both modes,
/// whatever the balancer's rule (it has nothing to spread).
#[test]
fn one_replica_is_the_single_router() {
    let trace = project_trace("mooncake-small.jsonl");
    for mode in [
        &["--format", "json"][..],
        &[
            "--format",
            "json",
            "--timing",
            "trace",
            "--metrics-interval-ms",
            "100",
        ][..],
    ] {
        for matcher in ["lcp", "simhash"] {
            let alone = Replay::new(matcher, &trace).args(mode).stdout();
            for assign in ["round-robin", "random", "session"] {
                let one = Replay::new(matcher, &trace)
                    .args(mode)
                    .args(&["--router-replicas", "1", "--replica-assign", assign])
                    .stdout();
                assert_eq!(one, alone, "{matcher} {assign} {mode:?}");
            }
        }
    }
}

/// A generated Mooncake trace with sessions (`traces/mooncake-sessions.jsonl`, the output
/// of `gen-trace --trace-format mooncake`), `lcp` over 8 endpoints: 8 replicas that each learn an
/// eighth of the traffic (round robin) find less of what the engines hold than one router;
/// sticky sessions keep most of it (within 5% of one router).
#[test]
fn replicas_lose_hits_unless_sessions_stick() {
    let trace = project_trace("mooncake-sessions.jsonl");
    for mode in [&[][..], &["--timing", "trace"][..]] {
        let hit_ratio = |replicas: &str, assign: &str| {
            let report = Replay::new("lcp", &trace)
                .args(&["--endpoints", "8"])
                .args(mode)
                .args(&["--router-replicas", replicas, "--replica-assign", assign])
                .report();
            report["hit_ratio"].as_f64().expect("a hit ratio")
        };
        let one = hit_ratio("1", "round-robin");
        let split = hit_ratio("8", "round-robin");
        let sticky = hit_ratio("8", "session");
        assert!(split < one, "{mode:?}: 8 replicas {split} vs 1 {one}");
        assert!(
            (sticky - one).abs() <= 0.05 * one,
            "{mode:?}: sticky {sticky} vs 1 {one}"
        );
    }
}

/// By hand. `round-robin` matchers over 2 endpoints; four requests of one 512-token block
/// each, on prefixes a, b, a, b. One router sends them to e0, e1, e0, e1: the second a and
/// the second b find their prefix, hit ratio 2/4. Two replicas behind a round-robin
/// balancer each get two requests and each starts its own turn at e0: replica 0 sends a
/// to e0 and a to e1, replica 1 sends b to e0 and b to e1, so e0 holds a then gets b, e1
/// holds a then gets b: nothing is found, hit ratio 0. (Timed, an engine recomputes the
/// last of a prompt's 64-token blocks even when it holds them all, as vLLM does: a hit is
/// 448 tokens, and one router's ratio is 2 × 448 / 2048 = 0.4375.)
#[test]
fn a_hand_built_trace_loses_what_replicas_cannot_share() {
    let line = |at: u32, prefix: u32| {
        format!(
            "{{\"timestamp\": {at}, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [{prefix}]}}\n"
        )
    };
    let text = [line(0, 1), line(1000, 2), line(2000, 1), line(3000, 2)].concat();
    let trace = scratch_file("replicas-by-hand.jsonl", text.as_bytes());
    for mode in [&[][..], &["--timing", "trace"][..]] {
        let run = |replicas: &str| {
            Replay::new("round-robin", &trace)
                .args(&["--endpoints", "2", "--router-replicas", replicas])
                .args(mode)
                .report()
        };
        let one = run("1");
        let expected = if mode.is_empty() { 0.5 } else { 0.4375 };
        assert_eq!(one["hit_ratio"], expected, "{mode:?}");
        assert!(one.get("replicas").is_none());
        let two = run("2");
        assert_eq!(two["hit_ratio"], 0.0, "{mode:?}");
        assert_eq!(two["nreq"]["counts"], serde_json::json!([2, 2]));
        let replicas = two["replicas"].as_array().expect("a replicas block");
        assert_eq!(replicas.len(), 2);
        for replica in replicas {
            assert_eq!(replica["requests"], 2);
            assert_eq!(replica["nreq"]["counts"], serde_json::json!([1, 1]));
            assert_eq!(replica["hit_ratio"], 0.0);
        }
        assert_eq!(
            two["run"]["router_replicas"],
            serde_json::json!({"count": 2, "assign": "round-robin"})
        );
    }
}

/// A trace without sessions still works with `session`: each conversation (a parent
/// chain) stays on one replica, which the per-request records show; round robin spreads
/// a conversation over several.
#[test]
fn session_assignment_without_sessions_follows_conversations() {
    // Five conversations of four turns each, interleaved, no `session` field. (Five, not a
    // multiple of the three replicas, so that round robin cannot keep a conversation.)
    let mut text = String::new();
    for turn in 0..4 {
        for conversation in 0..5 {
            let id = turn * 5 + conversation;
            let parent = if turn == 0 {
                String::new()
            } else {
                format!(", \"parent\": {}", id - 5)
            };
            text.push_str(&format!(
                "{{\"id\": {id}, \"prompt\": \"conversation {conversation} turn {turn}\"{parent}}}\n"
            ));
        }
    }
    let trace = scratch_file("replicas-conversations.jsonl", text.as_bytes());
    let replica_of = |assign: &str| -> BTreeMap<u64, u64> {
        let records = trace.with_file_name(format!("replicas-{assign}.records.jsonl"));
        Replay::new("lcp", &trace)
            .args(&["--timing", "trace", "--rate", "5", "--endpoints", "4"])
            .args(&["--router-replicas", "3", "--replica-assign", assign])
            .args(&["--requests-out", &records.to_string_lossy()])
            .stdout();
        std::fs::read_to_string(&records)
            .expect("records")
            .lines()
            .map(|line| {
                let record: serde_json::Value = serde_json::from_str(line).expect("JSON");
                let replica = record["replica"].as_u64().expect("a replica");
                (record["id"].as_u64().expect("an id"), replica)
            })
            .collect()
    };
    let conversation_of = |id: u64| (id - 1) % 5;
    let replicas_per_conversation = |by_request: &BTreeMap<u64, u64>| {
        let mut seen: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
        for (id, replica) in by_request {
            seen.entry(conversation_of(*id))
                .or_default()
                .insert(*replica);
        }
        seen.values().map(|s| s.len()).collect::<Vec<_>>()
    };
    let sticky = replica_of("session");
    assert_eq!(sticky.len(), 20);
    assert_eq!(replicas_per_conversation(&sticky), vec![1; 5]);
    let used: std::collections::BTreeSet<u64> = sticky.values().copied().collect();
    assert!(
        used.len() > 1,
        "every conversation on one replica: {sticky:?}"
    );
    let spread = replica_of("round-robin");
    assert!(replicas_per_conversation(&spread).iter().all(|n| *n > 1));
}

/// Each replica's plugins see their own router's in-flight counts (the `contract-1-2`
/// fixture fails the run when `inflight_requests` differs from what it routed itself),
/// first tokens and completions only of their own requests, in both modes, with stale
/// metrics and requests waiting at the routers.
#[test]
fn each_replica_sees_only_its_own_requests() {
    let contract = fixture_plugin("contract-1-2");
    let trace = project_trace("mooncake-small.jsonl");
    for assign in ["round-robin", "random", "session"] {
        let replicas = ["--router-replicas", "3", "--replica-assign", assign];
        let report = Replay::new(&contract, &trace)
            .args(&replicas)
            .args(&["--endpoints", "3"])
            .report();
        assert_eq!(report["rejected"], 0, "{assign}");
        let report = Replay::new(&contract, &trace)
            .args(&replicas)
            .args(&["--matcher-config", "{kv_block_tokens: 64}"])
            .args(&["--timing", "trace", "--speedup", "20", "--endpoints", "3"])
            .args(&["--metrics-interval-ms", "500", "--detector", "num-requests"])
            .args(&["--detector-config", "max_running: 2"])
            .report();
        assert!(
            report["timed"]["router_queued"].as_u64().unwrap() > 0,
            "{assign}"
        );
        let per_replica: u64 = report["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .map(|r| r["requests"].as_u64().unwrap())
            .sum();
        assert_eq!(per_replica, 300, "{assign}");
    }
}

/// With a metrics interval each replica scrapes the engines at its own phase: the
/// `scrape-phase` fixture fails the run when the statuses it sees change between two of its
/// decisions with none of its own scrape times in between. Told the wrong phases (as if
/// every replica scraped at once), it does fail: the check bites.
#[test]
fn replicas_scrape_the_engines_at_staggered_phases() {
    let fixture = fixture_plugin("scrape-phase");
    let trace = project_trace("mooncake-small.jsonl");
    let run = |config: &str| {
        Replay::new(&fixture, &trace)
            .args(&["--timing", "trace", "--speedup", "20", "--endpoints", "3"])
            .args(&["--metrics-interval-ms", "100", "--router-replicas", "4"])
            .args(&["--matcher-config", config])
            .run()
    };
    let staggered = run("{replicas: 4, interval_ms: 100}");
    assert!(staggered.status.success(), "{}", texts(&staggered).1);
    let together = run("{replicas: 1, interval_ms: 100}");
    let (_, stderr) = texts(&together);
    assert_eq!(together.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("without a scrape of this replica"),
        "{stderr}"
    );
}

/// Bad counts are refused by name.
#[test]
fn replica_counts_out_of_range_are_refused() {
    for count in ["0", "1025"] {
        let output = Replay::new("lcp", &project_trace("chat.jsonl"))
            .args(&["--router-replicas", count])
            .run();
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--router-replicas must be from 1 to 1024, not {count}"
            )),
            "{stderr}"
        );
    }
}
