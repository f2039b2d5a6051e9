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

/// A free-queue entry that stands for a run of anonymous blocks, their number in the bits
/// below [`RUN_HASHED`] (a block id is below [`MAX_BLOCKS`], so never has these bits).
const RUN: u32 = 1 << 31;
/// A run's blocks hold hashes (evicting them counts).
const RUN_HASHED: u32 = 1 << 30;
/// A run's number of blocks.
const RUN_LEN: u32 = RUN_HASHED - 1;

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
    /// Anonymous blocks given back together are one entry, a run ([`RUN`]), taken from
    /// block by block (`taken`).
    queue: Vec<u32>,
    /// The first entry not yet taken.
    head: usize,
    /// When the entry at `head` is a run: how many of its blocks are taken.
    taken: u32,
    /// Block ids with no role: their blocks are anonymous, held or free (see
    /// [`KvCache::allocate_anon`]); there is one for each.
    spare: Vec<u32>,
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
            taken: 0,
            spare: Vec::new(),
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
    #[cfg(test)]
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

    /// Takes the `n` oldest free blocks as anonymous ones, as `n` calls of
    /// [`KvCache::allocate`] would take them, and holds them without ids: blocks that no
    /// request but their holder's will ask for, which their holder keeps count of (and
    /// gives back with [`KvCache::release_anon`], or names with [`KvCache::name_anon`]).
    /// Such blocks cost nothing one by one, and a run of them is one entry of the free
    /// queue. Only while no events are recorded: an anonymous block leaves no event.
    /// `n` must not exceed [`KvCache::free`].
    #[inline]
    pub(crate) fn allocate_anon(&mut self, mut n: u32) {
        assert!(n <= self.free, "{n} blocks asked for, {} free", self.free);
        debug_assert!(self.events.is_none(), "anonymous blocks leave no events");
        self.free -= n;
        while n > 0 {
            let entry = self.queue[self.head];
            if entry & RUN != 0 {
                n -= self.take_from_run(entry, n);
                continue;
            }
            let at = self.first + self.head as u64;
            self.head += 1;
            let block = &mut self.blocks[entry as usize];
            if !block.free_at(at) {
                continue; // left behind
            }
            if block.hashed() {
                self.evictions += 1;
            }
            // Its id has no role now: no holder, no hash, and no entry of the queue's
            // from here on is its own.
            block.state = 0;
            self.spare.push(entry);
            n -= 1;
        }
    }

    /// Takes up to `want` blocks of the run `entry` at the queue's head; how many.
    #[inline]
    fn take_from_run(&mut self, entry: u32, want: u32) -> u32 {
        let took = ((entry & RUN_LEN) - self.taken).min(want);
        if entry & RUN_HASHED != 0 {
            self.evictions += u64::from(took);
        }
        self.taken += took;
        if self.taken == entry & RUN_LEN {
            self.head += 1;
            self.taken = 0;
        }
        took
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
            if id & RUN != 0 {
                // An anonymous block, given a spare id.
                self.take_from_run(id, 1);
                let id = self.spare_id();
                self.blocks[id as usize].state = 1;
                return id;
            }
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

    /// Gives back `unhashed` anonymous blocks and then `hashed` ones (a request's deepest
    /// first: see [`KvCache::release`]), each kind as one entry of the free queue.
    #[inline]
    pub(crate) fn release_anon(&mut self, unhashed: u32, hashed: u32) {
        self.push_run(unhashed, 0);
        self.push_run(hashed, RUN_HASHED);
    }

    /// Puts `n` anonymous blocks at the back of the free queue, as one run (or added to
    /// the run at its back, of the same kind and not yet all taken).
    #[inline]
    fn push_run(&mut self, n: u32, kind: u32) {
        if n == 0 {
            return;
        }
        self.free += n;
        if self.queue.len() > self.head
            && let Some(last) = self.queue.last_mut()
            && *last & !RUN_LEN == RUN | kind
        {
            *last += n;
            return;
        }
        if self.queue.len() >= self.queue_limit() {
            self.compact();
        }
        self.queue.push(RUN | kind | n);
    }

    /// Gives held anonymous blocks ids, for `hashes` (computed, this request's alone),
    /// appended to `into`: indexed (see [`KvCache::index_alone`]), they are found again.
    pub(crate) fn name_anon(&mut self, hashes: &[u64], into: &mut Vec<u32>) {
        let start = into.len();
        for &hash in hashes {
            let id = self.spare_id();
            let block = &mut self.blocks[id as usize];
            block.hash = hash;
            block.state = HASHED | 1;
            into.push(id);
        }
        self.index_alone(&into[start..]);
    }

    /// An id with no role, for an anonymous block about to be named.
    #[inline]
    fn spare_id(&mut self) -> u32 {
        self.spare
            .pop()
            .expect("each anonymous block has a spare id")
    }

    /// Whether stores and removals are recorded (then no block is anonymous).
    #[inline]
    pub(crate) fn recording(&self) -> bool {
        self.events.is_some()
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
    /// Anonymous blocks have no id and are left out: the host tier, which asks, keeps every
    /// block named.
    pub(crate) fn oldest_free(&self, n: u32) -> Vec<u32> {
        let n = n.min(self.free) as usize;
        (self.queue[self.head..]
            .iter()
            .zip(self.first + self.head as u64..))
        .filter(|&(&id, at)| id & RUN == 0 && self.blocks[id as usize].free_at(at))
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
    /// keeping their order (and the first of them its place); a run partly taken keeps
    /// the blocks left.
    #[cold]
    fn compact(&mut self) {
        let KvCache {
            blocks,
            queue,
            head,
            taken,
            first,
            ..
        } = self;
        if *taken > 0 {
            queue[*head] -= *taken;
            *taken = 0;
        }
        *first += *head as u64;
        let mut kept = 0;
        for (read, at) in (*head..queue.len()).zip(*first..) {
            let id = queue[read];
            if id & RUN != 0 {
                queue[kept] = id;
                kept += 1;
                continue;
            }
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
mod tests;
