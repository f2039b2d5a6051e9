//! An approximate prefix index with a recency bound per endpoint, as the Gateway API
//! Inference Extension keeps one (peers.md §4, "Approximate prefix cache"): which endpoints
//! were sent each block, each endpoint remembering at most `capacity` blocks, its least
//! recently sent block forgotten first (for it alone; other endpoints keep theirs).
//!
//! Matching counts, for each endpoint, the blocks of the chain it holds while walking from
//! the first block and stopping at the first block nobody holds: as in GIE, the count is
//! not strictly consecutive per endpoint.

use routerlab_core::EndpointId;

use crate::lru::LruMap;
use crate::trie::PrefixTrie;

/// Block holders with a per-endpoint LRU bound.
#[derive(Debug)]
pub struct PodPrefixIndex {
    holders: PrefixTrie,
    recency: Vec<LruMap<()>>,
    capacity: usize,
    max_blocks: usize,
}

impl PodPrefixIndex {
    /// An index remembering at most `capacity` blocks per endpoint, of each request only
    /// its first `max_blocks` blocks (GIE's `maxPrefixBlocksToMatch`).
    pub fn new(capacity: usize, max_blocks: usize) -> PodPrefixIndex {
        PodPrefixIndex {
            holders: PrefixTrie::unbounded(),
            recency: Vec::new(),
            capacity: capacity.max(1),
            max_blocks: max_blocks.max(1),
        }
    }

    /// The blocks of a chain this index looks at: its first `max_blocks`.
    pub fn head<'i>(&self, ids: &'i [u32]) -> &'i [u32] {
        &ids[..ids.len().min(self.max_blocks)]
    }

    /// `endpoint` was sent the blocks `ids` (their head).
    pub fn insert(&mut self, ids: &[u32], endpoint: EndpointId) {
        let ids = self.head(ids);
        let pod = endpoint.get() as usize;
        if self.recency.len() <= pod {
            self.recency.resize_with(pod + 1, LruMap::default);
        }
        self.holders.insert(ids, endpoint, 0);
        let recency = &mut self.recency[pod];
        for id in ids {
            recency.touch_or_insert_with(u64::from(*id), || ());
        }
        while recency.len() > self.capacity {
            if let Some((old, ())) = recency.pop_oldest() {
                self.holders.remove_holder(old as u32, endpoint);
            }
        }
    }

    /// Adds to `counts[endpoint id]` the blocks of `ids`' head each endpoint holds, walking
    /// until a block nobody holds (`counts` grows as needed).
    pub fn count_matches(&self, ids: &[u32], counts: &mut Vec<u64>) {
        for id in self.head(ids) {
            let Some(holders) = self.holders.holders(*id) else {
                break;
            };
            for pod in 0..self.recency.len() {
                if holders.contains(EndpointId(pod as u32)) {
                    if counts.len() <= pod {
                        counts.resize(pod + 1, 0);
                    }
                    counts[pod] += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_stop_at_the_first_unheld_block_and_each_pod_forgets_its_oldest() {
        let mut index = PodPrefixIndex::new(3, 256);
        index.insert(&[1, 2, 3], EndpointId(0));
        index.insert(&[1, 5], EndpointId(1));
        let mut counts = Vec::new();
        index.count_matches(&[1, 2, 5, 9, 3], &mut counts);
        // 1: both; 2: pod 0; 5: pod 1; 9: nobody, stop (3 is never reached).
        assert_eq!(counts, [2, 2]);
        // Pod 0 sends a fourth block: it forgets its oldest, block 1, which pod 1 still
        // holds; block 2 stays with pod 0.
        index.insert(&[7], EndpointId(0));
        let mut counts = Vec::new();
        index.count_matches(&[1, 2], &mut counts);
        assert_eq!(counts, [1, 1]);
        let mut counts = Vec::new();
        index.count_matches(&[1], &mut counts);
        assert_eq!(counts, [0, 1], "block 1: pod 1 alone");
    }
}
