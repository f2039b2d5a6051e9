//! Which blocks of a trace's chains more than one request has, found in a pass over the
//! trace: a timed replay's engines need not index a block that no other request will ask
//! for (see [`crate::blocks::shared_engine_blocks`]).
//!
//! A block is named by its id and its position in the chain. Traces mostly number their
//! blocks from zero up, each id at one place (Mooncake's ids name a prefix, so its place
//! too): such a block is counted exactly, in a table indexed by the id that keeps its place
//! and whether it was seen again. Any other (an id past the table's bound, or one seen at
//! a second place) goes into filters of fixed size, wrong one way only: a block two
//! requests have is always found shared; a block one request has is found alone but for
//! rare false positives (then it is taken as shared, which costs speed, never a result).

use routerlab_core::hash::mix64;

/// Smallest and largest filters, in 64-bit words (8 KiB and 16 MiB).
const FEWEST_WORDS: u64 = 1 << 10;
const MOST_WORDS: u64 = 1 << 21;

/// The table's bounds on ids: it covers ids up to twice the blocks a trace is thought to
/// have, within these (at 2 bytes an id, 128 KiB and 8 MiB), and grows only as far as the
/// largest id seen.
const FEWEST_IDS: u64 = 1 << 16;
const MOST_IDS: u64 = 1 << 22;

/// A table entry: the place (plus one; zero for an id not seen) where the id was first
/// seen, and whether it was seen there again. Places from [`PLACE`] on go to the filters.
const PLACE: u16 = 0x7fff;
const AGAIN: u16 = 0x8000;

/// 64-bit words in a 4 KiB page.
const PAGE_WORDS: usize = 512;

/// The blocks of the chains counted so far: those seen once, and those seen again.
#[derive(Debug, Clone)]
pub struct SharingCount {
    /// By id below `ids`: the place it was first seen at, and whether again.
    table: Vec<u16>,
    /// The ids the table may cover.
    ids: u64,
    /// For the other blocks, made at the first: (seen, seen again).
    filters: Option<(Filter, Filter)>,
    /// Blocks the trace is thought to have, which sizes the filters.
    blocks: u64,
}

impl SharingCount {
    /// Room for the chains of a trace of about `bytes` bytes (a block id takes about 8
    /// bytes of a line: its digits, a comma and a space).
    pub fn for_bytes(bytes: u64) -> SharingCount {
        SharingCount::for_blocks(bytes / 8)
    }

    /// Room for about `blocks` blocks in all chains. Filters, when needed, take 32 bits a
    /// block for those seen, within 8 KiB and 16 MiB, and a quarter of that for those seen
    /// again (fewer, and asked about through the replay). On the Mooncake conversation
    /// trace the filters alone found 96% of the blocks only one request has (89% at half
    /// the size); its ids all fit the table, which finds them all.
    pub fn for_blocks(blocks: u64) -> SharingCount {
        SharingCount {
            table: Vec::new(),
            ids: blocks
                .saturating_mul(2)
                .clamp(FEWEST_IDS, MOST_IDS)
                .next_power_of_two(),
            filters: None,
            blocks,
        }
    }

    /// Counts one request's chain.
    pub fn add(&mut self, chain: &[u64]) {
        for (at, &id) in chain.iter().enumerate() {
            if !self.add_to_table(id, at) {
                let blocks = self.blocks;
                let (seen, again) = self.filters.get_or_insert_with(|| {
                    let words = (blocks / 2)
                        .clamp(FEWEST_WORDS, MOST_WORDS)
                        .next_power_of_two();
                    (Filter::new(words), Filter::new(words / 4))
                });
                let key = key(id, at);
                if !seen.insert(key) {
                    again.insert(key);
                }
            }
        }
    }

    /// Counts block `id` at place `at` in the table; `false` when it is not the table's.
    #[inline]
    fn add_to_table(&mut self, id: u64, at: usize) -> bool {
        let Some(place) = table_place(id, at, self.ids) else {
            return false;
        };
        let id = id as usize;
        if id >= self.table.len() {
            // Grown a doubling at a time, as far as the ids go.
            let len = (id + 1).next_power_of_two().max(1 << 12);
            self.table.resize(len.min(self.ids as usize), 0);
        }
        let entry = &mut self.table[id];
        if *entry == 0 {
            *entry = place;
            true
        } else if *entry & PLACE == place {
            *entry |= AGAIN;
            true
        } else {
            // The same id at another place: another block, for the filters.
            false
        }
    }

