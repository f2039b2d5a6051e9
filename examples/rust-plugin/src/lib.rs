//! `least-tokens`: the available endpoint with the fewest in-flight prompt tokens, ties to
//! the lowest id. The README's Rust plugin example, built with the workspace.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};

/// Picks the least-loaded endpoint by prompt tokens in flight. It keeps no state: every
/// call receives the endpoints' current load.
pub struct LeastTokens;

impl Matcher for LeastTokens {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        // No keys to read: the SDK rejects any key but `seed` after this returns.
        Ok(LeastTokens)
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let best = endpoints
            .available()
            .min_by_key(|e| (e.inflight_prompt_tokens(), e.id()));
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
}
