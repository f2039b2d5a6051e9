//! `sglang-cache-aware`: the SGLang router's `cache_aware` policy (peers.md §2, "cache_aware
//! selection rule"; §7, policy 6).
//!
//! ```text
//! (lo, hi) = min/max in-flight requests over all endpoints (unavailable ones included)
//! if hi − lo > balance_abs_threshold and hi > balance_rel_threshold · lo:
//!     the least loaded available endpoint                      # imbalanced
//! else if matched / prompt > cache_threshold (strictly):
//!     the endpoint holding the longest matched prefix          # cache hit
//! else:
//!     the least loaded available endpoint                      # miss
//! the chosen endpoint is inserted into the tree in every branch
//! ```
//!
//! Ties on load go to the first endpoint in list order, as SGLang's `min_by_key`. The
//! deepest node's holder is the one with the lowest id (SGLang takes an arbitrary one).
//! When the best match is unavailable, the first available endpoint is taken.
//!
//! SGLang's tree is per character; here it is the host's block chain, so a match counts
//! whole blocks (`--block-size` bytes of text, or trace blocks of tokens) and the ratio is
//! matched units over the prompt's. SGLang bounds each tenant to `max_tree_size`
//! characters, evicting least recently used leaves every `eviction_interval` seconds; here
//! the whole tree is bounded to that many characters per endpoint (a token counted as 4
//! characters), least recently used nodes pruned at once.
//!
//! Config keys: `defaults` (`cli`: the router's command-line defaults, or `struct`: its
//! `CacheAwareConfig::default()`), then each of `cache_threshold` (0.3 | 0.5),
//! `balance_abs_threshold` (64 | 32), `balance_rel_threshold` (1.5 | 1.1),
//! `max_tree_size` (characters per endpoint, 2^26 | 10,000) overrides it; `seed` unused.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, Unit};
use routerlab_policy_kit::{DenseIds, EndpointSet, PrefixTrie, inflight, range_of};

/// The SGLang cache-aware matcher.
pub struct SglangCacheAware {
    cache_threshold: f64,
    balance_abs: u64,
    balance_rel: f64,
    max_tree_chars: u64,
    tree: Option<PrefixTrie>,
    ids: DenseIds,
    everyone: EndpointSet,
}

impl SglangCacheAware {
    /// The tree, bounded once the block size and fleet are known.
    fn tree(&mut self, request: &Request<'_>) -> &mut PrefixTrie {
        let chars_per_block = match request.unit() {
            Unit::Bytes => u64::from(request.block_size()),
            Unit::Tokens => 4 * u64::from(request.block_size()),
        }
        .max(1);
        let endpoints = self.everyone.len().max(1);
        let bound = (self.max_tree_chars / chars_per_block).max(1) * endpoints;
        self.tree.get_or_insert_with(|| {
            PrefixTrie::bounded(usize::try_from(bound).unwrap_or(usize::MAX))
        })
    }
}

/// The least loaded available endpoint, ties to the first in list order.
fn least_loaded(endpoints: &Endpoints<'_>) -> Option<EndpointId> {
    endpoints
        .available()
        .min_by_key(|e| inflight(e))
        .map(|e| e.id())
}

