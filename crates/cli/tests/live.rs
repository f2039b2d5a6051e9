//! `routerlab engine`, `serve` and `drive` end to end on this machine: real processes,
//! real sockets, the real plugin libraries.

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::server::{ROUTERLAB, Server};
use support::{http, project_trace, routerlab, scratch_file, texts};

/// Two engines started with `engine` and a round-robin router in front of them (with
/// `router_args` besides): the engines and the router.
fn two_engines_behind_round_robin(
    engine: &[&str],
    router_args: &[&str],
) -> (Server, Server, Server) {
    let (a, b) = (ROUTERLAB.start(engine), ROUTERLAB.start(engine));
    let endpoints = format!("{},{}", a.addr, b.addr);
    let mut args = vec![
        "serve",
        "--endpoints",
        &endpoints,
        "--matcher",
        "round-robin",
    ];
    args.extend_from_slice(router_args);
    let router = ROUTERLAB.start(&args);
    (a, b, router)
}

/// The value of the metric line starting with `series` on `addr`'s `/metrics`.
fn metric(addr: &str, series: &str) -> f64 {
    let (_, text) = http(addr, "GET", "/metrics", "");
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

/// Polls `check` every 50 ms for up to 5 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("not within 5 s: {what}");
}

const SMALL: &str = r#"{"prompt": "hello there", "max_tokens": 4}"#;

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
        .map(|_| ROUTERLAB.start(&["engine", "--model-speedup", "200"]))
        .collect();
    let list: Vec<&str> = engines.iter().map(|e| e.addr.as_str()).collect();
    let router = ROUTERLAB.start(&[
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
    let report = drive(
        &router.url(),
        &trace,
        &["--concurrency", "16", "--slo-ttft-ms", "1000000"],
    );
    assert_eq!(report["requests"], 300);
    assert_eq!(report["rejected"], 0);
    // Measured requests are judged by the SLO as the replay's are: a TTFT target of
    // 1,000 s, every one of the 300 meets it.
    let slo = &report["timed"]["slo"];
    assert_eq!(
        (&slo["requests"], &slo["met"], &slo["attainment"]),
        (&300.into(), &300.into(), &1.0.into()),
        "{slo}"
    );
    assert!(slo.get("tpot_ms").is_none(), "{slo}");
    let counts: Vec<u64> = report["nreq"]["counts"]
        .as_array()
        .expect("counts")
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 300);
    assert!(report["timed"]["ttft"]["p50"].as_f64().unwrap() > 0.0);
    // Labelled as measured, not simulated; the endpoints in name order, the counts with them.
    assert!(report.get("run").is_none());
    let measured = &report["measured"];
    assert_eq!(measured["url"], router.url());
    assert_eq!(measured["arrivals"]["process"], "closed");
    assert_eq!(measured["arrivals"]["concurrency"], 16);
    assert_eq!(measured["trace"]["format"], "mooncake");
    let named: Vec<&str> = measured["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let mut sorted = named.clone();
    sorted.sort_unstable();
    assert_eq!(named, sorted);
    assert_eq!(named.len(), counts.len());
}

/// What was measured offline is what runs live: with one request at a time and `lcp`
/// alone, every request goes to the endpoint the time-free replay chose for it. On the
/// conversation trace `lcp` sends everything to one endpoint (every request shares its
/// first block); the generated trace with sessions spreads, so the choices are tested too.
#[test]
fn live_decisions_are_the_time_free_replays() {
    let engines: Vec<Server> = (0..4)
        .map(|_| ROUTERLAB.start(&["engine", "--instant"]))
        .collect();
    let list: Vec<&str> = engines.iter().map(|e| e.addr.as_str()).collect();
    let endpoints = list.join(",");
    // With the plugins in process and in a plugin host: the channel carries every field
    // the matcher reads.
    for (name, spreads, isolation) in [
        ("mooncake-conversation.jsonl", false, "in-process"),
        ("mooncake-sessions.jsonl", true, "in-process"),
        ("mooncake-sessions.jsonl", true, "process"),
    ] {
        // A fresh router each time: its matcher starts with nothing learned, as a replay's.
        let router = ROUTERLAB.start(&[
            "serve",
            "--endpoints",
            &endpoints,
            "--matcher",
            "lcp",
            "--block-size",
            "2048",
            "--plugin-isolation",
            isolation,
        ]);
        let trace = head(name, 300, &format!("live-{isolation}-{name}"));
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
        assert_eq!(live.len(), 300, "{name}, {isolation}");
        assert_eq!(live, offline, "{name}, {isolation}");
        let used: std::collections::BTreeSet<_> = live.iter().collect();
        assert_eq!(used.len() > 1, spreads, "{name}: {used:?}");
    }
}

/// An engine dies: requests routed to it are retried on the other one (none lost), the
/// router takes it out of the fleet, and puts it back when it answers again.
#[test]
fn a_dead_engine_is_retried_around_removed_and_readded() {
    let (a, b, router) =
        two_engines_behind_round_robin(&["engine", "--instant"], &["--metrics-interval-ms", "100"]);
    let b_addr = b.addr.clone();
    let up = |addr: &str| {
        metric(
            &router.addr,
            &format!("routerlab_endpoint_up{{endpoint=\"{addr}\"}}"),
        )
    };
    eventually("both engines in the fleet", || {
        up(&a.addr) == 1.0 && up(&b_addr) == 1.0
    });
    drop(b);
    // Right after the kill the router still offers b: those requests are refused there
    // and go to a.
    for _ in 0..10 {
        let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
        assert_eq!(status, 200, "{body}");
    }
    eventually("b taken out", || up(&b_addr) == 0.0);
    let trace = head("mooncake-sessions.jsonl", 40, "live-dead.jsonl");
    let report = drive(&router.url(), &trace, &["--concurrency", "4"]);
    assert_eq!(report["rejected"], 0);
    let _b_again = ROUTERLAB.start_on(&["engine", "--instant"], &b_addr);
    eventually("b back", || up(&b_addr) == 1.0);
    let before = metric(
        &router.addr,
        &format!("routerlab_requests_total{{endpoint=\"{b_addr}\"}}"),
    );
    let report = drive(&router.url(), &trace, &["--concurrency", "4"]);
    assert_eq!(report["rejected"], 0);
    let after = metric(
        &router.addr,
        &format!("routerlab_requests_total{{endpoint=\"{b_addr}\"}}"),
    );
    assert!(after > before, "no request went to b after it came back");
}

/// A plugin that panics: its request gets a 503 naming the plugin and the panic, the
/// router stays up, and with `--on-plugin-error round-robin` requests still get through.
#[test]
fn a_panicking_plugin_gets_503s_and_the_router_stays_up() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let fixture = support::fixture_plugin("panic-on-match");
    let reject = ROUTERLAB.start(&["serve", "--endpoints", &engine.addr, "--matcher", &fixture]);
    let (first, _) = http(&reject.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(first, 200);
    let (status, body) = http(&reject.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("panic-on-match") && body.contains("boom"),
        "{body}"
    );
    let (status, body) = http(&reject.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 503, "{body}");
    assert_eq!(http(&reject.addr, "GET", "/health", "").0, 200);
    let fallback = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        &fixture,
        "--on-plugin-error",
        "round-robin",
    ]);
    for _ in 0..3 {
        let (status, body) = http(&fallback.addr, "POST", "/v1/completions", SMALL);
        assert_eq!(status, 200, "{body}");
    }
    assert!(
        metric(
            &fallback.addr,
            "routerlab_plugin_errors_total{matcher=\"panic-on-match\"}"
        ) >= 2.0
    );
}

