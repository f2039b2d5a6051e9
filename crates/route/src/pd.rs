//! The P/D decision of a disaggregated fleet: whether a request's prefill moves to the
//! prefill pool or stays on its decode endpoint.

use serde::{Deserialize, Serialize};

/// Whether to disaggregate a request.
///
/// With [`PdDecision::Always`] the prefill endpoint is chosen at arrival and the decode
/// endpoint when the prefill is done (as NVIDIA Dynamo's replay does). With
/// [`PdDecision::Threshold`] the decode endpoint is chosen first; a prompt whose part that
/// endpoint does not hold is at most `tokens` long is prefilled there, and only a longer
/// one goes to the prefill pool (llm-d's P/D profile handler and BLIS's `prefix-threshold`).
/// Beyond these two rules the decision is the matchers': in the prefill phase a matcher
/// that answers no endpoint (`RL_NO_ENDPOINT`) while a decode endpoint is already chosen
/// keeps the prefill local to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PdDecision {
    /// Every request is prefilled in the prefill pool.
    #[default]
    Always,
    /// Prefill remotely only when the uncached prompt is at least this many tokens.
    Threshold {
        /// Uncached prompt tokens from which the prefill pool prefills (0: always).
        tokens: u64,
    },
}

impl PdDecision {
    /// Whether the decode endpoint is chosen before the prefill endpoint.
    pub fn decode_first(self) -> bool {
        matches!(self, PdDecision::Threshold { .. })
    }

    /// Whether a prompt of `prompt_tokens`, of which the chosen decode endpoint holds
    /// `cached_tokens`, is prefilled in the prefill pool.
    pub fn disaggregate(self, prompt_tokens: u64, cached_tokens: u64) -> bool {
        match self {
            PdDecision::Always => true,
            PdDecision::Threshold { tokens } => {
                prompt_tokens.saturating_sub(cached_tokens) >= tokens
            }
        }
    }

    /// Its spelling on the command line: `always` or `threshold:TOKENS`.
    pub fn name(self) -> String {
        match self {
            PdDecision::Always => "always".into(),
            PdDecision::Threshold { tokens } => format!("threshold:{tokens}"),
        }
    }
}

impl std::str::FromStr for PdDecision {
    type Err = String;
    fn from_str(text: &str) -> Result<PdDecision, String> {
        if text == "always" {
            return Ok(PdDecision::Always);
        }
        match text.strip_prefix("threshold:").map(str::parse::<u64>) {
            Some(Ok(tokens)) => Ok(PdDecision::Threshold { tokens }),
            _ => Err(format!(
                "unknown P/D decision `{text}` (give `always` or `threshold:TOKENS`, e.g. `threshold:512`)"
            )),
        }
    }
}

/// A fleet split into a prefill pool and a decode pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pools {
    /// Endpoints `0..prefill` (in list order) form the prefill pool, the rest the decode
    /// pool.
    pub prefill: usize,
    /// Which requests are prefilled in the prefill pool.
    pub decision: PdDecision,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_counts_only_what_the_decode_endpoint_lacks() {
        let rule: PdDecision = "threshold:512".parse().unwrap();
        assert!(rule.decode_first());
        // 2,000 tokens, 1,536 cached on the decode endpoint: 464 to compute, kept local.
        assert!(!rule.disaggregate(2_000, 1_536));
        // 1,024 cached: 976 to compute, more than 512, sent to the prefill pool.
        assert!(rule.disaggregate(2_000, 1_024));
        // Exactly at the threshold goes to the prefill pool, one below stays (llm-d's rule).
        assert!(rule.disaggregate(1_024, 512));
        assert!(!rule.disaggregate(1_023, 512));
        assert!(
            PdDecision::Threshold { tokens: 0 }.disaggregate(5, 5),
            "0: always"
        );
        assert!(PdDecision::Always.disaggregate(10, 10));
        assert!(!PdDecision::Always.decode_first());
        assert_eq!(rule.name(), "threshold:512");
        assert!(
            "threshold:x"
                .parse::<PdDecision>()
                .unwrap_err()
                .contains("threshold:TOKENS")
        );
        assert!("sometimes".parse::<PdDecision>().is_err());
    }
}
