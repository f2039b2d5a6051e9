//! `serve`'s mirror of each endpoint, as the engine model's forecast needs it: the
//! requests it was sent and has not finished, each waiting for its first token (its
//! uncached prompt, from the KV events when they are followed) or decoding (since when),
//! and the KV usage its metrics report. A simulating matcher's `predict` (ABI 1.4) is
//! answered from it by [`routerlab_engine::forecast`], with the engine config of `serve
//! --engine-config` (for instance what `calibrate` fitted to these engines).
//!
//! What the router cannot see, it assumes: a request waiting for its first token has all
//! its uncached prompt still to compute and no seat yet; a decoding one has produced a
//! token per forecast decode step since its first, and decodes through the forecast when
//! its output length (`max_tokens`) is unknown; no step is in flight.

use std::collections::{BTreeMap, VecDeque};

use routerlab_core::abi::RlPrediction;
use routerlab_engine::EngineConfig;
use routerlab_engine::forecast::{self, DECODES_THROUGH, Outlook, Queued};

/// A request sent to an endpoint, by what the router knows of it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    prompt_tokens: u64,
    /// Its prompt's tokens the endpoint held when it was sent.
    cached_tokens: u64,
    /// Output tokens asked for (`max_tokens`), when given.
    output_tokens: Option<u64>,
    /// When its first token came, ns; `None` while it waits for it.
    first_token_ns: Option<u64>,
    /// The LoRA adapter it asked for (0: the base model, or adapters not followed).
    adapter: u32,
}

/// The mirror of the fleet: one book per upstream, by request number.
pub(super) struct Mirror {
    config: EngineConfig,
    books: Vec<BTreeMap<u64, Sent>>,
}

impl Mirror {
    pub(super) fn new(config: EngineConfig, upstreams: usize) -> Mirror {
        Mirror {
            config,
            books: vec![BTreeMap::new(); upstreams],
        }
    }

    /// Request `seq` was sent to `upstream`.
    pub(super) fn sent(
        &mut self,
        upstream: usize,
        seq: u64,
        prompt_tokens: u64,
        cached_tokens: u64,
        output_tokens: Option<u64>,
        adapter: u32,
    ) {
        self.books[upstream].insert(
            seq,
            Sent {
                prompt_tokens,
                cached_tokens: cached_tokens.min(prompt_tokens),
                output_tokens,
                first_token_ns: None,
                adapter,
            },
        );
    }

