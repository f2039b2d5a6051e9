//! `least-tokens`: the available endpoint with the fewest in-flight prompt tokens, ties to
//! the lowest index. The README's Rust plugin example, built with the workspace.

use routerlab_core::{Endpoints, Matcher, PluginConfig, Request};

/// Picks the least-loaded endpoint by prompt tokens in flight.
pub struct LeastTokens {
    decisions: u64,
}

impl Matcher for LeastTokens {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        // Reject unknown keys by name; `seed` is always accepted.
        PluginConfig::parse(config)?.finish()?;
        Ok(LeastTokens { decisions: 0 })
    }

    fn add_endpoints(&mut self, _endpoints: &Endpoints<'_>) -> Result<(), String> {
        Ok(())
    }

    fn remove_endpoints(&mut self, _indices: &[u32]) -> Result<(), String> {
        Ok(())
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        self.decisions += 1;
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
