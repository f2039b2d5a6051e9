//! `lcp`: send a request to an available endpoint that already holds the longest prefix of
//! it, as the original prototype did.
//!
//! The policy is three steps over the policy kit's pieces: find the deepest prefix of the
//! request that an available endpoint was sent ([`PrefixTrie::deepest_match`]); among the
//! available endpoints holding it, pick one with the seeded generator; when nothing matches,
//! pick among all available endpoints the same way. Then remember where the request went.
//! Ties are settled by the seed, so a replay is reproducible.
//!
//! With `max_nodes` set, the least recently used trie nodes are pruned (leaves before the
//! prefixes they hang from). Unbounded (the default) needs no recency at all.
//!
//! Config keys: `seed` (default 0), `max_nodes` (default 0 = unbounded, as the prototype).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, EndpointSet, PrefixTrie, pick_uniform};

/// The longest-common-prefix matcher.
pub struct Lcp {
    trie: PrefixTrie,
    rng: SeededRng,
    ids: DenseIds,
    /// Scratch: the available endpoints of the current call.
    available: EndpointSet,
    /// Scratch: the available endpoints holding the deepest match.
    best: EndpointSet,
}

impl Matcher for Lcp {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let seed = config.seed()?;
        let max_nodes = config.u64("max_nodes", 0)?;
        let trie = match max_nodes {
            0 => PrefixTrie::unbounded(),
            n => PrefixTrie::bounded(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        Ok(Lcp {
            trie,
            rng: SeededRng::new(seed),
            ids: DenseIds::default(),
            available: EndpointSet::default(),
            best: EndpointSet::default(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        self.trie.remove_endpoints(ids);
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.available.fill_available(endpoints);
        if self.available.is_empty() {
            return Ok(None);
        }
        let ids = self.ids.of(request)?;
        self.best.clear();
        if let Some(node) = self
            .trie
            .deepest_match(&ids, &self.available)
            .and_then(|id| self.trie.holders(id))
        {
            self.best.assign_intersection(node, &self.available);
        }
        self.ids.recycle(ids);
        let candidates = if self.best.is_empty() {
            &self.available
        } else {
            &self.best
        };
        Ok(Some(pick_uniform(&mut self.rng, candidates)))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let ids = self.ids.of(request)?;
        self.trie.insert(&ids, endpoint, request.arrival_ns());
        self.ids.recycle(ids);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher Lcp {
        name: "lcp",
        description: "longest common prefix: an available endpoint holding the longest prefix (prototype)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn route(lcp: &mut Lcp, request: &RequestBuilder, endpoints: &EndpointsBuilder) -> u32 {
        let (request, endpoints) = (request.view(), endpoints.view());
        let chosen = lcp.match_request(&request, &endpoints).unwrap().unwrap();
        lcp.update(&request, chosen).unwrap();
        chosen.get()
    }

    #[test]
    fn a_request_follows_the_endpoint_holding_its_longest_prefix() {
        let mut lcp: Lcp = create_matcher("seed: 3").unwrap();
        let fleet = EndpointsBuilder::new(8);
        let first = route(&mut lcp, &RequestBuilder::new(1).blocks(&[1, 2]), &fleet);
        let other = route(&mut lcp, &RequestBuilder::new(2).blocks(&[9]), &fleet);
        for id in 3..20 {
            let longer = RequestBuilder::new(id).blocks(&[1, 2, 100 + id]);
            assert_eq!(route(&mut lcp, &longer, &fleet), first, "request {id}");
        }
        let continues_other = RequestBuilder::new(20).blocks(&[9, 10]);
        assert_eq!(route(&mut lcp, &continues_other, &fleet), other);
    }

    #[test]
    fn an_unavailable_holder_is_passed_over_for_a_shallower_one() {
        let mut lcp: Lcp = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(2);
        // Teach: endpoint 0 holds [1, 2, 3], endpoint 1 holds [1].
        let (deep, shallow) = (
            RequestBuilder::new(1).blocks(&[1, 2, 3]),
            RequestBuilder::new(2).blocks(&[1]),
        );
        lcp.update(&deep.view(), EndpointId(0)).unwrap();
        lcp.update(&shallow.view(), EndpointId(1)).unwrap();
        let probe = RequestBuilder::new(3).blocks(&[1, 2, 3, 4]);
        assert_eq!(route(&mut lcp, &probe, &fleet), 0);
        let without_zero = EndpointsBuilder::new(2).unavailable(0);
        assert_eq!(route(&mut lcp, &probe, &without_zero), 1);
        let none = EndpointsBuilder::new(2).unavailable(0).unavailable(1);
        let request = probe.view();
        assert_eq!(lcp.match_request(&request, &none.view()), Ok(None));
    }

    #[test]
    fn the_same_seed_settles_ties_the_same_way() {
        let picks = |seed: u64| {
            let mut lcp: Lcp = create_matcher(&format!("seed: {seed}")).unwrap();
            let fleet = EndpointsBuilder::new(10);
            (1..40)
                .map(|id| route(&mut lcp, &RequestBuilder::new(id).blocks(&[id * 7]), &fleet))
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(1), picks(1));
        assert_ne!(picks(1), picks(2));
    }

    #[test]
    fn config_is_checked() {
        assert!(create_matcher::<Lcp>("max_nodes: 10").is_ok());
        let typo = create_matcher::<Lcp>("max_node: 10").err().unwrap();
        assert_eq!(
            typo,
            "unknown config key `max_node` (known keys: max_nodes, seed)"
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked =
            routerlab_core::testing::check_matcher_defaults::<super::Lcp>("lcp", upstream);
        assert_eq!(checked, Ok(()));
    }
}
