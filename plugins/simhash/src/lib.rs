//! `simhash`: place each request on a consistent-hash ring by a similarity hash of its
//! prompt's beginning, as the original prototype did.
//!
//! The 64-bit simhash is taken over the words of the first `max_prefix` bytes of the prompt
//! (each word hashed with the fixed xxh3; a bit is set when more words vote for it than
//! against), or, for hash-only traces, over the first `max_blocks` block hashes. Requests
//! whose beginnings share most words land on nearby positions. Each endpoint owns
//! `virtual_nodes` points on the ring, hashed from its name, so the mapping survives
//! endpoints joining and leaving. `match` walks clockwise to the first available endpoint;
//! `update` does nothing.
//!
//! Config keys: `max_prefix` (bytes, default 512), `max_blocks` (default 4),
//! `virtual_nodes` (per endpoint, default 100).

use routerlab_core::hash::hash64;
use routerlab_core::{Endpoints, Matcher, PluginConfig, Request};

/// The simhash consistent-hash matcher.
pub struct Simhash {
    max_prefix: usize,
    max_blocks: usize,
    virtual_nodes: u64,
    /// (position, stable endpoint index), sorted by position.
    ring: Vec<(u64, u32)>,
    /// Scratch: availability by stable index for the current call.
    available: Vec<bool>,
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
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        let mut config = PluginConfig::parse(config)?;
        let max_prefix = config.u64("max_prefix", 512)?;
        let max_blocks = config.u64("max_blocks", 4)?;
        let virtual_nodes = config.u64("virtual_nodes", 100)?;
        config.finish()?;
        if virtual_nodes == 0 || virtual_nodes > 10_000 {
            return Err(format!(
                "config key `virtual_nodes`: must be 1..=10000, found {virtual_nodes}"
            ));
        }
        Ok(Simhash {
            max_prefix: max_prefix as usize,
            max_blocks: max_blocks as usize,
            virtual_nodes,
            ring: Vec::new(),
            available: Vec::new(),
        })
    }

    fn add_endpoints(&mut self, endpoints: &Endpoints<'_>) -> Result<(), String> {
        for endpoint in endpoints.iter() {
            for vnode in 0..self.virtual_nodes {
                let key = format!("{}#{vnode}", endpoint.name());
                self.ring
                    .push((hash64(key.as_bytes(), 0), endpoint.index()));
            }
        }
        self.ring.sort_unstable();
        Ok(())
    }

    fn remove_endpoints(&mut self, indices: &[u32]) -> Result<(), String> {
        self.ring.retain(|(_, index)| !indices.contains(index));
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        self.available.clear();
        for endpoint in endpoints.available() {
            let index = endpoint.index() as usize;
            if self.available.len() <= index {
                self.available.resize(index + 1, false);
            }
            self.available[index] = true;
        }
        let position = self.position(request);
        let start = self.ring.partition_point(|(p, _)| *p < position);
        let (after, before) = (&self.ring[start..], &self.ring[..start]);
        let found = after.iter().chain(before).find(|(_, index)| {
            self.available
                .get(*index as usize)
                .copied()
                .unwrap_or(false)
        });
        Ok(found.map(|(_, index)| *index))
    }

    fn update(&mut self, _request: &Request<'_>, _endpoint: u32) -> Result<(), String> {
        Ok(())
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
    use super::simhash;

    #[test]
    fn majority_vote_per_bit() {
        assert_eq!(simhash([0b101, 0b100, 0b001].into_iter()), 0b101);
        assert_eq!(simhash(std::iter::empty()), 0);
    }
}