/// A client that goes away mid-stream: the router cancels the upstream request (the
/// engine sees its stream's reader gone) and the request leaves the router's books.
#[test]
fn a_client_disconnect_cancels_the_upstream_request() {
    use std::io::{Read as _, Write as _};
    let engine = ROUTERLAB.start(&["engine"]);
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        "round-robin",
    ]);
    let body = r#"{"prompt": "tell me a long story", "max_tokens": 100000, "stream": true}"#;
    let mut stream = std::net::TcpStream::connect(&router.addr).expect("connect");
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let n = stream.read(&mut buffer).expect("read");
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buffer[..n]);
    }
    let inflight = format!(
        "routerlab_inflight_requests{{endpoint=\"{}\"}}",
        engine.addr
    );
    assert_eq!(metric(&router.addr, &inflight), 1.0);
    drop(stream);
    eventually("the router's books cleared", || {
        metric(&router.addr, &inflight) == 0.0
    });
    eventually("the engine's stream cancelled", || {
        metric(
            &engine.addr,
            "routerlab:cancelled_streams_total{model_name=\"routerlab-sim\"}",
        ) == 1.0
    });
}

/// The policy can come from a replay experiment file, as for `replay`; with none at all,
/// `serve` says so and exits 2.
#[test]
fn serve_takes_its_policy_from_an_experiment_file() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let config = scratch_file(
        "live-experiment.yaml",
        b"matcher: round-robin\nblock_size: 64\nseed: 3\n",
    );
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--config",
        &config.to_string_lossy(),
    ]);
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 200, "{body}");
    let output = routerlab(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--listen",
        "127.0.0.1:0",
    ]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no matcher"), "{stderr}");
}

/// `serve --config` reads the same file as `replay`: its engine keys reach serve's engine
/// model (a bad one is refused as replay refuses it), and a key serve cannot honour is
/// refused by name rather than ignored.
#[test]
fn serve_honours_the_experiment_file_or_refuses_a_key_by_name() {
    for (text, why) in [
        (
            "matcher: sim-latency\nendpoints: [127.0.0.1:9]\nengine: {max_num_seqs: 0}\n",
            "--engine-config: engine `max_num_seqs` must be at least 1",
        ),
        (
            "matcher: lcp\nendpoints: [127.0.0.1:9]\ntrace: t.jsonl\nrouter_hop_ms: 5\n",
            "`router_hop_ms` is a replay setting that serve cannot honour",
        ),
        (
            "matcher: lcp\nendpoints: 4\n",
            "serve routes to engines by address: give host:port names, not a count",
        ),
    ] {
        let config = scratch_file("serve-refused.yaml", text.as_bytes());
        let output = routerlab(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &config.to_string_lossy(),
        ]);
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{text}: {stderr}");
        assert!(stderr.contains(why), "{text}: {stderr}");
    }
}

/// An engine killed while requests run on it: those requests (not yet answered: whole
/// answers, `--no-stream`) are retried on the other engine, and none is lost.
#[test]
fn requests_on_an_engine_killed_mid_run_are_retried_elsewhere() {
    let (_a, b, router) = two_engines_behind_round_robin(&["engine", "--model-speedup", "50"], &[]);
    let b_addr = b.addr.clone();
    let trace = head("mooncake-sessions.jsonl", 60, "live-killed.jsonl");
    let url = router.url();
    let run =
        std::thread::spawn(move || drive(&url, &trace, &["--concurrency", "8", "--no-stream"]));
    let in_flight = format!("routerlab_inflight_requests{{endpoint=\"{b_addr}\"}}");
    eventually("requests running on b", || {
        metric(&router.addr, &in_flight) >= 2.0
    });
    drop(b);
    let report = run.join().expect("the drive");
    assert_eq!(report["requests"], 60);
    assert_eq!(report["rejected"], 0);
    let retries = format!("routerlab_retries_total{{endpoint=\"{b_addr}\"}}");
    assert!(metric(&router.addr, &retries) >= 2.0);
}

