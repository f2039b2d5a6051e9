//! `lcp`: send a request to an available endpoint that already holds the longest prefix of
//! it, as the original prototype did.
//!
//! The trie is keyed by the host's block chain. Because block `i` of the chain already
//! identifies the whole prefix up to block `i`, a node is found by its block alone: one
//! lookup per depth, no child pointers. The lookup is by the host's dense block id (ABI
//! 1.1), so an unbounded trie is a plain array of holder masks, and the blocks of one
//! conversation sit next to each other in memory; on a host that sends only hashes the
//! plugin interns them itself. Each node records which endpoints were sent that prefix.
//! Ties (several available endpoints at the deepest matching node), and requests that match
//! nothing, are settled by the seeded generator, so a replay is reproducible.
//!
//! With `max_nodes` set, the least recently used nodes are pruned. An update touches the
//! deepest node first and the root last, so a prefix is always more recent than its
//! extensions and pruning removes leaves before the nodes they hang from. Unbounded (the
//! default) needs no recency at all.
//!
//! Endpoint sets are bitmasks for stable indices below 64 (a list above), so intersecting
//! a node's holders with the available endpoints is one `and` per depth.
//!
//! Config keys: `seed` (default 0), `max_nodes` (default 0 = unbounded, as the prototype).

use std::borrow::Cow;

use routerlab_core::hash::{BlockInterner, U64Map};
use routerlab_core::lru::LruMap;
use routerlab_core::{Endpoints, Matcher, PluginConfig, Request, SeededRng};

/// The endpoints that were sent one prefix: a bitmask for indices below 64, a list above.
#[derive(Default, Clone, Debug)]
struct Holders {
    low: u64,
    high: Vec<u32>,
}

impl Holders {
    #[inline]
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
    fn view(&self) -> Node<'_> {
        Node {
            low: self.low,
            high: &self.high,
        }
    }
    fn intersects(&self, node: Node<'_>) -> bool {
        self.low & node.low != 0 || node.high.iter().any(|i| self.high.contains(i))
    }
    fn assign_intersection(&mut self, node: Node<'_>, mask: &Holders) {
        self.low = node.low & mask.low;
        self.high.clear();
        self.high
            .extend(node.high.iter().filter(|i| mask.high.contains(i)));
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

/// One node's holders, borrowed.
#[derive(Clone, Copy)]
struct Node<'a> {
    low: u64,
    high: &'a [u32],
}

/// The trie's nodes by block id: an array of holder masks when unbounded, a recency-ordered
/// map when bounded.
enum Nodes {
    Unbounded {
        /// Holders below index 64, by block id; 0 = no node.
        low: Vec<u64>,
        /// Holders from index 64 up, by block id, for the nodes that have any.
        high: U64Map<Vec<u32>>,
    },
    Bounded {
        nodes: LruMap<Holders>,
        max_nodes: usize,
    },
}

/// The longest-common-prefix matcher.
pub struct Lcp {
    nodes: Nodes,
    rng: SeededRng,
    /// Block ids for hosts that send only hashes (before ABI 1.1).
    interner: BlockInterner,
    /// Scratch: the current request's block ids, when interned here.
    ids: Vec<u32>,
    /// Scratch: the available endpoints of the current call.
    available: Holders,
    /// Scratch: available endpoints of the deepest match, as a set.
    best: Holders,
}

