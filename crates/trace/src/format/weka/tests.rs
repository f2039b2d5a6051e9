//! The Weka lowering's rules, one session at a time.

use super::*;
use serde_json::Value;

/// The rows `sessions` (one `.jsonl` file, `name`) lower to, by `play|request` suffix.
fn lowered(name: &str, sessions: &[Value]) -> (Value, HashMap<String, Value>) {
    let dir = std::env::temp_dir().join(format!("routerlab-weka-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let text: Vec<String> = sessions.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n")).unwrap();
    let out = lower_corpus(&path, &mut |_| {}).unwrap();
    let mut lines = std::str::from_utf8(&out).unwrap().lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let rows = lines
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let id = v["request_id"].as_str().unwrap();
            let key = id.split(":request:").nth(1).unwrap().to_owned();
            let play = id.split(':').next().unwrap().to_owned();
            (format!("{play}|{key}"), v)
        })
        .collect();
    (header, rows)
}

fn req(t: f64, input: u64, hashes: &[u64], api: f64) -> Value {
    serde_json::json!({"type": "s", "t": t, "model": "m", "in": input, "out": 10,
        "hash_ids": hashes, "api_time": api})
}

fn session(id: &str, requests: Vec<Value>) -> Value {
    serde_json::json!({"id": id, "block_size": 4, "hash_id_scope": "local", "requests": requests})
}

