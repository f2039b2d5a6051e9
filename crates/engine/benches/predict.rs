//! The cost of the engine's forecast (`Engine::predict_ttft_ns` and `predict_tpot_ns`),
//! what the simulating router (`sim-latency`) makes the host compute once per candidate
//! endpoint per decision, on engines of the `dynamo` preset in three states: idle, busy
//! (32 running, 16 waiting) and saturated (its `max_num_seqs` running, 64 waiting), with
//! prompts of 4,000 tokens in 64-token blocks sharing a 1,000-token prefix.
//!
//! Run: `cargo bench -p routerlab-engine --bench predict`.

#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use routerlab_engine::{Engine, EngineConfig, Sequence};

/// Forecasts timed per state.
const CALLS: u32 = 20_000;

fn chain(request: u64, blocks: u64) -> Vec<u64> {
    // The first 15 blocks (960 tokens) shared, the rest the request's own.
    (0..blocks)
        .map(|b| if b < 15 { b + 1 } else { (request << 20) + b })
        .collect()
}

/// An engine of the preset with `admitted` requests enqueued and stepped until they run,
/// then `waiting` more enqueued.
fn engine(admitted: u64, waiting: u64) -> Engine {
    let mut engine = Engine::new(EngineConfig::dynamo());
    let mut now = 0;
    for r in 0..admitted {
        if let Some(end) = engine.enqueue(Sequence::new(r as usize, 4000, 400, chain(r, 62)), now) {
            now = end;
        }
    }
    // Step until everything admitted has its first token.
    while engine.status().waiting > 0 || engine.running().iter().any(|s| s.first_token_ns.is_none())
    {
        let Some(end) = engine.step_end() else { break };
        now = end;
        engine.finish_step(now);
    }
    for r in admitted..admitted + waiting {
        engine.enqueue(Sequence::new(r as usize, 4000, 400, chain(r, 62)), now);
    }
    engine
}

fn main() {
    let config = EngineConfig::dynamo();
    let seats = u64::from(config.max_num_seqs);
    let request = chain(1 << 30, 62);
    println!("state                         running  waiting  ns/forecast  forecast TTFT ms");
    for (name, admitted, waiting) in [("idle", 0, 0), ("busy", 32, 16), ("saturated", seats, 64)] {
        let engine = engine(admitted, waiting);
        let status = engine.status();
        let now = engine.step_in_flight().map_or(0, |(start, _, _)| start);
        let start = Instant::now();
        let mut sum = 0u64;
        for _ in 0..CALLS {
            sum =
                sum.wrapping_add(engine.predict_ttft_ns(black_box(4000), black_box(&request), now));
            sum = sum.wrapping_add(engine.predict_tpot_ns(black_box(4000)));
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(CALLS);
        black_box(sum);
        let ttft = engine.predict_ttft_ns(4000, &request, now) as f64 / 1e6;
        println!(
            "{name:<29} {:>7}  {:>7}  {ns:>11.0}  {ttft:>16.1}",
            status.running, status.waiting
        );
    }
}
