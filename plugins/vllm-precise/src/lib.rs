//! `vllm-precise`: vllm-router's `precise_cache_aware` policy
//! (`vllm-project/router`, `src/policies/precise_cache_aware.rs`): the endpoint whose KV
//! cache, as its KV events say, holds the longest run of the prompt's leading blocks; with
//! speculative insertion, a routed request's blocks past that run count as held by the
//! endpoint it went to for `speculative_ttl_s` seconds, so that requests arriving before
//! the engine's events see where their prefix is going.
//!
//! - *score*: per available endpoint, the host's cached prefix (ABI 1.2 `cached_prefix`,
//!   in whole blocks), then the blocks right after it that a live speculative entry gives
//!   that endpoint; the highest score wins, ties to the last in endpoint order (as Rust's
//!   `max_by_key` there);
//! - with no score above 0 anywhere: the fewest router-local in-flight requests (vllm-router
//!   falls back to least load), ties at random (seeded);
//! - then, when speculative, the blocks past the best score are entered for the chosen
//!   endpoint until now + TTL (vllm-router's default 2 s; 0 turns it off).
//!
//! Differences from vllm-router: blocks are the host's chain, not a tokenizer's blocks of
//! vLLM's hash; without `cached_prefix` (a time-free replay) only speculative entries count.
//!
//! Config keys: `seed` (0), `speculative_ttl_s` (2.0; 0 = no speculation).

use routerlab_core::hash::U64Map;
use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, inflight, pick_min};

/// Updates between sweeps of expired speculative entries.
const SWEEP_EVERY: u64 = 1024;

/// vllm-router's precise cache-aware policy.
pub struct VllmPrecise {
    rng: SeededRng,
    ttl_ns: u64,
    ids: DenseIds,
    /// Block id -> (endpoint, expiry ns) of live speculative entries.
    speculative: U64Map<Vec<(u32, u64)>>,
    /// The last decision: request id and the best score, for `update`.
    last: Option<(u64, usize)>,
    updates: u64,
}

impl VllmPrecise {
    /// Whether a live speculative entry gives block `id` to `endpoint` at `now`.
    fn speculated(&self, id: u32, endpoint: u32, now: u64) -> bool {
        self.speculative
            .get(&u64::from(id))
            .is_some_and(|v| v.iter().any(|(e, expiry)| *e == endpoint && *expiry > now))
    }
}

impl Matcher for VllmPrecise {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let ttl = config.f64("speculative_ttl_s", 2.0)?;
        if !(ttl.is_finite() && (0.0..=86_400.0).contains(&ttl)) {
            return Err("config: speculative_ttl_s must be from 0 to 86400".into());
        }
        Ok(VllmPrecise {
            rng,
            ttl_ns: (ttl * 1e9).round() as u64,
            ids: DenseIds::default(),
            speculative: U64Map::default(),
            last: None,
            updates: 0,
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let ids = self.ids.of(request)?;
        let block = u64::from(request.block_size()).max(1);
        let now = request.now_ns();
        let mut best: Option<(usize, EndpointId)> = None;
        for e in endpoints.available() {
            let cached = request.cached_prefix(e.id()).unwrap_or(0) / block;
            let mut score = (cached as usize).min(ids.len());
            while score < ids.len() && self.speculated(ids[score], e.id().get(), now) {
                score += 1;
            }
            // Ties to the later endpoint, as `max_by_key`.
            if best.is_none_or(|(s, _)| score >= s) {
                best = Some((score, e.id()));
            }
        }
        self.ids.recycle(ids);
        let Some((score, id)) = best else {
            return Ok(None);
        };
        self.last = Some((request.id(), score));
        if score > 0 {
            return Ok(Some(id));
        }
        Ok(pick_min(
            &mut self.rng,
            endpoints.available().map(|e| (e.id(), inflight(&e))),
        ))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        if self.ttl_ns == 0 {
            return Ok(());
        }
        let best = match self.last {
            Some((id, score)) if id == request.id() => score,
            _ => 0,
        };
        let now = request.now_ns();
        let expiry = now.saturating_add(self.ttl_ns);
        let ids = self.ids.of(request)?;
        for id in ids.iter().skip(best) {
            let entries = self.speculative.entry(u64::from(*id)).or_default();
            match entries.iter_mut().find(|(e, _)| *e == endpoint.get()) {
                Some(entry) => entry.1 = expiry,
                None => entries.push((endpoint.get(), expiry)),
            }
        }
        self.ids.recycle(ids);
        self.updates += 1;
        if self.updates.is_multiple_of(SWEEP_EVERY) {
            self.speculative.retain(|_, entries| {
                entries.retain(|(_, expiry)| *expiry > now);
                !entries.is_empty()
            });
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher VllmPrecise {
        name: "vllm-precise",
        description: "vllm-router precise_cache_aware: longest KV-event prefix, speculative insertion (2 s)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    /// A request of blocks `ids` (16 units each) at `now_ns`.
    fn request(id: u64, ids: &[u32], now_ns: u64) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 7).collect();
        RequestBuilder::new(id)
            .block_size(16)
            .blocks(&hashes)
            .block_ids(ids)
            .prompt_len(16 * ids.len() as u64)
            .now_ns(now_ns)
    }

    #[test]
    fn the_longest_cached_prefix_wins_and_speculation_covers_the_gap_until_its_ttl() {
        let fleet = EndpointsBuilder::new(3)
            .inflight_requests(0, 5)
            .inflight_requests(2, 5);
        let mut policy: VllmPrecise = create_matcher("").unwrap();
        // Nothing cached: the least loaded (endpoint 1) gets it, and its 4 blocks are
        // entered for endpoint 1 for 2 s.
        let first = request(1, &[1, 2, 3, 4], 0)
            .cached(0, 0)
            .cached(1, 0)
            .cached(2, 0);
        let chosen = policy.match_request(&first.view(), &fleet.view()).unwrap();
        assert_eq!(chosen, Some(EndpointId(1)));
        policy.update(&first.view(), EndpointId(1)).unwrap();
        // 1 s later, before any event: endpoint 2 holds 2 blocks for real, endpoint 1 the 4
        // speculated: 4 wins.
        let second = request(2, &[1, 2, 3, 4], 1_000_000_000)
            .cached(0, 0)
            .cached(1, 0)
            .cached(2, 32);
        assert_eq!(
            policy.match_request(&second.view(), &fleet.view()).unwrap(),
            Some(EndpointId(1))
        );
        // 3 s after the first: the speculation has expired; endpoint 2's real 2 blocks win.
        let third = request(3, &[1, 2, 3, 4], 3_000_000_000)
            .cached(0, 0)
            .cached(1, 0)
            .cached(2, 32);
        assert_eq!(
            policy.match_request(&third.view(), &fleet.view()).unwrap(),
            Some(EndpointId(2))
        );
        // Without speculation the second request already goes by the real caches.
        let mut plain: VllmPrecise = create_matcher("speculative_ttl_s: 0").unwrap();
        plain.match_request(&first.view(), &fleet.view()).unwrap();
        plain.update(&first.view(), EndpointId(1)).unwrap();
        assert_eq!(
            plain.match_request(&second.view(), &fleet.view()).unwrap(),
            Some(EndpointId(2))
        );
        assert!(create_matcher::<VllmPrecise>("speculative_ttl_s: -1").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::VllmPrecise>(
            "vllm-precise",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
