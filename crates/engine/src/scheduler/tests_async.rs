//! Async scheduling, with times worked out by hand: vLLM plans the next step while the GPU
//! runs this one, so a request arriving during a step joins the step after the next.

use super::tests::linear;
use super::*;

fn engine_config(async_scheduling: bool) -> EngineConfig {
    EngineConfig {
        async_scheduling,
        ..linear(100, 4, 64)
    }
}

fn engine(async_scheduling: bool) -> Engine {
    Engine::new(engine_config(async_scheduling))
}

/// Request 0 (4 prompt tokens, 10 out) prefills from 0 to 3 ms (1 + 4 × 0.5), then decodes
/// 2 ms a step. Request 1 (8 tokens) arrives at 4 ms, in the step from 3 to 5 ms. Planned
/// at the step's end, it prefills from 5 ms (1 + 8 × 0.5 + 2 = 7 ms, its first token at 12
/// ms); planned ahead, the step from 5 to 7 ms was planned at 3 ms without it, and it
/// prefills from 7 ms (first token at 14 ms).
#[test]
fn a_request_arriving_mid_step_joins_the_step_after_the_next() {
    for (ahead, cut_at, first_token) in [(false, 5, 12), (true, 7, 14)] {
        let ms = 1_000_000;
        let mut engine = engine(ahead);
        assert_eq!(
            engine.enqueue(Sequence::new(0, 4, 10, vec![]), 0),
            Some(3 * ms)
        );
        engine.finish_step(3 * ms);
        assert_eq!(
            engine.enqueue(Sequence::new(1, 8, 2, vec![]), 4 * ms),
            Some(cut_at * ms),
            "async {ahead}"
        );
        engine.finish_step(cut_at * ms);
        let end = engine.step_end().unwrap();
        engine.finish_step(end);
        let seq = engine.running.iter().find(|s| s.request == 1).unwrap();
        assert_eq!(seq.first_token_ns, Some(first_token * ms), "async {ahead}");
    }
}

/// Request 1 (8 tokens) arrives at 1 ms, during request 0's prefill (0 to 3 ms). Planned at
/// the step's end, it prefills from 3 ms (first token at 10 ms). Planned ahead, the step
/// from 3 ms was planned at 0 ms without it: that step decodes request 0 alone, and is one
/// step, not a run of them, so request 1 prefills from 5 ms (first token at 12 ms).
#[test]
fn a_deferred_request_cuts_the_decode_run_to_one_step() {
    let ms = 1_000_000;
    for (ahead, first_token) in [(false, 10), (true, 12)] {
        let mut engine = engine(ahead);
        engine.enqueue(Sequence::new(0, 4, 10, vec![]), 0);
        assert_eq!(engine.enqueue(Sequence::new(1, 8, 2, vec![]), ms), None);
        engine.finish_step(3 * ms);
        if ahead {
            let plan = engine.plan.as_ref().unwrap();
            assert!(plan.prefill.is_empty());
            assert_eq!((plan.steps, engine.step_end()), (1, Some(5 * ms)));
            engine.finish_step(5 * ms);
        }
        let end = engine.step_end().unwrap();
        engine.finish_step(end);
        let seq = engine.running.iter().find(|s| s.request == 1).unwrap();
        assert_eq!(seq.first_token_ns, Some(first_token * ms), "async {ahead}");
    }
}

/// An idle engine, or one whose step leaves nothing else to do, plans at once, with or
/// without planning ahead: request 0 (4 tokens, 1 out) ends with its prefill at 3 ms;
/// request 1 (8 tokens), queued at 1 ms, prefills from 3 ms to 8 ms either way.
#[test]
fn with_nothing_else_to_do_the_step_takes_what_waits() {
    let ms = 1_000_000;
    for ahead in [false, true] {
        let mut engine = engine(ahead);
        assert_eq!(
            engine.enqueue(Sequence::new(0, 4, 1, vec![]), 0),
            Some(3 * ms)
        );
        assert_eq!(engine.enqueue(Sequence::new(1, 8, 2, vec![]), ms), None);
        assert_eq!(engine.finish_step(3 * ms).len(), 1);
        assert_eq!(engine.step_end(), Some(8 * ms), "async {ahead}");
    }
}

/// V0 plans each step after the last: async scheduling is V1's.
#[test]
fn async_scheduling_is_refused_for_v0() {
    let config = EngineConfig {
        scheduler: crate::Scheduler::V0,
        ..engine_config(true)
    };
    let error = config.validate().unwrap_err();
    assert!(
        error.contains("`async_scheduling` needs `scheduler: v1`"),
        "{error}"
    );
}