    /// The LoRA adapters of the requests `upstream` was sent and has not finished, as
    /// (adapter, decoding: its first token came) pairs, adapters other than 0 only.
    pub(super) fn adapters(&self, upstream: usize) -> impl Iterator<Item = (u32, bool)> + '_ {
        (self.books[upstream].values())
            .filter(|s| s.adapter != 0)
            .map(|s| (s.adapter, s.first_token_ns.is_some()))
    }

    /// Request `seq`'s first token came from `upstream`.
    pub(super) fn first_token(&mut self, upstream: usize, seq: u64, now_ns: u64) {
        if let Some(sent) = self.books[upstream].get_mut(&seq) {
            sent.first_token_ns.get_or_insert(now_ns);
        }
    }

    /// Request `seq` no longer occupies `upstream`.
    pub(super) fn left(&mut self, upstream: usize, seq: u64) {
        self.books[upstream].remove(&seq);
    }

    /// How long the engine model takes to load a LoRA adapter (0 without `lora`).
    pub(super) fn adapter_load_ns(&self) -> u64 {
        self.config.lora.as_ref().map_or(0, |l| l.load_ns())
    }

    /// Requests the mirror holds for `upstream`.
    #[cfg(test)]
    pub(super) fn held(&self, upstream: usize) -> usize {
        self.books[upstream].len()
    }

    /// The forecast for a request of `prompt_tokens` tokens, `cached_tokens` of them held
    /// by `upstream`, were it sent there at `now_ns`; `kv_usage` as its metrics last said.
    pub(super) fn predict(
        &self,
        upstream: usize,
        prompt_tokens: u64,
        cached_tokens: u64,
        kv_usage: f64,
        now_ns: u64,
    ) -> RlPrediction {
        let book = &self.books[upstream];
        let kv_usage = if kv_usage.is_finite() {
            kv_usage.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let decoding = book.values().filter(|s| s.first_token_ns.is_some()).count() as u64;
        // The pace the decoders are taken to have gone at since their first tokens.
        let pace_ns = forecast::tpot_ns(&self.config, decoding.max(1), 0, kv_usage).max(1);
        let mut queue = VecDeque::new();
        let mut decoders = Vec::new();
        let mut context_tokens = 0u64;
        let mut batch_context = 0u64;
        for sent in book.values() {
            let decodes = sent
                .output_tokens
                .map_or(DECODES_THROUGH, |n| n.saturating_sub(1));
            match sent.first_token_ns {
                None => queue.push_back(Queued {
                    tokens: sent.prompt_tokens.saturating_sub(sent.cached_tokens).max(1),
                    decodes,
                    seated: false,
                }),
                Some(first) => {
                    let generated = now_ns.saturating_sub(first) / pace_ns;
                    let left = if decodes == DECODES_THROUGH {
                        DECODES_THROUGH
                    } else {
                        decodes.saturating_sub(generated).max(1)
                    };
                    decoders.push(left);
                    context_tokens = context_tokens
                        .saturating_add(sent.prompt_tokens)
                        .saturating_add(generated);
                }
            }
            batch_context = batch_context.saturating_add(sent.prompt_tokens);
        }
        let own = prompt_tokens.saturating_sub(cached_tokens).max(1);
        let batch = book.len() as u64 + 1;
        let outlook = Outlook {
            step_left_ns: 0,
            queue,
            decoders,
            seated_others: 0,
            context_tokens,
            kv_usage,
        };
        RlPrediction {
            ttft_ns: forecast::ttft_ns(&self.config, outlook, own),
            tpot_ns: forecast::tpot_ns(
                &self.config,
                batch,
                batch_context.saturating_add(prompt_tokens),
                kv_usage,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use routerlab_engine::{Preset, StepTime};

    /// A prefill costs 1 ms plus 0.01 ms a token, decoding 2 ms; budget 100 tokens.
    fn mirror() -> Mirror {
        let mut config = Preset::Dynamo.config();
        config.max_num_batched_tokens = 100;
        config.max_num_seqs = 4;
        config.step_time = StepTime::Linear {
            overhead_ms: 1.0,
            prefill_ms_per_token: 0.01,
            decode_ms: 2.0,
        };
        Mirror::new(config, 2)
    }

    #[test]
    fn an_idle_endpoint_forecasts_the_uncached_prompt_alone() {
        let m = mirror();
        let p = m.predict(0, 100, 0, 0.0, 0);
        assert_eq!(p.ttft_ns, 2_000_000, "one step of 100 tokens: 1 + 1 ms");
        assert_eq!(p.tpot_ns, 2_000_000);
        // Held tokens are not recomputed, but the last one always is.
        assert_eq!(m.predict(0, 100, 50, 0.0, 0).ttft_ns, 1_500_000);
        assert_eq!(m.predict(0, 100, 100, 0.0, 0).ttft_ns, 1_010_000);
    }

    #[test]
    fn requests_sent_and_not_started_queue_ahead_and_leave_when_done() {
        let mut m = mirror();
        m.sent(0, 1, 250, 50, Some(10), 0);
        // 200 tokens ahead: two full steps, then its own 99 tokens beside their decode.
        let busy = m.predict(0, 99, 0, 0.0, 0).ttft_ns;
        assert_eq!(busy, 2 * 2_000_000 + 3_990_000);
        assert_eq!(
            m.predict(1, 99, 0, 0.0, 0).ttft_ns,
            1_990_000,
            "the other is idle"
        );
        m.first_token(0, 1, 5_000_000);
        let decoding = m.predict(0, 99, 0, 0.0, 5_000_000).ttft_ns;
        assert_eq!(decoding, 3_990_000, "one step beside its decode");
        m.left(0, 1);
        assert_eq!(m.held(0), 0);
        assert_eq!(m.predict(0, 99, 0, 0.0, 6_000_000).ttft_ns, 1_990_000);
    }

    #[test]
    fn a_decoder_of_known_length_is_taken_to_finish() {
        let mut m = mirror();
        for seq in 1..=4 {
            m.sent(0, seq, 10, 0, Some(3), 0);
            m.first_token(0, seq, 0);
        }
        // All four seats decode; each has 2 tokens left at a 2 ms pace: the seats free
        // after 2 steps and the request's prefill comes third.
        let ttft = m.predict(0, 100, 0, 0.0, 0).ttft_ns;
        assert_eq!(ttft, 2 * 2_000_000 + 2_000_000);
        // Without a length they decode through the forecast: it runs to its cap.
        let mut through = mirror();
        for seq in 1..=4 {
            through.sent(0, seq, 10, 0, None, 0);
            through.first_token(0, seq, 0);
        }
        assert!(through.predict(0, 100, 0, 0.0, 0).ttft_ns > 1_000 * 2_000_000);
    }
}
