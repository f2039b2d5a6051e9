//! Plugins that panic on purpose, so the host's tests can prove a panic is caught at the
//! boundary, reported with its payload, and poisons the instance.

use routerlab_core::{Endpoints, Matcher, Request};

/// Panics in `create`.
pub struct PanicOnCreate;

impl Matcher for PanicOnCreate {
    fn create(_name: &str, _config: &str) -> Result<Self, String> {
        panic!("fixture: boom in create");
    }
    fn add_endpoints(&mut self, _endpoints: &Endpoints<'_>) -> Result<(), String> {
        Ok(())
    }
    fn remove_endpoints(&mut self, _indices: &[u32]) -> Result<(), String> {
        Ok(())
    }
    fn match_request(&mut self, _: &Request<'_>, _: &Endpoints<'_>) -> Result<Option<u32>, String> {
        Ok(None)
    }
    fn update(&mut self, _request: &Request<'_>, _endpoint: u32) -> Result<(), String> {
        Ok(())
    }
}

/// Panics in `match` on the request with id 2, and answers normally before that.
pub struct PanicOnMatch;

impl Matcher for PanicOnMatch {
    fn create(_name: &str, _config: &str) -> Result<Self, String> {
        Ok(PanicOnMatch)
    }
    fn add_endpoints(&mut self, _endpoints: &Endpoints<'_>) -> Result<(), String> {
        Ok(())
    }
    fn remove_endpoints(&mut self, _indices: &[u32]) -> Result<(), String> {
        Ok(())
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        if request.id() == 2 {
            panic!("fixture: boom in match for request {}", request.id());
        }
        Ok(endpoints.available().next().map(|e| e.index()))
    }
    fn update(&mut self, _request: &Request<'_>, _endpoint: u32) -> Result<(), String> {
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher PanicOnCreate { name: "panic-on-create", description: "fixture: panics in create" },
    matcher PanicOnMatch { name: "panic-on-match", description: "fixture: panics in match" },
}
