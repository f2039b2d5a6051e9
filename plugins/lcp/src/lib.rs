//! `lcp`: send a request to an available endpoint that already holds the longest prefix of
//! it, as the original prototype did.
//!
//! The trie is keyed by the host's block-hash chain. Because hash `i` of the chain already
//! identifies the whole prefix up to block `i`, a node is found by its hash alone: one map
//! lookup per depth, no child pointers. Each node records which endpoints were sent that
//! prefix. Ties (several available endpoints at the deepest matching node), and requests
//! that match nothing, are settled by the seeded generator, so a replay is reproducible.
//!
//! With `max_nodes` set, the least recently used nodes are pruned. An update touches the
//! deepest node first and the root last, so a prefix is always more recent than its
//! extensions and pruning removes leaves before the nodes they hang from. Unbounded (the
//! default) needs no recency at all, so it keeps a plain map.
//!
//! Endpoint sets are bitmasks for stable indices below 64 (a list above), so intersecting
//! a node's holders with the available endpoints is one `and` per depth.
//!
//! Config keys: `seed` (default 0), `max_nodes` (default 0 = unbounded, as the prototype).

use routerlab_core::hash::U64Map;
use routerlab_core::lru::LruMap;
use routerlab_core::{Endpoints, Matcher, PluginConfig, Request, SeededRng};

/// The endpoints that were sent one prefix: a bitmask for indices below 64, a list above.
#[derive(Default, Clone, Debug)]
struct Holders {
    low: u64,
    high: Vec<u32>,
}

impl Holders {
    fn insert(&mut self, index: u32) {
        if index < 64 {
            self.low |= 1 << index;
        } else if !self.high.contains(&index) {
            self.high.push(index);
        }
    }
    fn remove(&mut self, index: u32) {
        if index < 64 {
            self.low &= !(1 << index);
        } else {
            self.high.retain(|i| *i != index);
        }
    }
    fn is_empty(&self) -> bool {
        self.low == 0 && self.high.is_empty()
    }
    fn clear(&mut self) {
        self.low = 0;
        self.high.clear();
    }
    fn of(indices: &[u32]) -> Holders {
        let mut set = Holders::default();
        for index in indices {
            set.insert(*index);
        }
        set
    }
    fn intersects(&self, other: &Holders) -> bool {
        self.low & other.low != 0 || self.high.iter().any(|i| other.high.contains(i))
    }
    fn assign_intersection(&mut self, a: &Holders, b: &Holders) {
        self.low = a.low & b.low;
        self.high.clear();
        self.high
            .extend(a.high.iter().filter(|i| b.high.contains(i)));
    }
    fn len(&self) -> u64 {
        u64::from(self.low.count_ones()) + self.high.len() as u64
    }
    /// The `n`-th member: low indices in increasing order, then the others as inserted.
    fn nth(&self, mut n: usize) -> u32 {
        let mut low = self.low;
        while low != 0 {
            let index = low.trailing_zeros();
            if n == 0 {
                return index;
            }
            n -= 1;
            low &= low - 1;
        }
        self.high[n]
    }
}

/// The trie's nodes: a plain map when unbounded, a recency-ordered one when bounded.
enum Nodes {
    Unbounded(U64Map<Holders>),
    Bounded {
        nodes: LruMap<Holders>,
        max_nodes: usize,
    },
}

/// The longest-common-prefix matcher.
pub struct Lcp {
    nodes: Nodes,
    rng: SeededRng,
    /// Scratch: stable indices of the available endpoints of the current call.
    available: Vec<u32>,
    /// Scratch: available endpoints of the deepest match, as a set.
    best: Holders,
}

impl Lcp {
    fn holders(&self, hash: u64) -> Option<&Holders> {
        match &self.nodes {
            Nodes::Unbounded(map) => map.get(&hash),
            Nodes::Bounded { nodes, .. } => nodes.get(hash),
        }
    }
}

impl Matcher for Lcp {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        let mut config = PluginConfig::parse(config)?;
        let seed = config.seed()?;
        let max_nodes = config.u64("max_nodes", 0)?;
        config.finish()?;
        let nodes = match max_nodes {
            0 => Nodes::Unbounded(U64Map::default()),
            n => Nodes::Bounded {
                nodes: LruMap::default(),
                max_nodes: usize::try_from(n).unwrap_or(usize::MAX),
            },
        };
        Ok(Lcp {
            nodes,
            rng: SeededRng::new(seed),
            available: Vec::new(),
            best: Holders::default(),
        })
    }

    fn remove_endpoints(&mut self, indices: &[u32]) -> Result<(), String> {
        let purge = |holders: &mut Holders| {
            for index in indices {
                holders.remove(*index);
            }
            !holders.is_empty()
        };
        match &mut self.nodes {
            Nodes::Unbounded(map) => map.retain(|_, holders| purge(holders)),
            Nodes::Bounded { nodes, .. } => nodes.retain(purge),
        }
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        let mut available = std::mem::take(&mut self.available);
        available.clear();
        available.extend(endpoints.available().map(|e| e.index()));
        if available.is_empty() {
            self.available = available;
            return Ok(None);
        }
        let mask = Holders::of(&available);
        // The deepest node that has an available holder wins.
        let mut best = std::mem::take(&mut self.best);
        best.clear();
        for hash in request.block_hashes() {
            let Some(holders) = self.holders(*hash) else {
                break;
            };
            if holders.intersects(&mask) {
                best.assign_intersection(holders, &mask);
            }
        }
        let pick = if best.is_empty() {
            available[self.rng.below(available.len() as u64) as usize]
        } else {
            best.nth(self.rng.below(best.len()) as usize)
        };
        self.available = available;
        self.best = best;
        Ok(Some(pick))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: u32) -> Result<(), String> {
        match &mut self.nodes {
            Nodes::Unbounded(map) => {
                for hash in request.block_hashes() {
                    map.entry(*hash).or_default().insert(endpoint);
                }
            }
            Nodes::Bounded { nodes, max_nodes } => {
                for hash in request.block_hashes().iter().rev() {
                    nodes
                        .touch_or_insert_with(*hash, Holders::default)
                        .insert(endpoint);
                }
                while nodes.len() > *max_nodes {
                    nodes.pop_oldest();
                }
            }
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher Lcp {
        name: "lcp",
        description: "longest common prefix: an available endpoint holding the longest prefix (prototype)",
    },
}
