//! Fixed hashing shared by the host and plugins.
//!
//! Block-hash chains are computed by the host and compared by plugins, so both must agree on
//! one function forever: xxh3-64, seeded. Maps keyed by those hashes (or by Mooncake's small
//! integer ids) use [`U64Map`], whose hasher mixes the key with one multiplication: enough to
//! spread sequential ids, and far cheaper than SipHash in the hot path. [`BlockInterner`]
//! goes one step further and replaces keys by dense ids, so per-block state can be an array.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes `bytes` with `seed` (xxh3-64). Stable across releases: replays depend on it.
pub fn hash64(bytes: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, seed)
}

/// Extends a prefix-chain hash by one block: the result identifies `prefix ++ block`.
pub fn chain(previous: u64, block: &[u8]) -> u64 {
    hash64(block, previous)
}

/// The multiply-and-fold mix of [`U64Hasher`]: one 128-bit product, its halves folded.
/// For tables that take a key's hash directly (hashbrown's `HashTable`).
#[inline]
pub fn mix64(key: u64) -> u64 {
    let product = u128::from(key) * 0x9E37_79B9_7F4A_7C15_u128;
    (product as u64) ^ ((product >> 64) as u64)
}

/// A hasher for `u64` keys: a multiply-and-fold mix ([`mix64`]).
#[derive(Default, Clone, Copy)]
pub struct U64Hasher(u64);

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = mix64(self.0 ^ key);
    }
    fn write_u32(&mut self, key: u32) {
        self.write_u64(u64::from(key));
    }
}

/// A `HashMap` keyed by `u64` with [`U64Hasher`].
pub type U64Map<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// Keys below this always go to the direct table, however few blocks have been seen.
const DIRECT_FLOOR: u64 = 1 << 16;

/// Turns block hashes into dense ids: `0, 1, 2, ...` in order of first appearance, the same
/// id for the same hash, for as long as the interner lives.
///
/// Why: a table keyed by hash scatters a trace's blocks all over memory, so every per-block
/// lookup in a large replay is a cache miss. Ids handed out in order of first appearance
/// keep the blocks of one conversation next to each other, and let per-block state live in
/// plain arrays (a bit per endpoint, a holder mask per trie node).
///
/// Small keys (Mooncake's ids count up from 0) are looked up in a directly indexed table
/// whose size stays within a small multiple of the number of ids handed out; other keys (text
/// chain hashes) go through a [`U64Map`]. Either way memory grows with distinct blocks.
#[derive(Default, Debug, Clone)]
pub struct BlockInterner {
    /// `direct[key]` = id + 1 of a small key, 0 = not seen.
    direct: Vec<u32>,
    /// Keys that were too large for `direct` when first seen.
    other: U64Map<u32>,
    /// Ids handed out so far.
    len: u32,
}

impl BlockInterner {
    /// Ids handed out so far; every id is below this.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether no id has been handed out.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The id of `hash`, handing out the next one if it is new. `None` once `u32::MAX` ids
    /// are taken (some 4 billion distinct blocks).
    #[inline]
    pub fn intern(&mut self, hash: u64) -> Option<u32> {
        if let Some(slot) = self.direct.get(hash as usize)
            && *slot != 0
        {
            return Some(*slot - 1);
        }
        self.intern_slow(hash)
    }

    /// The id of `hash`, if it has one.
    #[inline]
    pub fn get(&self, hash: u64) -> Option<u32> {
        match self.direct.get(hash as usize) {
            Some(slot) if *slot != 0 => Some(*slot - 1),
            _ => self.other.get(&hash).copied(),
        }
    }

    /// Interns every hash of `hashes` into `ids` (cleared first). `false` when ids ran out.
    pub fn intern_all(&mut self, hashes: &[u64], ids: &mut Vec<u32>) -> bool {
        ids.clear();
        for hash in hashes {
            match self.intern(*hash) {
                Some(id) => ids.push(id),
                None => return false,
            }
        }
        true
    }

    #[cold]
    fn intern_slow(&mut self, hash: u64) -> Option<u32> {
        let limit = DIRECT_FLOOR.max(4 * u64::from(self.len));
        if hash >= limit {
            if let Some(id) = self.other.get(&hash) {
                return Some(*id);
            }
            let id = self.next_id()?;
            self.other.insert(hash, id);
            return Some(id);
        }
        let index = hash as usize;
        if index >= self.direct.len() {
            let grown = (index + 1).max(self.direct.len() * 2).min(limit as usize);
            self.direct.resize(grown, 0);
        }
        // The key may have been seen while it was still too large for the direct table.
        let earlier = if self.other.is_empty() {
            None
        } else {
            self.other.remove(&hash)
        };
        let id = match earlier {
            Some(id) => id,
            None => self.next_id()?,
        };
        self.direct[index] = id + 1;
        Some(id)
    }

    fn next_id(&mut self) -> Option<u32> {
        // `u32::MAX` itself is never handed out, so `id + 1` always fits in a slot.
        let id = self.len;
        self.len = self.len.checked_add(1).filter(|n| *n < u32::MAX)?;
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_in_order_of_first_appearance() {
        let mut interner = BlockInterner::default();
        let keys = [7u64, 3, 7, u64::MAX, 1 << 40, 3, 0, u64::MAX];
        let ids: Vec<u32> = keys.iter().map(|k| interner.intern(*k).unwrap()).collect();
        assert_eq!(ids, [0, 1, 0, 2, 3, 1, 4, 2]);
        assert_eq!(interner.len(), 5);
        assert_eq!(interner.get(1 << 40), Some(3));
        assert_eq!(interner.get(0), Some(4));
        assert_eq!(interner.get(8), None);
        assert_eq!(interner.get(1 << 41), None);
    }

    #[test]
    fn a_key_seen_as_large_keeps_its_id_when_the_direct_table_reaches_it() {
        let mut interner = BlockInterner::default();
        let late = DIRECT_FLOOR + 10;
        assert_eq!(interner.intern(late), Some(0));
        // Hand out enough ids that `late` falls inside the direct table's limit.
        for key in 0..DIRECT_FLOOR {
            interner.intern(key).unwrap();
        }
        assert_eq!(interner.get(late), Some(0));
        assert_eq!(interner.intern(late), Some(0));
        assert_eq!(interner.intern(late), Some(0));
        assert_eq!(interner.len() as u64, DIRECT_FLOOR + 1);
    }

    #[test]
    fn the_direct_table_stays_proportional_to_the_ids_handed_out() {
        let mut interner = BlockInterner::default();
        for key in (0..1_000_000u64).step_by(1_000) {
            interner.intern(key).unwrap();
        }
        assert_eq!(interner.len(), 1_000);
        assert!(interner.direct.len() as u64 <= DIRECT_FLOOR);
    }
}
