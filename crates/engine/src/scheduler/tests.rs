//! The engine's scheduler, step by step, with times worked out by hand.

use super::*;
use crate::host::HostTier;
use crate::step_time::{Experts, StepTime};

pub(super) fn linear(num_gpu_blocks: u32, max_num_seqs: u32, budget: u32) -> EngineConfig {
    EngineConfig {
        num_gpu_blocks,
        engine_block_size: 4,
        max_num_seqs,
        max_num_batched_tokens: budget,
        step_time: StepTime::Linear {
            overhead_ms: 1.0,
            prefill_ms_per_token: 0.5,
            decode_ms: 2.0,
        },
        kv_bytes_per_token: None,
        host_tier: None,
        shared_tier: None,
        scheduler: Default::default(),
        prefix_caching: true,
        max_paddings: None,
        lora: None,
        speculative: None,
        async_scheduling: false,
    }
}

#[test]
fn chunked_prefill_respects_the_token_budget() {
    // Budget 8 tokens a step; a 20-token prompt prefills in chunks 8, 8, 4.
    let mut engine = Engine::new(linear(100, 4, 8));
    let end = engine.enqueue(Sequence::new(0, 20, 2, vec![]), 0).unwrap();
    assert_eq!(end, 5_000_000, "1 + 8 × 0.5 ms");
    assert!(engine.finish_step(end).is_empty());
    let end2 = engine.step_end().unwrap();
    assert_eq!(end2 - end, 5_000_000);
    assert!(engine.finish_step(end2).is_empty());
    let end3 = engine.step_end().unwrap();
    assert_eq!(
        end3 - end2,
        3_000_000,
        "1 + 4 × 0.5 ms; the first token comes out"
    );
    assert!(engine.finish_step(end3).is_empty());
    assert_eq!(engine.running[0].first_token_ns, Some(end3));
    // One decode step (2 ms) makes the second and last token.
    let end4 = engine.step_end().unwrap();
    assert_eq!(end4 - end3, 2_000_000);
    let done = engine.finish_step(end4);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].generated, 2);
    assert_eq!(engine.step_end(), None);
    assert_eq!(engine.status().kv_blocks_used, 0);
}

#[test]
fn decode_and_admission_share_the_budget_and_sequence_limit() {
    // Budget 5: a decoding sequence takes 1 token, leaving 4 for the next prefill.
    let mut engine = Engine::new(linear(100, 2, 5));
    let end = engine.enqueue(Sequence::new(0, 4, 10, vec![]), 0).unwrap();
    engine.finish_step(end); // prefilled, first token; a decode run starts at `end`
    // Arrivals join at the next step boundary: the run is cut to one step.
    assert_eq!(
        engine.enqueue(Sequence::new(1, 8, 3, vec![]), end),
        Some(end + 2_000_000)
    );
    engine.enqueue(Sequence::new(2, 8, 3, vec![]), end);
    engine.finish_step(end + 2_000_000);
    let plan = engine.plan.as_ref().unwrap();
    assert!(!plan.pure_decode);
    // Decode (1) + the first 4 tokens of request 1; request 2 waits (max_num_seqs 2).
    assert_eq!(plan.prefill, vec![(1, 4)]);
    assert_eq!(engine.status().running, 2);
    assert_eq!(engine.status().waiting, 1);
}

#[test]
fn v0_runs_prefills_alone_and_whole_then_decodes() {
    // The same arrivals as above, budget 9, scheduled as vLLM V0 schedules them.
    let config = EngineConfig {
        scheduler: crate::Scheduler::V0,
        prefix_caching: true,
        ..linear(100, 3, 9)
    };
    let mut engine = Engine::new(config);
    let end = engine.enqueue(Sequence::new(0, 4, 10, vec![]), 0).unwrap();
    engine.finish_step(end);
    engine.enqueue(Sequence::new(1, 8, 3, vec![]), end);
    engine.enqueue(Sequence::new(2, 8, 3, vec![]), end);
    engine.finish_step(end + 2_000_000);
    // Requests wait: the step is request 1's whole prompt and no decode (request 2's
    // prompt would not fit the 1 token left; V1 would chunk it in).
    let plan = engine.plan.as_ref().unwrap();
    assert_eq!(plan.prefill, vec![(1, 8)]);
    assert!(plan.decode.is_empty());
    assert_eq!(plan.step_ns, 5_000_000, "1 + 8 × 0.5 ms");
    let next = engine.step_end().unwrap();
    engine.finish_step(next);
    let plan = engine.plan.as_ref().unwrap();
    assert_eq!(plan.prefill, vec![(2, 8)]);
    assert!(plan.decode.is_empty());
    // Nothing waits: every running sequence decodes.
    let next = engine.step_end().unwrap();
    engine.finish_step(next);
    let plan = engine.plan.as_ref().unwrap();
    assert!(plan.prefill.is_empty());
    assert_eq!(plan.decode, vec![0, 1, 2]);
}

