//! `vr-sticky-least-loaded`: vllm-router's `sticky_least_loaded` policy
//! (`src/policies/sticky_least_loaded.rs`; anchors-turn3.md §2): a session stays on the
//! endpoint it was first given; a new session goes to the available endpoint holding the
//! fewest active sessions, ties broken by rendezvous hashing of the session id with the
//! endpoint's name (the highest wins), so the same tie always breaks the same way. A
//! request without a session goes the same way (its prompt's hash breaking the tie) and is
//! not recorded. A session not seen for `session_ttl_s` expires, checked at most every
//! `sweep_interval_s` (the peer's 2 hours and 60 s); a session whose endpoint is no longer
//! available is given a new one.
//!
//! A session also ends explicitly, as the peer's `/finish_session` call ends it: when its
//! last request completes (the host's ABI 1.6 `ends_session`: a trace line's
//! `session_end`, `serve`'s `x-session-end` header), its endpoint holds one session fewer.
//!
//! Where the lab differs: the time-free replay has no completions, so there sessions end
//! by their lifetime only. The hash is the lab's xxh3, not the peer's FNV-style `fbi_hash`: which endpoint
//! wins a tie differs, not how often ties fall on each.
//!
//! Config keys: `session_ttl_s` (7200), `sweep_interval_s` (60); `seed` unused.

use std::collections::HashMap;

use routerlab_core::hash::hash64;
use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::seconds_ns;

/// Where a session went and when it was last routed.
struct Session {
    endpoint: EndpointId,
    last_ns: u64,
}

/// vllm-router's sticky least-loaded policy.
pub struct VrStickyLeastLoaded {
    ttl_ns: u64,
    sweep_ns: u64,
    last_sweep_ns: u64,
    sessions: HashMap<u64, Session>,
    /// Active sessions per endpoint.
    counts: HashMap<EndpointId, u64>,
}

impl VrStickyLeastLoaded {
    fn release(&mut self, endpoint: EndpointId) {
        if let Some(count) = self.counts.get_mut(&endpoint) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.counts.remove(&endpoint);
            }
        }
    }

    /// Drops the sessions idle for the lifetime, at most once a sweep interval.
    fn sweep(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.last_sweep_ns) < self.sweep_ns {
            return;
        }
        self.last_sweep_ns = now_ns;
        let ttl = self.ttl_ns;
        let mut expired = Vec::new();
        self.sessions.retain(|_, s| {
            let keep = now_ns.saturating_sub(s.last_ns) < ttl;
            if !keep {
                expired.push(s.endpoint);
            }
            keep
        });
        for endpoint in expired {
            self.release(endpoint);
        }
    }

    /// The available endpoint with the fewest active sessions, the tie to the highest
    /// rendezvous weight of `key` with its name.
    fn least_loaded(&self, endpoints: &Endpoints<'_>, key: u64) -> Option<EndpointId> {
        let count = |id: EndpointId| self.counts.get(&id).copied().unwrap_or(0);
        let fewest = endpoints.available().map(|e| count(e.id())).min()?;
        endpoints
            .available()
            .filter(|e| count(e.id()) == fewest)
            .map(|e| {
                let mut bytes = key.to_le_bytes().to_vec();
                bytes.extend_from_slice(e.name().as_bytes());
                (hash64(&bytes, 0), e.id())
            })
            .max_by_key(|(weight, id)| (*weight, std::cmp::Reverse(id.0)))
            .map(|(_, id)| id)
    }
}

