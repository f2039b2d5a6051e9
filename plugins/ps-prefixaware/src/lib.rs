//! `ps-prefixaware`: vLLM production-stack's `prefixaware` routing (peers.md §1, "HashTrie";
//! §7, policy 5).
//!
//! ```text
//! (len, cand) = longest prefix match: cand starts as the available endpoints and is
//!               intersected with each matched node's endpoints, stopping at a missing node
//!               or an empty intersection; each matched block adds its length
//! if len < min_match: QPS routing (an endpoint never used, else the lowest rate in the window)
//! else: uniformly at random among cand (all available endpoints when nothing matched)
//! insert the prompt's blocks for the chosen endpoint (no eviction, no bound)
//! ```
//!
//! production-stack cuts the prompt into 128-character chunks; here the host's chain does
//! that job (128 bytes by default for text; trace blocks for token traces).
//!
//! Config keys: `seed` (0), `min_match` (0, in the request's unit: never taken, as
//! production-stack's default), `window_s` (60, the QPS window).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, EndpointSet, PrefixTrie, RateWindow, pick_uniform};

/// The production-stack prefix-aware matcher.
pub struct PsPrefixAware {
    rng: SeededRng,
    min_match: u64,
    trie: PrefixTrie,
    rates: RateWindow,
    ids: DenseIds,
    cand: EndpointSet,
    next: EndpointSet,
}

impl Matcher for PsPrefixAware {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let min_match = config.u64("min_match", 0)?;
        let window_s = config.f64("window_s", 60.0)?;
        if window_s <= 0.0 {
            return Err("config key `window_s`: must be positive".into());
        }
        Ok(PsPrefixAware {
            rng,
            min_match,
            trie: PrefixTrie::unbounded(),
            rates: RateWindow::new((window_s * 1e9) as u64),
            ids: DenseIds::default(),
            cand: EndpointSet::default(),
            next: EndpointSet::default(),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.cand.fill_available(endpoints);
        if self.cand.is_empty() {
            return Ok(None);
        }
        let ids = self.ids.of(request)?;
        let mut matched = 0u64;
        for id in ids.iter() {
            let Some(holders) = self.trie.holders(*id) else {
                break;
            };
            self.next.assign_intersection(holders, &self.cand);
            if self.next.is_empty() {
                break;
            }
            std::mem::swap(&mut self.cand, &mut self.next);
            matched += u64::from(request.block_size());
        }
        self.ids.recycle(ids);
        if matched.min(request.prompt_len()) < self.min_match {
            return Ok(self.rates.least_busy(endpoints, request.now_ns()));
        }
        Ok(Some(pick_uniform(&mut self.rng, &self.cand)))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let trie = &mut self.trie;
        self.ids
            .with(request, |ids| trie.insert(ids, endpoint, request.now_ns()))?;
        self.rates.record(endpoint, request.now_ns());
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher PsPrefixAware {
        name: "ps-prefixaware",
        description: "vLLM production-stack prefixaware: random among the longest-match holders",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn request(id: u64, ids: &[u32]) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 3).collect();
        RequestBuilder::new(id)
            .block_size(128)
            .blocks(&hashes)
            .block_ids(ids)
    }

    #[test]
    fn the_longest_match_narrows_the_candidates_and_min_match_falls_back_to_qps() {
        let mut ps: PsPrefixAware = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(3);
        ps.update(&request(1, &[1, 2]).view(), EndpointId(2))
            .unwrap();
        ps.update(&request(2, &[1]).view(), EndpointId(0)).unwrap();
        // [1, 2, 7]: block 1 held by {0, 2}, block 2 by {2}: only 2 matches two blocks.
        for id in 3..10 {
            let r = request(id, &[1, 2, 7]);
            assert_eq!(
                ps.match_request(&r.view(), &fleet.view()).unwrap(),
                Some(EndpointId(2))
            );
        }
        // With min_match 300 (more than two 128-byte blocks), QPS routing: endpoint 1 never
        // received a request, so it goes first.
        let mut strict: PsPrefixAware = create_matcher("min_match: 300").unwrap();
        strict
            .update(&request(1, &[1, 2]).view(), EndpointId(2))
            .unwrap();
        strict
            .update(&request(2, &[1]).view(), EndpointId(0))
            .unwrap();
        let r = request(3, &[1, 2, 7]);
        assert_eq!(
            strict.match_request(&r.view(), &fleet.view()).unwrap(),
            Some(EndpointId(1))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::PsPrefixAware>(
            "ps-prefixaware",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
