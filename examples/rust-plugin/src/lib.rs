//! `least-tokens`: the available endpoint with the fewest in-flight prompt tokens, ties to
//! the lowest id; with `max_running: N`, endpoints already running N requests are passed
//! over while another is below it. The plugin guide's Rust example.

use routerlab_core::{EndpointId, EndpointStatus, Endpoints, Matcher, PluginConfig, Request};

/// Picks the least-loaded endpoint by prompt tokens in flight. It keeps no state between
/// calls: every call receives the endpoints' current load.
pub struct LeastTokens {
    /// Endpoints running this many requests or more are used only when all are.
    max_running: u64,
}

impl Matcher for LeastTokens {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        // Each key is read once, with its default; the SDK then rejects any key not read.
        let max_running = config.u64("max_running", u64::MAX)?;
        if max_running == 0 {
            return Err("max_running: must be at least 1".into());
        }
        Ok(LeastTokens { max_running })
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let load = |e: &EndpointStatus<'_>| (e.inflight_prompt_tokens(), e.id());
        let best = endpoints
            .available()
            .filter(|e| e.running() < self.max_running)
            .min_by_key(load)
            .or_else(|| endpoints.available().min_by_key(load));
        Ok(best.map(|e| e.id()))
    }
}

routerlab_core::export_plugins! {
    matcher LeastTokens {
        name: "least-tokens",
        description: "example: the available endpoint with the fewest in-flight prompt tokens",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_fewest_tokens_in_flight_win_ties_to_the_lowest_id() {
        let mut matcher: LeastTokens = create_matcher("").unwrap();
        let request = RequestBuilder::new(1);
        let fleet = EndpointsBuilder::new(3)
            .inflight_prompt_tokens(0, 900)
            .inflight_prompt_tokens(1, 100)
            .inflight_prompt_tokens(2, 100);
        let chosen = matcher.match_request(&request.view(), &fleet.view());
        assert_eq!(chosen, Ok(Some(EndpointId(1))));
    }

    #[test]
    fn a_full_endpoint_is_passed_over_while_another_has_room() {
        let mut matcher: LeastTokens = create_matcher("{max_running: 4}").unwrap();
        let request = RequestBuilder::new(1);
        let fleet = EndpointsBuilder::new(2)
            .inflight_prompt_tokens(0, 100)
            .running(0, 4)
            .inflight_prompt_tokens(1, 900)
            .running(1, 3);
        let chosen = matcher.match_request(&request.view(), &fleet.view());
        assert_eq!(chosen, Ok(Some(EndpointId(1))));
        assert!(create_matcher::<LeastTokens>("{max_running: 0}").is_err());
        assert!(create_matcher::<LeastTokens>("{max_runing: 4}").is_err());
    }
}
