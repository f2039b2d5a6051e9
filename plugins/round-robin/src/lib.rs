//! `round-robin`: the baseline every policy must beat. Takes the available endpoints in
//! list order and hands each request to the next one, ignoring prompts and load.
//!
//! Config keys: none.

use routerlab_core::{Endpoints, Matcher, PluginConfig, Request};

/// The round-robin baseline.
pub struct RoundRobin {
    turn: u64,
}

impl Matcher for RoundRobin {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        PluginConfig::parse(config)?.finish()?;
        Ok(RoundRobin { turn: 0 })
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        let available = endpoints.available().count() as u64;
        if available == 0 {
            return Ok(None);
        }
        let nth = (self.turn % available) as usize;
        self.turn += 1;
        Ok(endpoints.available().nth(nth).map(|e| e.index()))
    }

    fn update(&mut self, _request: &Request<'_>, _endpoint: u32) -> Result<(), String> {
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher RoundRobin {
        name: "round-robin",
        description: "baseline: the next available endpoint in turn",
    },
}