/// CPU seconds (user + system) the process `pid` has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the command name in parentheses: utime and stime are the 12th and 13th.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // Clock ticks per second: 100 on Linux (USER_HZ).
    ticks / 100.0
}

/// `serve` allowed 32 descriptors, and 64 idle connections to it: more than it can take,
/// so once out of descriptors every further accept fails with EMFILE while the
/// connections wait in the backlog.
fn out_of_descriptors() -> (Server, Vec<std::net::TcpStream>) {
    let router = ROUTERLAB.start_with_file_limit(
        &[
            "serve",
            "--matcher",
            "round-robin",
            "--endpoints",
            "127.0.0.1:9",
        ],
        32,
    );
    let holders: Vec<std::net::TcpStream> = (0..64)
        .filter_map(|_| std::net::TcpStream::connect(&router.addr).ok())
        .collect();
    assert!(holders.len() > 32, "{} connections", holders.len());
    (router, holders)
}

#[test]
fn a_router_out_of_file_descriptors_waits_instead_of_spinning() {
    let (router, holders) = out_of_descriptors();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let before = cpu_seconds(router.pid());
    std::thread::sleep(std::time::Duration::from_secs(2));
    let used = cpu_seconds(router.pid()) - before;
    // A loop that retried at once would burn the whole 2 s of a core.
    assert!(
        used < 0.5,
        "the router used {used} s of CPU in 2 s while out of descriptors"
    );
    drop(holders);
}

#[test]
fn endpoints_the_router_could_never_reach_are_refused_at_start() {
    for (bad, why) in [
        (
            "a b:80",
            "is not host:port (no path, query, fragment, user or spaces)",
        ),
        (
            "https://engine:8000",
            "only plain http:// engines can be served, not https://",
        ),
        ("engine:0", "port 0 is no engine's port"),
        ("engine:8000/v1", "is not host:port"),
        ("engine:8000?x=1", "is not host:port"),
        ("engine:8000#top", "is not host:port"),
        ("user@engine:8000", "is not host:port"),
        ("engine:80000", "`80000` is not a port"),
        ("[not-v6]:80", "`[not-v6]` is not a host name or address"),
    ] {
        // A server that started anyway would never exit: give it five seconds.
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args([
                "serve",
                "--matcher",
                "round-robin",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--endpoints", &format!("127.0.0.1:9,{bad}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > std::time::Duration::from_secs(5) {
                let _ = child.kill();
                panic!("`{bad}`: serve started with an endpoint it can never use");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(2), "`{bad}`: {stderr}");
        assert!(
            stderr.contains(&format!("--endpoints: `{bad}`: {why}")),
            "`{bad}`: {stderr}"
        );
    }
    // What can be reached is kept as host:port.
    let router = ROUTERLAB.start(&[
        "serve",
        "--matcher",
        "round-robin",
        "--endpoints",
        "http://127.0.0.1:9/,[::1]:9",
    ]);
    assert_eq!(
        metric(
            &router.addr,
            "routerlab_endpoint_up{endpoint=\"127.0.0.1:9\"}"
        ),
        1.0
    );
}

#[test]
fn an_engine_model_serve_cannot_forecast_with_is_refused_at_start() {
    for (bad, why) in [
        (
            "{max_num_seqs: 0}",
            "--engine-config: engine `max_num_seqs` must be at least 1",
        ),
        ("{bogus: 1}", "--engine-config: unknown field `bogus`"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_routerlab"))
            .args([
                "serve",
                "--matcher",
                "sim-latency",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--endpoints", "127.0.0.1:9", "--engine-config", bad])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "`{bad}`: {stderr}");
        assert!(stderr.contains(why), "`{bad}`: {stderr}");
        assert!(!stderr.contains("listening"), "`{bad}`: {stderr}");
    }
}

/// A hostile engine on a free port: `/metrics` answers as a healthy vLLM would, and every
/// completion gets `answer` (raw HTTP, written as is, then the connection closed).
fn hostile_engine(answer: &'static str) -> String {
    recording_engine(answer).0
}

/// [`hostile_engine`], and the bodies of the completions it was sent.
fn recording_engine(answer: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    use std::io::Write as _;
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let recorded = bodies.clone();
    let addr = fake_engine(move |body, mut stream| {
        recorded
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(body).into_owned());
        let _ = stream.write_all(answer.as_bytes());
    });
    (addr, bodies)
}

/// An engine on a free port, a thread a connection: `/metrics` answers as a healthy vLLM's
/// would, and every other request's body is handed to `complete` with the connection.
fn fake_engine(complete: impl Fn(&[u8], &std::net::TcpStream) + Send + Sync + 'static) -> String {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let complete = Arc::new(complete);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let complete = complete.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(&stream);
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    return;
                }
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                    if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut body);
                if request_line.starts_with("GET /metrics") {
                    let metrics = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n";
                    let _ = (&stream).write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{metrics}",
                            metrics.len()
                        )
                        .as_bytes(),
                    );
                } else {
                    complete(&body, &stream);
                }
            });
        }
    });
    addr
}

