//! `waiting-threshold`: the SGLang router's `workload_aware` filter (a PR-stage policy;
//! peers.md §2, "Other policies"; §7, D7): an endpoint whose engine reports more than
//! `max_waiting` waiting requests is unavailable. SGLang caches the metric for 1 s; use
//! `--metrics-interval-ms 1000` for the same staleness.
//!
//! Config keys: `max_waiting` (10).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::flag_where;

/// The waiting-threshold detector.
pub struct WaitingThreshold {
    max_waiting: u64,
}

impl Detector for WaitingThreshold {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(WaitingThreshold {
            max_waiting: config.u64("max_waiting", 10)?,
        })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| e.waiting() > self.max_waiting);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector WaitingThreshold {
        name: "waiting-threshold",
        description: "SGLang workload_aware: unavailable with more than 10 waiting",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn more_than_max_waiting_is_unavailable() {
        let mut d: WaitingThreshold = create_detector("").unwrap();
        let fleet = EndpointsBuilder::new(2).waiting(0, 10).waiting(1, 11);
        let mut flags = [false; 2];
        d.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, true]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::WaitingThreshold>(
            "waiting-threshold",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
