//! The scheduler speculating: the tokens each decode step yields, its cost, its budget.

use super::tests::linear;
use super::*;

/// Speculating 3 n-gram drafts accepted at 0.5 each yields 1 + 0.5 + 0.25 + 0.125 = 1.875
/// tokens a decode step. An 8-token prompt (1 + 8 × 0.5 = 5 ms; its step samples the
/// first token) then wants 9 more: the credit runs 1.875, 3.75, 5.625, 7.5, 9.375, so the
/// steps yield 1, 2, 2, 2, 2 tokens and the request ends after five 2 ms decode steps
/// (15 ms) where it took nine (23 ms). Each step verifies 4 tokens against the budget and
/// reserves room for them (3 + 4 = 7 tokens: 2 blocks of 4). EAGLE's drafts cost 3 passes of
/// 5% of the 2 ms decode step: 2.3 ms a step.
#[test]
fn speculative_decoding_yields_the_mean_accepted_tokens_a_step() {
    let spec = |method, draft_cost| crate::Speculative {
        method,
        num_tokens: 3,
        acceptance: vec![0.5],
        draft_cost,
    };
    let run = |speculative: Option<crate::Speculative>| -> (Vec<u64>, Vec<u32>, Engine) {
        let config = EngineConfig {
            speculative,
            ..linear(100, 4, 64)
        };
        let mut engine = Engine::new(config);
        let mut ends = vec![engine.enqueue(Sequence::new(0, 8, 10, vec![]), 0).unwrap()];
        let mut generated = Vec::new();
        loop {
            let end = *ends.last().unwrap();
            let done = engine.finish_step(end);
            generated.push(match done.first() {
                Some(seq) => seq.generated,
                None => engine.running[0].generated,
            });
            if !done.is_empty() {
                break;
            }
            ends.push(engine.step_end().unwrap());
        }
        (ends, generated, engine)
    };
    let (ends, generated, engine) = run(Some(spec(crate::speculative::Method::Ngram, None)));
    assert_eq!(generated, [1, 2, 4, 6, 8, 10]);
    assert_eq!(
        ends,
        [
            5_000_000, 7_000_000, 9_000_000, 11_000_000, 13_000_000, 15_000_000
        ]
    );
    assert_eq!(engine.speculated, (5, 9));
    let (plain, _, _) = run(None);
    assert_eq!(*plain.last().unwrap(), 5_000_000 + 9 * 2_000_000);
    let (eagle, _, _) = run(Some(spec(crate::speculative::Method::Eagle, None)));
    assert_eq!(eagle[1] - eagle[0], 2_300_000, "2 ms + 3 × 0.05 × 2 ms");
    // The verify pass's tokens count against the step's budget: with a budget of 3, a
    // decoding sequence verifies 2 drafts.
    let mut engine = Engine::new(EngineConfig {
        speculative: Some(spec(crate::speculative::Method::Ngram, None)),
        ..linear(100, 4, 3)
    });
    let end = engine.enqueue(Sequence::new(0, 2, 10, vec![]), 0).unwrap();
    engine.finish_step(end);
    let plan = engine.plan.as_ref().unwrap();
    assert_eq!(
        (plan.decode.as_slice(), plan.drafts.as_slice()),
        (&[0][..], &[2][..])
    );
}
