//! `serve --tokenizer`: with vLLM engines, the router tokenizes each prompt with their
//! `tokenizer.json` and looks vLLM's block keys up in what their KV events stored. The
//! engines here are `tests/python/vllm_kv_publisher.py`: it tokenizes with the Python
//! `tokenizers` library and hashes with vLLM's functions, for each of vLLM's four
//! `--prefix-caching-hash-algo` choices, and publishes as vLLM does. The tokenizer file is
//! built by the test. Needs a Python with msgspec, pyzmq, cbor2, xxhash and tokenizers
//! (`cargo xtask ci` makes one; `ROUTERLAB_PYTHON` names it).

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use routerlab_live::vllm_keys::{HashAlgo, VllmKeys};
use serde_json::{Value, json};
use support::server::{ROUTERLAB, Server};
use support::{exchange, http};

const SEED: &str = "1234";
const BLOCK: u32 = 16;

fn python() -> String {
    support::python("msgspec, zmq, cbor2, xxhash, tokenizers")
}

/// A word-level tokenizer (`w0`..`w299`, split on whitespace) that puts `[BOS]` first.
fn build_tokenizer(path: &Path) {
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    use tokenizers::processors::template::TemplateProcessing;
    let mut vocab: HashMap<String, u32> = (0..300).map(|i| (format!("w{i}"), i + 2)).collect();
    vocab.insert("[UNK]".into(), 0);
    vocab.insert("[BOS]".into(), 1);
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("[UNK]".into())
        .build()
        .unwrap();
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(Whitespace {}));
    tokenizer.with_post_processor(Some(
        TemplateProcessing::builder()
            .try_single("[BOS] $A")
            .unwrap()
            .special_tokens(vec![("[BOS]", 1)])
            .build()
            .unwrap(),
    ));
    tokenizer.add_special_tokens(&[tokenizers::AddedToken::from("[BOS]", true)]);
    tokenizer.save(path, false).unwrap();
}

