//! Speculative decoding: each decode step a proposer drafts `k` tokens for every decoding
//! sequence, and the model verifies them, with the sequence's next token, in one forward
//! pass; the drafts up to the first rejected one are kept, and the verify pass adds one
//! token of its own.
//!
//! With `a_i` the probability that draft `i` is accepted given that those before it were,
//! a step yields `1 + a_1 + a_1 a_2 + … + a_1 ⋯ a_k` tokens a sequence on average; one rate
//! `a` for every position gives `(1 − a^(k+1)) / (1 − a)`. The engine model credits each
//! decoding sequence that mean every step and emits the whole tokens it has earned
//! (deterministic, exact over a sequence's steps; never more than it has left to generate).
//!
//! What a step costs: the verify pass computes `k + 1` tokens for each decoding sequence
//! (counted against the step's token budget, and, with the roofline step time, through
//! the layers, attention and the output head); the drafts add `k` draft passes, each
//! `draft_cost` of a plain one-token decode step of the same batch (0 for n-gram lookup of
//! the prompt; a draft head such as EAGLE's or an MTP module is about one layer and the
//! head, 5% by default; a separate draft model's cost must be given). The drafts' KV takes
//! blocks: a decoding sequence needs room for `k + 1` more tokens (vLLM's lookahead slots),
//! and the rejected tokens' KV is given back.

use serde::{Deserialize, Serialize};

/// How the drafts are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Prompt lookup (vLLM's `ngram`): no model runs.
    Ngram,
    /// An EAGLE draft head.
    Eagle,
    /// A multi-token-prediction module of the model (DeepSeek's, Qwen's).
    Mtp,
    /// A separate, smaller draft model.
    Draft,
}

impl Method {
    /// Its name, as the engine config spells it.
    pub fn name(self) -> &'static str {
        match self {
            Method::Ngram => "ngram",
            Method::Eagle => "eagle",
            Method::Mtp => "mtp",
            Method::Draft => "draft",
        }
    }
}

/// Speculative decoding's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    /// How the drafts are proposed.
    pub method: Method,
    /// Draft tokens a step (`num_speculative_tokens`), 1 to 16.
    pub num_tokens: u32,
    /// Acceptance: one rate for every position, or one per position (each given that the
    /// drafts before it were accepted), from 0 to 1.
    pub acceptance: Vec<f64>,
    /// One draft pass's cost as a fraction of a one-token decode step of the same batch
    /// [default: 0 for ngram, 0.05 for eagle and mtp; required for draft].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_cost: Option<f64>,
}

impl Speculative {
    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=16).contains(&self.num_tokens) {
            return Err(format!(
                "engine `speculative.num_tokens` must be from 1 to 16, not {}",
                self.num_tokens
            ));
        }
        let k = self.num_tokens as usize;
        if self.acceptance.len() != 1 && self.acceptance.len() != k {
            return Err(format!(
                "engine `speculative.acceptance` holds {} rates: give one, or one per draft token ({k})",
                self.acceptance.len()
            ));
        }
        if let Some(bad) = self
            .acceptance
            .iter()
            .find(|a| !(a.is_finite() && (0.0..=1.0).contains(*a)))
        {
            return Err(format!(
                "engine `speculative.acceptance` rates are from 0 to 1, not {bad}"
            ));
        }
        match (self.method, self.draft_cost) {
            (Method::Draft, None) => Err(
                "engine `speculative.draft_cost` is needed with method `draft`: a draft pass's cost as a fraction of a decode step"
                    .into(),
            ),
            (_, Some(c)) if !(c.is_finite() && (0.0..=10.0).contains(&c)) => Err(format!(
                "engine `speculative.draft_cost` must be from 0 to 10, not {c}"
            )),
            _ => Ok(()),
        }
    }

    /// Tokens a decoding sequence yields a step, on average: `1 + Σ_i Π_{j ≤ i} a_j`.
    pub fn tokens_per_step(&self) -> f64 {
        self.tokens_per_step_with(self.num_tokens)
    }

    /// [`Speculative::tokens_per_step`] with `drafts` draft tokens (fewer when the step's
    /// token budget runs out).
    pub fn tokens_per_step_with(&self, drafts: u32) -> f64 {
        let mut kept = 1.0;
        let mut total = 1.0;
        for i in 0..drafts.min(self.num_tokens) as usize {
            kept *= self.acceptance.get(i).unwrap_or(&self.acceptance[0]);
            total += kept;
        }
        total
    }

    /// One draft pass's cost as a fraction of a one-token decode step.
    pub fn draft_cost(&self) -> f64 {
        self.draft_cost.unwrap_or(match self.method {
            Method::Ngram => 0.0,
            Method::Eagle | Method::Mtp | Method::Draft => 0.05,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(k: u32, acceptance: &[f64]) -> Speculative {
        Speculative {
            method: Method::Eagle,
            num_tokens: k,
            acceptance: acceptance.to_vec(),
            draft_cost: None,
        }
    }

    /// One rate: `(1 − a^(k+1)) / (1 − a)`; per position: the running products.
    #[test]
    fn tokens_per_step_as_computed_by_hand() {
        // a = 0.5, k = 3: 1 + 0.5 + 0.25 + 0.125.
        assert_eq!(spec(3, &[0.5]).tokens_per_step(), 1.875);
        let a: f64 = 0.8;
        let closed = (1.0 - a.powi(5)) / (1.0 - a);
        assert!((spec(4, &[0.8]).tokens_per_step() - closed).abs() < 1e-12);
        // 0.9, then 0.5, then 0.2: 1 + 0.9 + 0.45 + 0.09.
        assert!((spec(3, &[0.9, 0.5, 0.2]).tokens_per_step() - 2.44).abs() < 1e-12);
        assert_eq!(spec(2, &[0.0]).tokens_per_step(), 1.0);
        assert_eq!(spec(2, &[1.0]).tokens_per_step(), 3.0);
    }

    #[test]
    fn bad_settings_name_their_key() {
        assert!(
            spec(0, &[0.5])
                .validate()
                .unwrap_err()
                .contains("num_tokens")
        );
        assert!(
            spec(3, &[0.5, 0.5])
                .validate()
                .unwrap_err()
                .contains("one per draft token (3)")
        );
        assert!(
            spec(2, &[1.5])
                .validate()
                .unwrap_err()
                .contains("from 0 to 1, not 1.5")
        );
        let mut draft = spec(2, &[0.5]);
        draft.method = Method::Draft;
        assert!(draft.validate().unwrap_err().contains("draft_cost"));
        draft.draft_cost = Some(0.2);
        draft.validate().unwrap();
    }
}