#[test]
fn drive_asks_for_a_requests_adapter_by_its_name_as_the_model() {
    const ANSWER: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 29\r\nconnection: close\r\n\r\n{\"choices\": [{\"text\": \"ok\"}]}";
    let (engine, bodies) = recording_engine(ANSWER);
    let trace = scratch_file(
        "adapters.jsonl",
        b"{\"prompt\": \"a\", \"adapter\": \"sql-lora\"}\n{\"prompt\": \"b\"}\n",
    );
    drive(
        &format!("http://{engine}"),
        &trace,
        &["--concurrency", "1", "--no-stream", "--model", "base"],
    );
    let mut models: Vec<String> = bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| serde_json::from_str::<serde_json::Value>(b).unwrap()["model"].to_string())
        .collect();
    models.sort();
    assert_eq!(models, ["\"base\"", "\"sql-lora\""]);
}

#[test]
fn an_engine_that_fails_its_answers_leaves_though_its_metrics_look_fine() {
    let bad = hostile_engine(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\nconnection: close\r\n\r\nno",
    );
    let good = ROUTERLAB.start(&["engine", "--instant"]);
    let endpoints = format!("{bad},{}", good.addr);
    let router = ROUTERLAB.start(&[
        "serve",
        "--matcher",
        "round-robin",
        "--endpoints",
        &endpoints,
        "--unhealthy-after",
        "2",
        "--metrics-interval-ms",
        "100",
    ]);
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(http(&router.addr, "POST", "/v1/completions", SMALL).0);
    }
    let failures = statuses.iter().filter(|s| **s == 500).count();
    assert_eq!(
        failures, 2,
        "two 500s take it out, then only the good engine answers: {statuses:?}"
    );
    assert_eq!(
        metric(
            &router.addr,
            &format!("routerlab_endpoint_up{{endpoint=\"{bad}\"}}")
        ),
        0.0
    );
}

#[test]
fn a_whole_answer_the_engine_breaks_off_is_a_502_not_a_200() {
    // Promises 100 bytes, sends 12, hangs up.
    let broken = hostile_engine(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{\"choices\":",
    );
    let router = ROUTERLAB.start(&[
        "serve",
        "--matcher",
        "round-robin",
        "--endpoints",
        &broken,
        "--unhealthy-after",
        "3",
    ]);
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("the answer broke off"), "{body}");
    assert_eq!(
        metric(
            &router.addr,
            &format!("routerlab_errors_total{{endpoint=\"{broken}\"}}")
        ),
        1.0
    );
}

/// `serve` in process in front of `engine`, its matcher the `hang-on-match` fixture that
/// never returns from the second request's `match` (`extra` flags besides).
fn hanging_from_the_second_request(engine: &Server, extra: &[&str]) -> Server {
    let fixture = support::fixture_plugin("hang-on-match");
    let mut args = vec![
        "serve",
        "--matcher",
        &fixture,
        "--matcher-config",
        "{hang_from: 2}",
        "--endpoints",
        &engine.addr,
    ];
    args.extend_from_slice(extra);
    ROUTERLAB.start(&args)
}

#[test]
fn a_plugin_call_that_hangs_leaves_health_and_metrics_answering() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let router = hanging_from_the_second_request(&engine, &[]);
    assert_eq!(http(&router.addr, "POST", "/v1/completions", SMALL).0, 200);
    let before = metric(
        &router.addr,
        &format!("routerlab_requests_total{{endpoint=\"{}\"}}", engine.addr),
    );
    assert_eq!(before, 1.0);
    // The second request's `match` never returns: it holds the plugins' lock for ever.
    let addr = router.addr.clone();
    std::thread::spawn(move || http(&addr, "POST", "/v1/completions", SMALL));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let (status, body) = http(&router.addr, "GET", "/health", "");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("a plugin call is stuck"), "{body}");
    // The figures of the last scrape, as they were.
    assert_eq!(
        metric(
            &router.addr,
            &format!("routerlab_requests_total{{endpoint=\"{}\"}}", engine.addr)
        ),
        1.0
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "answered in {:?}",
        started.elapsed()
    );
}