impl Matcher for VrStickyLeastLoaded {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let ttl_ns = seconds_ns(config, "session_ttl_s", 7200.0, false)?;
        let sweep_ns = seconds_ns(config, "sweep_interval_s", 60.0, true)?;
        Ok(VrStickyLeastLoaded {
            ttl_ns,
            sweep_ns,
            last_sweep_ns: 0,
            sessions: HashMap::new(),
            counts: HashMap::new(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        self.sessions.retain(|_, s| !ids.contains(&s.endpoint));
        for id in ids {
            self.counts.remove(id);
        }
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.sweep(request.now_ns());
        let Some(session) = request.session_id() else {
            let key = hash64(request.prompt(), request.id());
            return Ok(self.least_loaded(endpoints, key));
        };
        if let Some(held) = self.sessions.get(&session)
            && (0..endpoints.len())
                .any(|pos| endpoints.is_available(pos) && endpoints.get(pos).id() == held.endpoint)
        {
            return Ok(Some(held.endpoint));
        }
        Ok(self.least_loaded(endpoints, session))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let Some(session) = request.session_id() else {
            return Ok(());
        };
        let now_ns = request.now_ns();
        let moved = match self.sessions.get_mut(&session) {
            Some(held) if held.endpoint == endpoint => {
                held.last_ns = now_ns;
                return Ok(());
            }
            Some(held) => Some(held.endpoint),
            None => None,
        };
        if let Some(old) = moved {
            self.release(old);
        }
        self.sessions.insert(
            session,
            Session {
                endpoint,
                last_ns: now_ns,
            },
        );
        *self.counts.entry(endpoint).or_insert(0) += 1;
        Ok(())
    }

    fn on_complete(&mut self, request: &Request<'_>, _endpoint: EndpointId) -> Result<(), String> {
        if request.ends_session()
            && let Some(session) = request.session_id()
            && let Some(ended) = self.sessions.remove(&session)
        {
            self.release(ended.endpoint);
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher VrStickyLeastLoaded {
        name: "vr-sticky-least-loaded",
        description: "vllm-router sticky_least_loaded: a session stays; new ones to the fewest sessions, with a lifetime",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    /// Routes session `session` at `now_s` and records the choice, as the host does.
    fn route(
        m: &mut VrStickyLeastLoaded,
        fleet: &EndpointsBuilder,
        session: u64,
        now_s: u64,
    ) -> EndpointId {
        let request = RequestBuilder::new(session)
            .session_id(session)
            .now_ns(now_s * 1_000_000_000);
        let chosen = m
            .match_request(&request.view(), &fleet.view())
            .unwrap()
            .unwrap();
        m.update(&request.view(), chosen).unwrap();
        chosen
    }

    #[test]
    fn sessions_stay_new_ones_spread_and_idle_ones_expire() {
        let mut m: VrStickyLeastLoaded =
            create_matcher("{session_ttl_s: 100, sweep_interval_s: 10}").unwrap();
        let fleet = EndpointsBuilder::new(3);
        // Three sessions land on three endpoints; each comes back to its own.
        let first: Vec<EndpointId> = (1..=3).map(|s| route(&mut m, &fleet, s, 0)).collect();
        let mut distinct = first.clone();
        distinct.sort_by_key(|id| id.0);
        distinct.dedup();
        assert_eq!(distinct.len(), 3, "{first:?}");
        for (s, id) in (1..=3).zip(&first) {
            assert_eq!(route(&mut m, &fleet, s, 50), *id);
        }
        // A fourth goes to one of them (each holds one); then 2 and 3 stay busy while 1
        // and 4 go idle: at 200 s, idle for 150 s or more, both have expired, and 1's
        // endpoint is the one without a session.
        let fourth = route(&mut m, &fleet, 4, 60);
        route(&mut m, &fleet, 2, 140);
        route(&mut m, &fleet, 3, 140);
        assert_eq!(m.sessions.len(), 4);
        let fifth = route(&mut m, &fleet, 5, 200);
        assert_eq!(m.sessions.len(), 3, "sessions 1 and 4 expired");
        assert_eq!(
            fifth, first[0],
            "the one endpoint left without a session ({fourth:?})"
        );
        // Session 2's endpoint goes away: it is given another, and the count moves.
        let pos = first[1].0 as usize;
        let without = EndpointsBuilder::new(3).unavailable(pos);
        let moved = route(&mut m, &without, 2, 210);
        assert_ne!(moved, first[1]);
        assert_eq!(m.counts.get(&first[1]), None);
    }

    #[test]
    fn a_session_whose_last_request_completes_ends_at_once() {
        let mut m: VrStickyLeastLoaded = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(2);
        let one = route(&mut m, &fleet, 1, 0);
        let two = route(&mut m, &fleet, 2, 0);
        assert_ne!(one, two);
        // Session 1's next request completes without ending it; then its last one does.
        let next = RequestBuilder::new(3).session_id(1);
        m.on_complete(&next.view(), one).unwrap();
        assert_eq!(m.sessions.len(), 2, "not its last");
        let last = RequestBuilder::new(4).session_id(1).ends_session();
        m.on_complete(&last.view(), one).unwrap();
        assert_eq!(m.sessions.len(), 1, "ended");
        assert_eq!(m.counts.get(&one), None, "its endpoint holds no session");
        // Two new sessions: the first goes to the endpoint left without one.
        assert_eq!(route(&mut m, &fleet, 5, 1), one);
        // Ending a session twice, or one never seen, changes nothing.
        m.on_complete(&last.view(), one).unwrap();
        assert_eq!(m.sessions.len(), 2);
    }

    #[test]
    fn requests_without_a_session_balance_and_leave_no_trace() {
        let mut m: VrStickyLeastLoaded = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(2);
        let held = route(&mut m, &fleet, 9, 0);
        let request = RequestBuilder::new(2).prompt("no session");
        let chosen = m.match_request(&request.view(), &fleet.view()).unwrap();
        assert_ne!(chosen, Some(held), "the endpoint without a session");
        m.update(&request.view(), chosen.unwrap()).unwrap();
        assert_eq!(m.sessions.len(), 1);
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(m.match_request(&request.view(), &none.view()), Ok(None));
        let err = create_matcher::<VrStickyLeastLoaded>("session_ttl_s: 0")
            .err()
            .unwrap();
        assert!(err.contains("session_ttl_s"), "{err}");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::VrStickyLeastLoaded>(
            "vr-sticky-least-loaded",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
