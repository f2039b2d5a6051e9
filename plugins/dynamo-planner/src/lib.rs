//! `dynamo-planner`: NVIDIA Dynamo Planner's scaling rules, as its `optimization_target`
//! chooses them.
//!
//! - `throughput` (the default) and `latency`: the load rule of "easy mode", every
//!   `load_adjustment_interval_s`. Each serving endpoint's utilisation is the prompt tokens
//!   of its unfinished requests, running or queued, over its KV cache in tokens. Dynamo
//!   sums its forward pass metrics: the KV tokens of the running requests (each request's
//!   whole context, a shared prefix counted for each) and of queued ones, plus the queued
//!   prompt tokens, over `max_kv_tokens`; the output tokens generated so far are what the
//!   prompt tokens leave out. One endpoint above the scale-up threshold (1.0; `latency`: 0.4)
//!   adds one; all below the scale-down threshold (0.6; `latency`: 0.1) remove one, unless
//!   the survivors' load would cross the scale-up threshold. Nothing is decided while an
//!   endpoint is starting.
//! - `sla`: the throughput rule, every `throughput_adjustment_interval_s`: the last
//!   interval's requests per second (the `constant` predictor) over what one engine serves
//!   within the SLA (`engine_rps`; Dynamo reads it from its profiler's results, here it is
//!   given): `max(ceil(demand / engine_rps), min_endpoint)` per pool, a prefill and a
//!   decode pool each by its own rate.
//!
//! Either way the GPU budget caps the answer: one pool at `max_gpu_budget / gpus per
//! endpoint`, two shrunk in proportion (Dynamo's `proportional_clamp_pair`, its ceiling
//! path). Between decisions the pools keep their size.
//!
//! Read from ai-dynamo 1.7.0.dev20261026 (the wheel AISimulate's Dynamo stack runs):
//! `planner/core/load_scaling.py` (`_agg_easy_decision`,
//! `_consolidation_safe_easy_target`), `planner/core/throughput_scaling.py`
//! (`_throughput_agg`, `_compute_prefill_replicas`, `_compute_decode_replicas`),
//! `planner/core/budget.py` and `planner/config/planner_config.py`.
//!
//! Config keys: `optimization_target`, `load_adjustment_interval_s`,
//! `throughput_adjustment_interval_s`, `engine_rps` (aggregated), `prefill_engine_rps`,
//! `decode_engine_rps`, `min_endpoint`, `max_gpu_budget`.

use routerlab_core::{PluginConfig, Pool, Role, Scaler, Tick};
use routerlab_policy_kit::seconds_ns;

/// Which of the planner's rules decides.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    /// The load rule with these scale-up and scale-down utilisations.
    Load { up: f64, down: f64 },
    /// The throughput rule.
    Sla,
}

/// The planner's rules.
pub struct DynamoPlanner {
    target: Target,
    load_interval_ns: u64,
    /// Time since the last load decision.
    load_elapsed_ns: u64,
    interval_ns: u64,
    engine_rps: f64,
    prefill_engine_rps: f64,
    decode_engine_rps: f64,
    min_endpoint: u32,
    max_gpu_budget: u32,
    /// Requests that arrived since the last adjustment, per pool (the first pool's count is
    /// the demand of an aggregated fleet and of a prefill pool; requests reach both pools).
    arrivals: Vec<u64>,
    /// Time covered since the last adjustment.
    elapsed_ns: u64,
}

fn rate(config: &mut PluginConfig, key: &'static str) -> Result<f64, String> {
    let value = config.f64(key, 1.0)?;
    if !(value.is_finite() && value > 0.0) {
        return Err(format!("config key `{key}`: must be above 0, not {value}"));
    }
    Ok(value)
}

