//! The prefix trie every prefix-aware policy needs: which endpoints were sent each prefix.
//!
//! It is keyed by the host's block chain. Because block `i` of the chain already identifies
//! the whole prefix up to block `i`, a node is found by its block alone: one lookup per
//! depth, no child pointers. Nodes are found by dense block id (ABI 1.1, or [`crate::DenseIds`]
//! on older hosts), so an unbounded trie is a plain array of holder masks and the blocks of
//! one conversation sit next to each other in memory.
//!
//! Bounded by node count, or aged by idle time, the nodes live in a recency map instead.
//! An insert touches the deepest node first and the root last, so a prefix is always more
//! recent than its extensions and pruning removes leaves before the nodes they hang from.
//! Idle-time expiry (SGLang's and AIBrix's trees age entries) drops nodes not touched for
//! `ttl` nanoseconds of the caller's clock; it needs no timer, only the time of each call.

use routerlab_core::hash::U64Map;
use routerlab_core::{EndpointId, Request};

use crate::block_masks::BlockMasks;
use crate::endpoint_set::{EndpointSet, EndpointSetRef};
use crate::lru::LruMap;

/// A node of a recency-ordered trie.
#[derive(Default, Debug)]
struct Node {
    holders: EndpointSet,
    touched_ns: u64,
}

#[derive(Debug)]
enum Nodes {
    Unbounded {
        /// Holders below id 64, by block id; 0 = no node.
        low: BlockMasks,
        /// Holders from id 64 up, by block id, for the nodes that have any.
        high: U64Map<Vec<u32>>,
    },
    Recency {
        nodes: LruMap<Node>,
        max_nodes: usize,
        ttl_ns: Option<u64>,
    },
}

/// Which endpoints were sent each prefix, by dense block id.
#[derive(Debug)]
pub struct PrefixTrie {
    nodes: Nodes,
}

impl PrefixTrie {
    /// A trie that never forgets (the prototype's `lcp`).
    pub fn unbounded() -> PrefixTrie {
        PrefixTrie {
            nodes: Nodes::Unbounded {
                low: BlockMasks::default(),
                high: U64Map::default(),
            },
        }
    }

    /// A trie of at most `max_nodes` nodes, pruning the least recently used.
    pub fn bounded(max_nodes: usize) -> PrefixTrie {
        PrefixTrie {
            nodes: Nodes::Recency {
                nodes: LruMap::default(),
                max_nodes,
                ttl_ns: None,
            },
        }
    }

    /// The same trie, also dropping nodes idle for more than `ttl_ns` (see
    /// [`PrefixTrie::expire`]). An unbounded trie becomes a recency map without a size bound.
    pub fn with_idle_ttl(self, ttl_ns: u64) -> PrefixTrie {
        let max_nodes = match self.nodes {
            Nodes::Unbounded { .. } => usize::MAX,
            Nodes::Recency { max_nodes, .. } => max_nodes,
        };
        PrefixTrie {
            nodes: Nodes::Recency {
                nodes: LruMap::default(),
                max_nodes,
                ttl_ns: Some(ttl_ns),
            },
        }
    }

