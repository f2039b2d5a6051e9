//! What a timed replay is run with, and the checks that the settings fit the routers.

use routerlab_engine::{EngineConfig, KvTransfer};
use routerlab_route::Replicas;

use super::Arrivals;
use crate::SimError;

/// Settings of a timed replay (the endpoints and the unavailable policy are the router's).
#[derive(Debug, Clone, PartialEq)]
pub struct TimedSettings {
    /// One engine per endpoint.
    pub engines: Vec<EngineConfig>,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// A request is not sent before its parent finished plus `think_time_ns`.
    pub respect_parents: bool,
    /// Pause between a parent's finish and its child's arrival.
    pub think_time_ns: u64,
    /// Status refresh period for plugins; 0 = live.
    pub metrics_interval_ns: u64,
    /// Output length when the trace has none.
    pub default_output_tokens: u64,
    /// Seed of the arrival process.
    pub seed: u64,
    /// The KV's move between the pools of a disaggregated fleet (the split itself is the
    /// routers': [`Replicas::pools`]).
    pub kv_transfer: KvTransfer,
    /// How late the routers' KV-event index sees the engines' stores and removals, ns
    /// (0: at once; see `lagged`).
    pub kv_event_lag_ns: u64,
    /// Latency targets each finished request is judged by (the report's `timed.slo`).
    pub slo: Option<routerlab_report::Slo>,
    /// The routing path's latency, ns: a request reaches its router this long after it is
    /// sent (a gateway's hop in front of the engines), and its latencies count from when
    /// it was sent (0: the router is the client's first stop).
    pub router_hop_ns: u64,
    /// Each routing decision's own time, ns, on top of the hop: once a request, twice in a
    /// disaggregated fleet (its prefill and its decode pick).
    pub router_decision_ns: u64,
    /// A fleet a scaler sizes: `engines` are then the slots the GPU ceiling allows, of
    /// which the scaler's answer decides how many run (`None`: all of them, always).
    pub scaling: Option<super::ScalingSettings>,
}

impl TimedSettings {
    /// A request's routing path, ns: the hop and its decisions' time (two when
    /// `disaggregated`).
    pub fn hop_ns(&self, disaggregated: bool) -> u64 {
        let decisions = if disaggregated { 2 } else { 1 };
        (self.router_hop_ns).saturating_add(self.router_decision_ns.saturating_mul(decisions))
    }

    /// `engines` (one per endpoint) at the trace's own times, live metrics, no parent held,
    /// 128 output tokens where none are given, seed 0: what calibrations and snapshots use.
    pub fn at_trace_times(engines: Vec<EngineConfig>) -> TimedSettings {
        TimedSettings {
            engines,
            arrivals: Arrivals::Trace { speedup: 1.0 },
            respect_parents: false,
            think_time_ns: 0,
            metrics_interval_ns: 0,
            default_output_tokens: 128,
            seed: 0,
            kv_transfer: KvTransfer::default(),
            kv_event_lag_ns: 0,
            slo: None,
            router_hop_ns: 0,
            router_decision_ns: 0,
            scaling: None,
        }
    }

    /// The engine block sizes a workload must be loaded with for these engines.
    pub fn engine_block_sizes(&self) -> Vec<u32> {
        self.engines.iter().map(|e| e.engine_block_size).collect()
    }
}