#[test]
fn v0_with_padding_batches_prompts_padded_to_the_longest_within_the_padding_limit() {
    // Prompts of 10, 12, 20 and 8 tokens queued together, budget 40, at most 4 padding.
    let steps = |max_paddings: Option<u32>| -> Vec<(Vec<(usize, u32)>, u64)> {
        let config = EngineConfig {
            scheduler: crate::Scheduler::V0,
            max_paddings,
            ..linear(100, 8, 40)
        };
        let mut engine = Engine::new(config);
        for (i, prompt) in [10, 12, 20, 8].into_iter().enumerate() {
            engine.enqueue_batched(Sequence::new(i, prompt, 5, vec![]), 0);
        }
        let mut end = engine.start_if_idle(0).unwrap();
        let mut steps = Vec::new();
        while engine.status().waiting > 0 || steps.is_empty() {
            let plan = engine.plan.as_ref().unwrap();
            steps.push((plan.prefill.clone(), plan.step_ns));
            engine.finish_step(end);
            end = engine.step_end().unwrap();
        }
        let plan = engine.plan.as_ref().unwrap();
        steps.push((plan.prefill.clone(), plan.step_ns));
        steps
    };
    // Unpadded: 10 + 12 (20 more would pass 40), then 20 + 8.
    assert_eq!(
        steps(None),
        vec![
            (vec![(0, 10), (1, 12)], 12_000_000),
            (vec![(2, 20), (3, 8)], 15_000_000),
        ]
    );
    // Padded: 10 and 12 are computed as 2 × 12 tokens (2 of padding; 3 × 20 would pass
    // 40); 20 and 8 would take 12 of padding, over 4, so each goes alone.
    assert_eq!(
        steps(Some(4)),
        vec![
            (vec![(0, 10), (1, 12)], 13_000_000),
            (vec![(2, 20)], 11_000_000),
            (vec![(3, 8)], 5_000_000),
        ]
    );
}

#[test]
fn experts_cost_what_a_steps_tokens_touch() {
    let experts = Experts {
        count: 128,
        per_token: 8,
        ms: 0.5,
    };
    // One token touches its 8; many touch nearly all 128 (1 − (120/128)^64 = 98.4%).
    assert!((experts.touched(1) - 8.0).abs() < 1e-9);
    assert!((experts.touched(64) / 128.0 - 0.984).abs() < 1e-3);
    assert!(experts.touched(10_000) <= 128.0);
    let model = StepTime::Batched {
        overhead_ms: 1.0,
        prefill_ms_per_token: 0.0,
        decode_ms_per_seq: 0.0,
        context_ms_per_ktoken: 0.0,
        experts: Some(experts),
    };
    let decoding = |seqs| Batch {
        decode_seqs: seqs,
        ..Batch::default()
    };
    // 1 + 0.5 × 8 ms for one sequence; a batch of 16 is dearer, but not 16 times.
    assert_eq!(model.step_ns(&decoding(1)), 5_000_000);
    let sixteen = model.step_ns(&decoding(16)) as f64;
    assert!(sixteen > 5e6 && sixteen < 16.0 * 5e6, "{sixteen}");
    assert!(model.validate(2048, 128, 1 << 20).is_ok());
    let wrong = StepTime::Batched {
        overhead_ms: 1.0,
        prefill_ms_per_token: 0.0,
        decode_ms_per_seq: 0.0,
        context_ms_per_ktoken: 0.0,
        experts: Some(Experts {
            per_token: 200,
            ..experts
        }),
    };
    assert!(
        wrong
            .validate(2048, 128, 1 << 20)
            .unwrap_err()
            .contains("`per_token` (200)")
    );
}

