//! The engine's [`Outlook`]: what [`crate::forecast`] needs of it, read from the scheduler's
//! own state, to answer ABI 1.4 `predict` in the timed replay.

use std::collections::VecDeque;

use super::Engine;
use crate::forecast::{self, Outlook, Queued};

impl Engine {
    /// Predicted nanoseconds from `now_ns` to the first token of a request of
    /// `prompt_tokens` tokens and engine-block chain `chain`, were it enqueued now.
    pub fn predict_ttft_ns(&self, prompt_tokens: u32, chain: &[u64], now_ns: u64) -> u64 {
        let block_tokens = u64::from(self.config.engine_block_size);
        let prompt = u64::from(prompt_tokens.max(1));
        // The rest of the step in flight; a pure decode run is cut at its next step.
        let step_left_ns = match &self.plan {
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
        // Scheduling ahead, the next step is planned already: it joins the one after.
        let step_left_ns = match (&self.plan, self.config.async_scheduling) {
            (Some(plan), true) => step_left_ns + plan.step_ns,
            _ => step_left_ns,
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
        // (which need a seat).
        let mut queue = VecDeque::new();
        let mut decoders = Vec::new();
        let mut context_tokens = 0u64;
        for (seq, done) in self.running.iter().zip(in_flight) {
            context_tokens += u64::from(seq.computed + done);
            let decodes = u64::from(seq.output_tokens.saturating_sub(seq.generated + 1));
            let left = seq.prefill_target.saturating_sub(seq.computed + done);
            if left > 0 {
                queue.push_back(Queued {
                    tokens: u64::from(left),
                    decodes,
                    seated: true,
                });
            } else if !seq.prefilling() {
                // Decoding now: one token a step until its output is out.
                decoders.push(decodes + 1);
            } else if decodes > 0 {
                // Its prefill ends with the step in flight, which samples its first token.
                decoders.push(decodes);
            }
        }
        let seated_others = queue.len() as u64;
        for seq in &self.waiting {
            let target = u64::from(seq.prompt_tokens + seq.generated);
            let hits = (seq.hit_ids.len() as u64 * block_tokens).min(target - 1);
            queue.push_back(Queued {
                tokens: target - hits,
                decodes: u64::from(seq.output_tokens.saturating_sub(seq.generated + 1)),
                seated: false,
            });
        }
        let outlook = Outlook {
            step_left_ns,
            queue,
            decoders,
            seated_others,
            context_tokens,
            kv_usage: self.held_usage(),
        };
        forecast::ttft_ns(&self.config, outlook, prompt - cached)
    }

    /// Predicted nanoseconds per output token of a request of `prompt_tokens` tokens, were
    /// it enqueued now: a decode step of the batch it would join (every request running or
    /// waiting here, and it, up to `max_num_seqs`), attending to their context and its
    /// prompt. It does not foresee the prefill chunks of later arrivals that share its
    /// steps, nor the batch shrinking as others finish.
    pub fn predict_tpot_ns(&self, prompt_tokens: u32) -> u64 {
        let batch = self.running.len() as u64 + self.waiting.len() as u64 + 1;
        let context: u64 = self
            .running
            .iter()
            .map(|s| u64::from(s.computed.max(s.prefill_target)))
            .sum::<u64>()
            + u64::from(prompt_tokens);
        forecast::tpot_ns(&self.config, batch, context, self.held_usage())
    }
}