    /// The blocks seen more than once.
    pub fn done(self) -> Sharing {
        Sharing {
            table: self.table,
            again: self.filters.map(|(_, again)| again),
        }
    }
}

/// Block `id` at place `at` as the table keeps it (its place plus one), when the table may
/// hold it.
#[inline]
fn table_place(id: u64, at: usize, ids: u64) -> Option<u16> {
    (id < ids && at < usize::from(PLACE)).then(|| at as u16 + 1)
}

/// The blocks of a trace's chains that more than one request has (see [`SharingCount`]).
#[derive(Debug, Clone)]
pub struct Sharing {
    /// As counted: it covers no id past the table's bound.
    table: Vec<u16>,
    /// The filters' blocks seen again, when any block went to them.
    again: Option<Filter>,
}

impl Sharing {
    /// How many leading blocks of `chain` (a request's trace chain) other requests' chains
    /// may have at the same place: none of the blocks after them is in another chain there.
    pub fn shared_len(&self, chain: &[u64]) -> usize {
        // Shared blocks lead a chain, so its tail is walked back to the last of them.
        (chain.iter().enumerate().rev())
            .find(|(at, id)| self.again(**id, *at))
            .map_or(0, |(at, _)| at + 1)
    }

    /// Whether block `id` at place `at` was counted more than once (or may have been,
    /// as the filters have it).
    #[inline]
    fn again(&self, id: u64, at: usize) -> bool {
        // The table grew to every id it counted: one past its end is not the table's.
        if let Some(place) = table_place(id, at, self.table.len() as u64)
            && let entry = self.table[id as usize]
            && entry & PLACE == place
        {
            return entry & AGAIN != 0;
        }
        (self.again.as_ref()).is_some_and(|again| again.contains(key(id, at)))
    }
}

/// A block's key: its id mixed with its place.
fn key(id: u64, at: usize) -> u64 {
    mix64(id ^ (at as u64 + 1).wrapping_mul(0xd6e8_feb8_6659_fd93))
}

/// A filter that sets two bits of one word a key: one memory access to ask or to add.
#[derive(Debug, Clone)]
struct Filter {
    words: Vec<u64>,
    mask: u64,
}

impl Filter {
    fn new(len: u64) -> Filter {
        let mut words = vec![0; len as usize];
        // A large zeroed allocation is pages not yet touched. Asking first, as `insert`
        // does, maps each to the shared zero page, and the write that follows must then
        // replace that mapping and flush it from every core running the replay (an
        // interrupt of the replay's own thread per page). One write a page first, here,
        // gives each its own page at once.
        for word in words.iter_mut().step_by(PAGE_WORDS) {
            *std::hint::black_box(word) = 0;
        }
        Filter {
            words,
            mask: len - 1,
        }
    }

    /// The word and the bits of `key`.
    fn place(&self, key: u64) -> (usize, u64) {
        let bits = (1 << ((key >> 52) & 63)) | (1 << ((key >> 58) & 63));
        ((key & self.mask) as usize, bits)
    }

    fn contains(&self, key: u64) -> bool {
        let (word, bits) = self.place(key);
        self.words[word] & bits == bits
    }