/// A hung in-process plugin costs its request the deadline and no more: that request is
/// answered as `--on-plugin-error` says once `--plugin-timeout-ms` has passed, the next ones
/// at once while the call stays stuck, and `/health` names the stuck call while `/health`
/// and `/metrics` go on answering.
#[test]
fn a_hung_in_process_plugin_costs_a_request_its_deadline_and_no_more() {
    use std::time::{Duration, Instant};
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let router = hanging_from_the_second_request(
        &engine,
        &[
            "--plugin-timeout-ms",
            "1500",
            "--on-plugin-error",
            "round-robin",
        ],
    );
    assert_eq!(http(&router.addr, "POST", "/v1/completions", SMALL).0, 200);
    // The second request's `match` never returns.
    let started = Instant::now();
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    let took = started.elapsed();
    assert_eq!(
        status, 200,
        "routed round robin once the deadline passed: {body}"
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(6500),
        "answered after {took:?}"
    );
    // The plugin is stuck: the next request does not wait for it.
    let started = Instant::now();
    assert_eq!(http(&router.addr, "POST", "/v1/completions", SMALL).0, 200);
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    let (status, body) = http(&router.addr, "GET", "/health", "");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("a plugin call is stuck: `hang-on-match` has not returned from `decide`"),
        "{body}"
    );
    let (_, text) = http(&router.addr, "GET", "/metrics", "");
    let errors = text
        .lines()
        .find(|l| l.starts_with("routerlab_plugin_errors_total{"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    // Each of the two requests: `decide` failed (past the deadline, then stuck), and so did
    // telling the matcher where it went.
    assert_eq!(errors, Some(4.0), "{text}");
    assert_eq!(
        metric(
            &router.addr,
            &format!("routerlab_requests_total{{endpoint=\"{}\"}}", engine.addr)
        ),
        3.0
    );
}

/// Whether `series` on `addr`'s `/metrics` reads `value`.
fn metric_is(addr: &str, series: &str, value: f64) -> bool {
    metric(addr, series) == value
}

/// `serve --plugin-isolation process` in front of one engine with the `crash.c` fixture
/// `plugin` as its matcher (`extra` flags besides).
fn isolated(engine: &Server, library: &Path, plugin: &str, extra: &[&str]) -> Server {
    let matcher = format!("{}#{plugin}", library.display());
    let mut args = vec![
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        &matcher,
        "--plugin-isolation",
        "process",
    ];
    args.extend_from_slice(extra);
    ROUTERLAB.start(&args)
}

/// A C plugin that aborts the process on the third request, run in a plugin host: that
/// request follows `--on-plugin-error` (a 503 naming the crash, or round robin), the
/// router keeps answering, the host is restarted, the crash is counted and logged with
/// the plugin and the call, and the restarted host routes again.
#[test]
fn an_aborting_plugin_in_a_plugin_host_only_restarts_the_host() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let library = support::crash_fixture("isolated");
    let reject = isolated(&engine, &library, "abort", &[]);
    for _ in 0..2 {
        assert_eq!(http(&reject.addr, "POST", "/v1/completions", SMALL).0, 200);
    }
    let (status, body) = http(&reject.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("the plugin host crashed during `decide`: killed by signal 6 (SIGABRT)"),
        "{body}"
    );
    assert_eq!(http(&reject.addr, "GET", "/health", "").0, 200);
    eventually("the host restarted", || {
        metric_is(&reject.addr, "routerlab_plugin_host_restarts_total", 1.0)
    });
    let errors = "routerlab_plugin_errors_total{matcher=\"abort\"}";
    let errors_after_restart = metric(&reject.addr, errors);
    for _ in 0..3 {
        let (status, body) = http(&reject.addr, "POST", "/v1/completions", SMALL);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(metric(&reject.addr, errors), errors_after_restart);
    assert_eq!(
        metric(&reject.addr, "routerlab_plugin_host_crashes_total"),
        1.0
    );
    let log = reject.stderr();
    assert!(
        log.contains("in plugin `abort` during `match`: the plugin crashed the process")
            && log.contains(
                "routerlab serve: the plugin host crashed during `decide`: killed by signal 6 (SIGABRT); restarting it (matcher `abort`)"
            ),
        "{log}"
    );
    // With round robin, the crashing request is answered too.
    let fallback = isolated(
        &engine,
        &library,
        "segv",
        &["--on-plugin-error", "round-robin"],
    );
    for _ in 0..6 {
        let (status, body) = http(&fallback.addr, "POST", "/v1/completions", SMALL);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        metric(&fallback.addr, "routerlab_plugin_host_crashes_total"),
        1.0
    );
    let _ = std::fs::remove_file(&library);
}

/// A plugin call that never returns, in a plugin host with a 200 ms deadline: the host is
/// killed at the deadline and restarted, the request is answered as `--on-plugin-error`
/// says instead of waiting, and the missed deadline is counted.
#[test]
fn a_plugin_host_that_misses_the_deadline_is_killed_and_restarted() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let fixture = support::fixture_plugin("hang-on-match");
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        &fixture,
        "--matcher-config",
        "{hang_from: 2}",
        "--plugin-isolation",
        "process",
        "--plugin-timeout-ms",
        "200",
    ]);
    assert_eq!(http(&router.addr, "POST", "/v1/completions", SMALL).0, 200);
    let started = std::time::Instant::now();
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("did not answer `decide` within 200 ms and was killed"),
        "{body}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "answered in {:?}",
        started.elapsed()
    );
    assert_eq!(
        metric(&router.addr, "routerlab_plugin_host_missed_deadlines_total"),
        1.0
    );
    eventually("the host restarted", || {
        metric_is(&router.addr, "routerlab_plugin_host_restarts_total", 1.0)
    });
    assert_eq!(http(&router.addr, "GET", "/health", "").0, 200);
}

/// The process ids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc") {
        let path = task.expect("task").path().join("children");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        found.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    found
}

/// A plugin host stuck in a call does not outlive its router: killed with it.
#[test]
fn a_stuck_plugin_host_dies_with_its_router() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let fixture = support::fixture_plugin("hang-on-match");
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        &fixture,
        "--plugin-isolation",
        "process",
        "--plugin-timeout-ms",
        "600000",
    ]);
    let hosts = children(router.pid());
    assert_eq!(hosts.len(), 1, "one plugin host: {hosts:?}");
    let addr = router.addr.clone();
    std::thread::spawn(move || http(&addr, "POST", "/v1/completions", SMALL));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(Path::new(&format!("/proc/{}", hosts[0])).exists());
    drop(router);
    eventually("the host is gone", || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", hosts[0]));
        // Gone, or a zombie waiting for whoever inherited it.
        stat.map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
    });
}

/// A plugin host whose plugins cannot be loaded stops `serve` before it listens, with the
/// host's own error and exit status 2; the deadline flag needs the host.
#[test]
fn a_plugin_host_that_cannot_load_its_plugins_stops_serve_at_start() {
    let output = routerlab(&[
        "serve",
        "--endpoints",
        "127.0.0.1:9",
        "--matcher",
        "no-such-plugin",
        "--plugin-isolation",
        "process",
        "--listen",
        "127.0.0.1:0",
    ]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("plugin `no-such-plugin` not found")
            && stderr.contains(
                "the plugin host did not start: it ended before it was ready: exit status 2"
            )
            && !stderr.contains("listening"),
        "{stderr}"
    );
    let output = routerlab(&[
        "serve",
        "--endpoints",
        "127.0.0.1:9",
        "--matcher",
        "lcp",
        "--plugin-timeout-ms",
        "0",
        "--listen",
        "127.0.0.1:0",
    ]);
    let (_, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--plugin-timeout-ms must be at least 1 in serve"),
        "{stderr}"
    );
}

