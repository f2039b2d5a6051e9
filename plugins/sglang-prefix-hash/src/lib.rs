//! `sglang-prefix-hash`: the SGLang router's `prefix_hash` policy (peers.md §2, "Other
//! policies"; §7, policy 15): a ring with `virtual_nodes` points per worker, keyed by the
//! prompt's first `prefix_token_count` tokens.
//!
//! ```text
//! load_ok(l) = total == 0 or l ≤ load_factor · (total + 1) / n_available
//! w0 = the first available worker clockwise from the key
//! if load_ok(load(w0)): w0
//! else the least loaded available worker with load_ok (first in list order), or w0
//! ```
//!
//! SGLang hashes token ids with xxh3 (and places workers with blake3); here the key is the
//! host's block chain at the block covering the first `prefix_token_count` tokens (text: 4
//! bytes a token), and loads are the router's in-flight requests.
//!
//! Config keys: `prefix_token_count` (256), `virtual_nodes` (150), `load_factor` (1.25);
//! `seed` unused.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::{EndpointSet, HashRing, inflight, prefix_key, within_bound};

/// The SGLang prefix-hash matcher.
pub struct SglangPrefixHash {
    tokens: u64,
    factor: f64,
    ring: HashRing,
    available: EndpointSet,
}

impl Matcher for SglangPrefixHash {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let tokens = config.u64("prefix_token_count", 256)?;
        let virtual_nodes = config.u64("virtual_nodes", 150)?;
        let factor = config.f64("load_factor", 1.25)?;
        if tokens == 0 || virtual_nodes == 0 || virtual_nodes > 10_000 || factor < 1.0 {
            return Err(
                "config: prefix_token_count >= 1, virtual_nodes within 1..=10000, \
                        load_factor >= 1"
                    .into(),
            );
        }
        Ok(SglangPrefixHash {
            tokens,
            factor,
            ring: HashRing::new(virtual_nodes),
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
        self.available.fill_available(endpoints);
        let units = request.unit().of_tokens(self.tokens);
        let key = prefix_key(request, units);
        let Some(owner) = self.ring.first_from(key, |id| self.available.contains(id)) else {
            return Ok(None);
        };
        let n = self.available.len() as usize;
        let total: u64 = endpoints.available().map(|e| inflight(&e)).sum();
        let load_ok = |load| within_bound(load, total, n, self.factor);
        let owner_load = endpoints
            .available()
            .find(|e| e.id() == owner)
            .map_or(u64::MAX, |e| inflight(&e));
        if load_ok(owner_load) {
            return Ok(Some(owner));
        }
        let relief = endpoints
            .available()
            .filter(|e| load_ok(inflight(e)))
            .min_by_key(|e| inflight(e))
            .map(|e| e.id());
        Ok(Some(relief.unwrap_or(owner)))
    }
}

routerlab_core::export_plugins! {
    matcher SglangPrefixHash {
        name: "sglang-prefix-hash",
        description: "SGLang prefix_hash: ring on the first 256 tokens, bounded load (1.25)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_owner_unless_overloaded_then_the_least_loaded_within_the_bound() {
        let mut ph: SglangPrefixHash = create_matcher("").unwrap();
        let idle = EndpointsBuilder::new(3);
        ph.add_endpoints(&idle.view()).unwrap();
        let r = RequestBuilder::new(1).block_size(512).blocks(&[5, 6]);
        let owner = ph.match_request(&r.view(), &idle.view()).unwrap().unwrap();
        let pos = owner.get() as usize;
        // 6 in flight at the owner, 0 and 1 elsewhere: bound 1.25 · 8 / 3 = 3.3.
        let other = (pos + 1) % 3;
        let third = (pos + 2) % 3;
        let hot = EndpointsBuilder::new(3)
            .inflight_requests(pos, 6)
            .inflight_requests(other, 1);
        assert_eq!(
            ph.match_request(&r.view(), &hot.view()).unwrap(),
            Some(EndpointId(third as u32))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::SglangPrefixHash>(
            "sglang-prefix-hash",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