#[test]
fn the_batched_model_charges_overhead_prompt_sequences_and_context() {
    let model = StepTime::Batched {
        overhead_ms: 5.0,
        prefill_ms_per_token: 0.1,
        decode_ms_per_seq: 0.2,
        context_ms_per_ktoken: 2.0,
        experts: None,
    };
    let batch = Batch {
        prefill_tokens: 100,
        decode_seqs: 10,
        context_tokens: 5000,
        attention_pairs: 0,
        decode_tokens: 0,
        kv_usage: 0.0,
    };
    // 5 + 10 + 2 + 10 ms.
    assert_eq!(model.step_ns(&batch), 27_000_000);
    assert!(model.validate(2048, 128, 1 << 20).is_ok());
    let batched = |overhead_ms, decode_ms_per_seq| StepTime::Batched {
        overhead_ms,
        prefill_ms_per_token: 0.1,
        decode_ms_per_seq,
        context_ms_per_ktoken: 2.0,
        experts: None,
    };
    let negative = batched(5.0, -0.1).validate(2048, 128, 1 << 20);
    assert!(negative.unwrap_err().contains("decode_ms_per_seq"));
    let free = batched(0.0, 0.2).validate(2048, 128, 1 << 20);
    assert!(free.unwrap_err().contains("positive"));
    // A longer context makes the same request finish later.
    let finish = |context_ms_per_ktoken| {
        let mut config = linear(1000, 4, 100);
        config.step_time = StepTime::Batched {
            overhead_ms: 1.0,
            prefill_ms_per_token: 0.01,
            decode_ms_per_seq: 0.5,
            context_ms_per_ktoken,
            experts: None,
        };
        let mut engine = Engine::new(config);
        let mut end = engine
            .enqueue(Sequence::new(0, 400, 20, vec![]), 0)
            .unwrap();
        loop {
            if !engine.finish_step(end).is_empty() {
                return end;
            }
            end = engine.step_end().unwrap();
        }
    };
    assert!(finish(50.0) > finish(0.0));
}

#[test]
fn without_a_prefix_cache_nothing_is_reused_or_published() {
    let config = EngineConfig {
        prefix_caching: false,
        ..linear(100, 4, 100)
    };
    let mut engine = Engine::new(config);
    let end = engine
        .enqueue(Sequence::new(0, 12, 1, vec![1, 2, 3]), 0)
        .unwrap();
    assert_eq!(engine.finish_step(end).len(), 1);
    assert_eq!(engine.kv.cached_prefix(&[1, 2, 3]), 0);
    let end = engine
        .enqueue(Sequence::new(1, 12, 1, vec![1, 2, 3]), end)
        .unwrap();
    assert_eq!(engine.running[0].hit_tokens, Some(0));
    // The whole prompt is computed again: 1 + 0.5 × 12 ms.
    let done = engine.finish_step(end);
    assert_eq!(done[0].hit_tokens, Some(0));
}

#[test]
fn a_second_request_reuses_the_first_ones_prefix() {
    let mut engine = Engine::new(linear(100, 4, 100));
    let end = engine
        .enqueue(Sequence::new(0, 12, 1, vec![1, 2, 3]), 0)
        .unwrap();
    assert_eq!(engine.finish_step(end).len(), 1);
    // Same first two blocks, different third: 8 of 12 tokens are reused.
    let end = engine
        .enqueue(Sequence::new(1, 12, 1, vec![1, 2, 9]), end)
        .unwrap();
    assert_eq!(engine.running[0].hit_tokens, Some(8));
    let done = engine.finish_step(end);
    assert_eq!(done[0].hit_tokens, Some(8));
    // Fully cached prompt: the last token is still computed.
    engine.enqueue(Sequence::new(2, 12, 1, vec![1, 2, 3]), end);
    assert_eq!(
        engine.running[0].hit_tokens,
        Some(8),
        "11 of 12 is capped to full blocks"
    );
}

#[test]
fn macro_steps_skip_identical_decodes_and_arrivals_cut_them() {
    let mut engine = Engine::new(linear(100, 4, 100));
    let end = engine.enqueue(Sequence::new(0, 4, 9, vec![]), 0).unwrap();
    engine.finish_step(end);
    // 8 tokens left: the engine reserves the blocks they need (12 tokens: 3 blocks) and
    // runs the 8 decode steps as one macro step.
    let plan = engine.plan.as_ref().unwrap();
    assert!(plan.pure_decode);
    assert_eq!(plan.steps, 8);
    assert_eq!(engine.status().kv_blocks_used, 3);
    assert_eq!(engine.step_end(), Some(end + 16_000_000));
    let run_start = end;
    // An arrival 1 ms in cuts the run at the first boundary (2 ms).
    let cut = engine
        .enqueue(Sequence::new(1, 4, 1, vec![]), run_start + 1_000_000)
        .unwrap();
    assert_eq!(cut, run_start + 2_000_000);
}