    /// The endpoints that were sent the prefix ending in block `id`, if any.
    #[inline]
    pub fn holders(&self, id: u32) -> Option<EndpointSetRef<'_>> {
        match &self.nodes {
            Nodes::Unbounded { low, high } => {
                let node = EndpointSetRef {
                    low: low.get(id),
                    high: if high.is_empty() {
                        &[]
                    } else {
                        high.get(&u64::from(id)).map_or(&[], Vec::as_slice)
                    },
                };
                (!node.is_empty()).then_some(node)
            }
            Nodes::Recency { nodes, .. } => nodes.get(u64::from(id)).map(|n| n.holders.as_ref()),
        }
    }

    /// The deepest block of `ids` whose prefix an endpoint of `available` holds, walking
    /// from the root and stopping at the first prefix nobody holds.
    #[inline]
    pub fn deepest_match(&self, ids: &[u32], available: &EndpointSet) -> Option<u32> {
        let mut deepest = None;
        match &self.nodes {
            // Every endpoint id below 64: the walk is a loop over one array of masks.
            Nodes::Unbounded { low, high } if high.is_empty() && available.is_small() => {
                let mask = available.low_mask();
                low.walk(ids, |id, holders| {
                    if holders & mask != 0 {
                        deepest = Some(id);
                    }
                    holders != 0
                });
            }
            _ => {
                for id in ids {
                    let Some(node) = self.holders(*id) else {
                        break;
                    };
                    if available.intersects(node) {
                        deepest = Some(*id);
                    }
                }
            }
        }
        deepest
    }

    /// How many leading blocks of `ids` `endpoint` holds: its own consecutive match from
    /// the first block.
    #[inline]
    pub fn held_prefix(&self, ids: &[u32], endpoint: EndpointId) -> usize {
        ids.iter()
            .take_while(|id| self.holders(**id).is_some_and(|h| h.contains(endpoint)))
            .count()
    }

    /// How much of `request`'s prompt (its blocks `ids`) `endpoint` holds, in the request's
    /// unit: the leading blocks it holds times the block size, at most the prompt's length.
    #[inline]
    pub fn held_len(&self, ids: &[u32], request: &Request<'_>, endpoint: EndpointId) -> u64 {
        let blocks = self.held_prefix(ids, endpoint) as u64;
        (blocks * u64::from(request.block_size())).min(request.prompt_len())
    }

    /// Records that `endpoint` was sent the prefixes `ids`, at time `now_ns` (used only by
    /// a trie with an idle-time bound).
    pub fn insert(&mut self, ids: &[u32], endpoint: EndpointId, now_ns: u64) {
        match &mut self.nodes {
            Nodes::Unbounded { low, high } => {
                let index = endpoint.get();
                if index < 64 {
                    low.insert_all(ids, index);
                    return;
                }
                for id in ids {
                    let list = high.entry(u64::from(*id)).or_default();
                    if !list.contains(&index) {
                        list.push(index);
                    }
                }
            }
            Nodes::Recency {
                nodes, max_nodes, ..
            } => {
                for id in ids.iter().rev() {
                    let node = nodes.touch_or_insert_with(u64::from(*id), Node::default);
                    node.holders.insert(endpoint);
                    node.touched_ns = now_ns;
                }
                while nodes.len() > *max_nodes {
                    nodes.pop_oldest();
                }
            }
        }
    }

    /// Drops the nodes not touched since `now_ns - ttl` (nothing without an idle-time
    /// bound). Call it with the time of each decision; times must not go backwards.
    pub fn expire(&mut self, now_ns: u64) {
        let Nodes::Recency {
            nodes,
            ttl_ns: Some(ttl),
            ..
        } = &mut self.nodes
        else {
            return;
        };
        while let Some((_, node)) = nodes.oldest() {
            if now_ns.saturating_sub(node.touched_ns) <= *ttl {
                break;
            }
            nodes.pop_oldest();
        }
    }

    /// Forgets that `endpoint` holds the prefix ending in block `id` (other holders stay).
    pub fn remove_holder(&mut self, id: u32, endpoint: EndpointId) {
        match &mut self.nodes {
            Nodes::Unbounded { low, high } => {
                let index = endpoint.get();
                if index < 64 {
                    low.remove(id, 1 << index);
                } else if let Some(list) = high.get_mut(&u64::from(id)) {
                    list.retain(|i| *i != index);
                    if list.is_empty() {
                        high.remove(&u64::from(id));
                    }
                }
            }
            Nodes::Recency { nodes, .. } => {
                let key = u64::from(id);
                let empty = nodes
                    .get(key)
                    .is_some_and(|n| n.holders.len() == 1 && n.holders.contains(endpoint));
                if empty {
                    nodes.remove(key);
                } else if let Some(node) = nodes.touch(key) {
                    node.holders.remove(endpoint);
                }
            }
        }
    }

    /// Forgets `ids` as holders everywhere.
    pub fn remove_endpoints(&mut self, ids: &[EndpointId]) {
        let removed = EndpointSet::of(ids);
        match &mut self.nodes {
            Nodes::Unbounded { low, high } => {
                low.remove_everywhere(removed.low_mask());
                high.retain(|_, list| {
                    list.retain(|i| !removed.contains(EndpointId(*i)));
                    !list.is_empty()
                });
            }
            Nodes::Recency { nodes, .. } => nodes.retain(|node| {
                for id in ids {
                    node.holders.remove(*id);
                }
                !node.holders.is_empty()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> EndpointSet {
        EndpointSet::of(&ids.iter().map(|i| EndpointId(*i)).collect::<Vec<_>>())
    }

    #[test]
    fn the_held_length_is_whole_blocks_at_most_the_prompt() {
        let mut trie = PrefixTrie::unbounded();
        trie.insert(&[0, 1, 2], EndpointId(3), 0);
        let request = routerlab_core::testing::RequestBuilder::new(1)
            .block_size(16)
            .prompt_len(40);
        // Three blocks of 16 held, a 40-unit prompt: 40; one held of two asked: 16.
        assert_eq!(
            trie.held_len(&[0, 1, 2], &request.view(), EndpointId(3)),
            40
        );
        assert_eq!(trie.held_len(&[0, 9], &request.view(), EndpointId(3)), 16);
        assert_eq!(trie.held_len(&[0, 1], &request.view(), EndpointId(4)), 0);
    }

    #[test]
    fn the_deepest_available_holder_wins_and_the_walk_stops_at_a_gap() {
        for mut trie in [PrefixTrie::unbounded(), PrefixTrie::bounded(100)] {
            trie.insert(&[0, 1, 2], EndpointId(1), 0);
            trie.insert(&[0, 1], EndpointId(70), 0);
            trie.insert(&[5], EndpointId(2), 0);
            assert_eq!(trie.deepest_match(&[0, 1, 2, 3], &set(&[1, 70])), Some(2));
            assert_eq!(trie.deepest_match(&[0, 1, 2, 3], &set(&[70])), Some(1));
            // Block 5 is held, but the walk stopped at block 3, which nobody holds.
            assert_eq!(trie.deepest_match(&[0, 3, 5], &set(&[2])), None);
            trie.remove_endpoints(&[EndpointId(1)]);
            assert_eq!(trie.deepest_match(&[0, 1, 2], &set(&[1, 70])), Some(1));
            assert!(trie.holders(2).is_none());
        }
    }

    #[test]
    fn a_bounded_trie_prunes_leaves_before_their_prefixes() {
        let mut trie = PrefixTrie::bounded(3);
        trie.insert(&[0, 1, 2], EndpointId(0), 0);
        trie.insert(&[0, 1, 3], EndpointId(1), 0);
        // Four distinct nodes for three places: the oldest leaf (2) went, the root stayed.
        assert!(trie.holders(2).is_none());
        assert!(trie.holders(0).is_some() && trie.holders(3).is_some());
    }

    #[test]
    fn idle_nodes_expire_after_the_ttl_and_touched_ones_stay() {
        let second = 1_000_000_000;
        let mut trie = PrefixTrie::unbounded().with_idle_ttl(120 * second);
        trie.insert(&[0, 1], EndpointId(0), 0);
        trie.insert(&[0, 2], EndpointId(1), 100 * second);
        trie.expire(120 * second);
        assert!(trie.holders(1).is_some(), "idle exactly the ttl: kept");
        trie.expire(121 * second);
        assert!(trie.holders(1).is_none(), "idle 121 s > 120 s");
        assert!(
            trie.holders(0).is_some(),
            "touched at 100 s by the second insert"
        );
        assert!(trie.holders(2).is_some());
        trie.expire(221 * second);
        assert!(trie.holders(0).is_none() && trie.holders(2).is_none());
    }
}
