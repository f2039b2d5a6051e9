//! `lcp`: send a request to an available endpoint that already holds the longest prefix of
//! it, as the original prototype did.
//!
//! The trie is keyed by the host's block-hash chain. Because hash `i` of the chain already
//! identifies the whole prefix up to block `i`, a node is found by its hash alone: one map
//! lookup per depth, no child pointers. Each node records which endpoints were sent that
//! prefix. Ties (several available endpoints at the deepest matching node), and requests
//! that match nothing, are settled by the seeded generator, so a replay is reproducible.
//!
//! With `max_nodes` set, the least recently used nodes are pruned. A walk touches the
//! deepest node first and the root last, so a prefix is always more recent than its
//! extensions and pruning removes leaves before the nodes they hang from.
//!
//! Config keys: `seed` (default 0), `max_nodes` (default 0 = unbounded, as the prototype).

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
    fn contains(&self, index: u32) -> bool {
        if index < 64 {
            self.low & (1 << index) != 0
        } else {
            self.high.contains(&index)
        }
    }
    fn is_empty(&self) -> bool {
        self.low == 0 && self.high.is_empty()
    }
}

/// The longest-common-prefix matcher.
pub struct Lcp {
    nodes: LruMap<Holders>,
    max_nodes: usize,
    rng: SeededRng,
    /// Scratch: stable indices of the available endpoints of the current call.
    available: Vec<u32>,
    /// Scratch: the available holders of the deepest node matched so far.
    best: Vec<u32>,
}

impl Lcp {
    /// Number of trie nodes held (for tests and benchmarks).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

impl Matcher for Lcp {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        let mut config = PluginConfig::parse(config)?;
        let seed = config.seed()?;
        let max_nodes = config.u64("max_nodes", 0)?;
        config.finish()?;
        Ok(Lcp {
            nodes: LruMap::default(),
            max_nodes: usize::try_from(max_nodes).unwrap_or(usize::MAX),
            rng: SeededRng::new(seed),
            available: Vec::new(),
            best: Vec::new(),
        })
    }

    fn add_endpoints(&mut self, _endpoints: &Endpoints<'_>) -> Result<(), String> {
        Ok(())
    }

    fn remove_endpoints(&mut self, indices: &[u32]) -> Result<(), String> {
        self.nodes.retain(|holders| {
            for index in indices {
                holders.remove(*index);
            }
            !holders.is_empty()
        });
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String> {
        self.available.clear();
        self.available
            .extend(endpoints.available().map(|e| e.index()));
        if self.available.is_empty() {
            return Ok(None);
        }
        self.best.clear();
        for hash in request.block_hashes() {
            let Some(holders) = self.nodes.get(*hash) else {
                break;
            };
            let before = self.best.len();
            self.best.extend(
                self.available
                    .iter()
                    .copied()
                    .filter(|i| holders.contains(*i)),
            );
            if self.best.len() > before {
                // A deeper match replaces the shallower one.
                self.best.drain(..before);
            } else {
                self.best.truncate(before);
            }
        }
        let pool = if self.best.is_empty() {
            &self.available
        } else {
            &self.best
        };
        let pick = pool[self.rng.below(pool.len() as u64) as usize];
        Ok(Some(pick))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: u32) -> Result<(), String> {
        for hash in request.block_hashes().iter().rev() {
            self.nodes
                .touch_or_insert_with(*hash, Holders::default)
                .insert(endpoint);
        }
        if self.max_nodes > 0 {
            while self.nodes.len() > self.max_nodes {
                self.nodes.pop_oldest();
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
