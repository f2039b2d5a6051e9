//! Rust matchers for the simulator's own tests, driven in process through the real export
//! shims (`routerlab_host::in_process`), and the scenario plumbing to use them.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_host::in_process;
use routerlab_route::Replicas;

use crate::SimError;
use crate::scenario::Scenario;

/// Always the first available endpoint.
pub(crate) use routerlab_core::testing::FirstAvailable as First;

/// The available endpoints in turn.
pub(crate) struct Turns {
    next: usize,
}

impl Matcher for Turns {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(Turns { next: 0 })
    }
    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let available: Vec<_> = endpoints.available().map(|e| e.id()).collect();
        self.next += 1;
        Ok(available
            .get((self.next - 1) % available.len().max(1))
            .copied())
    }
}

/// `scenario`'s routers, every replica's matcher an in-process `M` named `name`.
pub(crate) fn routers<M: Matcher>(scenario: &Scenario, name: &str) -> Replicas {
    scenario
        .routers_with(|config, _| {
            let matcher = in_process::matcher::<M>(name, config).map_err(SimError::Load)?;
            Ok((matcher, None))
        })
        .expect("in-process routers")
}
