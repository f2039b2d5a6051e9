//! `utilization`: llm-d's utilization detector as a per-endpoint filter (peers.md §4,
//! "Saturation detectors"; §7, D2), llm-d's default when flow control is on: an endpoint is
//! available while `waiting < queue_depth · (1 + headroom)` and
//! `kv_usage < min(1, kv_threshold · (1 + headroom))`. When the rule would remove every
//! endpoint, it removes none (llm-d fails open).
//!
//! Not modelled: llm-d treats metrics older than 200 ms as saturated; the host's statuses are
//! what the router last saw (live, or refreshed every `--metrics-interval-ms`) and carry no age.
//!
//! Config keys: `queue_depth` (5), `kv_threshold` (0.8), `headroom` (0).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::flag_where;

/// The utilization detector.
pub struct Utilization {
    queue: f64,
    kv: f64,
}

impl Detector for Utilization {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let queue = config.f64("queue_depth", 5.0)?;
        let kv = config.f64("kv_threshold", 0.8)?;
        let headroom = config.f64("headroom", 0.0)?;
        if queue <= 0.0 || kv <= 0.0 || headroom < 0.0 {
            return Err("config: queue_depth and kv_threshold positive, headroom >= 0".into());
        }
        Ok(Utilization {
            queue: queue * (1.0 + headroom),
            kv: (kv * (1.0 + headroom)).min(1.0),
        })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| {
            !((e.waiting() as f64) < self.queue && e.kv_usage() < self.kv)
        });
        if unavailable.iter().all(|f| *f) {
            unavailable.fill(false);
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector Utilization {
        name: "utilization",
        description: "llm-d utilization: unavailable at waiting >= 5 or KV usage >= 0.8 (fails open)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn a_queue_or_a_full_cache_saturates_unless_everything_is() {
        let mut d: Utilization = create_detector("").unwrap();
        let fleet = EndpointsBuilder::new(3).waiting(0, 5).kv_blocks(1, 80, 100);
        let mut flags = [false; 3];
        d.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(
            flags,
            [true, true, false],
            "5 is not below 5; 0.8 is not below 0.8"
        );
        let all = EndpointsBuilder::new(2).waiting(0, 9).waiting(1, 9);
        let mut flags = [false; 2];
        d.detect(&all.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, false], "fails open");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::Utilization>(
            "utilization",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
