//! A forecast of a request's time to first token and time per output token on one engine,
//! were it enqueued now, from an [`Outlook`] of what the engine holds: what a simulating
//! router asks each candidate (ABI 1.4 `predict`). The timed replay builds the outlook from
//! the engine itself ([`Engine::predict_ttft_ns`](crate::Engine::predict_ttft_ns)); `serve`
//! builds it from its own books of what it sent each endpoint.
//!
//! It forecasts, without changing anything, the steps the scheduler would run from here:
//! the rest of the step in flight, then chunked prefills in FIFO order of everything queued
//! ahead, each taking one of `max_num_seqs` seats when it starts, and then the request's
//! own uncached prompt. Each step shares its token budget with one token for every decoding
//! sequence; a sequence decodes once its prefill ends and leaves, freeing its seat, after
//! its output tokens; the step-time model prices each step. What it does not foresee:
//! waits for KV blocks to free, preemptions, host-tier loads, V0's prefill-only steps, and
//! requests that arrive after this one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::EngineConfig;
use crate::step_time::Batch;

/// Steps forecast one by one; a longer queue's remaining steps are priced as the last.
pub const MAX_FORECAST_STEPS: u64 = 1024;

/// A decoder that decodes through the whole forecast (its output length is unknown).
pub const DECODES_THROUGH: u64 = u64::MAX;

/// One prefill queued ahead of the request, in the scheduler's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queued {
    /// Prompt tokens it still has to compute.
    pub tokens: u64,
    /// Output tokens it decodes after the one its prefill samples.
    pub decodes: u64,
    /// Whether it already holds one of the `max_num_seqs` seats.
    pub seated: bool,
}

/// What one engine holds now, as the forecast needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outlook {
    /// Nanoseconds left of the step in flight.
    pub step_left_ns: u64,
    /// The prefills ahead, in order.
    pub queue: VecDeque<Queued>,
    /// For each decoding sequence, the forecast step after which it finishes (counted from
    /// 1; [`DECODES_THROUGH`] for never).
    pub decoders: Vec<u64>,
    /// Seats held by sequences other than the decoders (the seated ones of `queue`, and
    /// any the forecast should treat as never leaving).
    pub seated_others: u64,
    /// Tokens of context the engine's sequences attend to.
    pub context_tokens: u64,
    /// KV-cache usage, 0 to 1.
    pub kv_usage: f64,
}

/// Predicted nanoseconds to the first token of a request whose uncached prompt is
/// `own_tokens` (at least 1), queued behind `outlook`, on an engine of `config`.
pub fn ttft_ns(config: &EngineConfig, outlook: Outlook, own_tokens: u64) -> u64 {
    let Outlook {
        step_left_ns: mut ttft,
        mut queue,
        decoders,
        seated_others,
        mut context_tokens,
        kv_usage,
    } = outlook;
    let mut seated = seated_others + decoders.len() as u64;
    let mut decoders: BinaryHeap<Reverse<u64>> = decoders.into_iter().map(Reverse).collect();
    queue.push_back(Queued {
        tokens: own_tokens.max(1),
        decodes: 0,
        seated: false,
    });
    let budget = u64::from(config.max_num_batched_tokens);
    let seats = u64::from(config.max_num_seqs);
    let mut step = 0u64;
    loop {
        let decoding = decoders.len() as u64;
        let mut room = budget.saturating_sub(decoding);
        let mut prefill = 0u64;
        let mut pos = 0;
        let mut own_done = false;
        while room > 0 && pos < queue.len() {
            let Queued {
                tokens: left,
                decodes,
                seated: has_seat,
            } = queue[pos];
            if !has_seat {
                if seated >= seats {
                    break;
                }
                seated += 1;
                queue[pos].seated = true;
            }
            let chunk = left.min(room);
            room -= chunk;
            prefill += chunk;
            if chunk == left {
                if pos + 1 == queue.len() {
                    own_done = true;
                } else if decodes > 0 {
                    decoders.push(Reverse(step.saturating_add(1).saturating_add(decodes)));
                } else {
                    seated -= 1;
                }
                queue.remove(pos);
            } else {
                queue[pos].tokens -= chunk;
                pos += 1;
            }
        }
        context_tokens += prefill + decoding;
        let step_ns = config.step_time.step_ns(&Batch {
            prefill_tokens: prefill,
            decode_seqs: decoding,
            context_tokens,
            attention_pairs: 0,
            decode_tokens: 0,
            kv_usage,
        });
        step += 1;
        if own_done {
            return ttft.saturating_add(step_ns);
        }
        if step == MAX_FORECAST_STEPS {
            // The rest priced as this step, at the budget's pace.
            let left: u64 = queue.iter().map(|e| e.tokens).sum();
            let steps = left.div_ceil(budget.saturating_sub(decoding).max(1));
            return ttft.saturating_add(step_ns.saturating_mul(steps + 1));
        }
        ttft = ttft.saturating_add(step_ns);
        while decoders.peek().is_some_and(|Reverse(end)| *end <= step) {
            decoders.pop();
            seated = seated.saturating_sub(1);
        }
    }
}

