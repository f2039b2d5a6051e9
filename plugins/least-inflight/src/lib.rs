//! `least-inflight`: the available endpoint with the fewest requests in flight, counted by
//! the router itself, ties broken at random (KubeAI's LeastLoad, SGLang's min-load;
//! peers.md §7, baseline 3). From a host older than ABI 1.2, which has no router count, it
//! reads the engine's running plus waiting instead.
//!
//! Config keys: `seed` (default 0).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{inflight, pick_min};

/// The least-in-flight baseline.
pub struct LeastInflight {
    rng: SeededRng,
}

impl Matcher for LeastInflight {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(LeastInflight {
            rng: SeededRng::new(config.seed()?),
        })
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let candidates = endpoints.available().map(|e| (e.id(), inflight(&e)));
        Ok(pick_min(&mut self.rng, candidates))
    }
}

routerlab_core::export_plugins! {
    matcher LeastInflight {
        name: "least-inflight",
        description: "baseline: the fewest router-local in-flight requests, random ties",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_fewest_in_flight_wins_by_the_routers_count_not_the_engines() {
        let mut matcher: LeastInflight = create_matcher("").unwrap();
        // Endpoint 0 reports few running (stale), but the router knows it has 9 in flight.
        let fleet = EndpointsBuilder::new(3)
            .running(0, 0)
            .inflight_requests(0, 9)
            .inflight_requests(1, 2)
            .inflight_requests(2, 4);
        let request = RequestBuilder::new(1);
        let chosen = matcher
            .match_request(&request.view(), &fleet.view())
            .unwrap();
        assert_eq!(chosen, Some(EndpointId(1)));
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(
            matcher.match_request(&request.view(), &none.view()),
            Ok(None)
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::LeastInflight>(
            "least-inflight",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
