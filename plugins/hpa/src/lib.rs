//! `hpa`: a Kubernetes HorizontalPodAutoscaler on one per-endpoint metric. Each tick the
//! metric is averaged over the serving endpoints and compared with `target`; outside the
//! tolerance the pool asks for `ceil(ratio × ready)` endpoints, then the HPA's stabilisation
//! windows and rate limits apply ([`routerlab_policy_kit::scaling`]), with its defaults.
//!
//! Config keys: `metric` (`running`, `waiting`, `inflight`, `kv_usage`, `arrival_rate`; the
//! per-endpoint value averaged), `target` (the average to hold), and the HPA's `tolerance`,
//! `scale_up_stabilization_s`, `scale_down_stabilization_s`, `scale_up_percent`,
//! `scale_up_pods`, `scale_up_period_s`, `scale_down_percent`, `scale_down_period_s`.

use routerlab_core::{PluginConfig, Pool, Scaler, Tick};
use routerlab_policy_kit::{Behavior, HpaPools};

/// What the HPA averages over the serving endpoints.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Metric {
    Running,
    Waiting,
    Inflight,
    KvUsage,
    ArrivalRate,
}

/// The HPA rule, one per pool.
pub struct HpaScaler {
    metric: Metric,
    target: f64,
    pools: HpaPools,
}

impl Metric {
    /// The metric summed over `pool`'s serving endpoints.
    fn total(self, pool: &Pool<'_>, interval_ns: u64) -> f64 {
        let each = pool.endpoints.iter();
        match self {
            Metric::Running => each.map(|e| e.running() as f64).sum(),
            Metric::Waiting => each.map(|e| e.waiting() as f64).sum(),
            Metric::Inflight => each.map(|e| (e.running() + e.waiting()) as f64).sum(),
            Metric::KvUsage => each.map(|e| e.kv_usage()).sum(),
            Metric::ArrivalRate => pool.arrival_rate(interval_ns),
        }
    }
}

impl Scaler for HpaScaler {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let metric = match config.choice(
            "metric",
            &["running", "waiting", "inflight", "kv_usage", "arrival_rate"],
            "inflight",
        )? {
            "running" => Metric::Running,
            "waiting" => Metric::Waiting,
            "kv_usage" => Metric::KvUsage,
            "arrival_rate" => Metric::ArrivalRate,
            _ => Metric::Inflight,
        };
        let target = config.f64("target", 16.0)?;
        if !(target.is_finite() && target > 0.0) {
            return Err(format!(
                "config key `target`: must be above 0, not {target}"
            ));
        }
        Ok(HpaScaler {
            metric,
            target,
            pools: HpaPools::new(Behavior::from_config(config)?),
        })
    }

    fn scale(&mut self, tick: &Tick<'_>, desired: &mut [u32]) -> Result<(), String> {
        let (metric, target) = (self.metric, self.target);
        // No serving endpoint yet: nothing to average, the HPA waits.
        self.pools.scale(tick, desired, |hpa, pool| {
            let total = metric.total(pool, tick.interval_ns);
            hpa.recommend(total, target, pool.ready, pool.starting)
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    scaler HpaScaler {
        name: "hpa",
        description: "Kubernetes HPA: hold a per-endpoint metric's average at a target, with its tolerance, windows and rate limits",
    },
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked =
            routerlab_core::testing::check_scaler_defaults::<super::HpaScaler>("hpa", upstream);
        assert_eq!(checked, Ok(()));
    }
}
