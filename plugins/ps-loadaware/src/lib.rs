//! `ps-loadaware`: vLLM production-stack's `loadaware` routing (peers.md §1, PR #1035;
//! §7, policy 12): for each available endpoint,
//!
//! ```text
//! score = matched / prompt − beta · (load − mean_load) / max(1, mean_load)
//! ```
//!
//! with `matched` the request's leading blocks the endpoint was sent (its own prefix index,
//! no eviction) in the request's unit, `load` the router's in-flight requests, `mean_load`
//! their mean over the available endpoints; the highest score wins (ties at random).
//!
//! Config keys: `seed` (0), `beta` (1.0).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, PrefixTrie, Score, inflight, pick_min};

/// The production-stack load-aware matcher.
pub struct PsLoadAware {
    rng: SeededRng,
    beta: f64,
    trie: PrefixTrie,
    ids: DenseIds,
}

impl Matcher for PsLoadAware {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let beta = config.f64("beta", 1.0)?;
        if beta < 0.0 {
            return Err("config key `beta`: must be zero or more".into());
        }
        Ok(PsLoadAware {
            rng,
            beta,
            trie: PrefixTrie::unbounded(),
            ids: DenseIds::default(),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let n = endpoints.available().count();
        if n == 0 {
            return Ok(None);
        }
        let mean = endpoints.available().map(|e| inflight(&e)).sum::<u64>() as f64 / n as f64;
        let ids = self.ids.of(request)?;
        let prompt = request.prompt_len().max(1) as f64;
        let scored: Vec<(EndpointId, Score)> = endpoints
            .available()
            .map(|e| {
                let matched = self.trie.held_len(&ids, request, e.id()) as f64;
                let load = inflight(&e) as f64;
                let score = matched / prompt - self.beta * (load - mean) / mean.max(1.0);
                (e.id(), Score(-score))
            })
            .collect();
        self.ids.recycle(ids);
        Ok(pick_min(&mut self.rng, scored))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let trie = &mut self.trie;
        self.ids
            .with(request, |ids| trie.insert(ids, endpoint, request.now_ns()))?;
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher PsLoadAware {
        name: "ps-loadaware",
        description: "vLLM production-stack loadaware: matched share minus relative load",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_match_decides_among_equals_and_a_load_above_the_mean_costs_it() {
        let mut ps: PsLoadAware = create_matcher("").unwrap();
        let ids = [1u32, 2, 3, 4];
        let hashes = [10u64, 20, 30, 40];
        let r = RequestBuilder::new(1)
            .block_size(16)
            .blocks(&hashes)
            .block_ids(&ids);
        ps.update(&r.view(), EndpointId(0)).unwrap();
        // Equal loads: only the match counts, and endpoint 0 holds all of the prompt.
        let even = EndpointsBuilder::new(3)
            .inflight_requests(0, 1)
            .inflight_requests(1, 1)
            .inflight_requests(2, 1);
        assert_eq!(
            ps.match_request(&r.view(), &even.view()).unwrap(),
            Some(EndpointId(0))
        );
        // Loads 2, 0, 1 (mean 1): endpoint 0 scores 1 − 1 = 0, endpoint 1 scores 0 + 1 = 1.
        let skewed = EndpointsBuilder::new(3)
            .inflight_requests(0, 2)
            .inflight_requests(2, 1);
        assert_eq!(
            ps.match_request(&r.view(), &skewed.view()).unwrap(),
            Some(EndpointId(1))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::PsLoadAware>(
            "ps-loadaware",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
