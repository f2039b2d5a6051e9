//! `routerlab engine --publish-kv-events`: the frames it publishes decoded by vLLM's own message
//! types (`tests/python/kv_events_check.py`: msgspec structs copied from vLLM, pyzmq for
//! libzmq), the block hashes those of the prompt's chain, and the replay socket answering
//! from any sequence number. Needs a Python with `msgspec` and `pyzmq` (`cargo xtask ci`
//! makes one; `ROUTERLAB_PYTHON` names it).

mod support;

use serde_json::Value;
use support::http;
use support::server::{ROUTERLAB, Server};

fn python() -> String {
    support::python("msgspec, zmq")
}

/// The value after `label` on the engine's stderr, once it is there.
fn announced(server: &Server, label: &str) -> String {
    for _ in 0..200 {
        if let Some(rest) = server.stderr().split(label).nth(1) {
            return rest
                .split(|c: char| c == ',' || c.is_whitespace())
                .next()
                .unwrap_or_default()
                .to_owned();
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("the engine never said `{label}`: {}", server.stderr());
}

#[test]
fn published_frames_decode_as_vllms_kv_event_batches_and_replay_from_any_sequence() {
    let python = python();
    // 8 blocks of 64 tokens (256 bytes of text): a third prompt evicts.
    let engine = ROUTERLAB.start(&[
        "engine",
        "--speedup",
        "50",
        "--engine-config",
        "{num_gpu_blocks: 8}",
        "--kv-events",
        "tcp://127.0.0.1:0",
        "--kv-events-replay",
        "tcp://127.0.0.1:0",
    ]);
    let publisher = announced(&engine, "KV events on ");
    let replay = announced(&engine, "replay on ");
    let dir = std::env::temp_dir().join(format!("routerlab-kv-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let script = support::workspace_root().join("crates/cli/tests/python/kv_events_check.py");
    let checker = std::process::Command::new(&python)
        .arg(&script)
        .args([&publisher, &replay, "3"])
        .arg(&ready)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the Python check");
    for _ in 0..400 {
        if ready.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(ready.exists(), "the Python subscriber never got ready");
    // Two prompts sharing their first 600 bytes (two whole blocks), then a third that
    // needs more blocks than are free.
    let shared = "a".repeat(600);
    let prompts = [
        format!("{shared}1{shared}"),
        format!("{shared}2{shared}"),
        "b".repeat(700),
    ];
    for prompt in &prompts {
        let body = format!(r#"{{"model":"routerlab-sim","prompt":"{prompt}","max_tokens":2}}"#);
        let (status, text) = http(&engine.addr, "POST", "/v1/completions", &body);
        assert_eq!(status, 200, "{text}");
    }
    let output = checker.wait_with_output().unwrap();
    assert!(output.status.success(), "the Python check failed");
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    let live = seen["live"].as_array().unwrap();
    assert_eq!(live.len(), 3, "{seen}");
    let chain = |prompt: &str| routerlab_trace::blocks::text_engine_chain(prompt.as_bytes(), 64);
    let (a, b) = (chain(&prompts[0]), chain(&prompts[1]));
    let events: Vec<&Value> = live
        .iter()
        .flat_map(|batch| batch["events"].as_array().unwrap())
        .collect();
    let hashes = |e: &Value| -> Vec<u64> {
        e["block_hashes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_u64().unwrap())
            .collect()
    };
    // The first prompt's 4 full blocks, from the root; the second's 2 new ones after the
    // 2 it shares; then the LRU evictions the third forces.
    assert_eq!(events[0]["type"], "BlockStored");
    assert_eq!(hashes(events[0]), a[..4]);
    assert_eq!(events[0]["parent_block_hash"], Value::Null);
    assert_eq!(events[0]["block_size"], 64);
    assert_eq!(events[0]["medium"], "GPU");
    assert_eq!(hashes(events[1]), b[2..4]);
    assert_eq!(events[1]["parent_block_hash"], b[1]);
    assert_eq!(events[2]["type"], "BlockRemoved");
    let removed = hashes(events[2]);
    assert!(
        !removed.is_empty() && removed.iter().all(|h| a.contains(h) || b.contains(h)),
        "{seen}"
    );
    for (i, batch) in live.iter().enumerate() {
        assert_eq!(
            batch["seq"], i as u64,
            "sequence numbers from 0, one a batch"
        );
        assert_eq!(batch["rank"], 0);
    }
    // The replay from 0 holds every batch so far, the live ones among them, then the end.
    let replayed = seen["replayed"].as_array().unwrap();
    assert!(replayed.len() >= live.len(), "{seen}");
    assert_eq!(&replayed[..live.len()], &live[..]);
    assert_eq!(seen["end"], -1);
    // A REQ socket (vLLM's example subscriber's) gets the first reply: [seq, batch].
    assert_eq!(seen["req_first"], 2);
    let (_, metrics) = http(&engine.addr, "GET", "/metrics", "");
    assert!(
        metrics.lines().any(
            |l| l.starts_with("routerlab:kv_event_batches_dropped_total") && l.ends_with(" 0")
        ),
        "{metrics}"
    );
}

/// Where engine `server` publishes its KV events and replays them.
fn event_sockets(server: &Server) -> (String, String) {
    (
        announced(server, "KV events on "),
        announced(server, "replay on "),
    )
}

#[test]
fn serve_follows_four_engines_events_and_routes_as_the_timed_replay_does() {
    follow_and_route("in-process", false);
}

#[test]
fn a_plugin_host_is_told_what_the_events_say_each_engine_holds() {
    follow_and_route("process", false);
}

#[test]
fn batches_lost_on_the_way_are_replayed_and_routing_stays_the_replays() {
    follow_and_route("in-process", true);
}

/// A forwarder between each engine's PUB socket and `serve` that drops the batches
/// numbered 2, 5 and 9 (`tests/python/kv_events_drop.py`); the URLs `serve` is to follow.
struct Lossy {
    child: std::process::Child,
    urls: Vec<String>,
}

impl Lossy {
    fn start(publishers: &[&String], tag: &str) -> Lossy {
        let ready = support::scratch_file(&format!("kv-drop-{tag}.ready"), b"");
        std::fs::remove_file(&ready).unwrap();
        let script = support::workspace_root().join("crates/cli/tests/python/kv_events_drop.py");
        let mut child = std::process::Command::new(python())
            .arg(&script)
            .arg(&ready)
            .arg("2,5,9")
            .args(publishers)
            .spawn()
            .expect("run the forwarder");
        for _ in 0..400 {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                // Let the forwarder's subscriptions settle before anything is published.
                std::thread::sleep(std::time::Duration::from_millis(300));
                return Lossy {
                    child,
                    urls: text.lines().map(str::to_owned).collect(),
                };
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the forwarder never got ready");
    }
}

impl Drop for Lossy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Four engines publishing events, `serve --matcher dynamo-kv --kv-events` with its plugins
/// `isolation`, 200 requests of the sessions trace one at a time: each goes where the
/// timed replay of the same requests on the same engines sends it. `lossy`: through a
/// link that drops some batches, which `serve` recovers from the replay sockets.
fn follow_and_route(isolation: &str, lossy: bool) {
    // A small cache (128 blocks of 64 tokens) so that prompts evict one another: then
    // what an engine holds is not what was routed to it. Measured on these 200 requests:
    // without `--kv-events` (dynamo-kv falls back to its own index) 104 go where the
    // replay sends them; with them, all 200.
    let config = "{num_gpu_blocks: 128}";
    let engines: Vec<Server> = (0..4)
        .map(|_| {
            ROUTERLAB.start(&[
                "engine",
                "--speedup",
                "200",
                "--engine-config",
                config,
                "--kv-events",
                "tcp://127.0.0.1:0",
                "--kv-events-replay",
                "tcp://127.0.0.1:0",
            ])
        })
        .collect();
    let names: Vec<String> = engines.iter().map(|e| e.addr.clone()).collect();
    let mut sockets: Vec<(String, String)> = engines.iter().map(event_sockets).collect();
    let tag = format!("{isolation}-{lossy}");
    let _link = lossy.then(|| {
        let link = Lossy::start(&sockets.iter().map(|s| &s.0).collect::<Vec<_>>(), &tag);
        for (socket, url) in sockets.iter_mut().zip(&link.urls) {
            socket.0.clone_from(url);
        }
        link
    });
    let list = |pick: fn(&(String, String)) -> &String| {
        names
            .iter()
            .zip(&sockets)
            .map(|(name, s)| format!("{name}={}", pick(s)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &names.join(","),
        "--matcher",
        "dynamo-kv",
        "--block-size",
        "2048",
        "--kv-events",
        &list(|s| &s.0),
        "--kv-events-replay",
        &list(|s| &s.1),
        "--plugin-isolation",
        isolation,
    ]);
    let lines: Vec<&str> =
        std::fs::read_to_string(support::project_trace("mooncake-sessions.jsonl"))
            .unwrap()
            .leak()
            .lines()
            .take(200)
            .collect();
    let trace = support::scratch_file(
        &format!("kv-sessions-200-{tag}.jsonl"),
        (lines.join("\n") + "\n").as_bytes(),
    );
    let live = support::scratch_file(&format!("kv-live-{tag}.jsonl"), b"");
    let output = support::routerlab(&[
        "drive",
        "--url",
        &router.url(),
        "--trace",
        trace.to_str().unwrap(),
        "--concurrency",
        "1",
        "--requests-out",
        live.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", support::texts(&output).1);
    let simulated = support::scratch_file(&format!("kv-simulated-{tag}.jsonl"), b"");
    let output = support::routerlab(&[
        "replay",
        "--matcher",
        "dynamo-kv",
        "--trace",
        trace.to_str().unwrap(),
        "--timing",
        "trace",
        "--concurrency",
        "1",
        "--endpoints",
        &names.join(","),
        "--engine-config",
        config,
        "--requests-out",
        simulated.to_str().unwrap(),
        "-q",
    ]);
    assert!(output.status.success(), "{}", support::texts(&output).1);
    let read = |path: &std::path::Path, key: &str| -> std::collections::BTreeMap<u64, String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v[key].as_u64().unwrap(),
                    v["endpoint"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let (live, simulated) = (read(&live, "id"), read(&simulated, "line"));
    assert!(simulated.len() > 150, "{}", simulated.len());
    for (line, endpoint) in &simulated {
        assert_eq!(live.get(line), Some(endpoint), "request {line}");
    }
    // Every engine that served requests had its events indexed, none lost.
    let (_, metrics) = http(&router.addr, "GET", "/metrics", "");
    let served: std::collections::BTreeSet<&String> = live.values().collect();
    assert!(served.len() > 1, "{served:?}");
    let mut resyncs = 0.0;
    for name in served {
        let value = |series: &str| -> f64 {
            let prefix = format!("{series}{{endpoint=\"{name}\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
                .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
        };
        assert!(value("routerlab_kv_event_batches_total") > 0.0, "{name}");
        resyncs += value("routerlab_kv_event_resyncs_total");
        assert_eq!(
            value("routerlab_kv_event_index_resets_total"),
            0.0,
            "{name}"
        );
        assert_eq!(value("routerlab_kv_event_undecodable_total"), 0.0, "{name}");
    }
    // Through the lossy link the dropped batches came back through the replay sockets
    // (an engine with fewer than 3 batches lost nothing); without it there was no gap.
    if lossy {
        assert!(resyncs >= 1.0, "{metrics}");
    } else {
        assert_eq!(resyncs, 0.0, "{metrics}");
    }
}

/// Both of vLLM's layouts, each release's as msgspec encodes its own definitions
/// (`python/vllm_kv_event_releases.py`: events as tagged arrays up to 0.23, as maps from
/// 0.24, with the fields each release added): every batch decodes to the same changes, the
/// CPU tier's store left out. An array-layout batch was undecodable before ("invalid type:
/// unit value, expected u32"), and precise routing over such an engine fell back to its
/// own guess without a word.
#[test]
fn every_vllm_releases_event_layout_decodes() {
    use routerlab_live::kv_events::{Change, decode_batch};
    let dir = std::env::temp_dir().join(format!("routerlab-kv-layouts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script =
        support::workspace_root().join("crates/cli/tests/python/vllm_kv_event_releases.py");
    let output = std::process::Command::new(python())
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let releases = [
        "0.10", "0.11", "0.14", "0.17", "0.20", "0.22", "0.24", "0.26",
    ];
    for release in releases {
        let bytes = std::fs::read(dir.join(format!("{release}.msgpack"))).unwrap();
        let changes = decode_batch(&bytes).unwrap_or_else(|e| panic!("vLLM {release}: {e}"));
        assert_eq!(
            changes,
            [
                Change::Stored {
                    hashes: vec![11, 12],
                    block_size: 16,
                },
                Change::Removed { hashes: vec![11] },
                Change::Cleared,
            ],
            "vLLM {release}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
