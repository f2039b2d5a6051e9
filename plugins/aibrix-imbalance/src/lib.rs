//! `aibrix-imbalance`: AIBrix's imbalance override as a detector (peers.md §5, AIBrix; §7,
//! D5): when in-flight counts differ by more than `imbalance_abs_count`, every endpoint above
//! the minimum is unavailable.
//!
//! Config keys: `imbalance_abs_count` (8).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::{flag_where, inflight, range_of};

/// The AIBrix imbalance override.
pub struct AibrixImbalance {
    abs: u64,
}

impl Detector for AibrixImbalance {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(AibrixImbalance {
            abs: config.u64("imbalance_abs_count", 8)?,
        })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        let (lo, hi) = range_of(endpoints.iter().map(|e| inflight(&e))).unwrap_or((0, 0));
        let imbalanced = hi - lo > self.abs;
        flag_where(endpoints, unavailable, |e| imbalanced && inflight(e) > lo);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector AibrixImbalance {
        name: "aibrix-imbalance",
        description: "AIBrix imbalance: when max - min > 8 in flight, only the least loaded",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn more_than_eight_apart_narrows_to_the_minimum() {
        let mut d: AibrixImbalance = create_detector("").unwrap();
        let mut flags = [false; 3];
        let apart = EndpointsBuilder::new(3)
            .inflight_requests(0, 9)
            .inflight_requests(1, 4);
        d.detect(&apart.view(), &mut flags).unwrap();
        assert_eq!(flags, [true, true, false]);
        let close = EndpointsBuilder::new(3).inflight_requests(0, 8);
        let mut flags = [false; 3];
        d.detect(&close.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, false, false]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::AibrixImbalance>(
            "aibrix-imbalance",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