/// Predicted nanoseconds per output token of a request that joins a decode batch of
/// `batch_seqs` sequences (it included; capped at `max_num_seqs`) attending to
/// `context_tokens`, on an engine of `config` whose KV usage is `kv_usage`.
pub fn tpot_ns(config: &EngineConfig, batch_seqs: u64, context_tokens: u64, kv_usage: f64) -> u64 {
    config.step_time.step_ns(&Batch {
        prefill_tokens: 0,
        decode_seqs: batch_seqs.min(u64::from(config.max_num_seqs)),
        context_tokens,
        attention_pairs: 0,
        decode_tokens: 0,
        kv_usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StepTime;

    /// A prefill costs 1 ms plus 1 µs a token, decoding 1 ms; budget 8 tokens, 2 seats.
    fn config() -> EngineConfig {
        let mut config = crate::Preset::Dynamo.config();
        config.max_num_batched_tokens = 8;
        config.max_num_seqs = 2;
        config.step_time = StepTime::Linear {
            overhead_ms: 1.0,
            prefill_ms_per_token: 0.001,
            decode_ms: 1.0,
        };
        config
    }

    #[test]
    fn an_idle_engine_prices_the_prompt_in_budget_sized_chunks() {
        // 20 tokens at 8 a step: chunks 8, 8, 4.
        let ttft = ttft_ns(&config(), Outlook::default(), 20);
        assert_eq!(ttft, 3 * 1_000_000 + 20 * 1_000);
    }

    #[test]
    fn queued_prefills_go_first_and_seats_run_out() {
        let outlook = Outlook {
            step_left_ns: 500_000,
            queue: VecDeque::from([Queued {
                tokens: 8,
                decodes: 0,
                seated: false,
            }]),
            ..Outlook::default()
        };
        // Step 1: the queued 8 tokens; step 2: own 4 tokens.
        let ttft = ttft_ns(&config(), outlook.clone(), 4);
        assert_eq!(ttft, 500_000 + (1_000_000 + 8_000) + (1_000_000 + 4_000));
        // Two decoders that never finish hold both seats: the forecast runs to its cap.
        let full = Outlook {
            decoders: vec![DECODES_THROUGH, DECODES_THROUGH],
            ..outlook
        };
        assert!(ttft_ns(&config(), full, 4) > MAX_FORECAST_STEPS * 1_000_000);
    }

    #[test]
    fn a_decoder_that_finishes_frees_its_seat() {
        let outlook = Outlook {
            decoders: vec![3, DECODES_THROUGH],
            ..Outlook::default()
        };
        // Steps 1–3 decode two (6 tokens of room, but no seat); step 4 prefills own 4
        // beside the decoder left.
        let ttft = ttft_ns(&config(), outlook, 4);
        assert_eq!(ttft, 3 * 1_000_000 + (1_000_000 + 4_000 + 1_000_000));
    }

    #[test]
    fn tpot_is_one_decode_step_of_the_batch_capped_at_the_seats() {
        assert_eq!(tpot_ns(&config(), 5, 100, 0.0), 1_000_000);
    }
}
