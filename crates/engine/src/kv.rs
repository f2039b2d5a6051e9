//! The paged KV cache with prefix caching (vLLM's rules; see the crate docs).

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use routerlab_core::hash::mix64;

/// One KV block, in 16 bytes: blocks are read at random across the whole cache, and with
/// several busy engines their blocks compete for the same CPU caches.
struct Block {
    /// The prefix hash the block holds, when [`HASHED`].
    hash: u64,
    /// Where its latest entry is in the free queue, counted from the queue's first entry
    /// ever, modulo 2^32 (see [`KvCache::queue`]).
    queued_at: u32,
    /// How many requests hold it (below [`INDEXED`]), and the two flags.
    state: u32,
}

const _: () = assert!(std::mem::size_of::<Block>() == 16);

/// [`Block::state`]: the block holds a hash.
const HASHED: u32 = 1 << 31;
/// [`Block::state`]: the index finds it under its hash (see [`KvCache::publish_run`]).
const INDEXED: u32 = 1 << 30;
/// [`Block::state`]: its holders. A running request holds a block of its own, so there are
/// at most as many holders as blocks, at most [`MAX_BLOCKS`], far below this.
const REFS: u32 = INDEXED - 1;

/// The most blocks a cache may have (the engine settings' bound): small enough for a
/// block's holders and its place in the free queue to fit, with its flags, in the 16 bytes
/// a block takes.
pub const MAX_BLOCKS: u32 = 1 << 24;

impl Block {
    #[inline]
    fn refs(&self) -> u32 {
        self.state & REFS
    }

    #[inline]
    fn hashed(&self) -> bool {
        self.state & HASHED != 0
    }

    #[inline]
    fn indexed(&self) -> bool {
        self.state & INDEXED != 0
    }

    /// Whether it holds `hash` now (an index entry may be stale).
    #[inline]
    fn holds(&self, hash: u64) -> bool {
        self.hashed() && self.hash == hash
    }

    /// Whether the free queue's entry for it at place `at` is its own, standing for it
    /// free. Places are compared modulo 2^32: a free block's latest entry is in the queue,
    /// and the queue spans fewer than 2^32 places (at most [`KvCache::queue_limit`], and a
    /// cache has at most 2^24 blocks), so equal remainders are the same place.
    #[inline]
    fn free_at(&self, at: u64) -> bool {
        self.refs() == 0 && self.queued_at == at as u32
    }
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
    /// such entries would fill its table (`sweep`, [`KvCache::index_limit`]).
    by_hash: HashTable<u32>,
    /// The free blocks (no holder; cached ones keep their hash), oldest first, as the ids
    /// of the blocks released, in the order they were. A block taken back while free
    /// leaves its entry behind: unlinking it from a list would touch its neighbours, at
    /// random places of the cache, and a list is walked one dependent read after another
    /// where this queue's ids are read in a row. An entry stands for a free block only
    /// when it is its block's latest (`queued_at`) and the block has no holder; the queue
    /// is compacted before it holds more than [`KvCache::queue_limit`] entries
    /// ([`KvCache::compact`]). Entries before `head` have been taken; they stay until the
    /// compaction, so that taking and releasing are a read and a push on a plain list.
    queue: Vec<u32>,
    /// The first entry not yet taken.
    head: usize,
    /// The place of `queue[0]`, counted from the queue's first entry ever.
    first: u64,
    free: u32,
    /// Cached blocks evicted to make room.
    pub evictions: u64,
    /// When recording: what became cached (`true`) and what left (`false`), by hash, in
    /// order, as an engine's KV events report them.
    events: Option<Vec<KvEvent>>,
}

impl KvCache {
    /// A cache of `capacity` free, empty blocks.
    ///
    /// # Panics
    ///
    /// When `capacity` exceeds [`MAX_BLOCKS`] (the engine settings refuse such a cache).
    #[inline]
    pub fn new(capacity: u32) -> KvCache {
        assert!(
            capacity <= MAX_BLOCKS,
            "a KV cache of {capacity} blocks: at most {MAX_BLOCKS}"
        );
        // Every block free and empty, each at its own place in the free queue: what
        // releasing them one by one in order would leave, written in one pass each.
        let blocks = (0..capacity)
            .map(|id| Block {
                hash: 0,
                queued_at: id,
                state: 0,
            })
            .collect();
        KvCache {
            blocks,
            // Room for every block up front, up to a bound; a cache that fills it is given
            // its full room at its first rebuild (`sweep`).
            by_hash: HashTable::with_capacity(capacity.min(1 << 14) as usize),
            queue: (0..capacity).collect(),
            head: 0,
            first: 0,
            free: capacity,
            evictions: 0,
            events: None,
        }
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
            .find(mix64(hash), |id| blocks[*id as usize].holds(hash))
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
            .take_while(|(id, hash)| self.blocks[**id as usize].holds(**hash))
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
            .filter(|id| self.blocks[**id as usize].refs() == 0)
            .count() as u32
    }

