//! `kubeai-chwbl`: KubeAI's `PrefixHash` load balancing, consistent hashing with bounded
//! loads (peers.md §5, KubeAI; §7, policy 14).
//!
//! ```text
//! key = the prompt's first prefix_char_length characters
//! walk the ring clockwise from hash(key), 256 points per endpoint:
//!     the first available owner is the default
//!     take the first available owner whose in-flight ≤ mean_load_factor · (total + 1) / n
//! none within the bound: the default
//! ```
//!
//! KubeAI keys on the first user message of a chat (skipping the system prompt); here the
//! key is the host's block chain at the block covering the first `prefix_char_length`
//! characters of the prompt (a token counted as 4 characters), so it includes a system
//! prompt when there is one. `n` counts every endpoint, available or not.
//!
//! Config keys: `prefix_char_length` (100), `mean_load_factor` (1.25, i.e. 125%),
//! `replication` (256 ring points per endpoint); `seed` unused.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, Unit};
use routerlab_policy_kit::{EndpointSet, HashRing, inflight, prefix_key, within_bound};

/// The KubeAI CHWBL matcher.
pub struct KubeaiChwbl {
    chars: u64,
    factor: f64,
    ring: HashRing,
    available: EndpointSet,
}

impl Matcher for KubeaiChwbl {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let chars = config.u64("prefix_char_length", 100)?;
        let factor = config.f64("mean_load_factor", 1.25)?;
        let replication = config.u64("replication", 256)?;
        if factor < 1.0 || replication == 0 || replication > 10_000 || chars == 0 {
            return Err(
                "config: mean_load_factor >= 1, replication within 1..=10000, \
                        prefix_char_length >= 1"
                    .into(),
            );
        }
        Ok(KubeaiChwbl {
            chars,
            factor,
            ring: HashRing::new(replication),
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
        let units = match request.unit() {
            Unit::Bytes => self.chars,
            Unit::Tokens => Unit::Bytes.tokens(self.chars),
        };
        let key = prefix_key(request, units);
        let total: u64 = endpoints.iter().map(|e| inflight(&e)).sum();
        let n = endpoints.len();
        let mut default = None;
        let within = self.ring.first_from(key, |id| {
            if !self.available.contains(id) {
                return false;
            }
            default.get_or_insert(id);
            let load = endpoints
                .iter()
                .find(|e| e.id() == id)
                .map_or(u64::MAX, |e| inflight(&e));
            within_bound(load, total, n, self.factor)
        });
        Ok(within.or(default))
    }
}

routerlab_core::export_plugins! {
    matcher KubeaiChwbl {
        name: "kubeai-chwbl",
        description: "KubeAI PrefixHash: consistent hashing on the prompt head with bounded loads (125%)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn a_key_keeps_its_endpoint_until_that_one_exceeds_the_bound() {
        let mut chwbl: KubeaiChwbl = create_matcher("").unwrap();
        let idle = EndpointsBuilder::new(4);
        chwbl.add_endpoints(&idle.view()).unwrap();
        let r = RequestBuilder::new(1)
            .prompt("same system prompt and question")
            .blocks(&[77]);
        let home = chwbl
            .match_request(&r.view(), &idle.view())
            .unwrap()
            .unwrap();
        // 4 in flight, 3 of them at home: bound 1.25 · 5 / 4 = 1.56 < 3, so the walk moves on.
        let pos = home.get() as usize;
        let loaded = EndpointsBuilder::new(4)
            .inflight_requests(pos, 3)
            .inflight_requests((pos + 1) % 4, 1);
        let moved = chwbl
            .match_request(&r.view(), &loaded.view())
            .unwrap()
            .unwrap();
        assert_ne!(moved, home);
        // 3 in flight over 4 endpoints: bound 1.25 · 4 / 4 = 1.25, and home (1) keeps the key.
        let shared = EndpointsBuilder::new(4)
            .inflight_requests(pos, 1)
            .inflight_requests((pos + 1) % 4, 1)
            .inflight_requests((pos + 2) % 4, 1);
        assert_eq!(
            chwbl.match_request(&r.view(), &shared.view()).unwrap(),
            Some(home)
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::KubeaiChwbl>(
            "kubeai-chwbl",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