/// A restarted plugin host starts with the whole starting fleet; the router tells it which
/// engines are out. The `abort` fixture picks the first available endpoint and aborts on
/// the third request: with the first engine dead and out of the fleet when the host
/// crashes, the restarted host must not offer it, and it is added back when it returns.
#[test]
fn a_restarted_plugin_host_is_told_which_engines_are_out() {
    let library = support::crash_fixture("resync");
    let matcher = format!("{}#abort", library.display());
    let (first, second) = (
        ROUTERLAB.start(&["engine", "--instant"]),
        ROUTERLAB.start(&["engine", "--instant"]),
    );
    let first_addr = first.addr.clone();
    let endpoints = format!("{first_addr},{}", second.addr);
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &endpoints,
        "--matcher",
        &matcher,
        "--plugin-isolation",
        "process",
        "--metrics-interval-ms",
        "50",
    ]);
    let up = |addr: &str| {
        metric(
            &router.addr,
            &format!("routerlab_endpoint_up{{endpoint=\"{addr}\"}}"),
        )
    };
    let served = |addr: &str| {
        metric(
            &router.addr,
            &format!("routerlab_requests_total{{endpoint=\"{addr}\"}}"),
        )
    };
    drop(first);
    eventually("the first engine taken out", || up(&first_addr) == 0.0);
    for _ in 0..2 {
        assert_eq!(http(&router.addr, "POST", "/v1/completions", SMALL).0, 200);
    }
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 503, "{body}");
    eventually("the host restarted", || {
        metric_is(&router.addr, "routerlab_plugin_host_restarts_total", 1.0)
    });
    for _ in 0..3 {
        let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(served(&second.addr), 5.0);
    // Back, it joins the restarted host's fleet (at its end); with the second engine gone,
    // the host picks it.
    let _back = ROUTERLAB.start_on(&["engine", "--instant"], &first_addr);
    eventually("the first engine back", || up(&first_addr) == 1.0);
    let second_addr = second.addr.clone();
    drop(second);
    eventually("the second engine taken out", || up(&second_addr) == 0.0);
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        served(&first_addr),
        1.0,
        "the restarted host was told it is back"
    );
    let _ = std::fs::remove_file(&library);
}

/// The simulated engine counts the tokens it generates, as vLLM does, with the model and
/// with `--instant` alike.
#[test]
fn the_engine_counts_generated_tokens() {
    for mode in [["--speedup", "100"], ["--instant", "--speedup=1"]] {
        let engine = ROUTERLAB.start(&["engine", mode[0], mode[1]]);
        for _ in 0..3 {
            let (status, body) = http(&engine.addr, "POST", "/v1/completions", SMALL);
            assert_eq!(status, 200, "{body}");
        }
        eventually("12 tokens counted", || {
            metric(
                &engine.addr,
                "vllm:generation_tokens_total{model_name=\"routerlab-sim\"}",
            ) == 12.0
        });
        assert_eq!(
            metric(
                &engine.addr,
                "vllm:request_success_total{model_name=\"routerlab-sim\"}"
            ),
            3.0
        );
    }
}