#[test]
fn out_of_blocks_preempts_the_newest_sequence() {
    // 3 blocks of 4 tokens. Request 0 prefills alone (1 block); the next step it decodes
    // (a 2nd block) while request 1 is admitted (the 3rd). Then request 1 needs a 4th.
    let mut engine = Engine::new(linear(3, 4, 100));
    engine.enqueue(Sequence::new(0, 4, 8, vec![]), 0);
    engine.enqueue(Sequence::new(1, 4, 8, vec![]), 0);
    let end = engine.step_end().unwrap();
    engine.finish_step(end);
    assert_eq!((engine.preemptions, engine.status().running), (0, 2));
    assert_eq!(engine.status().kv_blocks_used, 3);
    let end = engine.step_end().unwrap();
    engine.finish_step(end);
    assert_eq!(engine.preemptions, 1);
    assert_eq!(engine.status().running, 1);
    assert_eq!(engine.status().waiting, 1);
    assert_eq!(
        engine.waiting[0].request, 1,
        "the most recently admitted went back"
    );
}

#[test]
fn a_block_evicted_to_the_host_tier_costs_its_load_not_its_prefill() {
    // Three GPU blocks of 4 tokens; a host tier of 8 blocks, 1,000 bytes a token loaded at
    // 1 GB/s (4 µs a block) plus 1 ms to the first byte, stored in no time (1,000 TB/s;
    // the next test times the stores).
    let mut config = linear(3, 4, 100);
    config.kv_bytes_per_token = Some(1_000);
    config.host_tier = Some(HostTier {
        blocks: 8,
        d2h_gbps: 1e6,
        h2d_gbps: 1.0,
        latency_ms: 1.0,
        blocking: false,
    });
    let mut engine = Engine::new(config);
    // Request 0: 8 tokens (two blocks), computed and stored to the host as they are.
    let end = engine
        .enqueue(Sequence::new(0, 8, 1, vec![1, 2]), 0)
        .unwrap();
    assert_eq!(end, 5_000_000, "1 + 8 × 0.5 ms");
    assert_eq!(engine.finish_step(end).len(), 1);
    assert_eq!(engine.host().unwrap().len(), 2);
    // Request 1 (12 other tokens) takes all three GPU blocks: 1 and 2 leave the GPU.
    let end = engine
        .enqueue(Sequence::new(1, 12, 1, vec![7, 8, 9]), end)
        .unwrap();
    engine.finish_step(end);
    assert_eq!(engine.cached_prefix_tokens(&[1, 2]), 0, "gone from the GPU");
    assert_eq!(
        engine.tier_prefix_tokens(&[1, 2]),
        [0, 8, 0],
        "still in the host tier"
    );
    // Request 2: 9 tokens sharing request 0's two blocks, both full before its last
    // token: loaded, 8 tokens × 1,000 bytes at 1 GB/s = 8 µs, + 1 ms. It waits for the
    // load; nothing is computed meanwhile.
    let start = end;
    let wait = engine
        .enqueue(Sequence::new(2, 9, 1, vec![1, 2]), start)
        .unwrap();
    assert_eq!(wait - start, 1_008_000);
    engine.finish_step(wait);
    // Then the one remaining token: 1 + 0.5 ms, not 1 + 9 × 0.5 ms.
    let end = engine.step_end().unwrap();
    assert_eq!(end - wait, 1_500_000);
    let done = engine.finish_step(end);
    assert_eq!(done[0].hit_tokens, Some(8));
    assert_eq!(done[0].host_hit_tokens, Some(8));
    assert_eq!(done[0].load_ns, 1_008_000);
    assert_eq!(engine.cached_prefix_tokens(&[1, 2]), 8, "back on the GPU");
}

