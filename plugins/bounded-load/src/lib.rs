//! `bounded-load`: the bound of consistent hashing with bounded loads (KubeAI CHWBL, SGLang
//! `prefix_hash`) as a detector (peers.md §7, D6): an endpoint is unavailable when its
//! in-flight requests exceed `factor · (total + 1) / endpoints`, so any matcher can be given
//! the bound.
//!
//! Config keys: `factor` (1.25).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::{flag_where, inflight, within_bound};

/// The bounded-load detector.
pub struct BoundedLoad {
    factor: f64,
}

impl Detector for BoundedLoad {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let factor = config.f64("factor", 1.25)?;
        if factor < 1.0 {
            return Err(format!(
                "config key `factor`: must be at least 1, found {factor}"
            ));
        }
        Ok(BoundedLoad { factor })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        let total: u64 = endpoints.iter().map(|e| inflight(&e)).sum();
        let n = endpoints.len();
        flag_where(endpoints, unavailable, |e| {
            !within_bound(inflight(e), total, n, self.factor)
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector BoundedLoad {
        name: "bounded-load",
        description: "bounded load: unavailable above 1.25 (total + 1) / n in flight",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn above_the_mean_bound_is_unavailable() {
        let mut d: BoundedLoad = create_detector("").unwrap();
        // 6 in flight over 3: bound 1.25 · 7 / 3 = 2.9.
        let fleet = EndpointsBuilder::new(3)
            .inflight_requests(0, 3)
            .inflight_requests(1, 2)
            .inflight_requests(2, 1);
        let mut flags = [false; 3];
        d.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [true, false, false]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::BoundedLoad>(
            "bounded-load",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
