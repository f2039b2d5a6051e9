//! The paged KV cache with prefix caching (vLLM's rules; see the crate docs).

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use routerlab_core::hash::mix64;

const NONE: u32 = u32::MAX;

/// One KV block. The hash and its flag are kept apart (not an `Option<u64>`) so a block
/// takes 24 bytes, not 32: the eviction list is walked and relinked across the whole cache,
/// and with several busy engines their blocks compete for the same CPU caches.
struct Block {
    /// The prefix hash the block holds, when `hashed`.
    hash: u64,
    hashed: bool,
    /// Whether the index finds it under `hash` (see [`KvCache::publish_run`]).
    indexed: bool,
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
    /// The ids of the blocks that hold a hash, found by it. Each entry is 4 bytes: the
    /// hash itself is the block's, read to confirm a match (the table's tag bytes rule
    /// out nearly all others first). An evicted block's entry stays behind: taking it out
    /// at each eviction costs a probe at a random place of the table, where a lookup that
    /// checks the block costs nothing more; the index is rebuilt from the blocks before
    /// such entries would make it more than three times the cache (`sweep`).
    by_hash: HashTable<u32>,
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
            // Room for every block up front, up to a bound; a cache that fills it is given
            // its full room at its first rebuild (`sweep`).
            by_hash: HashTable::with_capacity(capacity.min(1 << 14) as usize),
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
                indexed: false,
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

    /// The block cached under `hash`.
    #[inline]
    pub(crate) fn cached(&self, hash: u64) -> Option<u32> {
        let blocks = &self.blocks;
        (self.by_hash)
            .find(mix64(hash), |id| holds(blocks, *id, hash))
            .copied()
    }