impl Lcp {
    fn node(&self, id: u32) -> Option<Node<'_>> {
        match &self.nodes {
            Nodes::Unbounded { low, high } => {
                let node = Node {
                    low: low.get(id as usize).copied().unwrap_or(0),
                    high: if high.is_empty() {
                        &[]
                    } else {
                        high.get(&u64::from(id)).map_or(&[], Vec::as_slice)
                    },
                };
                (node.low != 0 || !node.high.is_empty()).then_some(node)
            }
            Nodes::Bounded { nodes, .. } => nodes.get(u64::from(id)).map(Holders::view),
        }
    }

    /// The request's block ids: the host's, or interned here. Moves them out of `self.ids`
    /// when interned here; callers put the buffer back.
    fn block_ids<'r>(&mut self, request: &Request<'r>) -> Result<Cow<'r, [u32]>, String> {
        if let Some(ids) = request.block_ids() {
            return Ok(Cow::Borrowed(ids));
        }
        let mut ids = std::mem::take(&mut self.ids);
        if !self.interner.intern_all(request.block_hashes(), &mut ids) {
            return Err("more distinct blocks than 32-bit block ids can name".into());
        }
        Ok(Cow::Owned(ids))
    }

    fn recycle(&mut self, ids: Cow<'_, [u32]>) {
        if let Cow::Owned(ids) = ids {
            self.ids = ids;
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
            0 => Nodes::Unbounded {
                low: Vec::new(),
                high: U64Map::default(),
            },
            n => Nodes::Bounded {
                nodes: LruMap::default(),
                max_nodes: usize::try_from(n).unwrap_or(usize::MAX),
            },
        };
        Ok(Lcp {
            nodes,
            rng: SeededRng::new(seed),
            interner: BlockInterner::default(),
            ids: Vec::new(),
            available: Holders::default(),
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
            Nodes::Unbounded { low, high } => {
                let removed = Holders::of(indices);
                for mask in low.iter_mut() {
                    *mask &= !removed.low;
                }
                high.retain(|_, list| {
                    list.retain(|i| !removed.high.contains(i));
                    !list.is_empty()
                });
            }
            Nodes::Bounded { nodes, .. } => nodes.retain(purge),
        }
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        let mut mask = std::mem::take(&mut self.available);
        mask.clear();
        for endpoint in endpoints.available() {
            mask.insert(endpoint.index());
        }
        if mask.is_empty() {
            self.available = mask;
            return Ok(None);
        }
        let ids = self.block_ids(request)?;
        // The deepest node that has an available holder wins.
        let mut deepest = None;
        match &self.nodes {
            // Every endpoint index below 64: the walk is a loop over one array of masks.
            Nodes::Unbounded { low, high } if high.is_empty() && mask.high.is_empty() => {
                for id in ids.iter() {
                    let holders = low.get(*id as usize).copied().unwrap_or(0);
                    if holders == 0 {
                        break;
                    }
                    if holders & mask.low != 0 {
                        deepest = Some(*id);
                    }
                }
            }
            _ => {
                for id in ids.iter() {
                    let Some(node) = self.node(*id) else {
                        break;
                    };
                    if mask.intersects(node) {
                        deepest = Some(*id);
                    }
                }
            }
        }
        let mut best = std::mem::take(&mut self.best);
        best.clear();
        if let Some(node) = deepest.and_then(|id| self.node(id)) {
            best.assign_intersection(node, &mask);
        }
        let candidates = if best.is_empty() { &mask } else { &best };
        let pick = candidates.nth(self.rng.below(candidates.len()) as usize);
        self.recycle(ids);
        self.available = mask;
        self.best = best;
        Ok(Some(pick))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: u32) -> Result<(), String> {
        let ids = self.block_ids(request)?;
        match &mut self.nodes {
            Nodes::Unbounded { low, high } => {
                for id in ids.iter() {
                    let id = *id as usize;
                    if endpoint < 64 {
                        if id >= low.len() {
                            low.resize(id + 1, 0);
                        }
                        low[id] |= 1 << endpoint;
                    } else {
                        let list = high.entry(id as u64).or_default();
                        if !list.contains(&endpoint) {
                            list.push(endpoint);
                        }
                    }
                }
            }
            Nodes::Bounded { nodes, max_nodes } => {
                for id in ids.iter().rev() {
                    nodes
                        .touch_or_insert_with(u64::from(*id), Holders::default)
                        .insert(endpoint);
                }
                while nodes.len() > *max_nodes {
                    nodes.pop_oldest();
                }
            }
        }
        self.recycle(ids);
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher Lcp {
        name: "lcp",
        description: "longest common prefix: an available endpoint holding the longest prefix (prototype)",
    },
}
