//! `routerlab engine`, `serve` and `drive` end to end on this machine: real processes,
//! real sockets, the real plugin libraries.

mod support;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::{project_trace, routerlab, scratch_file, texts};

/// A `routerlab` server process, killed when dropped.
struct Server {
    child: Child,
    /// `host:port` it listens on.
    addr: String,
}

impl Server {
    /// Starts `routerlab ARGS --listen 127.0.0.1:0` and reads the address it prints.
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("ROUTERLAB_PLUGIN_PATH")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start routerlab");
        let mut line = String::new();
        BufReader::new(child.stderr.take().expect("stderr"))
            .read_line(&mut line)
            .expect("a first line");
        let addr = line
            .trim()
            .rsplit_once("http://")
            .map(|(_, addr)| addr.to_owned())
            .unwrap_or_else(|| panic!("{args:?} did not say where it listens: {line}"));
        Server { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first `n` lines of a committed trace, as a scratch file.
fn head(trace: &str, n: usize, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(project_trace(trace)).expect("trace");
    let lines: Vec<&str> = text.lines().take(n).collect();
    scratch_file(name, (lines.join("\n") + "\n").as_bytes())
}

/// `routerlab drive`, requiring success; returns the JSON report.
fn drive(url: &str, trace: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["drive", "--url", url, "--trace"];
    let trace = trace.to_string_lossy();
    args.push(&trace);
    args.extend_from_slice(&["--format", "json"]);
    args.extend_from_slice(extra);
    let output = routerlab(&args);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    serde_json::from_str(&stdout).expect("a JSON report")
}

fn endpoints_of(records: &Path) -> Vec<Option<String>> {
    std::fs::read_to_string(records)
        .expect("records")
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).expect("JSON");
            record["endpoint"].as_str().map(str::to_owned)
        })
        .collect()
}

/// Four simulated engines, `serve --matcher lcp --detector max-kv-cache` in front, 300
/// requests of the Mooncake conversation trace driven through it: every request answered.
#[test]
fn four_engines_a_router_and_a_trace_every_request_answered() {
    let engines: Vec<Server> = (0..4)
        .map(|_| Server::start(&["engine", "--speedup", "200"]))
        .collect();
    let list: Vec<&str> = engines.iter().map(|e| e.addr.as_str()).collect();
    let router = Server::start(&[
        "serve",
        "--endpoints",
        &list.join(","),
        "--matcher",
        "lcp",
        "--detector",
        "max-kv-cache",
        "--block-size",
        "2048",
        "--metrics-interval-ms",
        "100",
    ]);
    let trace = head("mooncake-conversation.jsonl", 300, "live-300.jsonl");
    let report = drive(&router.url(), &trace, &["--concurrency", "16"]);
    assert_eq!(report["requests"], 300);
    assert_eq!(report["rejected"], 0);
    let counts: Vec<u64> = report["nreq"]["counts"]
        .as_array()
        .expect("counts")
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 300);
    assert!(report["timed"]["ttft"]["p50"].as_f64().unwrap() > 0.0);
}

/// What was measured offline is what runs live: with one request at a time and `lcp`
/// alone, every request goes to the endpoint the time-free replay chose for it. On the
/// conversation trace `lcp` sends everything to one endpoint (every request shares its
/// first block); the generated trace with sessions spreads, so the choices are tested too.
#[test]
fn live_decisions_are_the_time_free_replays() {
    let engines: Vec<Server> = (0..4)
        .map(|_| Server::start(&["engine", "--instant"]))
        .collect();
    let list: Vec<&str> = engines.iter().map(|e| e.addr.as_str()).collect();
    let endpoints = list.join(",");
    for (name, spreads) in [
        ("mooncake-conversation.jsonl", false),
        ("mooncake-sessions.jsonl", true),
    ] {
        // A fresh router each time: its matcher starts with nothing learned, as a replay's.
        let router = Server::start(&[
            "serve",
            "--endpoints",
            &endpoints,
            "--matcher",
            "lcp",
            "--block-size",
            "2048",
        ]);
        let trace = head(name, 300, &format!("live-{name}"));
        let live = trace.with_extension("live.jsonl");
        drive(
            &router.url(),
            &trace,
            &[
                "--concurrency",
                "1",
                "--requests-out",
                &live.to_string_lossy(),
            ],
        );
        let offline = trace.with_extension("offline.jsonl");
        let replay = routerlab(&[
            "replay",
            "--matcher",
            "lcp",
            "--trace",
            &trace.to_string_lossy(),
            "--endpoints",
            &endpoints,
            "--requests-out",
            &offline.to_string_lossy(),
            "--quiet",
        ]);
        assert!(replay.status.success(), "{}", texts(&replay).1);
        let (live, offline) = (endpoints_of(&live), endpoints_of(&offline));
        assert_eq!(live.len(), 300, "{name}");
        assert_eq!(live, offline, "{name}");
        let used: std::collections::BTreeSet<_> = live.iter().collect();
        assert_eq!(used.len() > 1, spreads, "{name}: {used:?}");
    }
}
