//! `keda-queue`: KEDA's queue rule. KEDA exposes the queue's length as an external metric
//! with an average-value target, and the HPA it creates asks for `ceil(queue / threshold)`
//! endpoints (unchanged within the tolerance of `queue / (threshold × current)`), then
//! applies its stabilisation windows and rate limits ([`routerlab_policy_kit::scaling`]).
//! The queue is what waits: requests queued at the router plus those waiting in the
//! engines.
//!
//! Config keys: `threshold` (queued requests per endpoint), `activation_threshold` (at or
//! below it the queue counts as empty, so the pool shrinks to its minimum), and the HPA's
//! behaviour keys (`tolerance`, `scale_up_stabilization_s`, ...; see `hpa`).

use routerlab_core::{PluginConfig, Scaler, Tick};
use routerlab_policy_kit::{Behavior, HpaPools};

/// KEDA's queue rule, one HPA per pool.
pub struct KedaQueue {
    threshold: f64,
    activation: f64,
    pools: HpaPools,
}

impl Scaler for KedaQueue {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let threshold = config.f64("threshold", 5.0)?;
        if !(threshold.is_finite() && threshold > 0.0) {
            return Err(format!(
                "config key `threshold`: must be above 0, not {threshold}"
            ));
        }
        let activation = config.f64("activation_threshold", 0.0)?;
        if !(activation.is_finite() && activation >= 0.0) {
            return Err(format!(
                "config key `activation_threshold`: must be 0 or more, not {activation}"
            ));
        }
        Ok(KedaQueue {
            threshold,
            activation,
            pools: HpaPools::new(Behavior::from_config(config)?),
        })
    }

    fn scale(&mut self, tick: &Tick<'_>, desired: &mut [u32]) -> Result<(), String> {
        let (threshold, activation) = (self.threshold, self.activation);
        self.pools.scale(tick, desired, |hpa, pool| {
            let engines: u64 = pool.endpoints.iter().map(|e| e.waiting()).sum();
            let queue = (pool.waiting_at_router + engines) as f64;
            if queue <= activation {
                // Not active: KEDA lets the HPA go to its minimum.
                Some(pool.min_endpoints)
            } else {
                hpa.recommend_average(queue, threshold, pool.current())
            }
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    scaler KedaQueue {
        name: "keda-queue",
        description: "KEDA: one endpoint per `threshold` queued requests, through the HPA's tolerance, windows and rate limits",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{self, EndpointsBuilder, create_scaler};
    use routerlab_core::{Pool, Scaler, Tick};

    use super::KedaQueue;

    fn tick(endpoints: &EndpointsBuilder, ready: u32, at_router: u64, now_s: u64) -> Tick<'_> {
        Tick {
            now_ns: now_s * 1_000_000_000,
            interval_ns: 15_000_000_000,
            pools: vec![Pool {
                ready,
                max_endpoints: 8,
                gpus_per_endpoint: 2,
                waiting_at_router: at_router,
                ..testing::pool(endpoints)
            }],
        }
    }

    #[test]
    fn one_endpoint_per_threshold_of_queue_within_the_ceiling() {
        let mut keda: KedaQueue =
            create_scaler("{threshold: 4, scale_down_stabilization_s: 0}").unwrap();
        // 2 endpoints with 3 and 5 waiting, 10 at the router: 18 / 4 ⇒ 5.
        let endpoints = EndpointsBuilder::new(2).waiting(0, 3).waiting(1, 5);
        let mut desired = [2];
        keda.scale(&tick(&endpoints, 2, 10, 0), &mut desired)
            .unwrap();
        assert_eq!(desired, [5]);
        // 100 queued: 25, but at most 8 (the pool's ceiling).
        let mut desired = [5];
        keda.scale(&tick(&endpoints, 5, 92, 15), &mut desired)
            .unwrap();
        assert_eq!(desired, [8]);
        // Empty queue: down to the minimum (no down window here).
        let idle = EndpointsBuilder::new(8);
        let mut desired = [8];
        keda.scale(&tick(&idle, 8, 0, 30), &mut desired).unwrap();
        assert_eq!(desired, [1]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_scaler_defaults::<super::KedaQueue>(
            "keda-queue",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
