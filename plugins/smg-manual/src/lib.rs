//! `smg-manual`: the Shepherd Model Gateway's `manual` policy
//! (`model_gateway/src/policies/manual.rs`; anchors-turn3.md §2): each routing key is pinned
//! to up to two candidate endpoints. A request goes to its key's first available candidate;
//! when none is available, a new endpoint is chosen and becomes a candidate, the oldest
//! candidate dropped past two (so a key comes back to its endpoint once it recovers, and
//! adding endpoints moves no key). A new key, or a request without one, gets an endpoint by
//! `assignment` (`random`, the peer's default, or `min-load`: the fewest in flight, random
//! ties). A key idle for `max_idle_s` (the peer's 4 hours) is forgotten, checked every
//! `eviction_interval_s` (60 s).
//!
//! Where the lab differs: the peer's key is the `X-SMG-Routing-Key` header; here it is the
//! request's session id (what a gateway would put in that header). The peer's `min-group`
//! mode (fewest keys per worker) and its separate keys for prefill and decode legs are not
//! modelled.
//!
//! Config keys: `assignment` (`random`), `max_idle_s` (14,400), `eviction_interval_s` (60),
//! `seed` (0).

use std::collections::HashMap;

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{EndpointSet, inflight, pick_min, pick_uniform, seconds_ns};

/// Candidates a key keeps.
const CANDIDATES: usize = 2;

/// How a new key (or a keyless request) gets its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Assignment {
    Random,
    MinLoad,
}

/// A key's candidates, most preferred first, and when it was last used.
struct Pin {
    candidates: Vec<EndpointId>,
    last_ns: u64,
}

/// SMG's manual (sticky routing key) policy.
pub struct SmgManual {
    rng: SeededRng,
    assignment: Assignment,
    max_idle_ns: u64,
    eviction_ns: u64,
    last_eviction_ns: u64,
    pins: HashMap<u64, Pin>,
    available: EndpointSet,
}

impl SmgManual {
    fn assign(&mut self, endpoints: &Endpoints<'_>) -> Option<EndpointId> {
        match self.assignment {
            Assignment::Random => {
                self.available.fill_available(endpoints);
                (!self.available.is_empty()).then(|| pick_uniform(&mut self.rng, &self.available))
            }
            Assignment::MinLoad => pick_min(
                &mut self.rng,
                endpoints.available().map(|e| (e.id(), inflight(&e))),
            ),
        }
    }

    fn evict(&mut self, now_ns: u64) {
        if self.eviction_ns == 0 || now_ns.saturating_sub(self.last_eviction_ns) < self.eviction_ns
        {
            return;
        }
        self.last_eviction_ns = now_ns;
        let idle = self.max_idle_ns;
        self.pins
            .retain(|_, pin| now_ns.saturating_sub(pin.last_ns) < idle);
    }
}

impl Matcher for SmgManual {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let assignment = match config.choice("assignment", &["random", "min-load"], "random")? {
            "min-load" => Assignment::MinLoad,
            _ => Assignment::Random,
        };
        let max_idle_ns = seconds_ns(config, "max_idle_s", 4.0 * 3600.0, false)?;
        let eviction_ns = seconds_ns(config, "eviction_interval_s", 60.0, true)?;
        Ok(SmgManual {
            rng,
            assignment,
            max_idle_ns,
            eviction_ns,
            last_eviction_ns: 0,
            pins: HashMap::new(),
            available: EndpointSet::default(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        for pin in self.pins.values_mut() {
            pin.candidates.retain(|c| !ids.contains(c));
        }
        self.pins.retain(|_, pin| !pin.candidates.is_empty());
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.evict(request.now_ns());
        if let Some(pin) = request.session_id().and_then(|key| self.pins.get(&key)) {
            self.available.fill_available(endpoints);
            if let Some(id) = pin.candidates.iter().find(|c| self.available.contains(**c)) {
                return Ok(Some(*id));
            }
        }
        Ok(self.assign(endpoints))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let Some(key) = request.session_id() else {
            return Ok(());
        };
        let now_ns = request.now_ns();
        let pin = self.pins.entry(key).or_insert_with(|| Pin {
            candidates: Vec::with_capacity(CANDIDATES),
            last_ns: now_ns,
        });
        pin.last_ns = now_ns;
        if !pin.candidates.contains(&endpoint) {
            if pin.candidates.len() >= CANDIDATES {
                pin.candidates.remove(0);
            }
            pin.candidates.push(endpoint);
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher SmgManual {
        name: "smg-manual",
        description: "SMG manual: a session pinned to up to two endpoints, failover to a new one",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn route(m: &mut SmgManual, fleet: &EndpointsBuilder, key: u64, now_s: u64) -> EndpointId {
        let r = RequestBuilder::new(key)
            .session_id(key)
            .now_ns(now_s * 1_000_000_000);
        let chosen = m.match_request(&r.view(), &fleet.view()).unwrap().unwrap();
        m.update(&r.view(), chosen).unwrap();
        chosen
    }

    #[test]
    fn a_key_keeps_its_endpoint_fails_over_and_comes_back() {
        let mut m: SmgManual = create_matcher("{seed: 3, max_idle_s: 100}").unwrap();
        let fleet = EndpointsBuilder::new(4);
        let home = route(&mut m, &fleet, 7, 0);
        for t in 1..5 {
            assert_eq!(route(&mut m, &fleet, 7, t), home);
        }
        // Its endpoint goes away: a second candidate; when it is back, the key is too.
        let without = EndpointsBuilder::new(4).unavailable(home.0 as usize);
        let second = route(&mut m, &without, 7, 10);
        assert_ne!(second, home);
        assert_eq!(m.pins[&7].candidates, vec![home, second]);
        assert_eq!(route(&mut m, &fleet, 7, 11), home);
        // Idle past 100 s, the key is forgotten at the next eviction check.
        route(&mut m, &fleet, 8, 200);
        assert!(!m.pins.contains_key(&7));
    }

    #[test]
    fn min_load_assigns_the_fewest_in_flight_and_keyless_requests_leave_no_pin() {
        let mut m: SmgManual = create_matcher("assignment: min-load").unwrap();
        let fleet = EndpointsBuilder::new(3)
            .inflight_requests(0, 4)
            .inflight_requests(1, 1)
            .inflight_requests(2, 3);
        assert_eq!(route(&mut m, &fleet, 1, 0), EndpointId(1));
        let keyless = RequestBuilder::new(2);
        let chosen = m.match_request(&keyless.view(), &fleet.view()).unwrap();
        assert_eq!(chosen, Some(EndpointId(1)));
        m.update(&keyless.view(), EndpointId(1)).unwrap();
        assert_eq!(m.pins.len(), 1);
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(m.match_request(&keyless.view(), &none.view()), Ok(None));
        let err = create_matcher::<SmgManual>("assignment: min-group")
            .err()
            .unwrap();
        assert!(err.contains("min-group"), "{err}");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::SmgManual>(
            "smg-manual",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
