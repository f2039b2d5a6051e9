//! Moving a prompt's KV from a prefill endpoint to a decode endpoint: how many tokens
//! move, and how long that takes.
//!
//! The time is `latency_ms + bytes / bandwidth`, with `bytes = tokens × kv_bytes_per_token`
//! (NVIDIA Dynamo's mocker: `kv_transfer_bytes_per_token`, `kv_transfer_bandwidth` in GB/s,
//! 10^9 bytes a second). Which tokens move is [`TransferMode`]: the whole prompt (Dynamo's
//! default `full_prompt`), or only the blocks the decode endpoint does not hold yet
//! (`destination_missing`). A bandwidth of 0 means the transfer takes no time beyond its
//! latency: Dynamo's default, which models no transfer at all.

use serde::{Deserialize, Serialize};

/// Which tokens of the prompt move to the decode endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransferMode {
    /// Every prompt token.
    #[default]
    FullPrompt,
    /// Only the prompt tokens past the decode endpoint's cached prefix (whole blocks).
    Missing,
}

impl TransferMode {
    /// Its name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            TransferMode::FullPrompt => "full-prompt",
            TransferMode::Missing => "missing",
        }
    }
}

impl std::str::FromStr for TransferMode {
    type Err = String;
    fn from_str(text: &str) -> Result<TransferMode, String> {
        [TransferMode::FullPrompt, TransferMode::Missing]
            .into_iter()
            .find(|m| m.name() == text)
            .ok_or_else(|| {
                format!("unknown KV transfer mode `{text}` (modes: full-prompt, missing)")
            })
    }
}

/// The KV transfer between the pools of a disaggregated fleet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KvTransfer {
    /// KV bytes of one token (all layers, keys and values).
    pub kv_bytes_per_token: u64,
    /// Link bandwidth in GB/s (10^9 bytes a second); 0 = no time for the bytes.
    pub bandwidth_gbps: f64,
    /// Time to the first byte, milliseconds.
    pub latency_ms: f64,
    /// Which tokens move.
    pub mode: TransferMode,
}

/// The longest time to the first byte a link may state: an hour (a longer one is a unit
/// mistake).
const MAX_LATENCY_MS: f64 = 3_600_000.0;

/// The longest delay computed exactly, ns (2^62, the simulator's clock range); a longer
/// one is given as one past it, which the drivers refuse, naming what took so long.
pub const LONGEST_DELAY_NS: u64 = 1 << 62;

/// `ms` milliseconds in nanoseconds, exactly up to [`LONGEST_DELAY_NS`], one past it for
/// anything longer.
pub(crate) fn delay_ns_of_ms(ms: f64) -> u64 {
    let ns = ms * 1e6;
    if ns > LONGEST_DELAY_NS as f64 {
        LONGEST_DELAY_NS + 1
    } else {
        ns.round() as u64
    }
}

impl KvTransfer {
    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("bandwidth_gbps", self.bandwidth_gbps),
            ("latency_ms", self.latency_ms),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(format!(
                    "kv transfer `{key}` must be a finite, non-negative number, not {value}"
                ));
            }
        }
        if self.latency_ms > MAX_LATENCY_MS {
            return Err(format!(
                "kv transfer `latency_ms` {} is more than an hour (are the units milliseconds?)",
                self.latency_ms
            ));
        }
        if self.bandwidth_gbps > 0.0 && self.kv_bytes_per_token == 0 {
            return Err(
                "kv transfer `bandwidth_gbps` is set but `kv_bytes_per_token` is 0: give the KV bytes of one token"
                    .into(),
            );
        }
        Ok(())
    }

    /// How long moving `tokens` tokens of KV takes, in nanoseconds (past
    /// [`LONGEST_DELAY_NS`] when longer than the simulator's clock can hold).
    pub fn delay_ns(&self, tokens: u64) -> u64 {
        let bytes_ms = if self.bandwidth_gbps > 0.0 {
            // bytes / (GB/s × 10^9) seconds = bytes / (GB/s × 10^6) ms.
            tokens as f64 * self.kv_bytes_per_token as f64 / (self.bandwidth_gbps * 1e6)
        } else {
            0.0
        };
        delay_ns_of_ms(self.latency_ms + bytes_ms)
    }

    /// The tokens that move for a prompt of `prompt_tokens` of which the decode endpoint
    /// holds `cached_tokens` already.
    pub fn tokens(&self, prompt_tokens: u64, cached_tokens: u64) -> u64 {
        match self.mode {
            TransferMode::FullPrompt => prompt_tokens,
            TransferMode::Missing => prompt_tokens.saturating_sub(cached_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_takes_its_latency_plus_bytes_over_bandwidth() {
        // Llama-3.1-8B in bf16: 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes =
        // 131,072 bytes a token. 10,000 tokens are 1.31072 GB; at 25 GB/s that is
        // 52.4288 ms, plus 0.5 ms to the first byte.
        let link = KvTransfer {
            kv_bytes_per_token: 131_072,
            bandwidth_gbps: 25.0,
            latency_ms: 0.5,
            mode: TransferMode::FullPrompt,
        };
        assert_eq!(link.delay_ns(10_000), 52_928_800);
        assert_eq!(link.delay_ns(0), 500_000, "the latency alone");
        assert_eq!(link.tokens(10_000, 4_096), 10_000);
        let missing = KvTransfer {
            mode: TransferMode::Missing,
            ..link
        };
        // 4,096 of 10,000 tokens are there already: 5,904 move: 30.953964 ms, plus 0.5 ms.
        assert_eq!(missing.tokens(10_000, 4_096), 5_904);
        assert_eq!(missing.delay_ns(5_904), 31_453_964);
        assert_eq!(missing.tokens(100, 512), 0);
        assert!(link.validate().is_ok());
    }

    #[test]
    fn no_bandwidth_means_no_time_and_bad_settings_name_their_key() {
        assert_eq!(KvTransfer::default().delay_ns(1 << 30), 0);
        let bad = KvTransfer {
            bandwidth_gbps: -1.0,
            ..KvTransfer::default()
        };
        assert!(bad.validate().unwrap_err().contains("bandwidth_gbps"));
        let no_bytes = KvTransfer {
            bandwidth_gbps: 25.0,
            ..KvTransfer::default()
        };
        assert!(
            no_bytes
                .validate()
                .unwrap_err()
                .contains("kv_bytes_per_token")
        );
        let slow = KvTransfer {
            kv_bytes_per_token: u64::MAX,
            bandwidth_gbps: 1e-9,
            ..KvTransfer::default()
        };
        assert_eq!(
            slow.delay_ns(u64::MAX),
            LONGEST_DELAY_NS + 1,
            "past the clock: said so, not capped"
        );
        // A day and a half is a day and a half (it was capped at an hour): 1,000 tokens of
        // 131,072 bytes at 1,000 bytes a second.
        let thin = KvTransfer {
            kv_bytes_per_token: 131_072,
            bandwidth_gbps: 1e-6,
            ..KvTransfer::default()
        };
        assert_eq!(thin.delay_ns(1_000), 131_072_000_000_000);
    }
}