#[test]
fn a_store_takes_its_turn_on_the_lane_and_holds_the_engine_until_its_gpu_blocks_are_free() {
    // Three GPU blocks of 4 tokens, 1,000 bytes a token: a block is 4,000 bytes, 4 µs each
    // way at 1 GB/s, no latency.
    let mut config = linear(3, 4, 100);
    config.kv_bytes_per_token = Some(1_000);
    config.host_tier = Some(HostTier {
        blocks: 8,
        d2h_gbps: 1.0,
        h2d_gbps: 1.0,
        latency_ms: 0.0,
        blocking: false,
    });
    let mut engine = Engine::new(config);
    // Request 0 (blocks 1, 2 in GPU blocks 0, 1) computes in 5 ms; its two blocks go to the
    // host as one 8 µs store, loadable from 5.008 ms.
    let end = engine
        .enqueue(Sequence::new(0, 8, 1, vec![1, 2]), 0)
        .unwrap();
    assert_eq!(end, 5_000_000);
    engine.finish_step(end);
    assert_eq!(engine.host().unwrap().ready_at(2), Some(5_008_000));
    // Request 1 (blocks 7, 8) gets GPU blocks 2 and 1; the store still reads block 1, so the
    // engine's step starts when it ends: 8 µs, then 1 + 4 ms of prefill.
    let end = engine
        .enqueue(Sequence::new(1, 8, 1, vec![7, 8]), end)
        .unwrap();
    assert_eq!(end, 5_008_000 + 5_000_000, "the fence, then the step");
    engine.finish_step(end);
    // Request 2 (blocks 1, 2, and a last token): block 1 is still in GPU block 0, block 2
    // only in the host. Its new GPU blocks (1 and 2) are read by request 1's store until
    // 10.016 ms; then the 4 µs load: it waits 12 µs, then computes one token.
    let wait = engine
        .enqueue(Sequence::new(2, 9, 1, vec![1, 2]), end)
        .unwrap();
    assert_eq!(wait - end, 12_000);
    engine.finish_step(wait);
    let done_at = engine.step_end().unwrap();
    assert_eq!(done_at - wait, 1_500_000);
    let done = engine.finish_step(done_at);
    assert_eq!(
        (done[0].hit_tokens, done[0].host_hit_tokens, done[0].load_ns),
        (Some(8), Some(4), 12_000)
    );
}

#[test]
fn the_shared_tier_serves_another_engines_block_over_the_loading_engines_link() {
    // Two engines sharing one store of 16 blocks, 1,000 bytes a token. A reaches it at
    // 1 GB/s; B at 2 GB/s plus 0.5 ms to the first byte, and B has a host tier of its own
    // (1 GB/s, 1 ms) and three GPU blocks of 4 tokens.
    let link = |h2d_gbps, latency_ms| HostTier {
        blocks: 16,
        d2h_gbps: 1.0,
        h2d_gbps,
        latency_ms,
        blocking: false,
    };
    let mut a = linear(8, 4, 100);
    a.kv_bytes_per_token = Some(1_000);
    a.shared_tier = Some(link(1.0, 0.0));
    let mut b = linear(3, 4, 100);
    b.kv_bytes_per_token = Some(1_000);
    b.shared_tier = Some(link(2.0, 0.5));
    b.host_tier = Some(HostTier {
        latency_ms: 1.0,
        blocking: false,
        ..link(1.0, 0.0)
    });
    let mut a = Engine::new(a);
    let mut b = Engine::new(b);
    b.join_shared(a.shared().unwrap());
    assert!(a.shared().unwrap().same_as(b.shared().unwrap()));
    let run = |engine: &mut Engine, seq: Sequence, at: u64| {
        let mut end = engine.enqueue(seq, at).unwrap();
        loop {
            let done = engine.finish_step(end);
            if let Some(seq) = done.into_iter().next() {
                return (seq, end);
            }
            end = engine.step_end().unwrap();
        }
    };
    // B computes block 1 (a 5-token prompt): its host tier and the store hold it.
    let (_, t) = run(&mut b, Sequence::new(0, 5, 1, vec![1]), 0);
    // A computes block 2 after block 1, which it loads from the store once B's store of it
    // ends (4,000 bytes over B's 1 GB/s, 4 µs), over its own 1 GB/s: 4 + 4 µs.
    let (seq, t) = run(&mut a, Sequence::new(1, 9, 1, vec![1, 2]), t);
    assert_eq!((seq.shared_hit_tokens, seq.load_ns), (Some(4), 8_000));
    assert_eq!(a.shared().unwrap().lock().len(), 2);
    // B's GPU fills with other blocks; 1 and 2 are gone from it.
    let (_, t) = run(&mut b, Sequence::new(2, 12, 1, vec![7, 8, 9]), t);
    assert_eq!(b.tier_prefix_tokens(&[1, 2]), [0, 4, 4]);
    // B reuses both: block 1 from its host tier (1 ms + 4 µs), then block 2, which only A
    // computed, from the store over B's link (0.5 ms + 2 µs), one after the other; first
    // its new GPU blocks must be free of the store of request 2's three blocks, which
    // reads them for 12 µs.
    let wait = b.enqueue(Sequence::new(3, 9, 1, vec![1, 2]), t).unwrap();
    assert_eq!(wait - t, 12_000 + 1_004_000 + 502_000);
    b.finish_step(wait);
    let end = b.step_end().unwrap();
    assert_eq!(
        end - wait,
        1_500_000,
        "only the last token computed: 1 + 0.5 ms"
    );
    let done = b.finish_step(end);
    assert_eq!(done[0].hit_tokens, Some(8));
    assert_eq!(
        (done[0].host_hit_tokens, done[0].shared_hit_tokens),
        (Some(4), Some(4))
    );
    // A block B loaded from the store is in its host tier now.
    assert_eq!(b.host().unwrap().run(&[1, 2]), 2);
}

