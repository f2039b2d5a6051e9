//! Warm caches: a warm-up workload replayed through the same fleet and routers first,
//! unmeasured, so the run starts with what it left in the engines' KV caches (GPU, host
//! and shared tiers) and in the routers' own state, as a benchmark's load point starts
//! after the one before it.

use routerlab_trace::Workload;

use std::sync::OnceLock;

use super::{Sim, TimedSettings, loaded};
use crate::observer::{NoObserver, Observer};
use crate::{Replicas, Report, SimError};

/// Replays `warm_up` through `replicas` on `settings`' engines, then `workload` on the
/// engines as the warm-up left them, its clock continuing (each of its arrivals after the
/// warm-up's last request finished); the report and `observer` see `workload` alone, its
/// times from its own start, the engines' counters (usage, evictions, preemptions, tier
/// stores) started over. Both workloads must have been loaded with
/// [`TimedSettings::engine_block_sizes`].
pub fn replay_timed_warm(
    warm_up: &Workload,
    workload: &Workload,
    replicas: &mut Replicas,
    settings: &TimedSettings,
    observer: &mut dyn Observer,
) -> Result<Report, SimError> {
    let mut unwatched = NoObserver;
    // No sharing hints: a block only one request of the warm-up has may be one of the
    // run's, so every block is indexed.
    let unknown = OnceLock::new();
    let mut warm = loaded(warm_up, &unknown, replicas, settings, &mut unwatched, 0)?;
    warm.run(replicas)?;
    let origin = warm.stats.latency.end_ns().saturating_add(1);
    let Sim {
        mut fleet, lagged, ..
    } = warm;
    for engine in &mut fleet.engines {
        engine.restart_counters(origin);
    }
    let mut sim = loaded(workload, &unknown, replicas, settings, observer, origin)?;
    sim.fleet = fleet;
    sim.lagged = lagged;
    sim.run(replicas)?;
    Ok(routerlab_report::checked(sim.report()))
}
