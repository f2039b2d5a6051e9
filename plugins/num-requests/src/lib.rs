//! `num-requests`: flag an endpoint unavailable when it runs too many requests, the
//! prototype's overload test.
//!
//! An endpoint is unavailable when its running requests are strictly greater than
//! `max_running`.
//!
//! Config keys: `max_running` (default 400, the prototype's threshold).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::flag_where;

/// The running-requests detector.
pub struct NumRequests {
    max_running: u64,
}

impl Detector for NumRequests {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let max_running = config.u64("max_running", 400)?;
        Ok(NumRequests { max_running })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| e.running() > self.max_running);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector NumRequests {
        name: "num-requests",
        description: "unavailable when running requests > max_running (default 400)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn strictly_more_than_max_running_is_unavailable() {
        let mut detector: NumRequests = create_detector("max_running: 10").unwrap();
        let fleet = EndpointsBuilder::new(3).running(0, 10).running(1, 11);
        let mut flags = [false; 3];
        detector.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, true, false], "10 is not more than 10; 11 is");
        let default: NumRequests = create_detector("").unwrap();
        assert_eq!(default.max_running, 400);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::NumRequests>(
            "num-requests",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
