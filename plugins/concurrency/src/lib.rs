//! `concurrency`: llm-d's concurrency detector as a per-endpoint filter (peers.md §4,
//! "Saturation detectors"; §7, D1): an endpoint is unavailable when its in-flight load is
//! above `capacity · (1 + headroom)`.
//!
//! `mode: requests` counts the router's in-flight requests (capacity 100); `mode: tokens`
//! its in-flight prompt tokens (capacity 1,000,000; llm-d estimates in-flight tokens, here
//! they are the prompts of unfinished requests).
//!
//! Config keys: `mode` (`requests`), `capacity` (100 | 1,000,000 by mode), `headroom` (0).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::{flag_where, inflight};

/// The concurrency detector.
pub struct Concurrency {
    tokens: bool,
    limit: f64,
}

impl Detector for Concurrency {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let tokens = config.choice("mode", &["requests", "tokens"], "requests")? == "tokens";
        let capacity = config.u64("capacity", if tokens { 1_000_000 } else { 100 })?;
        let headroom = config.f64("headroom", 0.0)?;
        if headroom < 0.0 {
            return Err("config key `headroom`: must be zero or more".into());
        }
        Ok(Concurrency {
            tokens,
            limit: capacity as f64 * (1.0 + headroom),
        })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| {
            let load = if self.tokens {
                e.inflight_prompt_tokens()
            } else {
                inflight(e)
            };
            load as f64 > self.limit
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector Concurrency {
        name: "concurrency",
        description: "llm-d concurrency: unavailable above capacity (100 requests) in flight",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn requests_or_tokens_above_capacity() {
        let mut d: Concurrency = create_detector("{capacity: 10, headroom: 0.5}").unwrap();
        let fleet = EndpointsBuilder::new(2)
            .inflight_requests(0, 15)
            .inflight_requests(1, 16);
        let mut flags = [false; 2];
        d.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, true], "15 is not above 10 · 1.5");
        let mut t: Concurrency = create_detector("mode: tokens").unwrap();
        let fleet = EndpointsBuilder::new(2).inflight_prompt_tokens(0, 1_000_001);
        t.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [true, false]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::Concurrency>(
            "concurrency",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
