//! What the timed replay counts beyond the time-free statistics: latencies, tokens per
//! endpoint, and the spread of running requests across the fleet over time.

use routerlab_report::stats::{LatencyStat, Tally, TimedTally, ratio};
use routerlab_report::{HostTierTimed, TiersReport};
use routerlab_report::{Spread, round6};

/// Prompt and output tokens of one endpoint's finished requests.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct EndpointTally {
    pub(super) requests: u64,
    pub(super) prompt_tokens: u64,
}

/// Running requests across endpoints, integrated over time.
#[derive(Debug, Default)]
pub(super) struct SpreadTally {
    /// Time of the last event seen.
    pub(super) last_ns: Option<u64>,
    /// ∫ (max − min) dt and ∫ cv dt, in request·ns and ns.
    pub(super) range_ns: f64,
    pub(super) cv_ns: f64,
    pub(super) total_ns: u64,
    /// The running counts the last (max − min, cv) was computed for, and that pair: most
    /// events (every metrics refresh, every step that admits or finishes nothing) leave the
    /// counts as they were, and the pair need not be worked out again.
    pub(super) counts: Vec<u64>,
    pub(super) last: Option<(u64, f64)>,
}

impl SpreadTally {
    /// The fleet held `running` from the last event until `now`.
    pub(super) fn advance(&mut self, now: u64, running: impl Iterator<Item = u64> + Clone) {
        let last = *self.last_ns.get_or_insert(now);
        let dt = now.saturating_sub(last);
        self.last_ns = Some(now);
        if dt == 0 {
            return;
        }
        let (range, cv) = match self.last {
            Some(pair) if self.counts.iter().copied().eq(running.clone()) => pair,
            _ => {
                self.counts.clear();
                self.counts.extend(running);
                let Some(pair) = spread_of(&self.counts) else {
                    return;
                };
                self.last = Some(pair);
                pair
            }
        };
        self.range_ns += range as f64 * dt as f64;
        self.cv_ns += cv * dt as f64;
        self.total_ns += dt;
    }

    pub(super) fn finish(&self) -> Spread {
        if self.total_ns == 0 {
            return Spread::default();
        }
        let total = self.total_ns as f64;
        Spread {
            max_minus_min: round6(self.range_ns / total),
            cv: round6(self.cv_ns / total),
        }
    }
}

/// max − min and the coefficient of variation of `running` (`None` for no endpoints).
pub(super) fn spread_of(running: &[u64]) -> Option<(u64, f64)> {
    let (mut sum, mut max, mut min) = (0u64, 0u64, u64::MAX);
    for r in running {
        sum += r;
        max = max.max(*r);
        min = min.min(*r);
    }
    if running.is_empty() {
        return None;
    }
    let n = running.len() as f64;
    let mean = sum as f64 / n;
    let cv = if mean > 0.0 {
        let var = running
            .iter()
            .map(|r| (*r as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        var.sqrt() / mean
    } else {
        0.0
    };
    Some((max - min, cv))
}

/// Reused tokens by tier, and the host tier's loads.
#[derive(Default)]
pub(super) struct TiersTally {
    prompt_tokens: u64,
    gpu_hit_tokens: u64,
    host_hit_tokens: u64,
    shared_hit_tokens: u64,
    loads: u64,
    load: LatencyStat,
}

impl TiersTally {
    /// A sequence an engine finished.
    pub(super) fn add(&mut self, sequence: &routerlab_engine::Sequence) {
        let hit = u64::from(sequence.hit_tokens.unwrap_or(0));
        let host = u64::from(sequence.host_hit_tokens.unwrap_or(0));
        let shared = u64::from(sequence.shared_hit_tokens.unwrap_or(0));
        self.prompt_tokens += u64::from(sequence.prompt_tokens);
        self.gpu_hit_tokens += hit.saturating_sub(host + shared);
        self.host_hit_tokens += host;
        self.shared_hit_tokens += shared;
        if sequence.load_ns > 0 {
            self.loads += 1;
            self.load.record(sequence.load_ns / 1000);
        }
    }

    pub(super) fn report(
        &self,
        per_endpoint: Vec<HostTierTimed>,
        shared: Option<HostTierTimed>,
    ) -> TiersReport {
        TiersReport {
            prompt_tokens: self.prompt_tokens,
            gpu_hit_tokens: self.gpu_hit_tokens,
            gpu_hit_ratio: ratio(self.gpu_hit_tokens, self.prompt_tokens),
            host_hit_tokens: self.host_hit_tokens,
            host_hit_ratio: ratio(self.host_hit_tokens, self.prompt_tokens),
            shared_hit_tokens: shared.as_ref().map(|_| self.shared_hit_tokens),
            shared_hit_ratio: (shared.as_ref())
                .map(|_| ratio(self.shared_hit_tokens, self.prompt_tokens)),
            loads: self.loads,
            load: self.load.summary(),
            per_endpoint,
            shared,
        }
    }
}

/// What the timed replay measures beyond the time-free statistics.
pub(super) struct TimedStats {
    pub(super) base: Tally,
    /// Latencies and token totals, reduced as `drive` reduces them.
    pub(super) latency: TimedTally,
    pub(super) per_endpoint: Vec<EndpointTally>,
    pub(super) router_queued: u64,
    pub(super) too_long: u64,
    pub(super) spread: SpreadTally,
    /// With a host tier anywhere.
    pub(super) tiers: Option<TiersTally>,
}