    /// Takes a hold on a cached block.
    #[inline]
    pub(crate) fn hold(&mut self, id: u32) {
        let block = &mut self.blocks[id as usize];
        if block.refs() == 0 {
            // Its queue entry is left behind, no longer its block's own.
            self.free -= 1;
        }
        block.state += 1;
    }

    /// Takes the oldest free block, evicting its cached content; `None` when all are held.
    #[inline]
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        if self.free == 0 {
            return None;
        }
        self.free -= 1;
        Some(self.take_oldest())
    }

    /// Takes the `n` oldest free blocks into `into`, as `n` calls of [`KvCache::allocate`]
    /// would. `n` must not exceed [`KvCache::free`].
    #[inline]
    pub(crate) fn allocate_into(&mut self, n: u32, into: &mut Vec<u32>) {
        assert!(n <= self.free, "{n} blocks asked for, {} free", self.free);
        self.free -= n;
        // A range mapped has an exact length: `extend` reserves once and checks no more.
        into.extend((0..n).map(|_| self.take_oldest()));
    }

    /// Takes the free block of the queue's first entry that stands for one (there is one
    /// for each free block), evicting its cached content. The caller counts it taken.
    #[inline]
    fn take_oldest(&mut self) -> u32 {
        loop {
            let id = *self
                .queue
                .get(self.head)
                .expect("a free block has an entry");
            let at = self.first + self.head as u64;
            self.head += 1;
            let block = &mut self.blocks[id as usize];
            if !block.free_at(at) {
                continue; // left behind
            }
            let hashed = block.hashed();
            block.state = 1;
            if hashed {
                self.evictions += 1;
                if let Some(events) = &mut self.events {
                    events.push(KvEvent::Removed { hash: block.hash });
                }
            }
            return id;
        }
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
        let n = n.min(self.free) as usize;
        (self.queue[self.head..]
            .iter()
            .zip(self.first + self.head as u64..))
        .filter(|&(&id, at)| self.blocks[id as usize].free_at(at))
        .map(|(&id, _)| id)
        .take(n)
        .collect()
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
            if !blocks[id as usize].hashed()
                && let Entry::Vacant(slot) = by_hash.entry(
                    mix64(hash),
                    |other| blocks[*other as usize].holds(hash),
                    |other| mix64(blocks[*other as usize].hash),
                )
            {
                slot.insert(id);
                let block = &mut blocks[id as usize];
                block.hash = hash;
                block.state |= HASHED | INDEXED;
                if let Some(events) = events {
                    events.push(KvEvent::Stored { hash, parent });
                }
            }
            parent = Some(hash);
        }
        // No other block can hold these hashes: each block takes its own, no probe asked.
        for (&id, &hash) in ids[shared..].iter().zip(&hashes[shared..]) {
            let block = &mut blocks[id as usize];
            if !block.hashed() {
                block.hash = hash;
                block.state = (block.state | HASHED) & !INDEXED;
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
            let block = &self.blocks[id as usize];
            if !block.hashed() || block.indexed() {
                continue;
            }
            let hash = block.hash;
            if self.by_hash.len() >= self.index_limit().min(self.by_hash.capacity()) {
                self.sweep();
            }
            let blocks = &self.blocks;
            self.by_hash
                .insert_unique(mix64(hash), id, |other| mix64(blocks[*other as usize].hash));
            self.blocks[id as usize].state |= INDEXED;
        }
    }

    /// The index is rebuilt before it would hold more entries than this: all that the
    /// smallest table with room for one and a half entries a block holds (hashbrown fills
    /// 7/8 of a power of two of buckets), so 1.75 a block for a cache of a power of two
    /// blocks, and at most 3.5. A table twice that size for the same cache (a limit of 3
    /// a block) made a replay of 4 such caches 2–4% slower: it no longer fit the CPU's
    /// caches beside the blocks. The rebuilds it saves cost less.
    #[inline]
    fn index_limit(&self) -> usize {
        let room = (self.blocks.len() * 3 / 2).max(64);
        let buckets = (room * 8 / 7).next_power_of_two();
        buckets / 8 * 7
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
            if block.hashed() && block.indexed() {
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
            block.state -= 1;
            if block.refs() == 0 {
                self.push_free(id);
            }
        }
    }

    /// Puts block `id`, just left by its last holder, at the back of the free queue.
    #[inline]
    fn push_free(&mut self, id: u32) {
        if self.queue.len() >= self.queue_limit() {
            self.compact();
        }
        self.blocks[id as usize].queued_at = (self.first + self.queue.len() as u64) as u32;
        self.queue.push(id);
        self.free += 1;
    }

    /// The free queue is compacted before it would hold more entries than this, taken ones
    /// included: four a block (64 at least). After a compaction at most one a block
    /// remains, so at least three times as many releases as the cache has blocks come
    /// before the next: with many hits (each leaves an entry behind), compacting at twice
    /// the cache took 3% of a 64-engine replay.
    #[inline]
    fn queue_limit(&self) -> usize {
        (self.blocks.len() * 4).max(64)
    }

    /// Drops the entries taken and those left behind from the free queue, the others
    /// keeping their order (and the first of them its place).
    #[cold]
    fn compact(&mut self) {
        let KvCache {
            blocks,
            queue,
            head,
            first,
            ..
        } = self;
        *first += *head as u64;
        let mut kept = 0;
        for (read, at) in (*head..queue.len()).zip(*first..) {
            let id = queue[read];
            let block = &mut blocks[id as usize];
            if block.free_at(at) {
                block.queued_at = (*first + kept as u64) as u32;
                queue[kept] = id;
                kept += 1;
            }
        }
        queue.truncate(kept);
        *head = 0;
    }
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

    /// The free queue hands out blocks in exactly the order a list of free blocks would
    /// (released at the back, taken again from anywhere, allocated from the front), through
    /// many entries left behind and the compactions they bring, and stays within twice the
    /// cache. Checked against such a list over a long seeded mix of the three.
    #[test]
    fn the_free_queue_allocates_as_a_list_would_through_compactions() {
        const CAPACITY: u32 = 16;
        let mut kv = KvCache::new(CAPACITY);
        // The list: free blocks, oldest first.
        let mut list: Vec<u32> = (0..CAPACITY).collect();
        let mut held: Vec<u32> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize % n
        };
        let (mut compactions, mut longest) = (0, 0);
        for step in 0..20_000 {
            let len = kv.queue.len();
            // Allocations are rare, so that entries left behind pile up between them.
            match next(64) {
                0 if !list.is_empty() => {
                    let id = kv.allocate().expect("a block is free");
                    assert_eq!(id, list.remove(0), "step {step}");
                    held.push(id);
                }
                1..=32 if !held.is_empty() => {
                    let id = held.swap_remove(next(held.len()));
                    kv.release(&[id]);
                    list.push(id);
                }
                _ if !list.is_empty() => {
                    // A free block taken back from the middle of the list.
                    let id = list.remove(next(list.len()));
                    kv.hold(id);
                    held.push(id);
                }
                _ => {}
            }
            assert_eq!(kv.free(), list.len() as u32, "step {step}");
            assert_eq!(kv.oldest_free(4), list[..list.len().min(4)], "step {step}");
            // The queue shrank: compacted (taken entries stay until then).
            compactions += usize::from(kv.queue.len() < len);
            longest = longest.max(kv.queue.len());
        }
        assert!(compactions > 10, "{compactions} compactions");
        assert!(longest <= 4 * CAPACITY as usize, "{longest} entries");
        // Whatever is left comes out in the list's order.
        let mut rest = Vec::new();
        kv.allocate_into(list.len() as u32, &mut rest);
        assert_eq!(rest, list);
        assert_eq!(kv.allocate(), None);
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

    /// An index starts with room for one entry a block (up to 2^14), and gets room for its
    /// limit only when it fills: a lightly used cache keeps a small table.
    #[test]
    fn the_index_gets_room_for_its_limit_only_once_full() {
        let mut kv = KvCache::new(20_000);
        let start = kv.by_hash.capacity();
        assert!((16_384..57_344).contains(&start), "{start}");
        assert_eq!(kv.index_limit(), 57_344);
        let mut ids = Vec::new();
        kv.allocate_into(100, &mut ids);
        kv.publish_run(&ids, &(0..100).collect::<Vec<u64>>(), None, usize::MAX);
        assert_eq!(kv.by_hash.capacity(), start);
        // Rounds of 2,000 fresh blocks until the table has been filled once.
        for round in 1..=20u64 {
            kv.release(&ids);
            ids.clear();
            kv.allocate_into(2_000, &mut ids);
            let hashes: Vec<u64> = (0..2_000).map(|i| round * 10_000 + i).collect();
            kv.publish_run(&ids, &hashes, None, usize::MAX);
            assert_eq!(kv.cached_prefix(&hashes), 2_000, "round {round}");
        }
        assert!(kv.by_hash.capacity() >= 57_344, "{}", kv.by_hash.capacity());
        assert!(kv.by_hash.len() <= 57_344);
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
    /// more than its limit (112 entries for 64 blocks), whatever has passed through it; a
    /// block evicted and then given its old hash again is found once more, and only under
    /// it.
    #[test]
    fn the_index_stays_within_its_limit() {
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
        assert_eq!(kv.index_limit(), 112);
        assert!(most <= 112, "the index held {most} entries for 64 blocks");
        assert!(most > 64, "entries of evicted blocks were kept: {most}");
        assert_eq!(
            kv.by_hash.capacity(),
            112,
            "the table never outgrows the limit"
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
