//! Per-request records: what `--requests-out` writes one JSON line each of, and what plots
//! are drawn from.

use serde::{Deserialize, Serialize};

/// One finished request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestRecord {
    /// Request id (1-based position in the trace).
    pub id: u64,
    /// Line in the trace.
    pub line: usize,
    /// Arrival, seconds.
    pub arrival_s: f64,
    /// Endpoint name (in a disaggregated fleet, where it decoded).
    pub endpoint: Option<String>,
    /// Where it was prefilled, in a disaggregated fleet when that was another endpoint
    /// (added in 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_endpoint: Option<String>,
    /// The router replica that routed it, from 0; absent with one router (added in 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Prompt tokens served from the engine's prefix cache.
    pub hit_tokens: u32,
    /// Arrival to first scheduled, ms.
    pub queue_ms: f64,
    /// Arrival to first token, ms.
    pub ttft_ms: f64,
    /// Finish, seconds.
    pub finish_s: f64,
}

/// Where one request of a time-free replay went (it has no latencies: nothing finishes).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoutedRecord {
    /// Request id (1-based position in the trace).
    pub id: u64,
    /// Line in the trace.
    pub line: usize,
    /// Endpoint name; `None` when the request was rejected. In a disaggregated fleet, its
    /// decode endpoint.
    pub endpoint: Option<String>,
    /// Its prefill endpoint, in a disaggregated fleet when that was another endpoint
    /// (added in 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_endpoint: Option<String>,
    /// The router replica that decided, from 0; absent with one router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
}
