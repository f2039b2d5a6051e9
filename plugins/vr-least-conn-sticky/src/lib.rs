//! `vr-least-conn-sticky`: vllm-router's `least_conn_sticky` policy
//! (`src/policies/least_conn_sticky.rs`; anchors-turn3.md §2): a returning session goes to
//! the endpoint it was given while that one is available; a new session (or one whose
//! endpoint is gone) goes to the endpoint with the least load, ties to the first, and is
//! recorded there. The load is the endpoint's requests in flight plus the sessions ever
//! assigned to it (the peer counts assignments at selection, so that sessions arriving
//! together do not all see zero load, and never decrements them).
//!
//! The key is the session id; a request without one is keyed by its prompt (the chained
//! hash of its last block; the peer hashes the request's text), so identical prompts stick
//! together too.
//!
//! Where the lab differs: the peer's session map grows without bound (its own TODO); here
//! it holds the `max_sessions` most recently used keys (2^20 by default), the least
//! recent forgotten first. The peer can also read loads polled from the workers; the
//! router's count stands for them here.
//!
//! Config keys: `max_sessions` (1,048,576); `seed` unused.

use std::collections::HashMap;

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::{LruMap, inflight};

/// vllm-router's least-connection sticky policy.
pub struct VrLeastConnSticky {
    max_sessions: usize,
    /// Session key → the endpoint's id.
    sessions: LruMap<u32>,
    assigned: HashMap<EndpointId, u64>,
}

impl VrLeastConnSticky {
    fn key(request: &Request<'_>) -> u64 {
        request
            .session_id()
            .or_else(|| request.block_hashes().last().copied())
            .unwrap_or_else(|| request.id())
    }
}

impl Matcher for VrLeastConnSticky {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let max_sessions = config.u64("max_sessions", 1 << 20)?;
        if max_sessions == 0 || max_sessions > 1 << 26 {
            return Err("config key `max_sessions`: must be from 1 to 2^26".into());
        }
        Ok(VrLeastConnSticky {
            max_sessions: max_sessions as usize,
            sessions: LruMap::default(),
            assigned: HashMap::new(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        for id in ids {
            self.assigned.remove(id);
        }
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        if let Some(held) = self
            .sessions
            .get(Self::key(request))
            .map(|id| EndpointId(*id))
            && endpoints.available().any(|e| e.id() == held)
        {
            return Ok(Some(held));
        }
        let mut best: Option<(EndpointId, u64)> = None;
        for e in endpoints.available() {
            let load = inflight(&e) + self.assigned.get(&e.id()).copied().unwrap_or(0);
            if best.is_none_or(|(_, b)| load < b) {
                best = Some((e.id(), load));
            }
        }
        Ok(best.map(|(id, _)| id))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let key = Self::key(request);
        if self.sessions.get(key) == Some(&endpoint.0) {
            self.sessions.touch(key);
            return Ok(());
        }
        *self.sessions.touch_or_insert_with(key, || endpoint.0) = endpoint.0;
        *self.assigned.entry(endpoint).or_insert(0) += 1;
        while self.sessions.len() > self.max_sessions {
            self.sessions.pop_oldest();
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher VrLeastConnSticky {
        name: "vr-least-conn-sticky",
        description: "vllm-router least_conn_sticky: a session kept; new ones to the least in flight plus sessions",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn route(m: &mut VrLeastConnSticky, fleet: &EndpointsBuilder, session: u64) -> u32 {
        let r = RequestBuilder::new(session).session_id(session);
        let chosen = m.match_request(&r.view(), &fleet.view()).unwrap().unwrap();
        m.update(&r.view(), chosen).unwrap();
        chosen.0
    }

    #[test]
    fn new_sessions_spread_by_assignments_and_returning_ones_stay() {
        let mut m: VrLeastConnSticky = create_matcher("max_sessions: 2").unwrap();
        let fleet = EndpointsBuilder::new(3).inflight_requests(0, 1);
        // Nothing finishes: sessions land where in flight + assigned is least.
        assert_eq!(route(&mut m, &fleet, 1), 1);
        assert_eq!(route(&mut m, &fleet, 2), 2);
        assert_eq!(
            route(&mut m, &fleet, 3),
            0,
            "1 + 0 against 0 + 1: the first"
        );
        // Session 2 comes back to 2; session 1 was forgotten (two kept) and goes by load.
        assert_eq!(route(&mut m, &fleet, 2), 2);
        assert_eq!(route(&mut m, &fleet, 1), 1);
        // Its endpoint gone, a session moves.
        let without = EndpointsBuilder::new(3).unavailable(2);
        assert_eq!(route(&mut m, &without, 2), 0);
        let none = EndpointsBuilder::new(1).unavailable(0);
        let r = RequestBuilder::new(9).session_id(9);
        assert_eq!(m.match_request(&r.view(), &none.view()), Ok(None));
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::VrLeastConnSticky>(
            "vr-least-conn-sticky",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