impl Matcher for SglangCacheAware {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let defaults = config.choice("defaults", &["cli", "struct"], "cli")?;
        let (t, abs, rel, size) = match defaults {
            "cli" => (0.3, 64, 1.5, 1 << 26),
            _ => (0.5, 32, 1.1, 10_000),
        };
        let cache_threshold = config.f64("cache_threshold", t)?;
        let balance_abs = config.u64("balance_abs_threshold", abs)?;
        let balance_rel = config.f64("balance_rel_threshold", rel)?;
        let max_tree_chars = config.u64("max_tree_size", size)?;
        if !(0.0..=1.0).contains(&cache_threshold) || balance_rel < 0.0 || max_tree_chars == 0 {
            return Err(
                "config: cache_threshold within 0..=1, balance_rel_threshold >= 0, \
                        max_tree_size > 0"
                    .into(),
            );
        }
        Ok(SglangCacheAware {
            cache_threshold,
            balance_abs,
            balance_rel,
            max_tree_chars,
            tree: None,
            ids: DenseIds::default(),
            everyone: EndpointSet::default(),
        })
    }

    fn add_endpoints(&mut self, endpoints: &Endpoints<'_>) -> Result<(), String> {
        for endpoint in endpoints.iter() {
            self.everyone.insert(endpoint.id());
        }
        Ok(())
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        for id in ids {
            self.everyone.remove(*id);
        }
        if let Some(tree) = &mut self.tree {
            tree.remove_endpoints(ids);
        }
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let Some((lo, hi)) = range_of(endpoints.iter().map(|e| inflight(&e))) else {
            return Ok(None);
        };
        if hi - lo > self.balance_abs && hi as f64 > self.balance_rel * lo as f64 {
            return Ok(least_loaded(endpoints));
        }
        let ids = self.ids.of(request)?;
        let everyone = self.everyone.clone();
        let tree = self.tree(request);
        let deepest = tree.deepest_match(&ids, &everyone);
        let best = deepest.and_then(|id| {
            let depth = ids.iter().position(|b| *b == id)? + 1;
            let holder = tree.holders(id)?;
            let lowest = everyone.iter().find(|e| holder.contains(*e))?;
            Some((depth, lowest))
        });
        self.ids.recycle(ids);
        let matched = best.map_or(0, |(depth, _)| {
            depth as u64 * u64::from(request.block_size())
        });
        let prompt = request.prompt_len();
        let rate = if prompt == 0 {
            0.0
        } else {
            matched.min(prompt) as f64 / prompt as f64
        };
        let chosen = match best {
            Some((_, holder)) if rate > self.cache_threshold => holder,
            _ => return Ok(least_loaded(endpoints)),
        };
        let available = endpoints.available().any(|e| e.id() == chosen);
        Ok(if available {
            Some(chosen)
        } else {
            endpoints.available().next().map(|e| e.id())
        })
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let ids = self.ids.of(request)?;
        let now = request.now_ns();
        self.tree(request).insert(&ids, endpoint, now);
        self.ids.recycle(ids);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher SglangCacheAware {
        name: "sglang-cache-aware",
        description: "SGLang router cache_aware: best prefix match above a ratio, else least load; balance first",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn request(id: u64, ids: &[u32]) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 77).collect();
        RequestBuilder::new(id)
            .block_size(16)
            .blocks(&hashes)
            .block_ids(ids)
    }

    fn routed(
        matcher: &mut SglangCacheAware,
        request: &RequestBuilder,
        fleet: &EndpointsBuilder,
    ) -> EndpointId {
        let chosen = matcher
            .match_request(&request.view(), &fleet.view())
            .unwrap()
            .unwrap();
        matcher.update(&request.view(), chosen).unwrap();
        chosen
    }

    #[test]
    fn a_good_match_follows_the_cache_and_a_poor_one_the_load() {
        let mut sglang: SglangCacheAware = create_matcher("").unwrap();
        let idle = EndpointsBuilder::new(3);
        sglang.add_endpoints(&idle.view()).unwrap();
        assert_eq!(
            routed(&mut sglang, &request(1, &[1, 2, 3, 4]), &idle),
            EndpointId(0)
        );
        // Endpoint 0 now has the most in flight, but 3 of 4 blocks (75% > 30%) match there.
        let busy = EndpointsBuilder::new(3).inflight_requests(0, 5);
        assert_eq!(
            routed(&mut sglang, &request(2, &[1, 2, 3, 9]), &busy),
            EndpointId(0)
        );
        // 1 block of 4 (25%) is not enough: the least loaded endpoint (first of 1, 2).
        assert_eq!(
            routed(&mut sglang, &request(3, &[1, 8, 8, 8]), &busy),
            EndpointId(1)
        );
    }

    #[test]
    fn imbalance_overrides_the_cache() {
        let mut sglang: SglangCacheAware = create_matcher("defaults: struct").unwrap();
        let idle = EndpointsBuilder::new(2);
        sglang.add_endpoints(&idle.view()).unwrap();
        routed(&mut sglang, &request(1, &[1, 2]), &idle);
        // struct defaults: max − min = 40 > 32 and 40 > 1.1 · 0: go to the least loaded.
        let skewed = EndpointsBuilder::new(2).inflight_requests(0, 40);
        assert_eq!(
            routed(&mut sglang, &request(2, &[1, 2]), &skewed),
            EndpointId(1)
        );
        // 30 − 0 = 30 is not above 32: the cache wins again.
        let mild = EndpointsBuilder::new(2).inflight_requests(0, 30);
        assert_eq!(
            routed(&mut sglang, &request(3, &[1, 2]), &mild),
            EndpointId(0)
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::SglangCacheAware>(
            "sglang-cache-aware",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
