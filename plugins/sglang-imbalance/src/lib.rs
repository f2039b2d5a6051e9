//! `sglang-imbalance`: the SGLang router's imbalance test as a detector (peers.md §2,
//! "cache_aware selection rule"; §7, D4): when in-flight loads are imbalanced
//! (`max − min > balance_abs_threshold` and `max > balance_rel_threshold · min`), every
//! endpoint above the minimum is unavailable, so any matcher is switched to least load.
//!
//! Config keys: `balance_abs_threshold` (64), `balance_rel_threshold` (1.5).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::{flag_where, inflight, range_of};

/// The SGLang imbalance switch.
pub struct SglangImbalance {
    abs: u64,
    rel: f64,
}

impl Detector for SglangImbalance {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let abs = config.u64("balance_abs_threshold", 64)?;
        let rel = config.f64("balance_rel_threshold", 1.5)?;
        if rel < 0.0 {
            return Err("config key `balance_rel_threshold`: must be zero or more".into());
        }
        Ok(SglangImbalance { abs, rel })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        let (lo, hi) = range_of(endpoints.iter().map(|e| inflight(&e))).unwrap_or((0, 0));
        let imbalanced = hi - lo > self.abs && hi as f64 > self.rel * lo as f64;
        flag_where(endpoints, unavailable, |e| imbalanced && inflight(e) > lo);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector SglangImbalance {
        name: "sglang-imbalance",
        description: "SGLang imbalance: when max - min > 64 and max > 1.5 min, only the least loaded",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn only_an_imbalance_narrows_to_the_least_loaded() {
        let mut d: SglangImbalance = create_detector("").unwrap();
        let mut flags = [false; 3];
        let skewed = EndpointsBuilder::new(3)
            .inflight_requests(0, 100)
            .inflight_requests(1, 30)
            .inflight_requests(2, 30);
        d.detect(&skewed.view(), &mut flags).unwrap();
        assert_eq!(flags, [true, false, false], "100 − 30 > 64 and 100 > 45");
        let mild = EndpointsBuilder::new(3)
            .inflight_requests(0, 90)
            .inflight_requests(1, 30);
        let mut flags = [false; 3];
        d.detect(&mild.view(), &mut flags).unwrap();
        assert_eq!(
            flags,
            [true, true, false],
            "90 − 0 > 64: only the idle endpoint"
        );
        let even = EndpointsBuilder::new(2).inflight_requests(0, 60);
        let mut flags = [false; 2];
        d.detect(&even.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, false], "60 − 0 is not above 64");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::SglangImbalance>(
            "sglang-imbalance",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
