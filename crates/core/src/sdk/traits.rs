//! The two traits a plugin implements. Few methods are required (`create` and the decision
//! itself); the rest have bodies that do nothing, so a policy states only what it does.

use crate::PluginConfig;
use crate::sdk::{EndpointId, Endpoints, Request};

/// A matcher plugin: picks an endpoint for each request. The host serialises calls on one
/// instance.
///
/// Required: [`Matcher::create`] and [`Matcher::match_request`]. Every other method does
/// nothing by default and is always called when the host has something to say, so a
/// method you write is never silently skipped.
pub trait Matcher: Send + Sized + 'static {
    /// Builds an instance. Read every key you accept from `config` (with its default);
    /// after this returns, the SDK rejects any key you did not read, naming it and the keys
    /// you did. `seed` is reserved and never unknown. An error is shown to the user.
    fn create(name: &str, config: &mut PluginConfig) -> Result<Self, String>;

    /// Picks the stable index of an available endpoint, or `None` when there is none.
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String>;

    /// New endpoints joined (their statuses carry id and name). By default nothing to do:
    /// every call also receives the current endpoints.
    fn add_endpoints(&mut self, _endpoints: &Endpoints<'_>) -> Result<(), String> {
        Ok(())
    }

    /// Endpoints left; never choose them again. By default nothing to do: removed
    /// endpoints are no longer in the list a call receives.
    fn remove_endpoints(&mut self, _ids: &[EndpointId]) -> Result<(), String> {
        Ok(())
    }

    /// The request was routed to `endpoint`. By default nothing to learn.
    fn update(&mut self, _request: &Request<'_>, _endpoint: EndpointId) -> Result<(), String> {
        Ok(())
    }

    /// The request produced its first token on `endpoint` (timed replays only): its prefill
    /// is done. By default nothing to do.
    fn on_first_token(
        &mut self,
        _request: &Request<'_>,
        _endpoint: EndpointId,
    ) -> Result<(), String> {
        Ok(())
    }

    /// The request finished on `endpoint` (timed replays only). By default nothing to do.
    fn on_complete(&mut self, _request: &Request<'_>, _endpoint: EndpointId) -> Result<(), String> {
        Ok(())
    }
}

/// A detector plugin: flags overloaded endpoints before each decision. The host serialises
/// calls on one instance.
pub trait Detector: Send + Sized + 'static {
    /// Builds an instance; as [`Matcher::create`], unread keys are rejected after it
    /// returns.
    fn create(name: &str, config: &mut PluginConfig) -> Result<Self, String>;

    /// Sets `unavailable[pos] = true` for each overloaded endpoint (all start false), by
    /// list position.
    fn detect(&mut self, endpoints: &Endpoints<'_>, unavailable: &mut [bool])
    -> Result<(), String>;
}
