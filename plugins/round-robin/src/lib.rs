//! `round-robin`: the baseline every policy must beat. Takes the available endpoints in
//! list order and hands each request to the next one, ignoring prompts and load.
//!
//! Config keys: none.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};

/// The round-robin baseline.
pub struct RoundRobin {
    turn: u64,
}

impl Matcher for RoundRobin {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(RoundRobin { turn: 0 })
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let available = endpoints.available().count() as u64;
        if available == 0 {
            return Ok(None);
        }
        let nth = (self.turn % available) as usize;
        self.turn += 1;
        Ok(endpoints.available().nth(nth).map(|e| e.id()))
    }
}

routerlab_core::export_plugins! {
    matcher RoundRobin {
        name: "round-robin",
        description: "baseline: the next available endpoint in turn",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn takes_the_available_endpoints_in_turn() {
        let mut rr: RoundRobin = create_matcher("").unwrap();
        let request = RequestBuilder::new(1);
        let fleet = EndpointsBuilder::new(3).unavailable(1);
        let picks: Vec<u32> = (0..4)
            .map(|_| {
                rr.match_request(&request.view(), &fleet.view())
                    .unwrap()
                    .unwrap()
                    .get()
            })
            .collect();
        assert_eq!(picks, [0, 2, 0, 2]);
        assert!(
            create_matcher::<RoundRobin>("anything: 1").is_err(),
            "no keys accepted"
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::RoundRobin>(
            "round-robin",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
