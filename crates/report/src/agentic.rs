//! What an agentic run measures: per play (one agent job) the time from its first request
//! sent to its last one done, per session the share of its prompt tokens reused, and how
//! often a session's later turns landed where their context was cached.

use serde::{Deserialize, Serialize};

use crate::latency::Latency;

/// An agentic trace's plays and sessions (added in 0.5; only for such traces).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgenticReport {
    /// Plays (agent jobs) that finished.
    pub plays: u64,
    /// Per play, first request sent to last request done, ms.
    pub play_ms: Option<Latency>,
    /// Sessions.
    pub sessions: u64,
    /// Over sessions, each session's reused prompt tokens over its prompt tokens (the
    /// `Latency` fields as plain shares, 0 to 1).
    pub session_hit_ratio: Option<Latency>,
    /// Turns after the first of their session.
    pub follow_up_turns: u64,
    /// Of those, the ones routed to an endpoint that held, as they were routed, the longest
    /// cached prefix of their prompt of any endpoint (and some of it); absent from `drive`,
    /// whose client cannot see the engines' caches.
    pub on_cached_context: Option<u64>,
    /// `on_cached_context / follow_up_turns`.
    pub on_cached_context_share: Option<f64>,
}

/// Mean, nearest-rank percentiles and maximum of `sorted` (ascending), rounded to 6
/// places; `None` when empty.
pub fn distribution(sorted: &[f64]) -> Option<Latency> {
    let last = *sorted.last()?;
    let at = |q: f64| {
        let rank = (q * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    };
    let round = |v: f64| (v * 1e6).round() / 1e6;
    Some(Latency {
        mean: round(sorted.iter().sum::<f64>() / sorted.len() as f64),
        p50: round(at(0.5)),
        p90: round(at(0.9)),
        p99: round(at(0.99)),
        max: round(last),
    })
}
