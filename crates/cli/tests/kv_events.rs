//! `routerlab engine --kv-events`: the frames it publishes decoded by vLLM's own message
//! types (`tests/python/kv_events_check.py`: msgspec structs copied from vLLM, pyzmq for
//! libzmq), the block hashes those of the prompt's chain, and the replay socket answering
//! from any sequence number. Needs a Python with `msgspec` and `pyzmq` (`cargo xtask ci`
//! makes one; `ROUTERLAB_PYTHON` names it).

mod support;

use serde_json::Value;
use support::http;
use support::server::Server;

fn python() -> String {
    let python = std::env::var("ROUTERLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&python)
        .args(["-c", "import msgspec, zmq"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`{python}` cannot import msgspec and zmq: run `cargo xtask ci` (it makes a Python with them), or `pip install msgspec==0.23.0 pyzmq==27.3.0`, or set ROUTERLAB_PYTHON"
    );
    python
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
    let engine = Server::start(&[
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
}
