//! `llmd-burst`: llm-d-router's `burst-prefix-cache-producer` (its Go package `burstprefix`,
//! under `pkg/epp/framework/plugins`; anchors-turn3.md §2): requests sharing a prompt that
//! arrive together (the `n` samples of an RL rollout step, best-of-N, a fan-out over one
//! context) are kept on one endpoint, so the prompt is prefilled once instead of on every
//! cold endpoint load balancing would spread them over.
//!
//! Time is cut into windows of `window_ms` (a window opens with the first request after
//! the last one closed). In a window, a request's group is its prompt's first
//! `max_prefix_blocks` blocks (the chained hash of the last of them names them all):
//!
//! ```text
//! the group already placed in this window, on an available endpoint under max_per_replica
//!     → that endpoint
//! else (a new group, or its endpoint full or gone)
//!     → the available endpoint given the fewest requests this window, then the fewest in
//!       flight (ties to the first), and the group is placed there
//! ```
//!
//! Where the lab differs: the peer holds each request up to the window's length and places
//! the whole batch at once (identical groups first, longest prefixes first); a replay
//! routes each request when it arrives, so a group follows its first member and nothing
//! waits (the peer's added latency, up to `windowDurationMs`, is not in the lab's TTFT).
//! A request alone in its group is placed by the same balance here, where the peer leaves
//! it to the other scorers. The peer's `minColocateBlocks` (partial overlaps) and `balanceBy:
//! tokens` are not modelled.
//!
//! Config keys: `window_ms` (100, 1 to 10,000), `max_per_replica` (0 = unlimited, the
//! peer's −1), `max_prefix_blocks` (2,048); `seed` unused.

use std::collections::HashMap;

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::inflight;

/// llm-d's burst co-location.
pub struct LlmdBurst {
    window_ns: u64,
    max_per_replica: u64,
    max_prefix_blocks: usize,
    /// When the current window closes (0: none open).
    window_end_ns: u64,
    /// Group key → (endpoint, members placed there this window).
    groups: HashMap<u64, (EndpointId, u64)>,
    /// Requests placed on each endpoint this window.
    placed: HashMap<EndpointId, u64>,
}

impl LlmdBurst {
    fn group(&self, request: &Request<'_>) -> Option<u64> {
        let blocks = request.block_hashes();
        (!blocks.is_empty()).then(|| blocks[blocks.len().min(self.max_prefix_blocks) - 1])
    }

    fn roll(&mut self, now_ns: u64) {
        if now_ns >= self.window_end_ns {
            self.window_end_ns = now_ns.saturating_add(self.window_ns);
            self.groups.clear();
            self.placed.clear();
        }
    }
}

impl Matcher for LlmdBurst {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let window_ms = config.u64("window_ms", 100)?;
        let max_per_replica = config.u64("max_per_replica", 0)?;
        let max_prefix_blocks = config.u64("max_prefix_blocks", 2048)?;
        if !(1..=10_000).contains(&window_ms) {
            return Err("config key `window_ms`: must be from 1 to 10000".into());
        }
        if max_prefix_blocks == 0 || max_prefix_blocks > 1 << 20 {
            return Err("config key `max_prefix_blocks`: must be from 1 to 2^20".into());
        }
        Ok(LlmdBurst {
            window_ns: window_ms * 1_000_000,
            max_per_replica,
            max_prefix_blocks: max_prefix_blocks as usize,
            window_end_ns: 0,
            groups: HashMap::new(),
            placed: HashMap::new(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        self.groups.retain(|_, (e, _)| !ids.contains(e));
        for id in ids {
            self.placed.remove(id);
        }
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.roll(request.now_ns());
        if let Some((endpoint, members)) = self.group(request).and_then(|g| self.groups.get(&g))
            && (self.max_per_replica == 0 || *members < self.max_per_replica)
            && endpoints.available().any(|e| e.id() == *endpoint)
        {
            return Ok(Some(*endpoint));
        }
        let placed = |id: EndpointId| self.placed.get(&id).copied().unwrap_or(0);
        Ok(endpoints
            .available()
            .map(|e| (placed(e.id()), inflight(&e), e.id()))
            .min_by_key(|(p, f, id)| (*p, *f, id.0))
            .map(|(_, _, id)| id))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        self.roll(request.now_ns());
        *self.placed.entry(endpoint).or_insert(0) += 1;
        if let Some(group) = self.group(request) {
            let entry = self.groups.entry(group).or_insert((endpoint, 0));
            if entry.0 != endpoint {
                // Spilled (its endpoint full or gone): the group goes on from here.
                *entry = (endpoint, 0);
            }
            entry.1 += 1;
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher LlmdBurst {
        name: "llmd-burst",
        description: "llm-d burst-prefix-cache-producer: a same-prompt burst kept on one endpoint",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn route(m: &mut LlmdBurst, fleet: &EndpointsBuilder, id: u64, prompt: u64, ms: u64) -> u32 {
        let r = RequestBuilder::new(id)
            .blocks(&[prompt, prompt + 1])
            .now_ns(ms * 1_000_000);
        let chosen = m.match_request(&r.view(), &fleet.view()).unwrap().unwrap();
        m.update(&r.view(), chosen).unwrap();
        chosen.0
    }

    #[test]
    fn a_burst_stays_together_spills_past_its_cap_and_windows_start_afresh() {
        let mut m: LlmdBurst = create_matcher("max_per_replica: 3").unwrap();
        let fleet = EndpointsBuilder::new(3).inflight_requests(0, 9);
        // Four samples of prompt 10 at once: three on endpoint 1 (fewest in flight), the
        // fourth spills to 2 (the fewest placed this window).
        let burst: Vec<u32> = (0..4).map(|i| route(&mut m, &fleet, i, 10, 5)).collect();
        assert_eq!(burst, [1, 1, 1, 2]);
        // Another prompt in the same window: the endpoint given fewest this window, 0.
        assert_eq!(route(&mut m, &fleet, 9, 20, 50), 0);
        // After the window: prompt 10 is a new group, placed by balance again.
        assert_eq!(route(&mut m, &fleet, 10, 10, 200), 1);
        let none = EndpointsBuilder::new(1).unavailable(0);
        let r = RequestBuilder::new(11)
            .blocks(&[10, 11])
            .now_ns(201_000_000);
        assert_eq!(m.match_request(&r.view(), &none.view()), Ok(None));
        let err = create_matcher::<LlmdBurst>("window_ms: 0").err().unwrap();
        assert!(err.contains("`window_ms`"), "{err}");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::LlmdBurst>(
            "llmd-burst",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