fn words(range: std::ops::Range<u32>) -> String {
    range.map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// The publisher process, its stdin held open while it lives.
struct Publisher {
    child: Child,
    ready: Value,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn publish(python: &str, tokenizer: &Path, algo: &str, engines: &[Vec<String>]) -> Publisher {
    // A directory of its own per publisher: tests run side by side.
    static PUBLISHERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = PUBLISHERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "routerlab-kv-tokenizer-{}-{algo}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("spec.json");
    let ready = dir.join("ready.json");
    let _ = std::fs::remove_file(&ready);
    let body = json!({"tokenizer": tokenizer, "algo": algo, "seed": SEED,
        "block_size": BLOCK, "engines": engines});
    std::fs::write(&spec, body.to_string()).unwrap();
    let script = support::workspace_root().join("crates/cli/tests/python/vllm_kv_publisher.py");
    let mut child = Command::new(python)
        .arg(&script)
        .arg(&spec)
        .arg(&ready)
        .stdin(Stdio::piped())
        .spawn()
        .expect("run the Python publisher");
    for _ in 0..400 {
        if ready.exists() {
            let ready = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
            return Publisher { child, ready };
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the Python publisher stopped: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let _ = child.kill();
    panic!("the Python publisher never got ready");
}

/// A router over `engines` following the publisher's two sockets as engines 1 and 3.
fn router(
    engines: &[String],
    publisher: &Publisher,
    tokenizer: &Path,
    algo: &str,
    seed: &str,
) -> Server {
    let urls = publisher.ready["urls"].as_array().unwrap();
    let events = format!(
        "{}={},{}={}",
        engines[1],
        urls[0].as_str().unwrap(),
        engines[3],
        urls[1].as_str().unwrap()
    );
    let router = ROUTERLAB.start(&[
        "serve",
        "--endpoints",
        &engines.join(","),
        "--matcher",
        "vllm-precise",
        "--matcher-config",
        "{speculative_ttl_s: 0}",
        "--block-size",
        "8",
        "--kv-events",
        &events,
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--python-hash-seed",
        seed,
        "--prefix-caching-hash-algo",
        algo,
    ]);
    // Both batches applied before any request.
    for _ in 0..400 {
        let (_, metrics) = http(&router.addr, "GET", "/metrics", "");
        let applied = [&engines[1], &engines[3]].iter().all(|name| {
            metrics.contains(&format!(
                "routerlab_kv_event_batches_total{{endpoint=\"{name}\"}} 1"
            ))
        });
        if applied {
            return router;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("the router never applied both batches: {}", router.stderr());
}

/// Where the router sends each prompt.
fn routed(router: &Server, prompts: &[&str]) -> Vec<String> {
    prompts
        .iter()
        .map(|prompt| {
            let body = json!({"prompt": prompt, "max_tokens": 1}).to_string();
            let (status, head, answer) = exchange(&router.addr, "POST", "/v1/completions", &body);
            assert_eq!(status, 200, "{answer}");
            head.lines()
                .find_map(|l| l.strip_prefix("x-routerlab-endpoint: "))
                .unwrap_or_else(|| panic!("no endpoint header in {head}"))
                .to_owned()
        })
        .collect()
}

#[test]
fn prompts_go_where_vllm_keys_of_their_tokens_were_stored_for_every_hash_algo() {
    let python = python();
    let dir = std::env::temp_dir().join(format!("routerlab-kv-tokenizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokenizer = dir.join("tokenizer.json");
    build_tokenizer(&tokenizer);
    let engines: Vec<Server> = (0..4)
        .map(|_| ROUTERLAB.start(&["engine", "--model-speedup", "200"]))
        .collect();
    let names: Vec<String> = engines.iter().map(|e| e.addr.clone()).collect();
    // 41 tokens with [BOS]: two full blocks of 16. The third shares P's first 20 words:
    // one full block with it.
    let (p, q) = (words(0..40), words(100..140));
    let p2 = format!("{} {}", words(0..20), words(200..220));
    let prompts = [p.as_str(), q.as_str(), p2.as_str()];
    let expected = vec![names[1].clone(), names[3].clone(), names[1].clone()];
    for algo in HashAlgo::NAMES {
        let publisher = publish(
            &python,
            &tokenizer,
            algo,
            &[vec![p.clone()], vec![q.clone()]],
        );
        // The router's own keys of each prompt are the publisher's, token for token.
        let keys = VllmKeys::load(&tokenizer, algo.parse().unwrap(), SEED).unwrap();
        for (engine, prompt) in [(0, &p), (1, &q)] {
            let theirs = &publisher.ready["keys"][engine][0];
            let tokens = keys.tokenize(prompt).unwrap();
            let ids: Vec<u64> = tokens.ids.iter().map(|&i| u64::from(i)).collect();
            assert_eq!(json!(ids), theirs["ids"], "{algo}");
            assert_eq!(
                json!(keys.chain(&tokens.ids, BLOCK)),
                theirs["keys"],
                "{algo}"
            );
            assert_eq!(theirs["keys"].as_array().unwrap().len(), 2, "{algo}");
        }
        let router = router(&names, &publisher, &tokenizer, algo, SEED);
        assert_eq!(routed(&router, &prompts), expected, "{algo}");
    }
    // Another seed roots other keys: the same events then say nothing of these prompts.
    let publisher = publish(
        &python,
        &tokenizer,
        "sha256",
        &[vec![p.clone()], vec![q.clone()]],
    );
    let router = router(&names, &publisher, &tokenizer, "sha256", "4321");
    assert_ne!(routed(&router, &prompts), expected);
}

#[test]
fn a_tokenizer_that_cannot_be_read_stops_serve_naming_the_flag() {
    let not_a_tokenizer = support::scratch_file("not-a-tokenizer.json", b"{\"model\": 1}\n");
    let dir = std::env::temp_dir();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--tokenizer", "/nonexistent/tokenizer.json"],
            "--tokenizer /nonexistent/tokenizer.json: ",
        ),
        (
            &["--tokenizer", not_a_tokenizer.to_str().unwrap()],
            "--tokenizer ",
        ),
        (
            &["--tokenizer", dir.to_str().unwrap()],
            "not a regular file",
        ),
        (
            &[
                "--tokenizer",
                not_a_tokenizer.to_str().unwrap(),
                "--prefix-caching-hash-algo",
                "md5",
            ],
            "--prefix-caching-hash-algo: unknown hash `md5` (one of sha256, sha256_cbor, xxhash, xxhash_cbor)",
        ),
    ];
    for (flags, said) in cases {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--endpoints",
            "127.0.0.1:9",
            "--matcher",
            "dynamo-kv",
            "--kv-events",
            "127.0.0.1:9=tcp://127.0.0.1:9",
            "--python-hash-seed",
            "0",
        ];
        args.extend(flags);
        let output = support::routerlab(&args);
        let (_, stderr) = support::texts(&output);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(said), "{flags:?}: {stderr}");
    }
}

/// A prompt longer than `serve --tokenizer` tokenizes is answered 413, saying the bound
/// (a 4 MB prompt held about 450 MB while it was tokenized; eight at once ended `serve`);
/// a prompt within it is still routed.
#[test]
fn a_prompt_too_long_to_tokenize_is_refused_with_413() {
    let python = python();
    let dir =
        std::env::temp_dir().join(format!("routerlab-kv-tokenizer-413-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokenizer = dir.join("tokenizer.json");
    build_tokenizer(&tokenizer);
    let engines: Vec<Server> = (0..4)
        .map(|_| ROUTERLAB.start(&["engine", "--model-speedup", "200"]))
        .collect();
    let names: Vec<String> = engines.iter().map(|e| e.addr.clone()).collect();
    let publisher = publish(
        &python,
        &tokenizer,
        "sha256",
        &[vec![words(0..40)], vec![words(100..140)]],
    );
    let router = router(&names, &publisher, &tokenizer, "sha256", SEED);
    let long = "word ".repeat((1 << 20) / 5 + 1);
    let body = json!({"prompt": long, "max_tokens": 1}).to_string();
    let (status, _, answer) = exchange(&router.addr, "POST", "/v1/completions", &body);
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer.contains("more than the 1048576 serve tokenizes (--tokenizer)"),
        "{answer}"
    );
    let body = json!({"prompt": words(0..40), "max_tokens": 1}).to_string();
    let (status, _, answer) = exchange(&router.addr, "POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{answer}");
    std::fs::remove_dir_all(&dir).unwrap();
}
