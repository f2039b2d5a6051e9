//! LoRA adapters on the live path: `routerlab engine` reports its adapters as vLLM does
//! (`vllm:lora_requests_info`, read back by `prometheus_client`'s own parser), and `serve
//! --base-model` follows them from the scrapes (of our engines and of an exposition
//! written by `prometheus_client` the way vLLM writes it), so `gie-lora-affinity` sends a
//! request to the engine running its adapter. The Python side needs `prometheus_client`
//! (`cargo xtask ci` makes a Python with it; `ROUTERLAB_PYTHON` names it).

mod support;

use std::io::{BufRead as _, Write as _};
use std::process::{Child, Command, Stdio};

use support::server::{ROUTERLAB, Server};
use support::{exchange, http};

fn python() -> String {
    support::python("prometheus_client")
}

fn script() -> std::path::PathBuf {
    support::workspace_root().join("crates/cli/tests/python/vllm_lora_metrics.py")
}

/// The labels of the latest `vllm:lora_requests_info` sample in `text`, as
/// `prometheus_client` parses it.
fn lora_labels(text: &str) -> serde_json::Value {
    let mut child = Command::new(python())
        .arg(script())
        .arg("read")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the parser");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the parser failed on:\n{text}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A `prometheus_client` exposition as vLLM's, on a free port; killed when dropped.
struct VllmMetrics {
    child: Child,
    addr: String,
}

impl VllmMetrics {
    fn start(max_lora: &str, old_running: &str, new_running: &str) -> VllmMetrics {
        let mut child = Command::new(python())
            .arg(script())
            .args(["serve", max_lora, old_running, new_running])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the exposition");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("a port");
        VllmMetrics {
            child,
            addr: format!("127.0.0.1:{port}"),
        }
    }
}

impl Drop for VllmMetrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 50 ms for up to 10 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("not within 10 s: {what}");
}

/// The value of `series` on `addr`'s `/metrics`, if it is there.
fn metric(addr: &str, series: &str) -> Option<f64> {
    let (_, text) = http(addr, "GET", "/metrics", "");
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

#[test]
fn serve_sends_a_request_to_the_engine_its_adapter_runs_on_as_the_engines_report_it() {
    let lora_engine = || {
        ROUTERLAB.start(&[
            "engine",
            "--engine-config",
            "{lora: {slots: 1, load_ms: 1}}",
        ])
    };
    let (a, b) = (lora_engine(), lora_engine());
    // vLLM's shape: the older step's label set stays, with the older time.
    let vllm = VllmMetrics::start("1", "old-lora,other-lora", "chat-lora");
    // A long request for `sql-lora` straight to `b`, past the router; its answer is not
    // read, and it runs until the engine is stopped.
    let mut direct = std::net::TcpStream::connect(&b.addr).unwrap();
    let body = r#"{"model": "sql-lora", "prompt": "hello", "max_tokens": 5000}"#;
    write!(
        direct,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut labels = serde_json::Value::Null;
    eventually("b reports sql-lora running", || {
        labels = lora_labels(&http(&b.addr, "GET", "/metrics", "").1);
        labels["running_lora_adapters"] == "sql-lora"
    });
    assert_eq!(
        labels,
        serde_json::json!({"max_lora": "1", "running_lora_adapters": "sql-lora", "waiting_lora_adapters": ""})
    );
    let idle = lora_labels(&http(&a.addr, "GET", "/metrics", "").1);
    assert_eq!(idle["running_lora_adapters"], "", "{idle}");

    let endpoints = [a.addr.as_str(), b.addr.as_str(), vllm.addr.as_str()].join(",");
    // The plugins in process, and in a plugin host (adapters cross its channel).
    for isolation in ["in-process", "process"] {
        let router = ROUTERLAB.start(&[
            "serve",
            "--endpoints",
            &endpoints,
            "--matcher",
            "gie-lora-affinity",
            "--base-model",
            "routerlab-sim",
            "--metrics-interval-ms",
            "50",
            "--plugin-isolation",
            isolation,
        ]);
        routes_by_adapter(&router, &a, &b, &vllm);
    }
    drop(direct);
}

/// `router` (over `a`, `b` and `vllm`, with `b` running `sql-lora`) sends each request
/// where `gie-lora-affinity` should.
fn routes_by_adapter(router: &Server, a: &Server, b: &Server, vllm: &VllmMetrics) {
    let running = |addr: &str| {
        metric(
            &router.addr,
            &format!("routerlab_lora_running_adapters{{endpoint=\"{addr}\"}}"),
        )
    };
    eventually("serve reads every engine's adapters", || {
        running(&b.addr) == Some(1.0) && running(&vllm.addr) == Some(1.0)
    });
    assert_eq!(running(&a.addr), Some(0.0));
    let routed_to = |model: &str| {
        let body = format!(r#"{{"model": "{model}", "prompt": "hi", "max_tokens": 1}}"#);
        let (status, head, answer) = exchange(&router.addr, "POST", "/v1/completions", &body);
        assert_eq!(status, 200, "{answer}");
        head.lines()
            .find_map(|l| l.strip_prefix("x-routerlab-endpoint: "))
            .expect("the endpoint header")
            .to_owned()
    };
    assert_eq!(routed_to("sql-lora"), b.addr, "b runs sql-lora");
    // `b` and the vLLM exposition have their one slot in use (the exposition's latest
    // series names `chat-lora`; an older one named two adapters): only `a` has room.
    assert_eq!(routed_to("new-lora"), a.addr, "a has a free slot");
    let long = format!(r#"{{"model": "{}", "prompt": "x"}}"#, "n".repeat(300));
    let (status, answer) = http(&router.addr, "POST", "/v1/completions", &long);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("at most 256 bytes"), "{answer}");
}
