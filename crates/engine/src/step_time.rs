//! How long an engine step takes: the step-time models, their validation and the batch
//! they read.

use serde::{Deserialize, Serialize};

/// How long a step takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", deny_unknown_fields)]
pub enum StepTime {
    /// NVIDIA Dynamo's mocker: prefill `P(T) = a T² + b T + c` ms for `T` uncached tokens
    /// computed in the step, decode `D(u) = d u² + e u + f` ms at KV utilisation `u`.
    Polynomial {
        /// Prefill coefficients `[a, b, c]`.
        prefill: [f64; 3],
        /// Decode coefficients `[d, e, f]`.
        decode: [f64; 3],
    },
    /// `overhead_ms + prefill_ms_per_token × T` when the step prefills, plus `decode_ms`
    /// when it decodes.
    Linear {
        /// Fixed cost of a step that prefills.
        overhead_ms: f64,
        /// Cost per prefilled (uncached) token.
        prefill_ms_per_token: f64,
        /// Cost of a step that decodes (the inter-token latency).
        decode_ms: f64,
    },
    /// A step's time grows with what its batch holds: `overhead_ms + prefill_ms_per_token
    /// × P + decode_ms_per_seq × D + context_ms_per_ktoken × C / 1000`, for `P` prompt
    /// tokens computed in the step, `D` sequences decoding a token, and `C` tokens of context
    /// the batch's attention reads (each sequence's KV so far). On a GPU: kernel launches,
    /// sampling and scheduling; the weights' matrix multiplies per prompt token; the
    /// per-sequence work of a decode step (its share of reading the weights, sampling);
    /// reading the KV cache, which grows with every sequence's context. A mixture-of-experts
    /// model adds the experts its tokens touch ([`Experts`]).
    Batched {
        /// Fixed cost of any step.
        overhead_ms: f64,
        /// Cost per prompt token computed in the step.
        prefill_ms_per_token: f64,
        /// Cost per sequence that decodes a token in the step.
        decode_ms_per_seq: f64,
        /// Cost per thousand tokens of context in the batch.
        context_ms_per_ktoken: f64,
        /// A mixture-of-experts model's expert term.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        experts: Option<Experts>,
    },
    /// From the model's shape and the GPU's limits ([`crate::roofline`]): no measured run
    /// needed.
    Roofline(Box<crate::roofline::Roofline>),
}

/// The experts a step's tokens touch, for a mixture-of-experts model: each of the `P + D`
/// tokens of a step is routed to `per_token` of the `count` experts of every layer, so a
/// step reads `count × (1 − (1 − per_token / count)^(P + D))` experts a layer on average
/// (routing taken as uniform), and each costs `ms` (reading its weights, every layer). A
/// decode batch of one reads few experts; a large batch reads them all, when the step costs
/// what a dense model's does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experts {
    /// Experts a layer (`num_experts`).
    pub count: u32,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub per_token: u32,
    /// Cost of one expert touched, every layer.
    pub ms: f64,
}

impl Experts {
    /// Experts touched a layer by `tokens` tokens, on average.
    pub fn touched(&self, tokens: u64) -> f64 {
        let n = f64::from(self.count.max(1));
        let miss = 1.0 - f64::from(self.per_token.min(self.count)) / n;
        n * (1.0 - miss.powf(tokens as f64))
    }
}

/// What a step's batch holds, as the step-time models read it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Batch {
    /// Prompt tokens computed in the step (uncached).
    pub prefill_tokens: u64,
    /// Sequences that decode one token in the step.
    pub decode_seqs: u64,
    /// Tokens those sequences compute: one each, and the drafts they verify when
    /// speculating (0: taken as `decode_seqs`).
    pub decode_tokens: u64,
    /// Tokens of context the step's sequences attend to.
    pub context_tokens: u64,
    /// Query–key pairs the step's attention computes: each prompt token computed attends
    /// to the context before it and to itself, each decoded token to its context (0: taken
    /// as `context_tokens`).
    pub attention_pairs: u64,
    /// The blocks the running sequences hold over the cache's capacity, a block shared by
    /// several counted for each (what their attention reads; may pass 1).
    pub kv_usage: f64,
}