impl Scaler for DynamoPlanner {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let target = match config.choice(
            "optimization_target",
            &["throughput", "latency", "sla"],
            "throughput",
        )? {
            "latency" => Target::Load { up: 0.4, down: 0.1 },
            "sla" => Target::Sla,
            _ => Target::Load { up: 1.0, down: 0.6 },
        };
        let load_interval_ns = seconds_ns(config, "load_adjustment_interval_s", 5.0, false)?;
        let interval_ns = seconds_ns(config, "throughput_adjustment_interval_s", 180.0, false)?;
        let engine_rps = rate(config, "engine_rps")?;
        let prefill_engine_rps = rate(config, "prefill_engine_rps")?;
        let decode_engine_rps = rate(config, "decode_engine_rps")?;
        let min_endpoint = config.u64("min_endpoint", 1)?;
        let max_gpu_budget = config.u64("max_gpu_budget", 8)?;
        let small = |key: &str, v: u64| {
            u32::try_from(v).map_err(|_| format!("config key `{key}`: {v} is too large"))
        };
        Ok(DynamoPlanner {
            target,
            load_interval_ns,
            load_elapsed_ns: 0,
            interval_ns,
            engine_rps,
            prefill_engine_rps,
            decode_engine_rps,
            min_endpoint: small("min_endpoint", min_endpoint)?,
            max_gpu_budget: small("max_gpu_budget", max_gpu_budget)?,
            arrivals: Vec::new(),
            elapsed_ns: 0,
        })
    }

    fn scale(&mut self, tick: &Tick<'_>, desired: &mut [u32]) -> Result<(), String> {
        if let Target::Load { up, down } = self.target {
            self.load_elapsed_ns = self.load_elapsed_ns.saturating_add(tick.interval_ns);
            if self.load_elapsed_ns < self.load_interval_ns {
                return Ok(());
            }
            self.load_elapsed_ns = 0;
            let proposed: Vec<u32> = (tick.pools.iter().zip(desired.iter()))
                .map(|(pool, &now)| self.load_rule(pool, up, down).unwrap_or(now))
                .collect();
            self.within_budget(tick, &proposed, desired);
            return Ok(());
        }
        self.arrivals.resize(tick.pools.len(), 0);
        for (sum, pool) in self.arrivals.iter_mut().zip(&tick.pools) {
            *sum += pool.arrivals;
        }
        self.elapsed_ns = self.elapsed_ns.saturating_add(tick.interval_ns);
        if self.elapsed_ns < self.interval_ns {
            return Ok(());
        }
        let duration_s = self.elapsed_ns as f64 / 1e9;
        // The `constant` predictor: the next interval brings what the last one did.
        let demand = self.arrivals.first().copied().unwrap_or(0) as f64 / duration_s;
        self.arrivals.iter_mut().for_each(|a| *a = 0);
        self.elapsed_ns = 0;
        let replicas =
            |engine_rps: f64| (demand / engine_rps).ceil().min(f64::from(u32::MAX)) as u32;
        let proposed: Vec<u32> = tick
            .pools
            .iter()
            .map(|pool| match pool.role {
                Role::Prefill => replicas(self.prefill_engine_rps),
                Role::Decode => replicas(self.decode_engine_rps),
                _ => replicas(self.engine_rps),
            })
            .collect();
        self.within_budget(tick, &proposed, desired);
        Ok(())
    }
}

impl DynamoPlanner {
    /// The load rule for one pool: its new size, or `None` for no change.
    fn load_rule(&self, pool: &Pool<'_>, up: f64, down: f64) -> Option<u32> {
        // A start in flight: the planner only observes until it settles.
        if pool.starting > 0 || pool.ready == 0 {
            return None;
        }
        let utils: Vec<f64> = pool
            .endpoints
            .iter()
            .filter_map(|e| {
                let capacity = e.kv_blocks_total() as f64 * e.kv_block_tokens()? as f64;
                let held = e.inflight_prompt_tokens() as f64;
                (capacity > 0.0).then(|| held / capacity)
            })
            .collect();
        if utils.is_empty() {
            return None;
        }
        let ready = pool.ready;
        if utils.iter().any(|&u| u > up) {
            return Some(ready + 1);
        }
        if ready > 1 && utils.iter().all(|&u| u < down) {
            let wanted = (ready - 1).max(self.min_endpoint).max(1);
            // Draining one must not push the others straight past the scale-up line.
            let busiest = utils.iter().copied().fold(0.0, f64::max);
            if wanted < ready && busiest * f64::from(ready) / f64::from(wanted) >= up {
                return None;
            }
            return Some(wanted);
        }
        None
    }

