//! `least-tokens`: the available endpoint with the fewest in-flight prompt tokens, ties to
//! the lowest index. The README's Rust plugin example, built with the workspace.

use routerlab_core::{Endpoints, Matcher, PluginConfig, Request};

/// Picks the least-loaded endpoint by prompt tokens in flight. It keeps no state: every
/// call receives the endpoints' current load.
pub struct LeastTokens;

impl Matcher for LeastTokens {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        // Reject unknown keys by name; `seed` is always accepted.
        PluginConfig::parse(config)?.finish()?;
        Ok(LeastTokens)
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        let best = endpoints
            .available()
            .min_by_key(|e| (e.inflight_prompt_tokens(), e.index()));
        Ok(best.map(|e| e.index()))
    }

    fn update(&mut self, _request: &Request<'_>, _endpoint: u32) -> Result<(), String> {
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher LeastTokens {
        name: "least-tokens",
        description: "example: the available endpoint with the fewest in-flight prompt tokens",
    },
}
