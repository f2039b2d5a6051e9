//! The timed replay end to end: snapshots on small fixtures, determinism, the hot spot on
//! the real Mooncake conversation trace, arrivals and parents, and its input errors.

mod support;

use std::path::Path;

use routerlab_engine::EngineConfig;
use routerlab_host::SearchPath;
use routerlab_sim::Report;
use routerlab_sim::observer::NoObserver;
use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::{Arrivals, TimedSettings};
use support::*;

fn small_engine() -> EngineConfig {
    EngineConfig {
        num_gpu_blocks: 400,
        engine_block_size: 64,
        max_num_seqs: 16,
        max_num_batched_tokens: 2048,
        step_time: EngineConfig::dynamo().step_time,
        kv_bytes_per_token: None,
        host_tier: None,
        shared_tier: None,
        scheduler: Default::default(),
        prefix_caching: true,
        max_paddings: None,
        lora: None,
        speculative: None,
        async_scheduling: false,
    }
}

fn timed(
    trace: &Path,
    matcher: &str,
    detector: Option<(&str, &str)>,
    arrivals: Arrivals,
) -> Report {
    let mut scenario = Scenario {
        endpoints: vec!["a:8000".into(), "b:8000".into(), "c:8000".into()],
        ..Scenario::new(matcher, trace)
    };
    if let Some((name, config)) = detector {
        scenario = scenario.detector(name, config).expect("detector config");
    }
    let scenario = scenario.timed(TimedSettings {
        arrivals,
        default_output_tokens: 64,
        ..TimedSettings::at_trace_times(vec![small_engine(); 3])
    });
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

#[test]
fn timed_lcp_mooncake() {
    let trace = project_trace("mooncake-small.jsonl");
    let speedup = Arrivals::Trace { speedup: 4.0 };
    insta::assert_yaml_snapshot!("timed-lcp@mooncake", timed(&trace, "lcp", None, speedup));
}

#[test]
fn timed_lcp_max_kv_cache_mooncake() {
    let trace = project_trace("mooncake-small.jsonl");
    let speedup = Arrivals::Trace { speedup: 4.0 };
    let detector = Some(("max-kv-cache", "max_usage: 0.5"));
    insta::assert_yaml_snapshot!(
        "timed-lcp+max-kv-cache@mooncake",
        timed(&trace, "lcp", detector, speedup)
    );
}

#[test]
fn timed_round_robin_mooncake() {
    let trace = project_trace("mooncake-small.jsonl");
    let speedup = Arrivals::Trace { speedup: 4.0 };
    insta::assert_yaml_snapshot!(
        "timed-round-robin@mooncake",
        timed(&trace, "round-robin", None, speedup)
    );
}

#[test]
fn timed_lcp_chat_poisson() {
    let chat = project_trace("chat.jsonl");
    insta::assert_yaml_snapshot!(
        "timed-lcp@chat-poisson",
        timed(&chat, "lcp", None, Arrivals::Poisson { rate: 20.0 })
    );
}

#[test]
fn same_inputs_give_byte_identical_timed_reports() {
    let chat = project_trace("chat.jsonl");
    let run = |seed: &str| {
        Replay::new("lcp", &chat)
            .args(&["--timing", "trace", "--rate", "30", "--seed", seed])
            .args(&[
                "--engine-config",
                "{num_gpu_blocks: 2000}",
                "--format",
                "yaml",
            ])
            .stdout()
    };
    let first = run("4");
    assert_eq!(first, run("4"));
    assert_ne!(first, run("5"), "the seed drives the Poisson arrivals");
    let text = String::from_utf8(first).unwrap();
    for key in [
        "timed:",
        "ttft:",
        "tpot:",
        "e2e:",
        "queue:",
        "throughput:",
        "makespan_s:",
        "per_endpoint:",
        "preemptions:",
    ] {
        assert!(text.contains(key), "{key} missing: {text}");
    }
}

#[test]
fn the_conversation_trace_shows_the_hot_spot_and_detectors_relieve_it() {
    let trace = project_trace("mooncake-conversation.jsonl");
    let fleet = |matcher: &str| Replay::new(matcher, &trace).args(&["--endpoints", "8"]);
    let timed = |replay: Replay| replay.args(&["--timing", "trace"]).report();
    let p99 = |r: &serde_json::Value| r["timed"]["ttft"]["p99"].as_f64().unwrap();
    let lcp = timed(fleet("lcp"));
    let rr = timed(fleet("round-robin"));
    let kv = timed(fleet("lcp").args(&["--detector", "max-kv-cache"]));
    let busy = timed(fleet("lcp").args(&[
        "--detector",
        "num-requests",
        "--detector-config",
        "max_running: 32",
    ]));
    // One endpoint takes everything, and its tail latency explodes.
    assert!(
        lcp["nreq"]["max_over_mean"].as_f64().unwrap() > 7.9,
        "{}",
        lcp["nreq"]
    );
    assert!(
        p99(&lcp) > 10.0 * p99(&rr),
        "lcp {} vs round-robin {}",
        p99(&lcp),
        p99(&rr)
    );
    // Detectors spread the load and cut the tail.
    for relieved in [&kv, &busy] {
        assert!(
            relieved["nreq"]["max_over_mean"].as_f64().unwrap() < 7.0,
            "{}",
            relieved["nreq"]
        );
        assert!(
            p99(relieved) < p99(&lcp) / 10.0,
            "{} vs {}",
            p99(relieved),
            p99(&lcp)
        );
    }
    // Finite caches under load reuse less than the time-free, infinite-cache replay.
    let free = fleet("lcp").args(&["--timing", "off"]).report();
    assert!(lcp["timed"]["hit_ratio"].as_f64().unwrap() < free["hit_ratio"].as_f64().unwrap());
}

#[test]
fn requests_out_and_respect_parents() {
    let out = scratch_file("requests.jsonl", b"");
    let chat = project_trace("chat.jsonl");
    Replay::new("round-robin", &chat)
        .args(&["--timing", "trace", "--rate", "50", "--respect-parents"])
        .args(&[
            "--think-time-s",
            "1.5",
            "--requests-out",
            out.to_str().unwrap(),
        ])
        .report();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2200);
    let by_line: std::collections::HashMap<u64, &serde_json::Value> = lines
        .iter()
        .map(|l| (l["line"].as_u64().unwrap(), l))
        .collect();
    // Every continuation arrives at least 1.5 s after its parent finished.
    let trace = std::fs::read_to_string(&chat).unwrap();
    let mut checked = 0;
    for (i, text) in trace.lines().enumerate() {
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        if let Some(parent) = value.get("parent").and_then(|p| p.as_u64()) {
            let child = by_line[&(i as u64 + 1)];
            let parent = by_line[&(parent + 1)];
            let gap = child["arrival_s"].as_f64().unwrap() - parent["finish_s"].as_f64().unwrap();
            assert!(
                gap >= 1.5 - 1e-6,
                "line {}: arrived {gap} s after its parent finished",
                i + 1
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 447);
    for key in [
        "arrival_s",
        "endpoint",
        "hit_tokens",
        "queue_ms",
        "ttft_ms",
        "finish_s",
    ] {
        assert!(lines[0].get(key).is_some(), "{key}");
    }
}

#[test]
fn closed_loop_of_one_never_queues() {
    let trace = project_trace("mooncake-small.jsonl");
    let report = Replay::new("lcp", &trace)
        .args(&["--timing", "trace", "--concurrency", "1"])
        .report();
    assert_eq!(report["timed"]["queue"]["max"], 0.0);
    assert_eq!(report["requests"], 300);
}

#[test]
fn stale_metrics_change_decisions() {
    let trace = project_trace("mooncake-small.jsonl");
    let run = |interval: &str| -> serde_json::Value {
        Replay::new("lcp", &trace)
            .args(&[
                "--detector",
                "num-requests",
                "--detector-config",
                "max_running: 2",
            ])
            .args(&["--timing", "trace", "--speedup", "20", "--endpoints", "3"])
            .args(&["--metrics-interval-ms", interval])
            .report()
    };
    let live = run("0");
    let stale = run("30000");
    assert_ne!(live["nreq"], stale["nreq"]);
    assert_eq!(live["requests"], 300);
    assert_eq!(stale["requests"], 300);
}

#[test]
fn timed_input_errors() {
    let chat = project_trace("chat.jsonl");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--rate", "5"],
            "error: --rate (an engine, arrival or latency setting) needs the timed replay: add --timing trace",
        ),
        (
            &["--timing", "trace"],
            "chat.jsonl:1: the trace has no arrival times; pass --rate R (Poisson) or --concurrency N (closed loop)",
        ),
        (
            &["--timing", "trace", "--rate", "5", "--concurrency", "2"],
            "error: give at most one of --speedup, --rate and --concurrency",
        ),
        (
            &["--timing", "trace", "--rate", "0"],
            "error: --rate must be a positive number",
        ),
        (
            &[
                "--timing",
                "trace",
                "--rate",
                "5",
                "--engine-config",
                "{max_num_seqs: 0}",
            ],
            "error: endpoint `localhost:8000`: engine `max_num_seqs` must be at least 1",
        ),
    ];
    for (extra, expected) in cases {
        let output = Replay::new("lcp", &chat).args(extra).run();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    let output = Replay::new("lcp", &chat)
        .args(&["--timing", "trace", "--rate", "5"])
        .args(&["--engine-config", "{num_gpu_blokcs: 10}"])
        .run();
    assert!(
        texts(&output).1.contains("unknown field `num_gpu_blokcs`"),
        "{}",
        texts(&output).1
    );
}

#[test]
fn on_complete_reaches_the_matcher() {
    // A matcher that counts outstanding requests itself (+1 on update, -1 on on_complete).
    // In a closed loop of one, every request arrives after the previous one finished: if
    // on_complete arrives, nothing is ever outstanding and every request goes to the first
    // endpoint; without it, the requests would alternate.
    let spec = fixture_plugin("least-outstanding");
    let trace = project_trace("mooncake-small.jsonl");
    let closed_loop = |concurrency: &str| {
        Replay::new(&spec, &trace)
            .args(&["--timing", "trace", "--concurrency", concurrency])
            .args(&["--endpoints", "2"])
            .report()
    };
    let report = closed_loop("1");
    assert_eq!(report["nreq"]["counts"], serde_json::json!([300, 0]));
    // With two outstanding at a time, both endpoints are used.
    let report = closed_loop("2");
    let counts = report["nreq"]["counts"].as_array().unwrap();
    assert!(
        counts.iter().all(|c| c.as_u64().unwrap() > 100),
        "{counts:?}"
    );
}

/// Property: for any settings, the same inputs give byte-identical reports. Settings are
/// drawn from a seeded generator; each draw is replayed twice.
#[test]
fn any_settings_replay_byte_identically() {
    let mut rng = routerlab_core::SeededRng::new(2026);
    let traces = [
        project_trace("mooncake-small.jsonl"),
        project_trace("chat.jsonl"),
    ];
    for _ in 0..6 {
        let trace = &traces[rng.below(2) as usize];
        let matcher = ["lcp", "simhash", "round-robin"][rng.below(3) as usize];
        let endpoints = (1 + rng.below(5)).to_string();
        let blocks = (200 + rng.below(4000)).to_string();
        let seqs = (1 + rng.below(64)).to_string();
        let engine =
            format!("{{num_gpu_blocks: {blocks}, max_num_seqs: {seqs}, engine_block_size: 16}}");
        let rate = (1 + rng.below(100)).to_string();
        let interval = ["0", "250"][rng.below(2) as usize];
        let replay = Replay::new(matcher, trace)
            .args(&[
                "--timing",
                "trace",
                "--rate",
                &rate,
                "--endpoints",
                &endpoints,
            ])
            .args(&[
                "--engine-config",
                &engine,
                "--metrics-interval-ms",
                interval,
            ])
            .args(&["--detector", "max-kv-cache", "--format", "yaml"]);
        assert_eq!(
            replay.stdout(),
            replay.stdout(),
            "{matcher} {engine} {rate}"
        );
    }
}

#[test]
fn engines_can_differ_per_endpoint() {
    let yaml = format!(
        "matcher: round-robin\ntrace: {}\ntiming: trace\nendpoints: [big, small]\nformat: json\n\
         engine: {{preset: dynamo}}\nengines:\n  - {{}}\n  - {{num_gpu_blocks: 300, max_num_seqs: 4}}\n",
        project_trace("mooncake-small.jsonl").display()
    );
    let path = scratch_file("fleet.yaml", yaml.as_bytes());
    let output = routerlab(&["replay", "--config", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", texts(&output).1);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let per = &report["timed"]["per_endpoint"];
    assert_eq!(per[0]["name"], "big");
    // The small engine fills its cache and evicts; the big one never needs to.
    assert!(per[1]["evictions"].as_u64().unwrap() > 0, "{per}");
    assert_eq!(per[0]["evictions"], 0, "{per}");
    let bad = scratch_file("bad-fleet.yaml", yaml.replace("  - {}\n", "").as_bytes());
    let output = routerlab(&["replay", "--config", bad.to_str().unwrap()]);
    assert!(
        texts(&output)
            .1
            .contains("experiment `engines`: 1 entries for 2 endpoints"),
        "{}",
        texts(&output).1
    );
}

#[test]
fn requests_larger_than_a_whole_kv_cache_are_rejected_not_lost() {
    // 40 blocks of 64 tokens hold 2,560 tokens: most fixture requests cannot ever run.
    let trace = project_trace("mooncake-small.jsonl");
    let report = Replay::new("lcp", &trace)
        .args(&[
            "--timing",
            "trace",
            "--engine-config",
            "{num_gpu_blocks: 40}",
        ])
        .args(&["--endpoints", "2"])
        .report();
    let too_long = report["timed"]["too_long"].as_u64().unwrap();
    assert!(too_long > 0);
    assert_eq!(report["rejected"].as_u64().unwrap(), too_long);
    let finished: u64 = report["nreq"]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(finished + too_long, 300, "every request is accounted for");
}

/// The ABI 1.2 signals (decision time, first tokens, router-local in-flight counts, cached
/// prefixes) agree with what a plugin can work out itself: the `contract-1-2` fixture
/// fails the run on the first disagreement.
#[test]
fn abi_one_two_signals_keep_their_contract() {
    let contract = fixture_plugin("contract-1-2");
    for trace in ["chat.jsonl", "mooncake-small.jsonl"] {
        let report = Replay::new(&contract, &project_trace(trace))
            .args(&[
                "--matcher-config",
                "{unbounded_cache: 1}",
                "--endpoints",
                "3",
            ])
            .report();
        assert_eq!(report["rejected"], 0, "{trace}");
    }
    // Timed, with stale metrics and a detector that makes requests wait at the router, so
    // decisions happen after arrival and engine statuses lag the router's own counts.
    // The default engine preset's blocks are 64 tokens.
    let report = Replay::new(&contract, &project_trace("mooncake-small.jsonl"))
        .args(&["--matcher-config", "{kv_block_tokens: 64}"])
        .args(&["--timing", "trace", "--speedup", "20", "--endpoints", "3"])
        .args(&["--metrics-interval-ms", "500", "--detector", "num-requests"])
        .args(&["--detector-config", "max_running: 2"])
        .report();
    assert!(report["timed"]["router_queued"].as_u64().unwrap() > 0);
    assert_eq!(report["requests"], 300);
    // Plugins see the block size of the engines the run has, not a constant.
    let report = Replay::new(&contract, &project_trace("mooncake-small.jsonl"))
        .args(&["--matcher-config", "{kv_block_tokens: 16}"])
        .args(&["--timing", "trace", "--speedup", "20", "--endpoints", "3"])
        .args(&["--engine-config", "{engine_block_size: 16}"])
        .report();
    assert_eq!(report["rejected"], 0);
}

/// A closed loop of one on two endpoints: at every moment one endpoint runs one request and
/// the other none, so the spread is 1 − 0 = 1 and the cv (std 0.5 over mean 0.5) is 1.
#[test]
fn running_spread_by_hand() {
    let report = Replay::new("round-robin", &project_trace("mooncake-small.jsonl"))
        .args(&[
            "--timing",
            "trace",
            "--concurrency",
            "1",
            "--endpoints",
            "2",
        ])
        .report();
    assert_eq!(
        report["timed"]["running_spread"],
        serde_json::json!({"max_minus_min": 1.0, "cv": 1.0})
    );
}

/// A warm-up trace replayed first leaves the engines' caches (and the routers' state) as a
/// benchmark's previous load point would: llm-d-benchmark sends the same 252 ShareGPT
/// prompts at each load point, so a point replayed after the one before finds them cached,
/// while the report counts the point alone.
#[test]
fn a_warm_up_leaves_the_caches_and_the_report_counts_the_run_alone() {
    let point =
        support::project_trace("llm-d-benchmark/llm-d-70b-2replicas/LMBench_sharegpt_output_2.csv");
    let dir = std::env::temp_dir().join(format!("routerlab-warm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |warm: Option<&std::path::Path>, out: &str| {
        let out = dir.join(out);
        let mut args = vec!["--timing", "trace", "--endpoints", "2", "-q"];
        args.extend(["--requests-out", out.to_str().unwrap()]);
        if let Some(warm) = warm {
            args.extend(["--warm-up", warm.to_str().unwrap()]);
        }
        let report = Replay::new("lcp", &point).args(&args).report();
        let first_arrival = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["arrival_s"]
                    .as_f64()
                    .unwrap()
            })
            .fold(f64::INFINITY, f64::min);
        (report, first_arrival)
    };
    let (cold, cold_first) = run(None, "cold.jsonl");
    let (warm, warm_first) = run(Some(&point), "warm.jsonl");
    // Nothing repeats inside the point; after itself, every prompt's whole blocks hit.
    assert_eq!(cold["hit_ratio"], 0.0);
    let hit = warm["hit_ratio"].as_f64().unwrap();
    assert!(hit > 0.95, "{hit}");
    // The point alone: its requests, its makespan, its times from its own start.
    assert_eq!(warm["requests"], cold["requests"]);
    let makespan = |r: &serde_json::Value| r["timed"]["makespan_s"].as_f64().unwrap();
    assert!((makespan(&warm) - makespan(&cold)).abs() < 0.5);
    assert_eq!(warm_first, cold_first);
    let ttft = |r: &serde_json::Value| r["timed"]["ttft"]["mean"].as_f64().unwrap();
    assert!(
        ttft(&warm) < ttft(&cold) * 0.8,
        "{} vs {}",
        ttft(&warm),
        ttft(&cold)
    );
    // The same inputs, the same bytes.
    assert_eq!(run(Some(&point), "again.jsonl").0, warm);
    // Only a timed replay warms anything.
    let output = Replay::new("lcp", &point)
        .args(&["--warm-up", point.to_str().unwrap()])
        .run();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        support::texts(&output).1.contains("--warm-up"),
        "{}",
        support::texts(&output).1
    );
    let _ = std::fs::remove_dir_all(&dir);
}
