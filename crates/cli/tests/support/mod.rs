//! Helpers for the replay tests: the real `routerlab` binary, scratch files, and the
//! traces committed under `traces/`.

#![allow(dead_code)]

pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A file under `traces/` in the workspace.
pub fn project_trace(name: &str) -> PathBuf {
    workspace_root().join("traces").join(name)
}

/// Runs the real `routerlab` binary (it finds the plugins built beside it).
pub fn routerlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_routerlab"))
        .args(args)
        .env_remove("ROUTERLAB_PLUGIN_PATH")
        .output()
        .expect("run routerlab")
}

/// `PATH#NAME` of a plugin in the test fixtures library (built beside the test binaries).
pub fn fixture_plugin(name: &str) -> String {
    let library = std::env::current_exe()
        .expect("test binary")
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join(format!(
            "{}fixture_panicky{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
    format!("{}#{name}", library.display())
}

/// stdout and stderr as text.
pub fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A fresh file with `contents` in this test process's scratch directory.
pub fn scratch_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("routerlab-replay-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write scratch file");
    path
}

/// A scratch path that does not exist (for a file a command must create).
pub fn fresh_path(name: &str) -> PathBuf {
    let path = scratch_file(name, b"");
    std::fs::remove_file(&path).expect("remove the scratch file");
    path
}

/// The JSON lines of `path` once it has at least `n` (a server writes them as requests end),
/// polling every 50 ms for up to 5 s.
pub fn json_lines_when(path: &Path, n: usize) -> Vec<serde_json::Value> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return (text.lines())
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{} has not {n} lines within 5 s", path.display());
}

/// `routerlab replay` with a matcher and a trace, plus whatever a test adds: the argument
/// list every replay test would otherwise spell out.
pub struct Replay {
    args: Vec<String>,
}

impl Replay {
    /// `routerlab replay --matcher MATCHER --trace TRACE`.
    pub fn new(matcher: &str, trace: &Path) -> Replay {
        let args = [
            "replay",
            "--matcher",
            matcher,
            "--trace",
            &trace.to_string_lossy(),
        ]
        .map(str::to_owned)
        .to_vec();
        Replay { args }
    }

    /// Adds arguments.
    pub fn args(mut self, more: &[&str]) -> Replay {
        self.args.extend(more.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Runs it.
    pub fn run(&self) -> Output {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        routerlab(&args)
    }

    /// Runs it, requires success, and returns stdout.
    pub fn stdout(&self) -> Vec<u8> {
        let output = self.run();
        assert!(
            output.status.success(),
            "{:?}: {}",
            self.args,
            texts(&output).1
        );
        output.stdout
    }

    /// Runs it with `--format json`, requires success, and returns the report and stderr.
    pub fn json(&self) -> (serde_json::Value, String) {
        let mut with_format = Replay {
            args: self.args.clone(),
        };
        with_format
            .args
            .extend(["--format".to_owned(), "json".to_owned()]);
        let output = with_format.run();
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(0), "{:?}: {stderr}", self.args);
        (
            serde_json::from_str(&stdout).expect("a JSON report"),
            stderr,
        )
    }

    /// The report of [`Replay::json`] alone.
    pub fn report(&self) -> serde_json::Value {
        self.json().0
    }
}

/// Builds `tests/fixtures/crash.c` into a scratch library of its own for the test `tag`.
pub fn crash_fixture(tag: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let library = std::env::temp_dir().join(format!(
        "librouterlab_crash_{tag}_{}.so",
        std::process::id()
    ));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-std=c11", "-I"])
        .arg(root.join("include"))
        .arg(root.join("crates/cli/tests/fixtures/crash.c"))
        .arg("-o")
        .arg(&library)
        .status()
        .expect("a C compiler (cc, or $CC)");
    assert!(built.success());
    library
}

/// Asserts `value` (a report's number) is within `band` (a fraction) of Dynamo's `dynamo`
/// for the same run, naming `name` and the distance when it is not.
pub fn within(name: &str, value: &serde_json::Value, dynamo: f64, band: f64) {
    let value = value.as_f64().unwrap_or_else(|| panic!("{name}: {value}"));
    let off = (value - dynamo) / dynamo;
    assert!(
        off.abs() <= band,
        "{name}: {value} is {:+.1}% from Dynamo's {dynamo} (band ±{:.0}%)",
        off * 100.0,
        band * 100.0
    );
}

/// One HTTP/1.1 exchange over a plain socket: status code and body.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let (status, _, body) = exchange(addr, method, path, body);
    (status, body)
}

