//! Warm caches: a warm-up workload replayed through the same fleet and routers first,
//! unmeasured, so the run starts with what it left in the engines' KV caches (GPU, host
//! and shared tiers) and in the routers' own state, as a benchmark's load point starts
//! after the one before it.

use routerlab_trace::Workload;

use std::sync::OnceLock;

use super::{Sim, TimedSettings, loaded};
use crate::observer::{NoObserver, Observer};
use crate::{Replicas, Report, SimError};

/// Replays the `warm_ups` in turn through `replicas` on `settings`' engines, each on the
/// engines as the one before left them, then `workload`, the clock continuing (each
/// workload's arrivals after the last request before it finished); the report and
/// `observer` see `workload` alone, its times from its own start, the engines' counters
/// (usage, evictions, preemptions, tier stores) started over. Every workload must have
/// been loaded with [`TimedSettings::engine_block_sizes`].
pub fn replay_timed_warm(
    warm_ups: &[Workload],
    workload: &Workload,
    replicas: &mut Replicas,
    settings: &TimedSettings,
    observer: &mut dyn Observer,
) -> Result<Report, SimError> {
    let mut unwatched = NoObserver;
    // No sharing hints: a block only one request of a warm-up has may be one of the
    // run's, so every block is indexed.
    let unknown = OnceLock::new();
    let mut origin = 0;
    // What the warm-ups before left: the engines and the lagged events' view of them.
    let mut left: Option<(super::Fleet, Option<super::lagged::Lagged>)> = None;
    for warm_up in warm_ups {
        let mut warm = loaded(
            warm_up,
            &unknown,
            replicas,
            settings,
            &mut unwatched,
            origin,
        )?;
        if let Some((fleet, lagged)) = left.take() {
            warm.fleet = fleet;
            warm.lagged = lagged;
        }
        warm.run(replicas)?;
        origin = warm.stats.latency.end_ns().max(origin).saturating_add(1);
        let Sim { fleet, lagged, .. } = warm;
        left = Some((fleet, lagged));
    }
    let mut sim = loaded(workload, &unknown, replicas, settings, observer, origin)?;
    if let Some((mut fleet, lagged)) = left {
        for engine in &mut fleet.engines {
            engine.restart_counters(origin);
        }
        sim.fleet = fleet;
        sim.lagged = lagged;
    }
    sim.run(replicas)?;
    Ok(routerlab_report::checked(sim.report()))
}