/// Refuses settings that do not fit the routers: one engine per endpoint, each valid, one
/// capacity for the fleet's shared store.
pub(super) fn validate(replicas: &Replicas, settings: &TimedSettings) -> Result<(), SimError> {
    let router = replicas.router(0);
    let n = router.table().len();
    if settings.engines.len() != n {
        return Err(SimError::Input(format!(
            "{} engines for {n} endpoints (give one per endpoint)",
            settings.engines.len()
        )));
    }
    settings
        .kv_transfer
        .validate()
        .map_err(|e| SimError::Input(e.to_string()))?;
    for (pos, engine) in settings.engines.iter().enumerate() {
        engine.validate().map_err(|e| {
            SimError::Input(format!("endpoint `{}`: {e}", router.table().name(pos)))
        })?;
    }
    lockstep_groups(replicas, settings)?;
    if let Some(scaling) = &settings.scaling {
        let slots = n as u64;
        let prefill_slots = replicas.pools().map(|p| p.prefill as u64);
        let problem = if prefill_slots != scaling.prefill.map(|(p, _)| u64::from(p)) {
            Some("the scaling settings' prefill slots are not the fleet's prefill pool".to_owned())
        } else if u64::from(scaling.max_endpoints) > slots
            || scaling.max_endpoints < scaling.initial
        {
            Some(format!(
                "a ceiling of {} endpoints for {slots} slots and {} at the start",
                scaling.max_endpoints, scaling.initial
            ))
        } else if replicas.scaler_name().is_none() {
            Some("scaling settings without a scaler".to_owned())
        } else if scaling.interval_ns == 0 {
            Some("the scaler's interval must be above 0".to_owned())
        } else if scaling.min_endpoints == 0 {
            Some("a scaled fleet keeps at least 1 endpoint".to_owned())
        } else if u64::from(scaling.min_endpoints) > slots || u64::from(scaling.initial) > slots {
            Some(format!(
                "{} endpoints at the start and at least {} kept, but the GPU ceiling allows {slots}",
                scaling.initial, scaling.min_endpoints
            ))
        } else if scaling.initial < scaling.min_endpoints {
            Some(format!(
                "{} endpoints at the start, fewer than the {} kept",
                scaling.initial, scaling.min_endpoints
            ))
        } else if settings.kv_event_lag_ns > 0 {
            Some("KV-event lag with a scaled fleet is not modelled yet".to_owned())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(SimError::Input(problem));
        }
    } else if replicas.scaler_name().is_some() {
        return Err(SimError::Input("a scaler without scaling settings".into()));
    }
    replicas
        .sync()
        .check(replicas.len())
        .map_err(SimError::Input)?;
    if replicas.sync().is_on() && replicas.is_disaggregated() {
        return Err(SimError::Input(
            "router replicas sharing state over a disaggregated fleet are not modelled yet".into(),
        ));
    }
    // One shared store for the fleet: its capacity is the same wherever it is named.
    let mut shared = (settings.engines.iter().enumerate())
        .filter_map(|(pos, e)| Some((pos, e.shared_tier?.blocks)));
    if let Some((first, blocks)) = shared.next()
        && let Some((other, theirs)) = shared.find(|(_, b)| *b != blocks)
    {
        let name = |pos| router.table().name(pos).to_owned();
        return Err(SimError::Input(format!(
            "engine `shared_tier.blocks` is the capacity of the fleet's one shared store, the same on every endpoint: `{}` has {blocks}, `{}` has {theirs}",
            name(first),
            name(other)
        )));
    }
    Ok(())
}

/// The data-parallel ranks of a mixture-of-experts engine step together (see [`super::fleet`]):
/// consecutive endpoints in whole groups of alike ranks, in a fleet that neither scales nor
/// splits prefill from decode.
fn lockstep_groups(replicas: &Replicas, settings: &TimedSettings) -> Result<(), SimError> {
    let table = replicas.router(0).table();
    let engines = &settings.engines;
    let mut first = 0;
    while first < engines.len() {
        let ranks = engines[first].step_time.lockstep_ranks() as usize;
        if ranks > 1 {
            let name = table.name(first);
            let whole = engines.get(first..first + ranks).is_some_and(|group| {
                group
                    .iter()
                    .all(|e| e.step_time.lockstep_ranks() as usize == ranks)
            });
            let problem = if !whole {
                Some(format!(
                    "its engine's experts span {ranks} data-parallel ranks, which step together: the fleet's endpoints come in whole groups of {ranks} consecutive endpoints with the same engine, and its group is not whole"
                ))
            } else if settings.scaling.is_some() {
                Some(
                    "a scaled fleet of data-parallel ranks stepping together is not modelled yet"
                        .to_owned(),
                )
            } else if replicas.is_disaggregated() {
                Some("a disaggregated fleet of data-parallel ranks stepping together is not modelled yet".to_owned())
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(SimError::Input(format!("endpoint `{name}`: {problem}")));
            }
        }
        first += ranks.max(1);
    }
    Ok(())
}