#[test]
fn polynomial_matches_dynamos_published_coefficients() {
    let model = EngineConfig::dynamo().step_time;
    // P(1000) = 4.21e-7·1e6 + 15.18 + 16.5 = 32.101 ms; no decode.
    let batch = |prefill_tokens, decode_seqs| Batch {
        prefill_tokens,
        decode_seqs,
        context_tokens: 0,
        attention_pairs: 0,
        decode_tokens: 0,
        kv_usage: 0.5,
    };
    assert_eq!(model.step_ns(&batch(1000, 0)), 32_101_000);
    // D(0.5) = -6.435 + 27.005 + 5.74 = 26.31 ms.
    assert_eq!(model.step_ns(&batch(0, 1)), 26_310_000);
}

#[test]
fn requests_queued_together_on_an_idle_engine_share_its_first_step() {
    // `enqueue` starts a step at the first request; `enqueue_batched` waits for
    // `start_if_idle`, so both 4-token prompts are prefilled in one step.
    let mut alone = Engine::new(linear(16, 4, 100));
    let first = alone.enqueue(Sequence::new(0, 4, 1, vec![]), 0).unwrap();
    assert_eq!(alone.enqueue(Sequence::new(1, 4, 1, vec![]), 0), None);
    assert_eq!(alone.finish_step(first).len(), 1);
    let mut batched = Engine::new(linear(16, 4, 100));
    assert!(batched.is_idle());
    assert_eq!(
        batched.enqueue_batched(Sequence::new(0, 4, 1, vec![]), 0),
        None
    );
    assert_eq!(
        batched.enqueue_batched(Sequence::new(1, 4, 1, vec![]), 0),
        None
    );
    let end = batched.start_if_idle(0).unwrap();
    assert_eq!(batched.start_if_idle(0), None, "one step at a time");
    assert_eq!(batched.finish_step(end).len(), 2);
}

#[test]
fn the_predicted_ttft_is_what_the_scheduler_then_does() {
    // Budget 8: A's 20 tokens prefill as 8, 8, 4; B (12 tokens, enqueued 1 ms in) shares
    // the third step (10 to 15 ms, 4 of its tokens), then its 7 tokens beside A's
    // decode (1 + 3.5 + 2 ms, to 21.5 ms), then its last (1 + 0.5 ms): first token at 23.
    let mut engine = Engine::new(linear(100, 4, 8));
    let mut end = engine.enqueue(Sequence::new(0, 20, 2, vec![]), 0).unwrap();
    let predicted = engine.predict_ttft_ns(12, &[], 1_000_000);
    assert_eq!(
        predicted, 22_000_000,
        "4 ms left, then 5 + 5 + 6.5 + 1.5 ms"
    );
    engine.enqueue(Sequence::new(1, 12, 2, vec![]), 1_000_000);
    let mut firsts = Vec::new();
    while firsts.iter().all(|r| *r != 1) {
        engine.finish_step(end);
        engine.take_first_tokens(&mut firsts);
        if firsts.contains(&1) {
            break;
        }
        end = engine.step_end().expect("still working");
    }
    assert_eq!(end - 1_000_000, predicted, "B's first token came out then");
}