fn deps(row: &Value) -> Vec<(String, String, f64, String)> {
    row["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["request_id"]
                    .as_str()
                    .unwrap()
                    .rsplit(":request:")
                    .next()
                    .unwrap()
                    .to_owned(),
                d["trigger"].as_str().unwrap().to_owned(),
                d["delay_ms"].as_f64().unwrap(),
                d["relation"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn dep(on: &str, trigger: &str, delay: f64, relation: &str) -> (String, String, f64, String) {
    (on.into(), trigger.into(), delay, relation.into())
}

#[test]
fn turns_chain_by_prefix_forks_spawn_and_a_completed_subagent_is_joined() {
    let sub = serde_json::json!({"type": "subagent", "t": 2.5, "agent_id": "a",
        "subagent_type": "task", "status": "completed", "duration_ms": 1500,
        "requests": [{"type": "n", "t": 2.6, "model": "m", "in": 8, "out": 5,
                      "hash_ids": [1, 7], "api_time": 0.5}]});
    let bg = serde_json::json!({"type": "subagent", "t": 2.7, "agent_id": "b",
        "subagent_type": "bg", "status": "async_launched",
        "requests": [{"type": "n", "t": 2.8, "model": "m", "in": 8, "out": 5,
                      "hash_ids": [1, 8], "api_time": 0.1}]});
    let (header, rows) = lowered(
        "t1.jsonl",
        &[session(
            "s",
            vec![
                // 0: the main chain's first turn, 0-1 s.
                req(0.0, 8, &[1, 2], 1.0),
                // 1: extends it (ids [1,2] are its prefix), 2 s after it ended.
                req(2.0, 12, &[1, 2, 3], 0.4),
                sub,
                bg,
                // 4: a fork sharing [1] with the tail, begun while 1 ran: a worker.
                req(2.2, 8, &[1, 9], 0.2),
                // 5: the next main turn, after the sub-agent's end (2.5 + 1.5 = 4).
                req(4.5, 16, &[1, 2, 3, 4], 0.1),
            ],
        )],
    );
    assert_eq!(header["block_size"], 4);
    let p = "t1.jsonl#000000";
    let row = |k: &str| &rows[&format!("{p}|{k}")];
    assert_eq!(row("outer:0")["session_id"], format!("{p}:session:root"));
    assert_eq!(row("outer:5")["session_id"], format!("{p}:session:root"));
    assert_eq!(
        row("outer:4")["session_id"],
        format!("{p}:session:root:worker:0")
    );
    assert_eq!(
        row("outer:2:inner:0")["session_id"],
        format!("{p}:session:subagent:2:a")
    );
    assert!(deps(row("outer:0")).is_empty());
    assert_eq!(
        deps(row("outer:1")),
        [dep("outer:0", "completion", 1000.0, "sequence")]
    );
    // The worker began (2.2) before its fork source (1) ended (2.4): spawned at dispatch;
    // and it waits for the main stream's latest request that had ended (0: a barrier).
    assert_eq!(
        deps(row("outer:4")),
        [
            dep("outer:1", "dispatch", 200.0, "spawn"),
            dep("outer:0", "completion", 0.0, "replay_barrier"),
        ]
    );
    // The sub-agent is spawned by the last parent request before it, once it ended.
    assert_eq!(
        deps(row("outer:2:inner:0")),
        [dep("outer:1", "completion", 200.0, "spawn")]
    );
    assert_eq!(
        deps(row("outer:3:inner:0")),
        [dep("outer:1", "completion", 400.0, "spawn")]
    );
    // 5: its own predecessor, the worker's last turn (a barrier) and the completed
    // sub-agent's (a join); never the async one.
    assert_eq!(
        deps(row("outer:5")),
        [
            dep("outer:1", "completion", 2100.0, "sequence"),
            dep("outer:4", "completion", 0.0, "replay_barrier"),
            dep("outer:2:inner:0", "completion", 1400.0, "join"),
        ]
    );
    assert_eq!(row("outer:5")["not_before_ms"], 4500.0);
    // Ids: the shared block is one id; an in-session id repeated keeps its id.
    let ids = |k: &str| row(k)["hash_ids"].as_array().unwrap().clone();
    assert_eq!(ids("outer:0")[..], ids("outer:5")[..2]);
    assert_eq!(ids("outer:1").len(), 3);
    assert_eq!(ids("outer:0")[0], ids("outer:4")[0]);
    assert_ne!(ids("outer:0")[1], ids("outer:4")[1]);
}

#[test]
fn a_partial_block_is_private_and_sessions_share_no_ids() {
    // 6 tokens at 4 a block: one full block and a partial one, private to the request
    // even though the source repeats the id.
    let (_, rows) = lowered(
        "t2.jsonl",
        &[
            session(
                "x",
                vec![req(0.0, 6, &[1, 2], 0.1), req(1.0, 6, &[1, 2], 0.1)],
            ),
            session("y", vec![req(0.0, 6, &[1, 2], 0.1)]),
        ],
    );
    let ids = |k: &str| rows[k]["hash_ids"].as_array().unwrap().clone();
    let (a, b) = (
        ids("t2.jsonl#000000|outer:0"),
        ids("t2.jsonl#000000|outer:1"),
    );
    let c = ids("t2.jsonl#000001|outer:0");
    assert_eq!(a[0], b[0]);
    assert_ne!(a[1], b[1]);
    assert_ne!(a[0], c[0], "hash ids are local to a session");
}

#[test]
fn nested_times_before_their_marker_make_the_corpus_relative() {
    let sub = |t: f64| {
        serde_json::json!({"type": "subagent", "t": 5.0, "agent_id": "a",
            "subagent_type": "task", "status": "async_launched",
            "requests": [{"type": "n", "t": t, "model": "m", "in": 4, "out": 5,
                          "hash_ids": [3]}]})
    };
    for (inner, expected, digest) in [
        (6.0, 6000.0, "nested-times-absolute"),
        (0.5, 5500.0, "nested-times-relative"),
    ] {
        let (header, rows) = lowered(
            &format!("nested-{inner}.jsonl"),
            &[session("z", vec![req(0.0, 4, &[1], 1.0), sub(inner)])],
        );
        assert_eq!(header["source"]["digest"], digest);
        let key = format!("nested-{inner}.jsonl#000000|outer:1:inner:0");
        assert_eq!(rows[&key]["not_before_ms"], expected, "{inner}");
    }
}

#[test]
fn bad_sessions_are_refused_naming_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("routerlab-weka-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = session("ok", vec![req(0.0, 4, &[1], 0.1)]).to_string();
    let cases = [
        (
            "status.jsonl",
            format!(
                "{good}\n{}",
                session(
                    "bad",
                    vec![
                        req(0.0, 4, &[1], 0.1),
                        serde_json::json!({"type": "subagent", "t": 1.0, "agent_id": "a",
                            "subagent_type": "x", "status": "failed", "requests": []})
                    ]
                )
            ),
            "status.jsonl:2: field `requests[1].status`",
        ),
        (
            "two.json",
            format!("{good}\n{good}"),
            "two.json:2: a .json Weka file holds one session",
        ),
        (
            "zero.jsonl",
            session("z", vec![req(0.0, 0, &[], 0.1)]).to_string(),
            "zero.jsonl:1: field `requests[0].in`: session `z`: must be above 0",
        ),
        (
            "blocks.jsonl",
            format!(
                "{good}\n{}",
                good.replace("\"block_size\":4", "\"block_size\":8")
            ),
            "blocks.jsonl:2: field `block_size`",
        ),
        (
            "field.jsonl",
            r#"{"id": "q", "block_size": 4}"#.into(),
            "missing field `hash_id_scope`",
        ),
    ];
    for (name, text, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let error = lower_corpus(&path, &mut |_| {}).unwrap_err().to_string();
        assert!(error.contains(expected), "{name}: {error}");
        assert!(error.contains(&path.display().to_string()), "{error}");
    }
}
