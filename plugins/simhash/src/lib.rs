//! `simhash`: place each request on a consistent-hash ring by a similarity hash of its
//! prompt's beginning, as the original prototype did.
//!
//! The 64-bit simhash is taken over the words of the first `max_prefix` bytes of the prompt
//! (each word hashed with the fixed xxh3; a bit is set when more words vote for it than
//! against), or, for hash-only traces, over the first `max_blocks` block hashes. Requests
//! whose beginnings share most words land on nearby positions. Each endpoint owns
//! `virtual_nodes` points on the ring, hashed from its name, so the mapping survives
//! endpoints joining and leaving (the policy kit's [`HashRing`]). `match` walks clockwise
//! to the first available endpoint; there is nothing to learn from where requests went.
//!
//! Config keys: `max_prefix` (bytes, default 512), `max_blocks` (default 4),
//! `virtual_nodes` (per endpoint, default 100).

use routerlab_core::hash::hash64;
use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::{EndpointSet, HashRing};

/// The simhash consistent-hash matcher.
pub struct Simhash {
    max_prefix: usize,
    max_blocks: usize,
    ring: HashRing,
    /// Scratch: the available endpoints of the current call.
    available: EndpointSet,
}

/// The 64-bit simhash of a sequence of feature hashes.
fn simhash(features: impl Iterator<Item = u64>) -> u64 {
    let mut votes = [0i32; 64];
    for feature in features {
        for (bit, vote) in votes.iter_mut().enumerate() {
            *vote += if feature >> bit & 1 == 1 { 1 } else { -1 };
        }
    }
    votes
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .fold(0, |acc, (bit, _)| acc | 1 << bit)
}

impl Simhash {
    fn position(&self, request: &Request<'_>) -> u64 {
        let prompt = request.prompt();
        if prompt.is_empty() {
            let blocks = request.block_hashes();
            let head = &blocks[..blocks.len().min(self.max_blocks)];
            simhash(head.iter().map(|h| hash64(&h.to_le_bytes(), 0)))
        } else {
            let head = &prompt[..prompt.len().min(self.max_prefix)];
            simhash(
                head.split(u8::is_ascii_whitespace)
                    .filter(|w| !w.is_empty())
                    .map(|w| hash64(w, 0)),
            )
        }
    }
}

impl Matcher for Simhash {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let max_prefix = config.u64("max_prefix", 512)?;
        let max_blocks = config.u64("max_blocks", 4)?;
        let virtual_nodes = config.u64("virtual_nodes", 100)?;
        if virtual_nodes == 0 || virtual_nodes > 10_000 {
            return Err(format!(
                "config key `virtual_nodes`: must be 1..=10000, found {virtual_nodes}"
            ));
        }
        Ok(Simhash {
            max_prefix: usize::try_from(max_prefix).unwrap_or(usize::MAX),
            max_blocks: usize::try_from(max_blocks).unwrap_or(usize::MAX),
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
        let position = self.position(request);
        Ok(self
            .ring
            .first_from(position, |id| self.available.contains(id)))
    }
}

routerlab_core::export_plugins! {
    matcher Simhash {
        name: "simhash",
        description: "simhash of the prompt's beginning on a consistent-hash ring (prototype)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn pick(matcher: &mut Simhash, prompt: &str, fleet: &EndpointsBuilder) -> Option<u32> {
        let request = RequestBuilder::new(1).prompt(prompt);
        matcher
            .match_request(&request.view(), &fleet.view())
            .unwrap()
            .map(EndpointId::get)
    }

    #[test]
    fn similar_beginnings_share_an_endpoint_and_unavailable_ones_are_skipped() {
        let mut simhash: Simhash = create_matcher("{virtual_nodes: 50, max_prefix: 64}").unwrap();
        let fleet = EndpointsBuilder::new(6);
        simhash.add_endpoints(&fleet.view()).unwrap();
        let system = "You are a helpful assistant. Answer briefly and cite your sources.";
        let a = pick(&mut simhash, &format!("{system} What is rust?"), &fleet).unwrap();
        let b = pick(&mut simhash, &format!("{system} Who wrote it?"), &fleet).unwrap();
        assert_eq!(a, b, "only the first 64 bytes place a request");
        let mut without = EndpointsBuilder::new(6).unavailable(a as usize);
        let moved = pick(&mut simhash, &format!("{system} What is rust?"), &without).unwrap();
        assert_ne!(moved, a);
        for pos in 0..6 {
            without = without.unavailable(pos);
        }
        assert_eq!(pick(&mut simhash, system, &without), None);
    }

    #[test]
    fn virtual_nodes_are_bounded() {
        let refused = create_matcher::<Simhash>("virtual_nodes: 0").err().unwrap();
        assert_eq!(
            refused,
            "config key `virtual_nodes`: must be 1..=10000, found 0"
        );
    }

    #[test]
    fn majority_vote_per_bit() {
        assert_eq!(simhash([0b101, 0b100, 0b001].into_iter()), 0b101);
        assert_eq!(simhash(std::iter::empty()), 0);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked =
            routerlab_core::testing::check_matcher_defaults::<super::Simhash>("simhash", upstream);
        assert_eq!(checked, Ok(()));
    }
}