#[test]
fn a_cached_prefix_shortens_the_predicted_ttft() {
    let mut engine = Engine::new(linear(100, 4, 64));
    let chain = [11, 12, 13, 14];
    let end = engine
        .enqueue(Sequence::new(0, 16, 1, chain.to_vec()), 0)
        .unwrap();
    assert_eq!(engine.predict_ttft_ns(16, &chain, 0), end + 9_000_000);
    engine.finish_step(end);
    let idle = engine.step_end().map_or(end, |e| {
        engine.finish_step(e);
        e
    });
    // Idle, with the prompt's first 3 blocks cached (the last token is always computed).
    assert_eq!(
        engine.predict_ttft_ns(16, &chain, idle),
        3_000_000,
        "1 + 4 × 0.5 ms"
    );
    assert_eq!(
        engine.predict_ttft_ns(16, &[99], idle),
        9_000_000,
        "1 + 16 × 0.5 ms"
    );
    assert_eq!(engine.predict_tpot_ns(16), 2_000_000, "a decode step: 2 ms");
}

/// Runs `arrivals` (time, sequence) to the end: each request's (first token, finish), ns.
fn run_all(engine: &mut Engine, mut arrivals: Vec<(u64, Sequence)>) -> Vec<(u64, u64)> {
    arrivals.reverse();
    let mut done = vec![(0, 0); arrivals.len()];
    loop {
        let arrival = arrivals.last().map(|(at, _)| *at);
        match (arrival, engine.step_end()) {
            (Some(at), end) if end.is_none_or(|end| at < end) => {
                let (at, seq) = arrivals.pop().expect("an arrival");
                engine.enqueue(seq, at);
            }
            (_, Some(end)) => {
                for seq in engine.finish_step(end) {
                    done[seq.request] = (seq.first_token_ns.expect("a first token"), end);
                }
            }
            (None, None) => return done,
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
}

fn with_lora(slots: u32, load_ms: f64, step_overhead: f64) -> EngineConfig {
    EngineConfig {
        lora: Some(crate::LoraConfig {
            slots,
            load_ms,
            step_overhead,
        }),
        ..linear(100, 4, 64)
    }
}

fn of_adapter(request: usize, adapter: u32, prompt: u32, output: u32) -> Sequence {
    Sequence {
        adapter,
        ..Sequence::new(request, prompt, output, vec![])
    }
}

#[test]
fn a_cold_adapter_waits_for_its_load_a_warm_one_does_not() {
    let mut engine = Engine::new(with_lora(1, 10.0, 0.0));
    let done = run_all(
        &mut engine,
        vec![
            (0, of_adapter(0, 1, 4, 1)),
            (20_000_000, of_adapter(1, 1, 4, 1)),
            (30_000_000, of_adapter(2, 2, 4, 1)),
        ],
    );
    // A prefill of 4 tokens is 1 + 2 ms; a load 10 ms.
    assert_eq!(done[0].0, 13_000_000, "loaded, then prefilled");
    assert_eq!(done[1].0, 23_000_000, "warm");
    assert_eq!(done[2].0, 43_000_000, "adapter 2 evicts 1 and loads");
    let status = engine.lora_status().unwrap();
    assert_eq!((status.loads, status.evictions, status.active), (2, 1, 0));
    assert!(engine.adapter_resident(2) && !engine.adapter_resident(1));
}

#[test]
fn a_request_whose_adapter_has_no_slot_is_passed_over_until_one_frees() {
    let mut engine = Engine::new(with_lora(1, 0.0, 0.0));
    let done = run_all(
        &mut engine,
        vec![
            (0, of_adapter(0, 1, 4, 10)),
            (1_000_000, of_adapter(1, 2, 4, 1)),
            (1_000_000, of_adapter(2, 0, 4, 1)),
        ],
    );
    let (a, b, base) = (done[0], done[1], done[2]);
    assert!(base.0 < a.1, "the base-model request went ahead: {done:?}");
    assert!(b.0 > a.1, "adapter 2 waited for adapter 1's slot: {done:?}");
}

#[test]
fn each_adapter_in_a_batch_slows_its_step() {
    let mut engine = Engine::new(with_lora(2, 0.0, 0.5));
    let done = run_all(&mut engine, vec![(0, of_adapter(0, 1, 4, 1))]);
    assert_eq!(done[0].0, 4_500_000, "3 ms × (1 + 0.5)");
    let mut base = Engine::new(with_lora(2, 0.0, 0.5));
    let done = run_all(&mut base, vec![(0, of_adapter(0, 0, 4, 1))]);
    assert_eq!(done[0].0, 3_000_000, "the base model pays nothing");
}

#[test]
fn the_adapters_in_use_are_told_apart_as_running_and_waiting() {
    let mut engine = Engine::new(with_lora(1, 0.0, 0.0));
    assert_eq!(engine.lora_adapters(), Some((vec![], vec![])));
    engine.enqueue(of_adapter(0, 1, 4, 10), 0);
    engine.enqueue(of_adapter(1, 2, 4, 1), 0);
    engine.enqueue(of_adapter(2, 1, 4, 1), 0);
    engine.enqueue(of_adapter(3, 0, 4, 1), 0);
    assert_eq!(
        engine.lora_adapters(),
        Some((vec![1], vec![1, 2])),
        "adapter 1 runs and waits; the base model is no adapter"
    );
    let end = engine.step_end().expect("a step in flight");
    engine.finish_step(end);
    assert_eq!(
        engine.lora_adapters(),
        Some((vec![1], vec![2])),
        "the second request of adapter 1 joined the batch; adapter 2 has no slot"
    );
    assert_eq!(Engine::new(linear(100, 4, 64)).lora_adapters(), None);
}

#[test]
fn a_forecast_waits_for_the_adapter_to_load() {
    let mut engine = Engine::new(with_lora(1, 10.0, 0.0));
    assert_eq!(
        engine.adapter_wait_ns(1, 0),
        10_000_000,
        "cold: a whole load"
    );
    assert_eq!(
        engine.adapter_wait_ns(0, 0),
        0,
        "the base model loads nothing"
    );
    engine.enqueue(of_adapter(0, 1, 4, 1), 0);
    assert_eq!(engine.adapter_wait_ns(1, 4_000_000), 6_000_000, "loading");
    assert_eq!(engine.adapter_wait_ns(1, 12_000_000), 0, "loaded");
    assert_eq!(Engine::new(linear(100, 4, 64)).adapter_wait_ns(1, 0), 0);
}

#[test]
fn a_forecast_waits_for_a_pinned_slot_to_free() {
    let mut engine = Engine::new(with_lora(1, 10.0, 0.0));
    engine.enqueue(of_adapter(0, 1, 4, 5), 0);
    let step = engine.predict_tpot_ns(1);
    assert_eq!(
        engine.adapter_wait_ns(2, 0),
        5 * step + 10_000_000,
        "adapter 1's request decodes its 5 tokens, then adapter 2 loads"
    );
}

#[test]
fn a_request_fits_when_its_tokens_take_no_more_blocks_than_the_cache_has() {
    // 5 blocks of 4 tokens: 20 tokens of room.
    let engine = Engine::new(linear(5, 8, 64));
    assert_eq!(engine.room_tokens(), 20);
    assert!(engine.can_ever_fit(16, 4), "20 tokens, 5 blocks");
    assert!(!engine.can_ever_fit(16, 5), "21 tokens, 6 blocks");
    assert!(
        !engine.can_ever_fit(20, 0),
        "the output counts as a token at least"
    );
    assert!(
        engine.can_ever_fit(0, 19),
        "the prompt counts as a token at least"
    );
    assert!(!engine.can_ever_fit(u32::MAX, u32::MAX), "no overflow");
}

/// Requests whose first two blocks are one shared prefix and whose other two are their own,
/// told so or not, through a cache that preempts: the same steps, events and evictions.
/// Told, without events recorded, their own blocks are anonymous (`KvCache::allocate_anon`),
/// named when preempted: the same steps and evictions again.
#[test]
fn a_sequence_told_which_blocks_are_its_own_runs_as_one_not_told() {
    let run = |told: bool, record: bool| {
        let mut engine = Engine::new(linear(14, 4, 100));
        if record {
            engine.record_kv_events();
        }
        let arrivals = (0..6u64)
            .map(|r| {
                let hashes = vec![100, 101, 1_000 + r * 10, 1_001 + r * 10];
                let seq = Sequence::new(r as usize, 16, 14, hashes);
                (r * 3_000_000, if told { seq.shared_blocks(2) } else { seq })
            })
            .collect();
        let done = run_all(&mut engine, arrivals);
        let mut events = Vec::new();
        engine.take_kv_events(&mut events);
        (done, events, engine.preemptions, engine.evictions())
    };
    let (told, not_told) = (run(true, true), run(false, true));
    assert!(told.2 > 0, "the cache preempts");
    assert!(!told.1.is_empty());
    assert_eq!(told, not_told);
    let anonymous = run(true, false);
    assert_eq!(anonymous, (told.0, Vec::new(), told.2, told.3));
}
