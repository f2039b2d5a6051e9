//! A blocking tier (LMCache's connector), with times worked out by hand: a step stores the
//! blocks it completes before it ends, and a load holds back the whole step its request
//! joins, the other requests' decodes with it.

use super::tests::linear;
use super::*;
use crate::host::HostTier;

/// Eight GPU blocks of 4 tokens, 1,000 bytes a token (4,000 bytes a block, 4 µs each way
/// at 1 GB/s), a blocking host tier of 16 blocks with 1 ms to a load's first byte. Steps:
/// 1 ms + 0.5 ms a prefilled token, 2 ms a decode.
fn engine() -> Engine {
    let mut config = linear(8, 4, 64);
    config.kv_bytes_per_token = Some(1_000);
    config.host_tier = Some(HostTier {
        blocks: 16,
        d2h_gbps: 1.0,
        h2d_gbps: 1.0,
        latency_ms: 1.0,
        blocking: true,
    });
    Engine::new(config)
}

#[test]
fn a_blocking_tier_stores_within_the_step_and_loads_before_it() {
    let us = 1_000;
    let mut engine = engine();
    // A (8 tokens, blocks 1 and 2): 1 + 8 × 0.5 ms, then its two blocks stored, 8 µs.
    let end = engine.enqueue(Sequence::new(0, 8, 1, vec![1, 2]), 0);
    assert_eq!(end, Some(5_008 * us));
    assert_eq!(engine.finish_step(5_008 * us).len(), 1);
    assert_eq!(
        engine.host().unwrap().ready_at(2),
        Some(5_008 * us),
        "stored by the step's end"
    );
    // B (32 tokens) takes all eight GPU blocks, so 1 and 2 are left only in the host tier:
    // 1 + 16 ms, then 32 µs of stores. No store fences the next step: each ended in its own.
    let b: Vec<u64> = (10..18).collect();
    let end = engine.enqueue(Sequence::new(1, 32, 1, b), 5_008 * us);
    assert_eq!(end, Some(22_040 * us));
    engine.finish_step(22_040 * us);
    assert_eq!(engine.tier_prefix_tokens(&[1, 2]), [0, 8, 0]);
    // C (4 tokens, 4 out): 1 + 2 ms and a 4 µs store, then a run of three 2 ms decodes,
    // cut to one by D's arrival at 26.044 ms.
    assert_eq!(
        engine.enqueue(Sequence::new(2, 4, 4, vec![20]), 22_040 * us),
        Some(25_044 * us)
    );
    engine.finish_step(25_044 * us);
    assert_eq!(engine.step_end(), Some(31_044 * us));
    let d = Sequence::new(3, 9, 1, vec![1, 2]);
    assert_eq!(engine.enqueue(d, 26_044 * us), Some(27_044 * us));
    engine.finish_step(27_044 * us);
    // D's two blocks come from the host tier, 1 ms + 8 µs; the step (C's decode and D's
    // last token, 1 + 0.5 + 2 ms) starts once they are in: C waits for D's load.
    assert_eq!(engine.step_end(), Some((28_052 + 3_500) * us));
    let done = engine.finish_step(31_552 * us);
    assert_eq!(done.len(), 1, "D, its one token out");
    assert_eq!(
        (done[0].hit_tokens, done[0].host_hit_tokens, done[0].load_ns),
        (Some(8), Some(8), 1_008 * us)
    );
    assert_eq!(
        engine.status().running,
        1,
        "C, three of its four tokens out"
    );
}
