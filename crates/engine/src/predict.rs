//! The engine's own forecast of a request's time to first token and time per output token,
//! were it enqueued now: what a simulating router asks each candidate (ABI 1.4 `predict`).
//!
//! It forecasts, without changing anything, the steps the scheduler would run from here:
//! the rest of the step in flight, then chunked prefills in FIFO order of everything queued
//! ahead (the running sequences' unfinished prefills, the waiting requests' uncached
//! prompts, each taking one of `max_num_seqs` seats) and then of the request's own
//! uncached prompt. Each step shares its token budget with one token for every decoding
//! sequence; a sequence decodes once its prefill ends and leaves, freeing its seat, after
//! its output tokens; the step-time model prices each step. What it does not foresee:
//! waits for KV blocks to free, preemptions, host-tier loads, V0's prefill-only steps, and
//! requests that arrive after this one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::Engine;
use crate::step_time::Batch;

/// Steps forecast one by one; a longer queue's remaining steps are priced as the last.
const MAX_FORECAST_STEPS: u64 = 1024;

impl Engine {
    /// Predicted nanoseconds from `now_ns` to the first token of a request of
    /// `prompt_tokens` tokens and engine-block chain `chain`, were it enqueued now.
    pub fn predict_ttft_ns(&self, prompt_tokens: u32, chain: &[u64], now_ns: u64) -> u64 {
        let block_tokens = u64::from(self.config.engine_block_size);
        let prompt = u64::from(prompt_tokens.max(1));
        // The rest of the step in flight; a pure decode run is cut at its next step.
        let mut ttft = match &self.plan {
            None => 0,
            Some(plan) => {
                let end = plan.start_ns + plan.steps * plan.step_ns;
                let elapsed = now_ns.saturating_sub(plan.start_ns);
                if plan.pure_decode && plan.step_ns > 0 {
                    let into = elapsed % plan.step_ns;
                    (plan.step_ns - into).min(end.saturating_sub(now_ns))
                } else {
                    end.saturating_sub(now_ns)
                }
            }
        };
        // As the scheduler: the last prompt token is always computed.
        let cached = if self.config.prefix_caching {
            let most = (prompt - 1) / block_tokens * block_tokens;
            self.cached_prefix_tokens(chain).min(most)
        } else {
            0
        };
        // Prefills in the step in flight are done when it ends.
        let mut in_flight = vec![0u32; self.running.len()];
        if let Some(plan) = &self.plan {
            for &(pos, tokens) in &plan.prefill {
                in_flight[pos] += tokens;
            }
        }
        // The prefill queue in the scheduler's order: running sequences, then waiting ones
        // (which need a seat), then this request. Each: (tokens left, tokens it then
        // decodes, needs a seat).
        let mut queue: VecDeque<(u64, u64, bool)> = VecDeque::new();
        // Decoders by the forecast step after which they finish.
        let mut decoders: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
        let mut context = 0u64;
        let mut seated = self.running.len() as u64;
        for (seq, done) in self.running.iter().zip(in_flight) {
            context += u64::from(seq.computed + done);
            let decodes = u64::from(seq.output_tokens.saturating_sub(seq.generated + 1));
            let left = seq.prefill_target.saturating_sub(seq.computed + done);
            if left > 0 {
                queue.push_back((u64::from(left), decodes, false));
            } else if !seq.prefilling() {
                // Decoding now: one token a step until its output is out.
                decoders.push(Reverse(decodes + 1));
            } else if decodes > 0 {
                // Its prefill ends with the step in flight, which samples its first token.
                decoders.push(Reverse(decodes));
            } else {
                seated -= 1;
            }
        }
        for seq in &self.waiting {
            let target = u64::from(seq.prompt_tokens + seq.generated);
            let hits = (seq.hit_ids.len() as u64 * block_tokens).min(target - 1);
            let decodes = u64::from(seq.output_tokens.saturating_sub(seq.generated + 1));
            queue.push_back((target - hits, decodes, true));
        }
        queue.push_back((prompt - cached, 0, true));
        let budget = u64::from(self.config.max_num_batched_tokens);
        let seats = u64::from(self.config.max_num_seqs);
        let usage = self.usage();
        let mut step = 0u64;
        loop {
            let decoding = decoders.len() as u64;
            let mut room = budget.saturating_sub(decoding);
            let mut prefill = 0u64;
            let mut pos = 0;
            let mut own_done = false;
            while room > 0 && pos < queue.len() {
                let (left, decodes, needs_seat) = queue[pos];
                if needs_seat {
                    if seated >= seats {
                        break;
                    }
                    seated += 1;
                    queue[pos].2 = false;
                }
                let chunk = left.min(room);
                room -= chunk;
                prefill += chunk;
                if chunk == left {
                    if pos + 1 == queue.len() {
                        own_done = true;
                    } else if decodes > 0 {
                        decoders.push(Reverse(step + 1 + decodes));
                    } else {
                        seated -= 1;
                    }
                    queue.remove(pos);
                } else {
                    queue[pos].0 -= chunk;
                    pos += 1;
                }
            }
            context += prefill + decoding;
            let step_ns = self.config.step_time.step_ns(&Batch {
                prefill_tokens: prefill,
                decode_seqs: decoding,
                context_tokens: context,
                kv_usage: usage,
            });
            step += 1;
            if own_done {
                return ttft.saturating_add(step_ns);
            }
            if step == MAX_FORECAST_STEPS {
                // The rest priced as this step, at the budget's pace.
                let left: u64 = queue.iter().map(|e| e.0).sum();
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

    /// Predicted nanoseconds per output token of a request of `prompt_tokens` tokens, were
    /// it enqueued now: a decode step of the batch it would join (every request running or
    /// waiting here, and it, up to `max_num_seqs`), attending to their context and its
    /// prompt. It does not foresee the prefill chunks of later arrivals that share its
    /// steps, nor the batch shrinking as others finish.
    pub fn predict_tpot_ns(&self, prompt_tokens: u32) -> u64 {
        let seats = u64::from(self.config.max_num_seqs);
        let batch = (self.running.len() as u64 + self.waiting.len() as u64 + 1).min(seats);
        let context: u64 = self
            .running
            .iter()
            .map(|s| u64::from(s.computed.max(s.prefill_target)))
            .sum::<u64>()
            + u64::from(prompt_tokens);
        self.config.step_time.step_ns(&Batch {
            prefill_tokens: 0,
            decode_seqs: batch,
            context_tokens: context,
            kv_usage: self.usage(),
        })
    }
}