    /// How many leading hashes of `chain` are cached.
    #[inline]
    pub fn cached_prefix(&self, chain: &[u64]) -> usize {
        chain
            .iter()
            .take_while(|h| self.cached(**h).is_some())
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
        // The run's length is not known before the walk: room for the whole chain, so the
        // walk does not grow the list a doubling at a time.
        ids.reserve(chain.len() - valid);
        ids.extend(chain[valid..].iter().map_while(|h| self.cached(*h)));
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
            self.evictions += 1;
            if let Some(events) = &mut self.events {
                events.push(KvEvent::Removed { hash });
            }
        }
        self.blocks[id as usize].refs = 1;
        Some(id)
    }

    /// Takes the `n` oldest free blocks into `into`, as `n` calls of [`KvCache::allocate`]
    /// would, in one walk of the free list (unlinked once, at its end). `n` must not
    /// exceed [`KvCache::free`].
    #[inline]
    pub(crate) fn allocate_into(&mut self, n: u32, into: &mut Vec<u32>) {
        assert!(n <= self.free, "{n} blocks asked for, {} free", self.free);
        if n == 0 {
            return;
        }
        let KvCache {
            blocks,
            evictions,
            events,
            ..
        } = self;
        let mut id = self.free_head;
        // A range mapped has an exact length: `extend` reserves once and checks no more.
        into.extend((0..n).map(|_| {
            let taken = id;
            let block = &mut blocks[taken as usize];
            block.refs = 1;
            id = block.newer;
            if block.hashed {
                block.hashed = false;
                *evictions += 1;
                if let Some(events) = events {
                    events.push(KvEvent::Removed { hash: block.hash });
                }
            }
            taken
        }));
        self.free_head = id;
        match id {
            NONE => self.free_tail = NONE,
            next => self.blocks[next as usize].older = NONE,
        }
        self.free -= n;
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
    #[cfg(test)]
    pub(crate) fn publish(&mut self, id: u32, hash: u64, parent: Option<u64>) {
        self.publish_run(&[id], &[hash], parent, 1);
    }

    /// Publishes a request's computed full blocks `ids` under `hashes`, each under its
    /// prefix hash (first writer wins, a block already published keeps its own); `parent`
    /// is the hash of the block before the first in its request's chain. Only the first
    /// `shared` may be asked for by other requests: the blocks after them hold hashes no
    /// other request's chain has, and are published without an index entry, which only
    /// their own request could look them up by (see [`KvCache::index_alone`]).
    #[inline]
    pub(crate) fn publish_run(
        &mut self,
        ids: &[u32],
        hashes: &[u64],
        mut parent: Option<u64>,
        shared: usize,
    ) {
        let shared = shared.min(ids.len());
        // Rebuilt before it would hold more than its limit, or outgrow its table: a rebuild
        // into a larger table reads the blocks in order, where growing the table would read
        // each entry's block, at random, for its hash.
        if self.by_hash.len() + shared > self.index_limit().min(self.by_hash.capacity()) {
            self.sweep();
        }
        let KvCache {
            blocks,
            by_hash,
            events,
            ..
        } = self;
        for (&id, &hash) in ids[..shared].iter().zip(hashes) {
            // One probe: the slot is found, and filled when vacant. (Growing the table
            // places each entry by its block's hash: a left-behind entry goes where that
            // hash is looked up, and matches only if its block holds the hash again.)
            if !blocks[id as usize].hashed
                && let Entry::Vacant(slot) = by_hash.entry(
                    mix64(hash),
                    |other| holds(blocks, *other, hash),
                    |other| mix64(blocks[*other as usize].hash),
                )
            {
                slot.insert(id);
                let block = &mut blocks[id as usize];
                block.hash = hash;
                block.hashed = true;
                block.indexed = true;
                if let Some(events) = events {
                    events.push(KvEvent::Stored { hash, parent });
                }
            }
            parent = Some(hash);
        }
        // No other block can hold these hashes: each block takes its own, no probe asked.
        for (&id, &hash) in ids[shared..].iter().zip(&hashes[shared..]) {
            let block = &mut blocks[id as usize];
            if !block.hashed {
                block.hash = hash;
                block.hashed = true;
                block.indexed = false;
                if let Some(events) = events {
                    events.push(KvEvent::Stored { hash, parent });
                }
            }
            parent = Some(hash);
        }
    }

    /// Gives the blocks of `ids` published without an index entry ([`KvCache::publish_run`])
    /// one, so that their request, preempted, finds them again.
    pub(crate) fn index_alone(&mut self, ids: &[u32]) {
        for &id in ids {
            let Block {
                hash,
                hashed,
                indexed,
                ..
            } = self.blocks[id as usize];
            if !hashed || indexed {
                continue;
            }
            if self.by_hash.len() >= self.index_limit().min(self.by_hash.capacity()) {
                self.sweep();
            }
            let blocks = &self.blocks;
            self.by_hash
                .insert_unique(mix64(hash), id, |other| mix64(blocks[*other as usize].hash));
            self.blocks[id as usize].indexed = true;
        }
    }

    /// The index is rebuilt before it would hold more entries than this: 3 a block.
    #[inline]
    fn index_limit(&self) -> usize {
        (self.blocks.len() * 3).max(64)
    }

    /// Rebuilds the index from the blocks that hold a hash: the entries of evicted blocks
    /// are left in place when they go (a lookup checks the block), and dropped here. The
    /// first rebuild of a table smaller than the limit gives it room for the limit.
    #[cold]
    fn sweep(&mut self) {
        let limit = self.index_limit();
        if self.by_hash.capacity() < limit {
            // The old table goes first, so the two are never held at once.
            self.by_hash = HashTable::new();
            self.by_hash = HashTable::with_capacity(limit);
        } else {
            self.by_hash.clear();
        }
        let blocks = &self.blocks;
        for (id, block) in blocks.iter().enumerate() {
            if block.hashed && block.indexed {
                self.by_hash
                    .insert_unique(mix64(block.hash), id as u32, |other| {
                        mix64(blocks[*other as usize].hash)
                    });
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

/// Whether block `id` holds `hash` now (an index entry may be stale).
#[inline]
fn holds(blocks: &[Block], id: u32, hash: u64) -> bool {
    let block = &blocks[id as usize];
    block.hashed && block.hash == hash
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache where some free blocks hold hashes and some of them are held again.
    fn used_cache() -> KvCache {
        let mut kv = KvCache::new(8);
        kv.record_events();
        let mut ids = Vec::new();
        kv.allocate_into(6, &mut ids);
        for (i, id) in ids.iter().enumerate() {
            kv.publish(*id, 100 + i as u64, None);
        }
        kv.release(&ids);
        kv.hold(ids[2]);
        kv
    }

    #[test]
    fn kv_reuses_prefixes_pins_held_blocks_and_evicts_deepest_first() {
        let mut kv = KvCache::new(4);
        let a: Vec<u32> = (0..3).map(|_| kv.allocate().unwrap()).collect();
        for (i, id) in a.iter().enumerate() {
            kv.publish(*id, 100 + i as u64, None);
        }
        assert_eq!(kv.cached_prefix(&[100, 101, 102, 999]), 3);
        assert_eq!(kv.cached_prefix(&[100, 555, 102]), 1);
        // Held blocks are pinned: only the one empty block can be allocated.
        let spare = kv.allocate().unwrap();
        assert_eq!(kv.allocate(), None);
        kv.release(&[spare]);
        // Releasing a chain frees its deepest block first: it is evicted first.
        kv.release(&a);
        assert_eq!(kv.free(), 4);
        let _ = kv.allocate().unwrap(); // the empty block freed earlier
        assert_eq!(kv.evictions, 0);
        let _ = kv.allocate().unwrap();
        assert_eq!(kv.evictions, 1);
        assert_eq!(
            kv.cached_prefix(&[100, 101, 102]),
            2,
            "hash 102 (deepest) went first"
        );
        let _ = kv.allocate().unwrap();
        assert_eq!(kv.cached_prefix(&[100, 101, 102]), 1);
        // A cached free block taken by a new holder leaves the free queue.
        let mut ids = Vec::new();
        kv.refresh_cached_ids(&[100, 101], &mut ids);
        assert_eq!(ids.len(), 1);
        kv.hold(ids[0]);
        assert_eq!(kv.free(), 0);
        kv.release(&ids);
        assert_eq!(kv.cached_prefix(&[100]), 1);
    }

    #[test]
    fn allocate_into_takes_what_allocate_would_in_order() {
        let (mut one_by_one, mut at_once) = (used_cache(), used_cache());
        let singles: Vec<u32> = (0..6).map(|_| one_by_one.allocate().unwrap()).collect();
        let mut batch = Vec::new();
        at_once.allocate_into(6, &mut batch);
        assert_eq!(batch, singles);
        assert_eq!(at_once.free(), one_by_one.free());
        assert_eq!(at_once.evictions, one_by_one.evictions);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        at_once.take_events(&mut a);
        one_by_one.take_events(&mut b);
        assert_eq!(a, b);
        // What is left is the same list: the last free block, then nothing.
        assert_eq!(at_once.allocate(), one_by_one.allocate());
        assert_eq!(at_once.allocate(), None);
        assert_eq!(one_by_one.allocate(), None);
    }

    /// The index follows the blocks through eviction and reuse: a hash is found at the
    /// block that holds it now, an evicted one is gone, and a block that takes a new hash
    /// answers only to that one. Cycled many times over a small cache, so that every
    /// block is reused again and again.
    #[test]
    fn the_index_finds_each_hash_at_the_block_that_holds_it_now() {
        let mut kv = KvCache::new(64);
        let mut ids = Vec::new();
        for round in 0..200u64 {
            let hashes: Vec<u64> = (0..48).map(|i| round * 1_000 + i).collect();
            ids.clear();
            kv.allocate_into(48, &mut ids);
            kv.publish_run(&ids, &hashes, None, usize::MAX);
            for (id, hash) in ids.iter().zip(&hashes) {
                assert_eq!(kv.cached(*hash), Some(*id), "round {round}");
            }
            assert_eq!(kv.cached_prefix(&hashes), 48);
            kv.release(&ids);
            if round > 0 {
                // 64 blocks: the 48 of this round and 16 of the last; the last round's
                // deepest were released first, so evicted first, and its first 16 remain.
                let last: Vec<u64> = (0..48).map(|i| (round - 1) * 1_000 + i).collect();
                assert_eq!(kv.cached_prefix(&last), 16, "round {round}");
                assert_eq!(kv.cached(last[16]), None);
            }
        }
        assert_eq!(
            kv.cached(7),
            None,
            "the first round's blocks were all evicted"
        );
    }

    /// An index starts with room for one entry a block, and gets room for its limit (three a
    /// block) only when it fills: a lightly used cache keeps a small table.
    #[test]
    fn the_index_gets_room_for_its_limit_only_once_full() {
        let mut kv = KvCache::new(4_096);
        let start = kv.by_hash.capacity();
        assert!((4_096..12_288).contains(&start), "{start}");
        let mut ids = Vec::new();
        kv.allocate_into(100, &mut ids);
        kv.publish_run(&ids, &(0..100).collect::<Vec<u64>>(), None, usize::MAX);
        assert_eq!(kv.by_hash.capacity(), start);
        // Rounds of 1,000 fresh blocks until the table has been filled once.
        for round in 1..=20u64 {
            kv.release(&ids);
            ids.clear();
            kv.allocate_into(1_000, &mut ids);
            let hashes: Vec<u64> = (0..1_000).map(|i| round * 10_000 + i).collect();
            kv.publish_run(&ids, &hashes, None, usize::MAX);
            assert_eq!(kv.cached_prefix(&hashes), 1_000, "round {round}");
        }
        assert!(kv.by_hash.capacity() >= 12_288, "{}", kv.by_hash.capacity());
        assert!(kv.by_hash.len() <= 12_288);
    }

    /// Blocks published as their request's alone hold their hashes, count as evicted and
    /// report their events as others do, but are not found by hash until indexed, even
    /// through a rebuild of the index.
    #[test]
    fn blocks_alone_are_found_only_once_indexed() {
        let mut kv = KvCache::new(16);
        kv.record_events();
        let mut ids = Vec::new();
        kv.allocate_into(4, &mut ids);
        kv.publish_run(&ids, &[10, 11, 12, 13], None, 2);
        assert_eq!(kv.cached_prefix(&[10, 11, 12, 13]), 2);
        assert_eq!(kv.cached(12), None);
        kv.sweep();
        assert_eq!(kv.cached(12), None, "a rebuild leaves them out");
        let mut events = Vec::new();
        kv.take_events(&mut events);
        let stored = |hash, parent| KvEvent::Stored { hash, parent };
        let expected = [
            stored(10, None),
            stored(11, Some(10)),
            stored(12, Some(11)),
            stored(13, Some(12)),
        ];
        assert_eq!(events, expected);
        kv.index_alone(&ids);
        assert_eq!(kv.cached_prefix(&[10, 11, 12, 13]), 4);
        assert_eq!(kv.cached(13), Some(ids[3]));
        kv.sweep();
        assert_eq!(
            kv.cached(13),
            Some(ids[3]),
            "indexed, they stay through a rebuild"
        );
        // Evicted all the same: all 16 blocks taken, the 4 published among them.
        kv.release(&ids);
        let mut all = Vec::new();
        kv.allocate_into(16, &mut all);
        assert_eq!(kv.evictions, 4);
        assert_eq!(kv.cached(11), None);
    }

    /// Evicted blocks' entries stay in the index until it is rebuilt, so it never holds
    /// more than three times the cache, whatever has passed through it; a block
    /// evicted and then given its old hash again is found once more, and only under it.
    #[test]
    fn the_index_stays_within_three_times_the_cache() {
        let mut kv = KvCache::new(64);
        let mut ids = Vec::new();
        let mut most = 0;
        for round in 0..500u64 {
            ids.clear();
            kv.allocate_into(40, &mut ids);
            // Every third round brings back the hashes of the round before the last.
            let base = if round % 3 == 2 { round - 2 } else { round };
            let hashes: Vec<u64> = (0..40).map(|i| base * 1_000 + i).collect();
            kv.publish_run(&ids, &hashes, None, usize::MAX);
            kv.release(&ids);
            most = most.max(kv.by_hash.len());
            for (id, hash) in ids.iter().zip(&hashes) {
                assert_eq!(kv.cached(*hash), Some(*id), "round {round}");
            }
        }
        assert!(most <= 192, "the index held {most} entries for 64 blocks");
        assert!(most > 64, "entries of evicted blocks were kept: {most}");
        assert!(
            kv.by_hash.capacity() >= 192,
            "a filled index is given room for its limit at a rebuild"
        );
        // Every block holds a hash of the last two rounds; those of earlier ones are gone.
        let held = (0..1_000)
            .filter(|i| kv.cached(498_000 + i).is_some())
            .count()
            + (0..1_000)
                .filter(|i| kv.cached(499_000 + i).is_some())
                .count();
        assert_eq!(held, 64);
        assert_eq!(kv.cached(496_000), None);
    }
}