/// One HTTP/1.1 exchange over a plain socket: status code, head (status line and headers)
/// and body.
pub fn exchange(addr: &str, method: &str, path: &str, body: &str) -> (u16, String, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    // One write, as an HTTP client sends a request: a server that answers and closes early
    // must not find half a request and the rest still coming.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .map_or((response.as_str(), ""), |(h, b)| (h, b));
    (status, head.to_owned(), body.to_owned())
}

/// A Python that imports `modules` (comma-separated, as in an `import` line):
/// `ROUTERLAB_PYTHON`, else `python3`; the test stops saying how to get one.
pub fn python(modules: &str) -> String {
    let python = std::env::var("ROUTERLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`{python}` cannot import {modules}: run `cargo xtask ci` (it makes a Python with them), or set ROUTERLAB_PYTHON"
    );
    python
}

/// A scratch copy of the LLMServingSim run of Llama-3.1-8B on an RTX PRO 6000 (a directory
/// named by `tag` and this process), its `requests.jsonl` passed through `edit`.
pub fn scratch_run(tag: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let source = project_trace("llmservingsim/RTXPRO6000-Llama-3.1-8B-vllm");
    let run = std::env::temp_dir().join(format!("routerlab-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).expect("a scratch run directory");
    for name in ["meta.json", "timeseries.csv"] {
        std::fs::copy(source.join(name), run.join(name)).expect("a run file copied");
    }
    let requests = std::fs::read_to_string(source.join("requests.jsonl")).expect("requests");
    std::fs::write(run.join("requests.jsonl"), edit(&requests)).expect("requests written");
    run
}

/// A made-up LMBench ShareGPT workload: three conversations (a three rounds, b two, c
/// one), one round of each in turn, each input the previous round's, its answer and a new
/// question; `(input, output_length)` per entry.
pub const LMBENCH_ROUNDS: [(&str, u64); 6] = [
    ("Tell me about tides.", 40),
    ("Write a haiku.", 30),
    ("What is 2 + 2?", 20),
    ("Tell me about tides.\nThe moon.\nWhy two a day?", 50),
    ("Write a haiku.\nAn old pond.\nAnother one?", 60),
    (
        "Tell me about tides.\nThe moon.\nWhy two a day?\nThe far side.\nAnd spring tides?",
        70,
    ),
];

/// Prompt tokens and tokens generated of each request of the run [`LMBENCH_ROUNDS`] sent
/// (the third stopped early).
pub const LMBENCH_LOGGED: [(u64, u64); 6] = [
    (400, 40),
    (300, 30),
    (200, 12),
    (560, 50),
    (420, 60),
    (700, 70),
];

/// [`LMBENCH_ROUNDS`] as LMBench's workload file writes it.
pub fn lmbench_workload() -> String {
    let entries: Vec<serde_json::Value> = LMBENCH_ROUNDS
        .iter()
        .map(|(input, n)| serde_json::json!({"input": input, "output_length": n}))
        .collect();
    serde_json::to_string(&entries).expect("a workload")
}

/// The LMBench CSV of [`LMBENCH_LOGGED`], one launch a second, without request `lost`
/// (0-based) when given.
pub fn lmbench_csv(lost: Option<usize>) -> String {
    let mut text = String::from(
        "prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time\n",
    );
    for (i, (prompt, generated)) in LMBENCH_LOGGED.iter().enumerate() {
        if Some(i) == lost {
            continue;
        }
        let launch = 1_700_000_000.0 + i as f64;
        text += &format!("{prompt},{generated},0.2,1.0,{launch},{}\n", launch + 1.2);
    }
    text
}

/// DistServe's engine (`traces/distserve/`): its flags, and the KV blocks vLLM's arithmetic
/// gives OPT-13B in fp16 at 0.95 of an A100-80GB (docs/guide/calibration.md), where a
/// search of the cache starts.
pub const DISTSERVE_ENGINE: [&str; 6] = [
    "--max-num-seqs",
    "1024",
    "--max-num-batched-tokens",
    "16384",
    "--num-gpu-blocks",
    "3970",
];
