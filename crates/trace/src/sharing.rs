//! Which blocks of a trace's chains more than one request has, found in a pass over the
//! trace: a timed replay's engines need not index a block that no other request will ask
//! for (see [`crate::blocks::shared_engine_blocks`]).
//!
//! A block is named by its id and its position in the chain. The sets are filters of
//! fixed size, wrong one way only: a block two requests have is always found shared; a
//! block one request has is found alone but for rare false positives (then it is taken as
//! shared, which costs speed, never a result).

use routerlab_core::hash::mix64;

/// Smallest and largest filters, in 64-bit words (8 KiB and 16 MiB).
const FEWEST_WORDS: u64 = 1 << 10;
const MOST_WORDS: u64 = 1 << 21;

/// 64-bit words in a 4 KiB page.
const PAGE_WORDS: usize = 512;

/// The blocks of the chains counted so far: those seen once, and those seen again.
#[derive(Debug, Clone)]
pub struct SharingCount {
    seen: Filter,
    again: Filter,
}

impl SharingCount {
    /// Room for the chains of a trace of about `bytes` bytes (a block id takes about 8
    /// bytes of a line: its digits, a comma and a space).
    pub fn for_bytes(bytes: u64) -> SharingCount {
        SharingCount::for_blocks(bytes / 8)
    }

    /// Room for about `blocks` blocks in all chains: 32 bits a block for those seen,
    /// within 8 KiB and 16 MiB, and a quarter of that for those seen again (fewer, and
    /// asked about through the replay). On the Mooncake conversation trace this finds 96%
    /// of the blocks only one request has (89% at half the size).
    pub fn for_blocks(blocks: u64) -> SharingCount {
        let words = (blocks / 2)
            .clamp(FEWEST_WORDS, MOST_WORDS)
            .next_power_of_two();
        SharingCount {
            seen: Filter::new(words),
            again: Filter::new(words / 4),
        }
    }

    /// Counts one request's chain.
    pub fn add(&mut self, chain: &[u64]) {
        for (at, &id) in chain.iter().enumerate() {
            let key = key(id, at);
            if !self.seen.insert(key) {
                self.again.insert(key);
            }
        }
    }

    /// The blocks seen more than once.
    pub fn done(self) -> Sharing {
        Sharing { again: self.again }
    }
}

/// The blocks of a trace's chains that more than one request has (see [`SharingCount`]).
#[derive(Debug, Clone)]
pub struct Sharing {
    again: Filter,
}

impl Sharing {
    /// How many leading blocks of `chain` (a request's trace chain) other requests' chains
    /// may have at the same place: none of the blocks after them is in another chain there.
    pub fn shared_len(&self, chain: &[u64]) -> usize {
        // Shared blocks lead a chain, so its tail is walked back to the last of them.
        (chain.iter().enumerate().rev())
            .find(|(at, id)| self.again.contains(key(**id, *at)))
            .map_or(0, |(at, _)| at + 1)
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

    #[test]
    fn a_filter_is_sized_by_the_trace_within_its_bounds() {
        let words = |bytes| SharingCount::for_bytes(bytes).seen.words.len() as u64;
        assert_eq!(words(0), FEWEST_WORDS);
        assert_eq!(words(3_000_000), 262_144);
        assert_eq!(words(u64::MAX), MOST_WORDS);
    }
}