    /// `proposed` (one count per pool, at least `min_endpoint`) within the GPU budget,
    /// into `desired`.
    fn within_budget(&self, tick: &Tick<'_>, proposed: &[u32], desired: &mut [u32]) {
        let proposed: Vec<u32> = proposed.iter().map(|&p| p.max(self.min_endpoint)).collect();
        let budget = self.max_gpu_budget;
        match tick.pools.as_slice() {
            [pool] => {
                let gpus = pool.gpus_per_endpoint.max(1);
                desired[0] = proposed[0].min(budget / gpus);
            }
            [p, d] => {
                let (pg, dg) = (p.gpus_per_endpoint.max(1), d.gpus_per_endpoint.max(1));
                let (num_p, num_d) = (proposed[0], proposed[1]);
                let total = u64::from(num_p) * u64::from(pg) + u64::from(num_d) * u64::from(dg);
                if total <= u64::from(budget) {
                    desired[0] = num_p;
                    desired[1] = num_d;
                } else {
                    // The ceiling path: shrink in proportion, the prefill pool first, the
                    // decode pool taking what is left.
                    let (target, min) = (f64::from(budget), f64::from(self.min_endpoint));
                    let scale = target / total as f64;
                    let max_p = ((target - min * f64::from(dg)) / f64::from(pg)).floor();
                    let new_p = (f64::from(num_p) * scale).floor().min(max_p).max(min);
                    let remaining = target - new_p * f64::from(pg);
                    let new_d = (remaining / f64::from(dg)).floor().max(min);
                    desired[0] = new_p as u32;
                    desired[1] = new_d as u32;
                }
            }
            _ => desired.copy_from_slice(&proposed),
        }
    }
}

routerlab_core::export_plugins! {
    scaler DynamoPlanner {
        name: "dynamo-planner",
        description: "NVIDIA Dynamo Planner's throughput rule: ceil(predicted requests/s over one engine's SLA-meeting rate), within a GPU budget",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{self, EndpointsBuilder, create_scaler};
    use routerlab_core::{Pool, Role, Scaler, Tick};

    use super::DynamoPlanner;

    fn pool(endpoints: &EndpointsBuilder, role: Role, ready: u32, arrivals: u64) -> Pool<'_> {
        Pool {
            role,
            ready,
            arrivals,
            ..testing::pool(endpoints)
        }
    }

    #[test]
    fn demand_over_one_engines_rate_at_each_adjustment() {
        let mut planner: DynamoPlanner = create_scaler(
            "{optimization_target: sla, throughput_adjustment_interval_s: 60, engine_rps: 2.5}",
        )
        .unwrap();
        let endpoints = EndpointsBuilder::new(2);
        let mut desired = [2];
        // 30 s in, 300 arrivals: no adjustment yet.
        let tick = |now, n| Tick {
            now_ns: now * 1_000_000_000u64,
            interval_ns: 30_000_000_000,
            pools: vec![pool(&endpoints, Role::Aggregated, 2, n)],
        };
        planner.scale(&tick(30, 300), &mut desired).unwrap();
        assert_eq!(desired, [2]);
        // 60 s: 300 + 330 = 630 in 60 s is 10.5/s, over 2.5/s: 5 (4.2 up); budget 8.
        planner.scale(&tick(60, 330), &mut desired).unwrap();
        assert_eq!(desired, [5]);
        // 120 s: 1,200 in 60 s is 20/s: 8, capped by the 8-GPU budget at 8.
        planner.scale(&tick(90, 600), &mut desired).unwrap();
        planner.scale(&tick(120, 600), &mut desired).unwrap();
        assert_eq!(desired, [8]);
    }

    #[test]
    fn two_pools_are_shrunk_in_proportion_to_the_budget() {
        let mut planner: DynamoPlanner = create_scaler(
            "{optimization_target: sla, throughput_adjustment_interval_s: 10, prefill_engine_rps: 1, decode_engine_rps: 2, max_gpu_budget: 6}",
        )
        .unwrap();
        let endpoints = EndpointsBuilder::new(1);
        let tick = Tick {
            now_ns: 10_000_000_000,
            interval_ns: 10_000_000_000,
            pools: vec![
                pool(&endpoints, Role::Prefill, 1, 60),
                pool(&endpoints, Role::Decode, 1, 60),
            ],
        };
        let mut desired = [1, 1];
        planner.scale(&tick, &mut desired).unwrap();
        // 6/s: prefill 6, decode 3, 9 GPUs over 6: p = floor(6 × 6/9) = 4, d = 6 - 4 = 2.
        assert_eq!(desired, [4, 2]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_scaler_defaults::<super::DynamoPlanner>(
            "dynamo-planner",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
