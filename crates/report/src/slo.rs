//! SLO attainment: the latency targets a timed run's finished requests are judged by, and
//! the report's `timed.slo` block (counted by [`crate::stats::TimedTally`]).

use serde::{Deserialize, Serialize};

/// Latency targets a request is judged by: it meets them when its TTFT and its time per
/// output token after the first are each at most the target given (a request of one token
/// has no TPOT to miss).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// TTFT target, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// TPOT target, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
}

/// SLO attainment: the finished requests that met each target and both.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SloReport {
    /// The targets.
    #[serde(flatten)]
    pub targets: Slo,
    /// Finished requests judged (requests refused as too long are not: see `too_long`).
    pub requests: u64,
    /// Of those, with TTFT within its target (all of them without one).
    pub ttft_met: u64,
    /// Of those, with TPOT within its target (all of them without one).
    pub tpot_met: u64,
    /// Of those, meeting every target.
    pub met: u64,
    /// `met / requests` (0 when none finished).
    pub attainment: f64,
}