/// The least and the most of `c[0] x² + c[1] x + c[2]` for `x` in `[lo, hi]`: at the ends,
/// or at the vertex when it lies between them.
fn quadratic_range(c: [f64; 3], (lo, hi): (f64, f64)) -> (f64, f64) {
    let at = |x: f64| c[0] * x * x + c[1] * x + c[2];
    let mut points = vec![at(lo), at(hi)];
    if c[0] != 0.0 {
        let vertex = -c[1] / (2.0 * c[0]);
        if vertex > lo && vertex < hi {
            points.push(at(vertex));
        }
    }
    let min = points.iter().copied().fold(f64::INFINITY, f64::min);
    let max = points.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// The longest step the model may take: an hour. A step time past it is a unit mistake,
/// and it keeps every step well inside the clock's range.
const MAX_STEP_MS: f64 = 3_600_000.0;

impl StepTime {
    /// How many data-parallel ranks step together: a mixture-of-experts model whose
    /// experts are split over more GPUs than one rank's tensor-parallel ones spans
    /// `expert_parallel / tensor_parallel` ranks (vLLM's data-parallel ranks with expert
    /// parallelism), which exchange tokens in every layer. 1 for anything else.
    pub fn lockstep_ranks(&self) -> u32 {
        match self {
            StepTime::Roofline(r) if r.shape.experts.is_some() => {
                (r.expert_parallel / r.tensor_parallel.max(1)).max(1)
            }
            _ => 1,
        }
    }

    /// Checks that every coefficient is a finite number, that every step that prefills
    /// 1 to `max_batched` tokens or decodes at any KV usage takes a positive time, and that
    /// no step takes more than an hour (with `max_seqs` sequences and `max_context`
    /// tokens of context, for the batched model).
    pub fn validate(
        &self,
        max_batched: u32,
        max_seqs: u32,
        max_context: u64,
    ) -> Result<(), String> {
        if let StepTime::Roofline(roofline) = self {
            roofline.validate()?;
            let longest = roofline
                .parts(&Batch {
                    prefill_tokens: u64::from(max_batched),
                    decode_seqs: u64::from(max_seqs),
                    context_tokens: max_context,
                    attention_pairs: max_context.saturating_mul(u64::from(max_batched.max(1))),
                    decode_tokens: 0,
                    kv_usage: 1.0,
                })
                .total();
            if !longest.is_finite() || longest > MAX_STEP_MS {
                return Err(format!(
                    "engine `step_time` gives a step of up to {longest:.3e} ms, more than an hour"
                ));
            }
            return Ok(());
        }
        if let StepTime::Batched {
            overhead_ms,
            prefill_ms_per_token,
            decode_ms_per_seq,
            context_ms_per_ktoken,
            experts,
        } = self
        {
            let terms = [
                ("overhead_ms", *overhead_ms),
                ("prefill_ms_per_token", *prefill_ms_per_token),
                ("decode_ms_per_seq", *decode_ms_per_seq),
                ("context_ms_per_ktoken", *context_ms_per_ktoken),
                ("experts.ms", experts.map_or(0.0, |e| e.ms)),
            ];
            for (name, value) in terms {
                if !value.is_finite() || value < 0.0 {
                    return Err(format!(
                        "engine `step_time.{name}` must be a finite, non-negative number, not {value}"
                    ));
                }
            }
            if *overhead_ms <= 0.0 {
                return Err(
                    "engine `step_time.overhead_ms` must be positive: every step must take a positive time"
                        .into(),
                );
            }
            if let Some(e) = experts
                && (e.count == 0 || e.per_token == 0 || e.per_token > e.count)
            {
                return Err(format!(
                    "engine `step_time.experts`: `per_token` ({}) must be from 1 to `count` ({}), and `count` at least 1",
                    e.per_token, e.count
                ));
            }
            let longest = overhead_ms
                + prefill_ms_per_token * f64::from(max_batched)
                + decode_ms_per_seq * f64::from(max_seqs)
                + context_ms_per_ktoken * max_context as f64 / 1000.0
                + experts.map_or(0.0, |e| e.ms * f64::from(e.count));
            if longest > MAX_STEP_MS {
                return Err(format!(
                    "engine `step_time` gives a step of up to {longest:.3e} ms, more than an hour (are the units milliseconds?)"
                ));
            }
            return Ok(());
        }
        let (prefill, decode, names): ([f64; 3], [f64; 3], [&str; 6]) = match self {
            StepTime::Polynomial { prefill, decode } => (
                *prefill,
                *decode,
                [
                    "prefill[0]",
                    "prefill[1]",
                    "prefill[2]",
                    "decode[0]",
                    "decode[1]",
                    "decode[2]",
                ],
            ),
            StepTime::Linear {
                overhead_ms,
                prefill_ms_per_token,
                decode_ms,
            } => (
                [0.0, *prefill_ms_per_token, *overhead_ms],
                [0.0, 0.0, *decode_ms],
                [
                    "",
                    "prefill_ms_per_token",
                    "overhead_ms",
                    "",
                    "",
                    "decode_ms",
                ],
            ),
            StepTime::Batched { .. } | StepTime::Roofline(_) => unreachable!("checked above"),
        };
        for (value, name) in prefill.iter().chain(&decode).zip(names) {
            if !value.is_finite() {
                return Err(format!(
                    "engine `step_time.{name}` must be a finite number, not {value}"
                ));
            }
        }
        let tokens = (1.0, f64::from(max_batched.max(1)));
        let (prefill_min, prefill_max) = quadratic_range(prefill, tokens);
        let (decode_min, decode_max) = quadratic_range(decode, (0.0, 1.0));
        if prefill_min.is_nan() || prefill_min <= 0.0 {
            return Err(format!(
                "engine `step_time` gives a prefill step of 1 to {max_batched} tokens {prefill_min:.3} ms at the least; every step must take a positive time"
            ));
        }
        if decode_min.is_nan() || decode_min <= 0.0 {
            return Err(format!(
                "engine `step_time` gives a decode step {decode_min:.3} ms at the least (KV usage 0 to 1); every step must take a positive time"
            ));
        }
        let longest = prefill_max + decode_max;
        if longest.is_nan() || longest > MAX_STEP_MS {
            return Err(format!(
                "engine `step_time` gives a step of up to {longest:.3e} ms, more than an hour (are the units milliseconds?)"
            ));
        }
        Ok(())
    }

    /// Duration of a step, in milliseconds, as the model says.
    fn step_ms(&self, batch: &Batch) -> f64 {
        let (prefill_tokens, decoding, kv_usage) =
            (batch.prefill_tokens, batch.decode_seqs > 0, batch.kv_usage);
        let t = prefill_tokens as f64;
        match self {
            StepTime::Polynomial { prefill, decode } => {
                let p = if prefill_tokens > 0 {
                    prefill[0] * t * t + prefill[1] * t + prefill[2]
                } else {
                    0.0
                };
                // Past a full cache (sharing counted per sequence), as a full one.
                let u = kv_usage.clamp(0.0, 1.0);
                let d = if decoding {
                    decode[0] * u * u + decode[1] * u + decode[2]
                } else {
                    0.0
                };
                p + d
            }
            StepTime::Linear {
                overhead_ms,
                prefill_ms_per_token,
                decode_ms,
            } => {
                let p = if prefill_tokens > 0 {
                    overhead_ms + prefill_ms_per_token * t
                } else {
                    0.0
                };
                p + if decoding { *decode_ms } else { 0.0 }
            }
            StepTime::Batched {
                overhead_ms,
                prefill_ms_per_token,
                decode_ms_per_seq,
                context_ms_per_ktoken,
                experts,
            } => {
                overhead_ms
                    + prefill_ms_per_token * t
                    + decode_ms_per_seq * batch.decode_seqs as f64
                    + context_ms_per_ktoken * batch.context_tokens as f64 / 1000.0
                    + experts.map_or(0.0, |e| {
                        e.ms * e.touched(prefill_tokens + batch.decode_seqs)
                    })
            }
            StepTime::Roofline(roofline) => roofline.parts(batch).total(),
        }
    }

    /// Duration of a step, in nanoseconds (at least 1). Validated models keep it within
    /// an hour; the conversion saturates rather than wraps for any other.
    pub fn step_ns(&self, batch: &Batch) -> u64 {
        let ms = self.step_ms(batch);
        ((ms.max(0.0) * 1e6).round() as u64).max(1)
    }
}
