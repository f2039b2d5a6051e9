//! `random`: a uniformly random available endpoint, from the seeded generator. The baseline
//! that knows nothing (peers.md §7, baseline 2).
//!
//! Config keys: `seed` (default 0).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{EndpointSet, pick_uniform};

/// The random baseline.
pub struct Random {
    rng: SeededRng,
    available: EndpointSet,
}

impl Matcher for Random {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Random {
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
        if self.available.is_empty() {
            return Ok(None);
        }
        Ok(Some(pick_uniform(&mut self.rng, &self.available)))
    }
}

routerlab_core::export_plugins! {
    matcher Random {
        name: "random",
        description: "baseline: a uniformly random available endpoint (seeded)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn every_available_endpoint_is_drawn_and_unavailable_ones_never() {
        let mut random: Random = create_matcher("seed: 9").unwrap();
        let fleet = EndpointsBuilder::new(4).unavailable(2);
        let request = RequestBuilder::new(1);
        let mut counts = [0u32; 4];
        for _ in 0..400 {
            let id = random
                .match_request(&request.view(), &fleet.view())
                .unwrap()
                .unwrap();
            counts[id.get() as usize] += 1;
        }
        assert_eq!(counts[2], 0);
        assert!(
            counts.iter().enumerate().all(|(i, c)| i == 2 || *c > 100),
            "{counts:?}"
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked =
            routerlab_core::testing::check_matcher_defaults::<super::Random>("random", upstream);
        assert_eq!(checked, Ok(()));
    }
}
