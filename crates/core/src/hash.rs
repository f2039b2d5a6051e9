//! Fixed hashing shared by the host and plugins.
//!
//! Block-hash chains are computed by the host and compared by plugins, so both must agree on
//! one function forever: xxh3-64, seeded. Maps keyed by those hashes (or by Mooncake's small
//! integer ids) use [`U64Map`], whose hasher mixes the key with one multiplication: enough to
//! spread sequential ids, and far cheaper than SipHash in the hot path.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes `bytes` with `seed` (xxh3-64). Stable across releases: replays depend on it.
pub fn hash64(bytes: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, seed)
}

/// Extends a prefix-chain hash by one block: the result identifies `prefix ++ block`.
pub fn chain(previous: u64, block: &[u8]) -> u64 {
    hash64(block, previous)
}

/// A hasher for `u64` keys: a multiply-and-fold mix.
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
        let product = u128::from(self.0 ^ key) * 0x9E37_79B9_7F4A_7C15_u128;
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
    fn write_u32(&mut self, key: u32) {
        self.write_u64(u64::from(key));
    }
}

/// A `HashMap` keyed by `u64` with [`U64Hasher`].
pub type U64Map<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// A `HashSet` of `u64` with [`U64Hasher`].
pub type U64Set = HashSet<u64, BuildHasherDefault<U64Hasher>>;