#[test]
fn an_engine_with_lora_slots_serves_an_adapter_named_as_the_model_after_loading_it() {
    let engine = ROUTERLAB.start(&[
        "engine",
        "--engine-config",
        "{lora: {slots: 1, load_ms: 400}}",
    ]);
    let ask = |model: &str| {
        let body = format!(r#"{{"model": "{model}", "prompt": "hello there", "max_tokens": 1}}"#);
        let started = std::time::Instant::now();
        let (status, answer) = http(&engine.addr, "POST", "/v1/completions", &body);
        assert_eq!(status, 200, "{answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        (
            answer["model"].as_str().unwrap().to_owned(),
            started.elapsed(),
        )
    };
    let (model, cold) = ask("sql-lora");
    assert_eq!(model, "sql-lora", "the answer names the adapter");
    assert!(
        cold.as_millis() >= 400,
        "a cold adapter waits for its load: {cold:?}"
    );
    let (model, _) = ask("routerlab-sim");
    assert_eq!(model, "routerlab-sim", "the served model is the base model");
    let long = format!(r#"{{"model": "{}", "prompt": "x"}}"#, "n".repeat(300));
    let (status, answer) = http(&engine.addr, "POST", "/v1/completions", &long);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("at most 256 bytes"), "{answer}");
}

/// `routerlab engine --role` prefill and decode engines: two of each behind `serve
/// --prefill-endpoints ... --decode-endpoints ...` (vLLM's disaggregated-serving proxy
/// protocol), 300 conversation requests driven through: every one answered, each
/// prefilled on a prefill engine and decoded on a decode engine that took its KV in. One
/// at a time and with `lcp`, each request's (prefill, decode) pair is the time-free
/// replay's of the same split.
#[test]
fn a_disaggregated_fleet_behind_serve_answers_and_routes_as_the_replay() {
    let start = |role: &str| ROUTERLAB.start(&["engine", "--role", role, "--model-speedup", "200"]);
    let prefill: Vec<Server> = (0..2).map(|_| start("prefill")).collect();
    let decode: Vec<Server> = (0..2).map(|_| start("decode")).collect();
    let list = |servers: &[Server]| {
        servers
            .iter()
            .map(|s| s.addr.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let (prefill_list, decode_list) = (list(&prefill), list(&decode));
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--prefill-endpoints",
            &prefill_list,
            "--decode-endpoints",
            &decode_list,
            "--block-size",
            "2048",
            "--metrics-interval-ms",
            "100",
        ];
        args.extend_from_slice(extra);
        ROUTERLAB.start(&args)
    };
    let trace = head("mooncake-conversation.jsonl", 300, "live-pd-300.jsonl");
    // Sixteen at a time, a load-aware policy in each pool: every request answered.
    let router = serve(&["--matcher", "least-inflight"]);
    let report = drive(&router.url(), &trace, &["--concurrency", "16"]);
    assert_eq!(report["requests"], 300);
    assert_eq!(report["rejected"], 0);
    let named: Vec<&str> = report["measured"]["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        named.iter().all(|n| decode_list.contains(n)),
        "the answers come from decode engines: {named:?}"
    );
    let total = |servers: &[Server], series: &str| -> f64 {
        servers.iter().map(|s| metric(&s.addr, series)).sum()
    };
    let moved = "routerlab:remote_prefills_total{model_name=\"routerlab-sim\"}";
    let handed = "routerlab:remote_decodes_total{model_name=\"routerlab-sim\"}";
    assert_eq!(total(&prefill, handed), 300.0, "every prefill handed on");
    assert_eq!(total(&decode, moved), 300.0, "every decode took the KV in");
    assert_eq!(total(&prefill, moved) + total(&decode, handed), 0.0);
    drop(router);

    // One at a time with `lcp`: the pairs are the time-free replay's.
    let router = serve(&["--matcher", "lcp"]);
    let live = trace.with_extension("pd-live.jsonl");
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
    let offline = trace.with_extension("pd-offline.jsonl");
    let replay = routerlab(&[
        "replay",
        "--matcher",
        "lcp",
        "--trace",
        &trace.to_string_lossy(),
        "--endpoints",
        &format!("{prefill_list},{decode_list}"),
        "--prefill-endpoints",
        "2",
        "--requests-out",
        &offline.to_string_lossy(),
        "--quiet",
    ]);
    assert!(replay.status.success(), "{}", texts(&replay).1);
    let pairs = |records: &Path| -> Vec<(String, String)> {
        std::fs::read_to_string(records)
            .expect("records")
            .lines()
            .map(|line| {
                let record: serde_json::Value = serde_json::from_str(line).expect("JSON");
                let name = |key: &str| record[key].as_str().expect(key).to_owned();
                (name("prefill_endpoint"), name("endpoint"))
            })
            .collect()
    };
    let (live, offline) = (pairs(&live), pairs(&offline));
    assert_eq!(live.len(), 300);
    assert_eq!(live, offline);
    assert!(
        live.iter()
            .all(|(p, d)| prefill_list.contains(p.as_str()) && decode_list.contains(d.as_str()))
    );
}

/// A decode engine refuses a request that asks for a remote prefill without saying where
/// from, naming the missing field, as a 400.
#[test]
fn a_decode_engine_refuses_kv_transfer_params_without_a_source() {
    let engine = ROUTERLAB.start(&["engine", "--role", "decode", "--instant"]);
    let (status, body) = http(
        &engine.addr,
        "POST",
        "/v1/completions",
        r#"{"prompt": "hi", "max_tokens": 2, "kv_transfer_params": {"do_remote_prefill": true}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("remote_engine_id"), "{body}");
    // A prefill engine hands a remote decode its KV's whereabouts, with one token.
    let engine = ROUTERLAB.start(&["engine", "--role", "prefill", "--instant"]);
    let (status, body) = http(
        &engine.addr,
        "POST",
        "/v1/completions",
        r#"{"prompt": "hello there", "max_tokens": 9, "kv_transfer_params": {"do_remote_decode": true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let params = &answer["kv_transfer_params"];
    assert_eq!(params["do_remote_prefill"], true);
    assert_eq!(params["do_remote_decode"], false);
    assert_eq!(answer["usage"]["completion_tokens"], 1);
    let (host, port) = engine.addr.rsplit_once(':').unwrap();
    assert_eq!(params["remote_host"], host);
    assert_eq!(params["remote_port"], port.parse::<u64>().unwrap());
    assert!(params["remote_engine_id"].is_string());
    assert!(params["remote_block_ids"].is_array());
}

/// `drive` against an address where nothing listens: every request fails, so there is no
/// measurement to report. Exit 1 with one line saying so, nothing on stdout (a report of
/// zeros would pass for one).
#[test]
fn drive_with_every_request_failed_reports_nothing_and_exits_1() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let trace = head("mooncake-conversation.jsonl", 5, "drive-all-failed.jsonl");
    let output = routerlab(&[
        "drive",
        "--url",
        &format!("http://{closed}"),
        "--trace",
        &trace.to_string_lossy(),
        "--rate",
        "100",
        "--timeout-s",
        "5",
    ]);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(
            "error: every one of the 5 requests failed, so there is nothing to report"
        ),
        "{stderr}"
    );
}

/// An engine on a free port that answers `/metrics` as a healthy vLLM would and every
/// completion with the head of a 1,000-byte answer, then one byte every 100 ms for as long
/// as it is read (at most 60 s).
fn trickling_engine() -> String {
    use std::io::Write as _;
    fake_engine(|_, mut stream| {
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{";
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..600 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if stream.write_all(b" ").is_err() {
                return;
            }
        }
    })
}

/// A split fleet whose prefill engine trickles its answer: the whole prefill leg has the
/// upstream deadline (a client that waits gets 504 at it, where it waited as long as the
/// engine trickled), and a client that leaves early takes the leg with it. Either way the
/// prefill engine's in-flight count comes back to 0 (it stayed raised for good).
#[test]
fn a_trickling_prefill_leg_ends_at_its_deadline_and_when_the_client_leaves() {
    const DECODE: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 29\r\nconnection: close\r\n\r\n{\"choices\": [{\"text\": \"ok\"}]}";
    let prefill = trickling_engine();
    let decode = hostile_engine(DECODE);
    let router = ROUTERLAB.start(&[
        "serve",
        "--matcher",
        "round-robin",
        "--endpoints",
        &format!("{prefill},{decode}"),
        "--prefill-endpoints",
        "1",
        "--upstream-timeout-s",
        "1",
    ]);
    let in_flight = format!("routerlab_inflight_requests{{endpoint=\"{prefill}\"}}");
    let started = std::time::Instant::now();
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    let waited = started.elapsed();
    assert_eq!(status, 504, "{body}");
    assert!(
        body.contains("did not answer the prefill within 1 s"),
        "{body}"
    );
    assert!(waited < std::time::Duration::from_secs(4), "{waited:?}");
    eventually("the prefill engine's in-flight count back to 0", || {
        metric(&router.addr, &in_flight) == 0.0
    });

    // A client that leaves after 300 ms, long before the deadline.
    {
        use std::io::Write as _;
        let mut client = std::net::TcpStream::connect(&router.addr).unwrap();
        let request = format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{SMALL}",
            SMALL.len()
        );
        client.write_all(request.as_bytes()).unwrap();
        eventually("the leg in flight", || {
            metric(&router.addr, &in_flight) == 1.0
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    eventually("the prefill engine's in-flight count back to 0", || {
        metric(&router.addr, &in_flight) == 0.0
    });
}

/// A prefill answer that is not JSON: the rule is that the decode leg goes on without
/// `kv_transfer_params` (the client gets its answer, the decode engine computes the prompt)
/// and the prefill engine's errors count it (it was 200 with no error counted).
#[test]
fn a_prefill_answer_without_transfer_params_is_counted_and_decoded_without_them() {
    const PREFILL: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 8\r\nconnection: close\r\n\r\nnot json";
    const DECODE: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 29\r\nconnection: close\r\n\r\n{\"choices\": [{\"text\": \"ok\"}]}";
    let prefill = hostile_engine(PREFILL);
    let (decode, bodies) = recording_engine(DECODE);
    let router = ROUTERLAB.start(&[
        "serve",
        "--matcher",
        "round-robin",
        "--endpoints",
        &format!("{prefill},{decode}"),
        "--prefill-endpoints",
        "1",
    ]);
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        metric(
            &router.addr,
            &format!("routerlab_errors_total{{endpoint=\"{prefill}\"}}")
        ),
        1.0
    );
    let sent = bodies.lock().unwrap();
    assert_eq!(sent.len(), 1);
    let decoded: serde_json::Value = serde_json::from_str(&sent[0]).unwrap();
    assert!(decoded.get("kv_transfer_params").is_none(), "{decoded}");
    assert_eq!(decoded["prompt"], "hello there");
}

/// Whether process `pid` is gone (or a zombie waiting for whoever inherited it).
fn gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    stat.map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
}

/// A plugin in a plugin host that starts a process of its own: when `serve` ends (killed,
/// so nothing of it runs), the plugin's process ends with the host (it outlived both).
#[test]
fn what_a_hosted_plugin_starts_ends_with_serve() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let fixture = support::fixture_plugin("spawn-on-create");
    let pid_file = support::scratch_file("spawned.pid", b"");
    let router = ROUTERLAB.start_with_env(
        &[
            "serve",
            "--endpoints",
            &engine.addr,
            "--matcher",
            &fixture,
            "--plugin-isolation",
            "process",
        ],
        &[("ROUTERLAB_FIXTURE_PID_FILE", pid_file.to_str().unwrap())],
    );
    let spawned = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !spawned.is_empty() && !gone(&spawned),
        "the plugin's process runs"
    );
    let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
    assert_eq!(status, 200, "{body}");
    drop(router);
    eventually("the plugin's process is gone", || gone(&spawned));
}

/// A hosted plugin whose memory grows on every call: past `--plugin-host-memory-mb` the
/// host ends (not the machine, not `serve`), the request follows `--on-plugin-error`, and
/// `serve` restarts the host and keeps answering.
#[test]
fn a_hosted_plugin_past_its_memory_bound_costs_its_host_not_serve() {
    let engine = ROUTERLAB.start(&["engine", "--instant"]);
    let fixture = support::fixture_plugin("grow-on-match");
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engine.addr,
        "--matcher",
        &fixture,
        "--matcher-config",
        "{mb: 128}",
        "--plugin-isolation",
        "process",
        "--plugin-host-memory-mb",
        "512",
        "--on-plugin-error",
        "round-robin",
    ]);
    for _ in 0..8 {
        let (status, body) = http(&router.addr, "POST", "/v1/completions", SMALL);
        assert_eq!(status, 200, "{body}");
    }
    let stderr = router.stderr();
    assert!(stderr.contains("restarting it"), "{stderr}");
    let (status, _) = http(&router.addr, "GET", "/health", "");
    assert_eq!(status, 200);
}

/// Out of file descriptors, a health check behind dozens of idle connections is answered
/// at once, 503 saying why (it waited 9 s, until an idle connection timed out).
#[test]
fn a_router_out_of_file_descriptors_answers_at_once() {
    let (router, holders) = out_of_descriptors();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // The router's endpoint probes open and close a socket now and then, so a descriptor
    // may have come free since: a few more idle connections take any such one first.
    let top_up: Vec<std::net::TcpStream> = (0..4)
        .filter_map(|_| std::net::TcpStream::connect(&router.addr).ok())
        .collect();
    let started = std::time::Instant::now();
    let (status, body) = http(&router.addr, "GET", "/health", "");
    let waited = started.elapsed();
    assert!(waited < std::time::Duration::from_secs(2), "{waited:?}");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("out of file descriptors"), "{body}");
    drop((holders, top_up));
}
