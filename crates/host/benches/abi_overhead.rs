//! What one decision (`match` + `update`, fused in ABI 1.2's `match_update`) through the
//! ABI costs, against the same `lcp` matcher linked
//! statically and called through its Rust trait.
//!
//! Both sides see the same requests in the same order with the same seed, and must make the
//! same decisions (checked), so the difference is the boundary alone: the host wrapper's
//! checks, the C call, the SDK shim's `catch_unwind`, and the view construction.
//!
//! Run: `cargo bench -p routerlab-host --bench abi_overhead` (after `cargo build --release
//! --workspace`, so the plugin library exists).

#![allow(clippy::print_stdout)]
// This benchmark belongs to the host crate, which may use `unsafe` (see its lib.rs).
#![allow(unsafe_code)]

use std::hint::black_box;
use std::mem::size_of;
use std::time::Instant;

use routerlab_core::abi::{RL_PHASE_WHOLE, RL_UNIT_TOKENS, RL_UNKNOWN, RlRequest, RlStr};
use routerlab_core::hash::BlockInterner;
use routerlab_core::testing::EndpointsBuilder;
use routerlab_core::{Matcher, Request, SeededRng, Unit};
use routerlab_host::{EndpointTable, RequestData, SearchPath, load_matcher};
use routerlab_lcp::Lcp;

const ENDPOINTS: usize = 10;
const REQUESTS: usize = 200_000;
const ROUNDS: usize = 21;

/// `ROUTERLAB_BENCH_ROUNDS` overrides the round count (1 for instruction counting under
/// `valgrind --tool=callgrind`, where time is meaningless).
fn rounds() -> usize {
    std::env::var("ROUTERLAB_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS)
}

/// Mooncake-like chains: 8 shared 4-block prefixes, conversations growing by 1–2 blocks.
fn workload() -> Vec<Vec<u64>> {
    let mut rng = SeededRng::new(11);
    let mut next = 1000u64;
    let mut chains: Vec<Vec<u64>> = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let mut chain = if !chains.is_empty() && rng.unit_f64() < 0.4 {
            let from = &chains[chains.len() - 1 - rng.below(chains.len().min(512) as u64) as usize];
            if from.len() < 40 {
                from.clone()
            } else {
                Vec::new()
            }
        } else {
            Vec::new()
        };
        if chain.is_empty() {
            let system = rng.below(8);
            chain.extend((0..4).map(|b| system * 4 + b));
        }
        for _ in 0..1 + rng.below(2) {
            chain.push(next);
            next += 1;
        }
        chains.push(chain);
    }
    chains
}

#[inline(never)]
fn through_abi(chains: &[Vec<u64>], ids: &[Vec<u32>], decisions: &mut Vec<usize>) -> f64 {
    let search = SearchPath::from_env();
    let mut matcher = load_matcher("lcp", "seed: 5", &search)
        .expect("lcp library built (cargo build --release --workspace)");
    let table = EndpointTable::new((0..ENDPOINTS).map(|i| format!("localhost:{}", 8000 + i)));
    matcher.add_endpoints(&table).unwrap();
    let available = [false; ENDPOINTS];
    decisions.clear();
    let start = Instant::now();
    for (id, (chain, block_ids)) in chains.iter().zip(ids).enumerate() {
        let request = RequestData {
            id: id as u64 + 1,
            arrival_ns: 0,
            prompt: b"",
            block_hashes: chain,
            block_ids: Some(block_ids),
            block_size: 512,
            unit: Unit::Tokens,
            prompt_len: chain.len() as u64 * 512,
            output_tokens: None,
            session_id: 0,
            parent_id: 0,
            ends_session: false,
            now_ns: 0,
            cached_prefix: None,
            phase: routerlab_core::Phase::Whole,
            cached_tiers: None,
            predict: None,
            lora: None,
        };
        // One crossing: the SDK's `match_update` slot (ABI 1.2).
        let pos = matcher
            .match_and_update(&request, &table, &available)
            .unwrap()
            .unwrap();
        decisions.push(black_box(pos));
    }
    start.elapsed().as_secs_f64()
}

