//! `serve`'s decision log: one JSON line per request it routed, written when the request
//! is done. A line says what came in (its arrival, session, prompt size and the block
//! chain of its prompt, hashes only, never the text), what the router saw and did (every
//! endpoint's load at the decision, the policy, the endpoint chosen and, where the policy
//! randomised, the chance it had of being chosen) and what it took (time to first token,
//! per output token, end to end). `serve` writes it; `replay --trace LOG` replays the
//! logged traffic, and `replay --from-log LOG` judges another policy on it.

use serde::{Deserialize, Serialize};

/// The first field of every line: the log's format and its version.
pub const LOG_TAG: &str = "routerlab-decisions/1";

/// A live engine's KV usage arrives as a fraction; `serve`'s plugins see it as this many
/// blocks out of the total, and a policy asked in a logged state sees it the same way.
pub const LIVE_KV_BLOCKS: u64 = 10_000;

/// One endpoint as the router saw it when it decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    /// Its name (`host:port`).
    pub endpoint: String,
    /// Requests running, by its last scrape.
    pub running: u64,
    /// Requests waiting, by its last scrape.
    pub waiting: u64,
    /// KV-cache use, 0 to 1, by its last scrape.
    pub kv_usage: f64,
    /// Requests in flight there as the router's plugins saw them: its own, and its peer
    /// replicas' when they share state.
    pub inflight: u64,
}

/// One routed request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRecord {
    /// [`LOG_TAG`].
    pub log: String,
    /// The router's number for it, from 1.
    pub seq: u64,
    /// When it arrived, seconds since `serve` started.
    pub arrival_s: f64,
    /// Its session's number, 0 = none.
    pub session: u64,
    /// The previous request of its session (`seq`), 0 = none.
    pub parent: u64,
    /// Prompt tokens (the router's estimate: bytes / 4).
    pub prompt_tokens: u64,
    /// Bytes per block of `blocks`.
    pub block_bytes: u32,
    /// The prompt's block chain: a hash per whole block.
    pub blocks: Vec<u64>,
    /// The prompt's text, only when asked for (`serve --decision-log-prompts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The tokens it asked for at most, if it said.
    pub max_tokens: Option<u64>,
    /// The matcher that chose.
    pub policy: String,
    /// Every endpoint in the fleet as the router saw it.
    pub candidates: Vec<Candidate>,
    /// Where it went (after retries, the endpoint that answered).
    pub endpoint: String,
    /// The chance the policy had of choosing `endpoint`, when it chose at random (`random`
    /// picks uniformly among the available endpoints); `null` when unknown or deterministic.
    pub propensity: Option<f64>,
    /// `ok` (answered whole), `broken` (the engine broke the answer off), `left` (the
    /// client went away), or `http-N` (the engine answered status N).
    pub status: String,
    /// Output tokens: what it asked for (`max_tokens`, as `drive` sends a trace), else the
    /// server-sent events received.
    pub output_tokens: u64,
    /// Arrival to first answer bytes, ms; `null` when none came.
    pub ttft_ms: Option<f64>,
    /// Per output token after the first, ms; `null` with fewer than two.
    pub tpot_ms: Option<f64>,
    /// Arrival to the end of the answer, ms.
    pub e2e_ms: f64,
}

impl DecisionRecord {
    /// Whether `line` is a decision-log line (its first field is the tag).
    pub fn is_log_line(line: &str) -> bool {
        line.trim_start()
            .strip_prefix("{\"log\":")
            .is_some_and(|rest| rest.trim_start().starts_with(&format!("\"{LOG_TAG}\"")))
    }
}
