//! The paged KV cache with prefix caching (vLLM's rules; see the crate docs).

use std::collections::hash_map::Entry;

use routerlab_core::hash::U64Map;

const NONE: u32 = u32::MAX;

/// One KV block. The hash and its flag are kept apart (not an `Option<u64>`) so a block
/// takes 24 bytes, not 32: the eviction list is walked and relinked across the whole cache,
/// and with several busy engines their blocks compete for the same CPU caches.
struct Block {
    /// The prefix hash the block holds, when `hashed`.
    hash: u64,
    hashed: bool,
    refs: u32,
    newer: u32,
    older: u32,
}

/// A change to what a KV cache holds, as an engine's KV events report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvEvent {
    /// A computed block was stored under `hash`; `parent` is the block before it in the
    /// chain that computed it.
    Stored {
        /// The block's prefix hash.
        hash: u64,
        /// The previous block's, none for a chain's first.
        parent: Option<u64>,
    },
    /// The block stored under `hash` was evicted.
    Removed {
        /// The block's prefix hash.
        hash: u64,
    },
}

/// A paged KV cache with prefix caching.
pub struct KvCache {
    blocks: Vec<Block>,
    pub(crate) by_hash: U64Map<u32>,
    /// Free blocks (no holder), oldest at `free_head`; cached ones keep their hash.
    free_head: u32,
    free_tail: u32,
    free: u32,
    /// Cached blocks evicted to make room.
    pub evictions: u64,
    /// When recording: what became cached (`true`) and what left (`false`), by hash, in
    /// order, as an engine's KV events report them.
    events: Option<Vec<KvEvent>>,
}

impl KvCache {
    /// A cache of `capacity` free, empty blocks.
    #[inline]
    pub fn new(capacity: u32) -> KvCache {
        let mut cache = KvCache {
            blocks: Vec::with_capacity(capacity as usize),
            // Room for every block up front, up to a bound: growing the index while the
            // cache fills costs rehashes in every engine that gets traffic.
            by_hash: U64Map::with_capacity_and_hasher(
                capacity.min(1 << 14) as usize,
                Default::default(),
            ),
            free_head: NONE,
            free_tail: NONE,
            free: 0,
            evictions: 0,
            events: None,
        };
        for id in 0..capacity {
            cache.blocks.push(Block {
                hash: 0,
                hashed: false,
                refs: 0,
                newer: NONE,
                older: NONE,
            });
            cache.push_free(id);
        }
        cache
    }

    /// Blocks in total.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks no request holds (cached or empty).
    #[inline]
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Blocks held by requests.
    #[inline]
    pub fn used(&self) -> u32 {
        self.capacity() - self.free
    }

    /// How many leading hashes of `chain` are cached.
    #[inline]
    pub fn cached_prefix(&self, chain: &[u64]) -> usize {
        chain
            .iter()
            .take_while(|h| self.by_hash.contains_key(*h))
            .count()
    }

    /// Brings `ids` (empty, or a previous answer for `chain`) up to the blocks of the cached
    /// leading run of `chain`: keeps the leading ids whose blocks still hold their hash,
    /// then extends the run.
    #[inline]
    pub(crate) fn refresh_cached_ids(&self, chain: &[u64], ids: &mut Vec<u32>) {
        let valid = ids
            .iter()
            .zip(chain)
            .take_while(|(id, hash)| {
                let block = &self.blocks[**id as usize];
                block.hashed && block.hash == **hash
            })
            .count();
        ids.truncate(valid);
        ids.extend(
            chain[valid..]
                .iter()
                .map_while(|h| self.by_hash.get(h).copied()),
        );
    }

    /// How many of these blocks nobody holds (taking them uses up free blocks).
    #[inline]
    pub(crate) fn unheld(&self, ids: &[u32]) -> u32 {
        ids.iter()
            .filter(|id| self.blocks[**id as usize].refs == 0)
            .count() as u32
    }

    /// Takes a hold on a cached block.
    #[inline]
    pub(crate) fn hold(&mut self, id: u32) {
        if self.blocks[id as usize].refs == 0 {
            self.unlink_free(id);
        }
        self.blocks[id as usize].refs += 1;
    }

    /// Takes the oldest free block, evicting its cached content; `None` when all are held.
    #[inline]
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        let id = self.free_head;
        if id == NONE {
            return None;
        }
        self.unlink_free(id);
        let block = &mut self.blocks[id as usize];
        if block.hashed {
            block.hashed = false;
            let hash = block.hash;
            self.by_hash.remove(&hash);
            self.evictions += 1;
            if let Some(events) = &mut self.events {
                events.push(KvEvent::Removed { hash });
            }
        }
        self.blocks[id as usize].refs = 1;
        Some(id)
    }

    /// Records stores and removals from now on (see [`KvCache::take_events`]).
    pub fn record_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The stores and removals recorded since the last call, in order.
    pub fn take_events(&mut self, into: &mut Vec<KvEvent>) {
        if let Some(events) = &mut self.events {
            into.append(events);
        }
    }

    /// The `n` free blocks [`KvCache::allocate`] would take next, oldest first (fewer when
    /// fewer are free).
    pub(crate) fn oldest_free(&self, n: u32) -> Vec<u32> {
        let mut ids = Vec::with_capacity(n.min(self.free) as usize);
        let mut id = self.free_head;
        while id != NONE && ids.len() < n as usize {
            ids.push(id);
            id = self.blocks[id as usize].newer;
        }
        ids
    }

    /// Publishes a computed full block under its prefix hash (first writer wins); `parent`
    /// is the hash of the block before it in its request's chain (none for the first).
    #[inline]
    pub(crate) fn publish(&mut self, id: u32, hash: u64, parent: Option<u64>) {
        if self.blocks[id as usize].hashed {
            return;
        }
        // One probe: the slot is found, and filled when vacant.
        if let Entry::Vacant(slot) = self.by_hash.entry(hash) {
            slot.insert(id);
            self.blocks[id as usize].hash = hash;
            self.blocks[id as usize].hashed = true;
            if let Some(events) = &mut self.events {
                events.push(KvEvent::Stored { hash, parent });
            }
        }
    }

    /// Drops a request's holds, deepest block first, so deeper blocks are evicted first.
    #[inline]
    pub(crate) fn release(&mut self, ids: &[u32]) {
        for &id in ids.iter().rev() {
            let block = &mut self.blocks[id as usize];
            block.refs -= 1;
            if block.refs == 0 {
                self.push_free(id);
            }
        }
    }

    #[inline]
    pub(crate) fn push_free(&mut self, id: u32) {
        let previous = self.free_tail;
        self.blocks[id as usize].older = previous;
        self.blocks[id as usize].newer = NONE;
        match previous {
            NONE => self.free_head = id,
            p => self.blocks[p as usize].newer = id,
        }
        self.free_tail = id;
        self.free += 1;
    }

    #[inline]
    pub(crate) fn unlink_free(&mut self, id: u32) {
        let (newer, older) = (
            self.blocks[id as usize].newer,
            self.blocks[id as usize].older,
        );
        match older {
            NONE => self.free_head = newer,
            o => self.blocks[o as usize].newer = newer,
        }
        match newer {
            NONE => self.free_tail = older,
            n => self.blocks[n as usize].older = older,
        }
        self.free -= 1;
    }
}