#[inline(never)]
fn linked_statically(chains: &[Vec<u64>], ids: &[Vec<u32>], decisions: &mut Vec<usize>) -> f64 {
    // The same 10 idle endpoints the host's table holds, lent without a host.
    let fleet = EndpointsBuilder::new(ENDPOINTS);
    let endpoints = fleet.view();
    let mut matcher: Lcp = routerlab_core::testing::create_matcher("seed: 5").unwrap();
    matcher.add_endpoints(&endpoints).unwrap();
    decisions.clear();
    let start = Instant::now();
    for (id, (chain, block_ids)) in chains.iter().zip(ids).enumerate() {
        let raw = RlRequest {
            struct_size: size_of::<RlRequest>() as u32,
            unit: RL_UNIT_TOKENS,
            id: id as u64 + 1,
            arrival_ns: 0,
            prompt: RlStr::from_str(""),
            block_hashes: chain.as_ptr(),
            block_count: chain.len() as u64,
            block_size: 512,
            flags: 0,
            prompt_len: chain.len() as u64 * 512,
            output_tokens: RL_UNKNOWN,
            session_id: 0,
            parent_id: 0,
            block_ids: block_ids.as_ptr(),
            now_ns: 0,
            cached_prefix: None,
            cached_prefix_ctx: std::ptr::null(),
            phase: RL_PHASE_WHOLE,
            _reserved_1_3: 0,
            cached_tiers: None,
            cached_tiers_ctx: std::ptr::null(),
            predict: None,
            predict_ctx: std::ptr::null(),
            adapter_id: 0,
            adapter: RlStr {
                ptr: std::ptr::null(),
                len: 0,
            },
            adapter_state: None,
            adapter_state_ctx: std::ptr::null(),
        };
        // SAFETY: `raw` borrows `chain` and `block_ids`, alive for this iteration.
        let request = unsafe { Request::from_raw(&raw) }.unwrap();
        let index = matcher
            .match_request(&request, &endpoints)
            .unwrap()
            .unwrap();
        matcher.update(&request, index).unwrap();
        decisions.push(black_box(index.get() as usize));
    }
    start.elapsed().as_secs_f64()
}

/// The prefix-block chains of the public Mooncake conversation trace (12,031 requests),
/// repeated to `REQUESTS` requests (`traces/mooncake-conversation.jsonl`).
fn conversation_chains() -> Vec<Vec<u64>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces/mooncake-conversation.jsonl");
    let text = std::fs::read_to_string(path).expect("the committed conversation trace");
    let one_pass: Vec<Vec<u64>> = text
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("valid trace line");
            let ids = value["hash_ids"].as_array().expect("hash_ids");
            ids.iter().map(|id| id.as_u64().expect("id")).collect()
        })
        .collect();
    one_pass.iter().cycle().take(REQUESTS).cloned().collect()
}

fn main() {
    measure(
        "synthetic chains (8 shared 4-block prefixes, +1-2 blocks a turn)",
        &workload(),
    );
    measure("Mooncake conversation_trace chains", &conversation_chains());
}

fn measure(label: &str, chains: &[Vec<u64>]) {
    // The host interns once per request while reading the trace, outside match + update.
    let mut interner = BlockInterner::default();
    let ids: Vec<Vec<u32>> = chains
        .iter()
        .map(|chain| {
            let mut ids = Vec::new();
            assert!(interner.intern_all(chain, &mut ids));
            ids
        })
        .collect();
    let (mut abi, mut linked) = (Vec::new(), Vec::new());
    let (mut abi_decisions, mut linked_decisions) = (Vec::new(), Vec::new());
    // Interleave rounds so drift in machine speed hits both sides alike, and alternate
    // which side goes first, so neither always runs on the memory the other just freed.
    let rounds = rounds();
    for round in 0..rounds {
        if round % 2 == 0 {
            abi.push(through_abi(chains, &ids, &mut abi_decisions));
            linked.push(linked_statically(chains, &ids, &mut linked_decisions));
        } else {
            linked.push(linked_statically(chains, &ids, &mut linked_decisions));
            abi.push(through_abi(chains, &ids, &mut abi_decisions));
        }
        assert_eq!(
            abi_decisions, linked_decisions,
            "both paths must decide identically"
        );
    }
    // Each round runs both sides back to back, so the ratio of a pair is insensitive to
    // slow drifts in machine speed; the median pair ratio ignores the disturbed rounds.
    let mut ratios: Vec<f64> = abi.iter().zip(&linked).map(|(a, l)| a / l).collect();
    ratios.sort_by(f64::total_cmp);
    let median_ratio = ratios[ratios.len() / 2];
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let per = |secs: f64| secs * 1e9 / REQUESTS as f64;
    println!(
        "abi_overhead: lcp, {label}: {REQUESTS} requests x {rounds} rounds, {ENDPOINTS} endpoints"
    );
    println!(
        "  linked statically : {:7.1} ns per match+update (fastest round)",
        per(fastest(&linked))
    );
    println!(
        "  through the ABI   : {:7.1} ns per match+update (fastest round)",
        per(fastest(&abi))
    );
    println!(
        "  overhead          : {:+7.1}% (median of per-round ratios)",
        (median_ratio - 1.0) * 100.0
    );
}