    /// Adds `key`; whether it was new (not already contained).
    fn insert(&mut self, key: u64) -> bool {
        let (word, bits) = self.place(key);
        let old = self.words[word];
        self.words[word] = old | bits;
        old & bits != bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chains that share a lead, as a conversation's turns do, then go their own ways.
    fn chains() -> Vec<Vec<u64>> {
        (0..2_000u64)
            .map(|r| {
                let lead = (0..r % 7).map(|i| i * 1_000);
                lead.chain((0..12).map(|i| 1_000_000 + r * 100 + i))
                    .collect()
            })
            .collect()
    }

    /// How many of `chains()` a filter for a trace of `bytes` finds exactly, after
    /// checking that it finds no chain's shared lead shorter than it is.
    fn exact_with(bytes: u64) -> usize {
        let chains = chains();
        let mut count = SharingCount::for_bytes(bytes);
        for chain in &chains {
            count.add(chain);
        }
        let sharing = count.done();
        let mut exact = 0;
        for (r, chain) in chains.iter().enumerate() {
            // Requests share their leads (of `r % 7` blocks); the rest is theirs alone.
            let truly = r % 7;
            let found = sharing.shared_len(chain);
            assert!(found >= truly, "request {r}: {found} < {truly}");
            exact += usize::from(found == truly);
        }
        exact
    }

    #[test]
    fn a_shared_block_is_always_found_shared_and_an_alone_one_nearly_always_alone() {
        // 24,000 blocks, in the filters of a 1 MB trace: a block alone is taken as shared
        // about once in 500 (where the two bits it sets were both set already).
        let exact = exact_with(1 << 20);
        assert!(exact >= 1_940, "{exact} of 2,000 exact");
        // In the smallest filter, most of whose bits they set, many blocks alone are taken
        // as shared, but no shared one as alone.
        let exact = exact_with(0);
        assert!(exact < 1_990, "{exact} of 2,000 exact");
    }

    #[test]
    fn the_same_id_elsewhere_in_a_chain_is_another_block() {
        let mut count = SharingCount::for_bytes(1 << 20);
        count.add(&[1, 2, 3]);
        count.add(&[2, 3, 1]);
        count.add(&[1, 2, 9]);
        let sharing = count.done();
        assert_eq!(sharing.shared_len(&[1, 2, 3]), 2);
        assert_eq!(sharing.shared_len(&[2, 3, 1]), 0);
        assert_eq!(sharing.shared_len(&[]), 0);
    }

    /// Ids from zero up, each at one place, are counted exactly: even with the smallest
    /// filters, which take many of `chains()`' blocks alone as shared, every chain's shared
    /// lead is found as it is.
    #[test]
    fn ids_from_zero_at_one_place_each_are_counted_exactly() {
        // `chains()` renumbered densely: the leads' ids stay, the rest follow them.
        let chains: Vec<Vec<u64>> = (chains().into_iter())
            .map(|chain| {
                // Chain `r`'s own ids are 1,000,000 + 100 r + i, for i below 12.
                let to_dense = |id: u64| match id {
                    ..1_000_000 => id,
                    _ => 10_000 + (id - 1_000_000) / 100 * 12 + id % 100,
                };
                chain.into_iter().map(to_dense).collect()
            })
            .collect();
        let mut count = SharingCount::for_bytes(0);
        for chain in &chains {
            count.add(chain);
        }
        assert!(count.filters.is_none(), "no block went to the filters");
        let sharing = count.done();
        for (r, chain) in chains.iter().enumerate() {
            assert_eq!(sharing.shared_len(chain), r % 7, "request {r}");
        }
    }

    /// Blocks the table cannot keep go to the filters and are counted there: ids past its
    /// bound, and places past the last it can name.
    #[test]
    fn ids_past_the_table_and_far_places_go_to_the_filters() {
        let mut count = SharingCount::for_bytes(0);
        assert_eq!(count.ids, FEWEST_IDS);
        let far = usize::from(PLACE);
        // A long chain, whose blocks from `far` on are kept by the filters; once, then a
        // second chain with the same lead but the last block its own.
        let long: Vec<u64> = (0..far as u64 + 10).collect();
        let mut other = long.clone();
        *other.last_mut().unwrap() = FEWEST_IDS + 5;
        count.add(&long);
        count.add(&other);
        assert!(count.table.len() as u64 <= FEWEST_IDS);
        assert!(count.filters.is_some());
        let sharing = count.done();
        assert_eq!(sharing.shared_len(&long), long.len() - 1);
        assert_eq!(sharing.shared_len(&other), other.len() - 1);
        // An id past the table's bound, in two chains at the same place: shared.
        let mut count = SharingCount::for_bytes(0);
        count.add(&[0, FEWEST_IDS * 3]);
        count.add(&[0, FEWEST_IDS * 3, 7]);
        let sharing = count.done();
        assert_eq!(sharing.shared_len(&[0, FEWEST_IDS * 3, 7]), 2);
    }

    #[test]
    fn the_table_and_the_filters_are_sized_by_the_trace_within_their_bounds() {
        let words = |bytes| {
            let mut count = SharingCount::for_bytes(bytes);
            count.add(&[u64::MAX]);
            count.filters.map(|(seen, _)| seen.words.len() as u64)
        };
        assert_eq!(words(0), Some(FEWEST_WORDS));
        assert_eq!(words(3_000_000), Some(262_144));
        assert_eq!(words(u64::MAX), Some(MOST_WORDS));
        let ids = |bytes| SharingCount::for_bytes(bytes).ids;
        assert_eq!(ids(0), FEWEST_IDS);
        assert_eq!(ids(3_000_000), 1 << 20);
        assert_eq!(ids(u64::MAX), MOST_IDS);
        // The table grows only as far as the ids go.
        let mut count = SharingCount::for_bytes(u64::MAX);
        count.add(&[5, 6, 70_000]);
        assert_eq!(count.table.len(), 1 << 17);
    }
}
