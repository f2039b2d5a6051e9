//! Two `serve` replicas sharing their state over loopback (`--replica-sync`), behind a
//! round-robin `serve` as their balancer: each request goes to the engine the timed
//! replay's two replicas, sharing alike, send it to.

mod support;

use serde_json::Value;
use support::server::{ROUTERLAB, Server};
use support::{fresh_path, json_lines_when, project_trace, routerlab, scratch_file, texts};

/// The engine each logged request went to, by the replica's own order.
fn logged(log: &std::path::Path, n: usize) -> Vec<String> {
    let mut records = json_lines_when(log, n);
    records.sort_by_key(|r| r["seq"].as_u64());
    (records.iter())
        .map(|r| r["endpoint"].as_str().unwrap().to_owned())
        .collect()
}

/// The engine of each request when two replicas routed `trace` live with `sync` (the
/// balancer alternating, one request at a time), in trace order.
fn live(engines: &str, trace: &std::path::Path, sync: &[&str], tag: &str) -> Vec<String> {
    let (log_a, log_b) = (
        fresh_path(&format!("{tag}-a.jsonl")),
        fresh_path(&format!("{tag}-b.jsonl")),
    );
    let replica = |log: &std::path::Path, seed: &str, more: &[&str]| -> Server {
        let log = log.to_string_lossy();
        let mut args = vec![
            "serve",
            "--endpoints",
            engines,
            "--matcher",
            "lcp",
            "--seed",
            seed,
            "--block-size",
            "2048",
            "--decision-log",
            &log,
        ];
        args.extend_from_slice(sync);
        args.extend_from_slice(more);
        ROUTERLAB.start(&args)
    };
    let a = replica(&log_a, "0", &[]);
    // The second names the first; the first learns it from its greeting.
    let peers = if sync.is_empty() {
        vec![]
    } else {
        vec!["--peers", a.addr.as_str()]
    };
    let b = replica(&log_b, "1", &peers);
    let front_endpoints = format!("{},{}", a.addr, b.addr);
    let front = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &front_endpoints,
        "--matcher",
        "round-robin",
    ]);
    // The first has heard from the second before any request: both share from the start.
    if !sync.is_empty() {
        let joined = (0..100).any(|_| {
            let (_, metrics) = support::http(&a.addr, "GET", "/metrics", "");
            let ok = metrics.lines().any(|l| l == "routerlab_sync_peers 1");
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            ok
        });
        assert!(joined, "the first replica never heard from the second");
    }
    let output = routerlab(&[
        "drive",
        "--url",
        &front.url(),
        "--trace",
        &trace.to_string_lossy(),
        "--concurrency",
        "1",
        "--format",
        "json",
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let (a, b) = (logged(&log_a, 100), logged(&log_b, 100));
    a.into_iter().zip(b).flat_map(|(x, y)| [x, y]).collect()
}

/// The same, replayed (timed) by two replicas sharing as `sync` says.
fn replayed(engines: &str, trace: &std::path::Path, sync: &str, tag: &str) -> Vec<String> {
    let out = fresh_path(&format!("{tag}-replay.jsonl"));
    let output = routerlab(&[
        "replay",
        "--matcher",
        "lcp",
        "--trace",
        &trace.to_string_lossy(),
        "--timing",
        "trace",
        "--endpoints",
        engines,
        "--router-replicas",
        "2",
        "--replica-sync",
        sync,
        "--requests-out",
        &out.to_string_lossy(),
        "--quiet",
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let mut records: Vec<Value> = (std::fs::read_to_string(&out).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    records.sort_by_key(|r| r["line"].as_u64());
    (records.iter())
        .map(|r| r["endpoint"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn two_serve_replicas_sharing_their_state_decide_as_the_replay_does() {
    let engines: Vec<Server> = (0..2)
        .map(|_| ROUTERLAB.start(&["engine", "--instant"]))
        .collect();
    let endpoints = format!("{},{}", engines[0].addr, engines[1].addr);
    let text = std::fs::read_to_string(project_trace("mooncake-sessions.jsonl")).unwrap();
    let head: Vec<&str> = text.lines().take(200).collect();
    let trace = scratch_file("sync-live-200.jsonl", (head.join("\n") + "\n").as_bytes());
    // `shared` holds a request until its peers took the change: decision for decision the
    // replay's, whatever the load on this machine (`broadcast` races the next request).
    let shared = live(&endpoints, &trace, &["--replica-sync", "shared"], "shared");
    assert_eq!(shared, replayed(&endpoints, &trace, "shared", "shared"));
    // Alone, the replicas decide otherwise: what they share is what moved the decisions.
    let alone = live(&endpoints, &trace, &[], "alone");
    assert_eq!(alone, replayed(&endpoints, &trace, "none", "alone"));
    let differ = alone.iter().zip(&shared).filter(|(x, y)| x != y).count();
    assert!(differ > 20, "{differ} of 200 decisions differ alone");
}

#[test]
fn serve_refuses_peers_without_a_strategy_and_a_replay_only_sync_key() {
    for (args, message) in [
        (
            &["--peers", "127.0.0.1:9"][..],
            "--peers: give a --replica-sync strategy",
        ),
        (
            &["--replica-sync", "broadcast", "--peers", "nowhere"][..],
            "`nowhere` is not a host:port address",
        ),
    ] {
        let mut all = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--endpoints",
            "127.0.0.1:9",
            "--matcher",
            "lcp",
        ];
        all.extend_from_slice(args);
        let output = routerlab(&all);
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    let config = scratch_file(
        "sync-delay.yaml",
        b"matcher: lcp\nendpoints: 127.0.0.1:9\nreplica_sync: broadcast\nsync_delay_ms: 5\n",
    );
    let output = routerlab(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        &config.to_string_lossy(),
    ]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`sync_delay_ms` is a replay setting that serve cannot honour"),
        "{stderr}"
    );
}

/// Polls `addr`'s `/metrics` every 20 ms for up to 5 s until a line is `line`.
fn until_metric(addr: &str, line: &str) {
    let seen = (0..250).any(|_| {
        let (_, metrics) = support::http(addr, "GET", "/metrics", "");
        let found = metrics.lines().any(|l| l == line);
        if !found {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        found
    });
    assert!(seen, "{addr}: no `{line}` within 5 s");
}

#[test]
fn a_periodic_sync_shows_a_replica_its_peers_requests_in_flight() {
    // Decode steps of 20 ms: a 200-token answer takes 4 s.
    let engine = ROUTERLAB.start(&[
        "engine",
        "--engine-config",
        "{step_time: {model: linear, overhead_ms: 1, prefill_ms_per_token: 0, decode_ms: 20}}",
    ]);
    let sync = [
        "--replica-sync",
        "periodic",
        "--sync-interval-ms",
        "20",
        "--sync-scope",
        "loads",
    ];
    let mut args = vec![
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        "least-inflight",
    ];
    args.extend_from_slice(&sync);
    let a = ROUTERLAB.start(&args);
    let log = fresh_path("periodic-b.jsonl");
    let log_arg = log.to_string_lossy().into_owned();
    args.extend_from_slice(&["--peers", &a.addr, "--decision-log", &log_arg]);
    let b = ROUTERLAB.start(&args);
    until_metric(&a.addr, "routerlab_sync_peers 1");
    // Three long requests through the first replica, left running.
    for _ in 0..3 {
        let addr = a.addr.clone();
        std::thread::spawn(move || {
            support::http(
                &addr,
                "POST",
                "/v1/completions",
                r#"{"prompt": "a long one", "max_tokens": 200}"#,
            )
        });
    }
    let series = format!(
        "routerlab_inflight_requests{{endpoint=\"{}\"}} 3",
        engine.addr
    );
    until_metric(&a.addr, &series);
    // Ten of its publications later, the second replica routes one request of its own.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (status, body) = support::http(
        &b.addr,
        "POST",
        "/v1/completions",
        r#"{"prompt": "a short one", "max_tokens": 2}"#,
    );
    assert_eq!(status, 200, "{body}");
    let text = (0..100)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::fs::read_to_string(&log).unwrap_or_default()
        })
        .find(|t| !t.is_empty())
        .expect("the second replica logged its request");
    let record: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    // What it saw in flight at the engine: its peer's three, none of its own yet.
    assert_eq!(
        record["candidates"][0]["inflight"].as_u64(),
        Some(3),
        "{record}"
    );
}
