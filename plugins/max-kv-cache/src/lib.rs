//! `max-kv-cache`: flag an endpoint unavailable when its KV cache is nearly full, and
//! optionally when its queue is long.
//!
//! An endpoint is unavailable when its KV usage is strictly greater than `max_usage`, or,
//! when `max_waiting` is set, when its waiting requests are strictly greater than that.
//! Endpoints with an unbounded cache report usage 0 and are never flagged by usage.
//!
//! Config keys: `max_usage` (fraction, default 0.9), `max_waiting` (default unset).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::flag_where;

/// The KV-usage detector.
pub struct MaxKvCache {
    max_usage: f64,
    max_waiting: Option<u64>,
}

impl Detector for MaxKvCache {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let max_usage = config.f64("max_usage", 0.9)?;
        let max_waiting = config.optional_u64("max_waiting")?;
        if !(0.0..=1.0).contains(&max_usage) {
            return Err(format!(
                "config key `max_usage`: must be within 0..=1, found {max_usage}"
            ));
        }
        Ok(MaxKvCache {
            max_usage,
            max_waiting,
        })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| {
            let full = e.kv_usage() > self.max_usage;
            let queued = self.max_waiting.is_some_and(|max| e.waiting() > max);
            full || queued
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector MaxKvCache {
        name: "max-kv-cache",
        description: "unavailable when KV usage > max_usage (default 0.9) or waiting > max_waiting",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn usage_above_the_bound_or_a_long_queue_is_unavailable() {
        let mut detector: MaxKvCache = create_detector("{max_usage: 0.5, max_waiting: 2}").unwrap();
        let fleet = EndpointsBuilder::new(4)
            .kv_blocks(0, 50, 100)
            .kv_blocks(1, 51, 100)
            .waiting(2, 3)
            .kv_blocks(3, 1_000, 0);
        let mut flags = [false; 4];
        detector.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(
            flags,
            [false, true, true, false],
            "0.5 is not above 0.5; unbounded never is"
        );
    }

    #[test]
    fn usage_outside_zero_to_one_is_refused() {
        let refused = create_detector::<MaxKvCache>("max_usage: 1.5")
            .err()
            .unwrap();
        assert_eq!(
            refused,
            "config key `max_usage`: must be within 0..=1, found 1.5"
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::MaxKvCache>(
            "max-kv-cache",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
