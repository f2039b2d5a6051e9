//! The timed replay's report: the statistics, per endpoint, per pool and per tier.

use routerlab_engine::HostCache;
use routerlab_report::{EndpointTimed, HostTierTimed, Report, TimedReport, round6};

use super::{Sim, agentic};

impl Sim<'_> {
    /// The run's report, once it is over.
    pub(super) fn report(self) -> Report {
        let sync = self.sync_report();
        let stats = self.stats;
        let mut report = stats.base.finish();
        let end = stats.latency.end_ns();
        report.timed = Some(TimedReport {
            router_queued: stats.router_queued,
            too_long: stats.too_long,
            running_spread: stats.spread.finish(),
            per_endpoint: self
                .fleet
                .engines
                .iter()
                .enumerate()
                .map(|(pos, engine)| EndpointTimed {
                    name: self.names[pos].clone(),
                    requests: stats.per_endpoint[pos].requests,
                    prompt_tokens: stats.per_endpoint[pos].prompt_tokens,
                    peak_kv_usage: round6(engine.peak_usage),
                    mean_kv_usage: round6(engine.mean_usage(end)),
                    evictions: engine.evictions(),
                    preemptions: engine.preemptions,
                    tokens_per_decode_step: engine.config().speculative.as_ref().map(|_| {
                        match engine.speculated {
                            (0, _) => 0.0,
                            (steps, tokens) => round6(tokens as f64 / steps as f64),
                        }
                    }),
                })
                .collect(),
            pools: self
                .pd
                .as_ref()
                .map(|pd| pd.report(self.fleet.engines.len())),
            agentic: self.agentic.as_ref().map(agentic::Agentic::report),
            tiers: stats.tiers.as_ref().map(|tiers| {
                let occupancy = |name: &str, tier: &HostCache| HostTierTimed {
                    name: name.to_owned(),
                    blocks: tier.capacity() as u64,
                    peak_blocks: tier.peak,
                    stores: tier.stores,
                    evictions: tier.evictions,
                };
                let per_endpoint = (self.fleet.engines.iter().enumerate())
                    .filter_map(|(pos, engine)| Some(occupancy(&self.names[pos], engine.host()?)))
                    .collect();
                let shared = (self.fleet.engines.iter())
                    .find_map(|engine| engine.shared())
                    .map(|store| occupancy("shared", &store.lock()));
                tiers.report(per_endpoint, shared)
            }),
            scaling: (self.autoscale)
                .map(|auto| auto.report(self.origin_ns, end.max(self.origin_ns))),
            sync,
            off_policy: None,
            ..stats.latency.report()
        });
        report
    }
}
