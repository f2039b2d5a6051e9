//! `power-of-two`: two distinct random available endpoints, the one with fewer requests in
//! flight wins, ties to the first drawn (SGLang's power-of-two; peers.md §7, baseline 4).
//! One available endpoint is taken as is.
//!
//! Config keys: `seed` (default 0).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{EndpointSet, inflight};

/// The power-of-two-choices baseline.
pub struct PowerOfTwo {
    rng: SeededRng,
    available: EndpointSet,
}

impl Matcher for PowerOfTwo {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(PowerOfTwo {
            rng: SeededRng::new(config.seed()?),
            available: EndpointSet::default(),
        })
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.available.fill_available(endpoints);
        let n = self.available.len();
        if n == 0 {
            return Ok(None);
        }
        let first = self.rng.below(n) as usize;
        if n == 1 {
            return Ok(Some(self.available.nth(first)));
        }
        // A second, distinct draw: uniform over the other n - 1.
        let mut second = self.rng.below(n - 1) as usize;
        if second >= first {
            second += 1;
        }
        let (a, b) = (self.available.nth(first), self.available.nth(second));
        let load = |id: EndpointId| {
            endpoints
                .iter()
                .find(|e| e.id() == id)
                .map_or(u64::MAX, |e| inflight(&e))
        };
        Ok(Some(if load(b) < load(a) { b } else { a }))
    }
}

routerlab_core::export_plugins! {
    matcher PowerOfTwo {
        name: "power-of-two",
        description: "baseline: the less loaded of two random available endpoints",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_busiest_endpoint_is_never_chosen_when_a_pair_includes_another() {
        let mut matcher: PowerOfTwo = create_matcher("seed: 3").unwrap();
        // Endpoint 2 is the busiest: any pair holding it also holds a less loaded one.
        let fleet = EndpointsBuilder::new(3)
            .inflight_requests(0, 1)
            .inflight_requests(1, 2)
            .inflight_requests(2, 50);
        let request = RequestBuilder::new(1);
        let mut seen = [0u32; 3];
        for _ in 0..200 {
            let id = matcher
                .match_request(&request.view(), &fleet.view())
                .unwrap()
                .unwrap();
            seen[id.get() as usize] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        assert!(
            seen[0] > seen[1],
            "endpoint 0 wins every pair it is in: {seen:?}"
        );
        let one = EndpointsBuilder::new(2).unavailable(0);
        let chosen = matcher.match_request(&request.view(), &one.view()).unwrap();
        assert_eq!(chosen, Some(EndpointId(1)));
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::PowerOfTwo>(
            "power-of-two",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
