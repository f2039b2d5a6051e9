//! Test plugins that the built-ins cannot stand in for: two that panic on purpose (so the
//! host's tests can prove a panic is caught at the boundary, reported with its payload, and
//! poisons the instance), and one that depends on `on_complete` (so the timed replay's
//! tests can prove it is called).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};

/// Panics in `create`.
pub struct PanicOnCreate;

impl Matcher for PanicOnCreate {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        panic!("fixture: boom in create");
    }
    fn match_request(
        &mut self,
        _: &Request<'_>,
        _: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        Ok(None)
    }
}

/// Panics in `match` on the request with id 2, and answers normally before that.
pub struct PanicOnMatch;

impl Matcher for PanicOnMatch {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(PanicOnMatch)
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        if request.id() == 2 {
            panic!("fixture: boom in match for request {}", request.id());
        }
        Ok(endpoints.available().next().map(|e| e.id()))
    }
}

/// Sends each request to the endpoint with the fewest requests outstanding, counting them
/// itself: +1 on `update`, −1 on `on_complete`. Fails if a completion does not match.
#[derive(Default)]
pub struct LeastOutstanding {
    outstanding: std::collections::BTreeMap<EndpointId, u64>,
}

impl Matcher for LeastOutstanding {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(LeastOutstanding::default())
    }
    fn add_endpoints(&mut self, endpoints: &Endpoints<'_>) -> Result<(), String> {
        for endpoint in endpoints.iter() {
            self.outstanding.insert(endpoint.id(), 0);
        }
        Ok(())
    }
    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        for id in ids {
            self.outstanding.remove(id);
        }
        Ok(())
    }
    fn match_request(
        &mut self,
        _: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let best = endpoints
            .available()
            .min_by_key(|e| (self.outstanding.get(&e.id()).copied(), e.id()));
        Ok(best.map(|e| e.id()))
    }
    fn update(&mut self, _request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        *self.outstanding.entry(endpoint).or_default() += 1;
        Ok(())
    }
    fn on_complete(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let count = self.outstanding.entry(endpoint).or_default();
        if *count == 0 {
            return Err(format!(
                "completion of request {} on endpoint {endpoint} with none outstanding",
                request.id()
            ));
        }
        *count -= 1;
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher PanicOnCreate { name: "panic-on-create", description: "fixture: panics in create" },
    matcher PanicOnMatch { name: "panic-on-match", description: "fixture: panics in match" },
    matcher LeastOutstanding {
        name: "least-outstanding",
        description: "fixture: fewest outstanding requests, tracked with update and on_complete",
    },
}
