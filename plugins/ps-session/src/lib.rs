//! `ps-session`: vLLM production-stack's `session` routing (peers.md §1; §7, policy 16): a
//! request with a session id goes to that id's place on a consistent-hash ring (the first
//! available endpoint clockwise); one without goes by QPS routing (an endpoint never used,
//! else the lowest rate in the window).
//!
//! production-stack uses `uhashring` with its library defaults; this ring gives each
//! endpoint `virtual_nodes` points hashed from its name, and places a session by the xxh3
//! of its id.
//!
//! Config keys: `virtual_nodes` (160), `window_s` (60); `seed` unused.

use routerlab_core::hash::hash64;
use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::{EndpointSet, HashRing, RateWindow};

/// The production-stack session matcher.
pub struct PsSession {
    ring: HashRing,
    rates: RateWindow,
    available: EndpointSet,
}

impl Matcher for PsSession {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let virtual_nodes = config.u64("virtual_nodes", 160)?;
        let window_s = config.f64("window_s", 60.0)?;
        if virtual_nodes == 0 || virtual_nodes > 10_000 || window_s <= 0.0 {
            return Err("config: virtual_nodes within 1..=10000, window_s positive".into());
        }
        Ok(PsSession {
            ring: HashRing::new(virtual_nodes),
            rates: RateWindow::new((window_s * 1e9) as u64),
            available: EndpointSet::default(),
        })
    }

    fn add_endpoints(&mut self, endpoints: &Endpoints<'_>) -> Result<(), String> {
        self.ring.add(endpoints);
        Ok(())
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        self.ring.remove(ids);
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let Some(session) = request.session_id() else {
            return Ok(self.rates.least_busy(endpoints, request.now_ns()));
        };
        self.available.fill_available(endpoints);
        let position = hash64(&session.to_le_bytes(), 0);
        Ok(self
            .ring
            .first_from(position, |id| self.available.contains(id)))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        self.rates.record(endpoint, request.now_ns());
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher PsSession {
        name: "ps-session",
        description: "vLLM production-stack session: consistent hash on the session id, else lowest QPS",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn a_session_keeps_its_endpoint_and_requests_without_one_spread() {
        let mut ps: PsSession = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(4);
        ps.add_endpoints(&fleet.view()).unwrap();
        let home = |ps: &mut PsSession, session: u64| {
            let r = RequestBuilder::new(session).session_id(session);
            ps.match_request(&r.view(), &fleet.view()).unwrap().unwrap()
        };
        let first = home(&mut ps, 42);
        assert_eq!(home(&mut ps, 42), first);
        let homes: std::collections::BTreeSet<EndpointId> =
            (1..60).map(|s| home(&mut ps, s)).collect();
        assert!(homes.len() >= 3, "sessions spread over the ring: {homes:?}");
        // No session: the endpoints never used come first, in list order.
        let anonymous = RequestBuilder::new(100);
        assert_eq!(
            ps.match_request(&anonymous.view(), &fleet.view()).unwrap(),
            Some(EndpointId(0))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::PsSession>(
            "ps-session",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
