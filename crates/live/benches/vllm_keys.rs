//! What `serve --tokenizer` adds to a decision: tokenizing a prompt and keying its blocks
//! as vLLM does, per hash algorithm.
//!
//! The tokenizer is a byte-level BPE (GPT-2's pre-tokenizer, 16,000 tokens) trained here on
//! the prompts of `traces/chat.jsonl`, the prompts then timed. Median of 11 rounds.
//!
//! Run: `cargo bench -p routerlab-live --bench vllm_keys`.

#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use routerlab_live::vllm_keys::{HashAlgo, VllmKeys};
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

const ROUNDS: usize = 11;
const BLOCK: u32 = 16;

fn prompts() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/chat.jsonl");
    std::fs::read_to_string(path)
        .expect("traces/chat.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["prompt"].as_str().map(str::to_owned))
        .collect()
}

fn tokenizer(prompts: &[String]) -> tokenizers::Tokenizer {
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(16_000)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    let mut tokenizer = tokenizers::Tokenizer::new(BPE::default());
    tokenizer.with_pre_tokenizer(Some(ByteLevel::default()));
    tokenizer
        .train(&mut trainer, prompts.iter())
        .expect("train the tokenizer");
    tokenizer
}

/// Median seconds of `ROUNDS` runs of `f`.
fn median(mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[ROUNDS / 2]
}

fn main() {
    let prompts = prompts();
    let bytes: usize = prompts.iter().map(String::len).sum();
    let tokenizer = tokenizer(&prompts);
    let keys = VllmKeys::new(tokenizer, HashAlgo::Sha256, "0");
    let tokens: Vec<_> = prompts.iter().map(|p| keys.tokenize(p).unwrap()).collect();
    let count: usize = tokens.iter().map(|t| t.ids.len()).sum();
    println!(
        "{} prompts, {bytes} bytes, {count} tokens ({:.0} bytes a prompt)",
        prompts.len(),
        bytes as f64 / prompts.len() as f64
    );
    let n = prompts.len() as f64;
    let tokenize = median(|| {
        for p in &prompts {
            black_box(keys.tokenize(black_box(p)).unwrap());
        }
    });
    println!(
        "tokenize: {:.1} µs a prompt, {:.1} MB/s",
        tokenize / n * 1e6,
        bytes as f64 / tokenize / 1e6
    );
    for name in HashAlgo::NAMES {
        let keys = VllmKeys::new(
            tokenizers::Tokenizer::new(BPE::default()),
            name.parse().unwrap(),
            "0",
        );
        let chain = median(|| {
            for t in &tokens {
                black_box(keys.chain(black_box(&t.ids), BLOCK));
            }
        });
        let blocks = count / BLOCK as usize;
        println!(
            "keys {name}: {:.1} µs a prompt, {:.0} ns a block of {BLOCK}",
            chain / n * 1e6,
            chain / blocks as f64 * 1e9
        );
    }
}
