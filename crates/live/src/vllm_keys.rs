//! vLLM's prefix-cache block keys, computed from a prompt's text (`serve --tokenizer`).
//!
//! vLLM names each full block of a prompt by a hash chained from its parent's:
//! `hash((parent_hash, tuple(block_token_ids), extra_keys))`, the first block's parent
//! being `NONE_HASH`, itself `hash(PYTHONHASHSEED)`. The hash is one of its
//! `--prefix-caching-hash-algo` choices: SHA-256 or xxHash3-128 of the tuple serialized as
//! a pickle (protocol 5) or as canonical CBOR. Its KV events carry the low 64 bits of that
//! digest, big-endian (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, the default), so a router
//! that tokenizes a prompt the same way can look its blocks up in what an engine said it
//! stored. This module writes the serializations byte for byte as CPython's `pickle` and
//! `cbor2` do for these three types (bytes, a tuple of non-negative ints, `None`); the
//! test suite checks them against Python.
//!
//! Not covered: `extra_keys` other than `None` (LoRA adapters, multimodal inputs,
//! `cache_salt`), and an engine that runs without `PYTHONHASHSEED` (its first block's
//! parent is then random, and no router can compute its keys).

use std::path::Path;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::LiveError;

/// vLLM's `--prefix-caching-hash-algo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashAlgo {
    /// SHA-256 of the pickle (vLLM's default).
    #[default]
    Sha256,
    /// SHA-256 of canonical CBOR.
    Sha256Cbor,
    /// xxHash3-128 of the pickle.
    Xxhash,
    /// xxHash3-128 of canonical CBOR.
    XxhashCbor,
}

impl HashAlgo {
    /// The names vLLM takes, in its order.
    pub const NAMES: [&'static str; 4] = ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"];

    fn cbor(self) -> bool {
        matches!(self, HashAlgo::Sha256Cbor | HashAlgo::XxhashCbor)
    }

    fn digest(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            HashAlgo::Sha256 | HashAlgo::Sha256Cbor => Sha256::digest(bytes).to_vec(),
            // Python's `xxh3_128_digest`: the canonical form, high half first, big-endian.
            HashAlgo::Xxhash | HashAlgo::XxhashCbor => {
                xxhash_rust::xxh3::xxh3_128(bytes).to_be_bytes().to_vec()
            }
        }
    }
}

impl FromStr for HashAlgo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sha256" => Ok(HashAlgo::Sha256),
            "sha256_cbor" => Ok(HashAlgo::Sha256Cbor),
            "xxhash" => Ok(HashAlgo::Xxhash),
            "xxhash_cbor" => Ok(HashAlgo::XxhashCbor),
            other => Err(format!(
                "unknown hash `{other}` (one of {})",
                HashAlgo::NAMES.join(", ")
            )),
        }
    }
}

/// A prompt as the engine's tokenizer splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// Token ids, special tokens included.
    pub ids: Vec<u32>,
    /// For each token, the byte of the prompt it ends at (0 for an added special token).
    pub ends: Vec<usize>,
}

impl Tokens {
    /// Bytes of the prompt its first `tokens` tokens cover.
    pub fn bytes_of(&self, tokens: usize) -> u64 {
        self.ends[..tokens.min(self.ends.len())]
            .iter()
            .max()
            .map_or(0, |&end| end as u64)
    }
}

/// A Hugging Face tokenizer.
#[cfg(feature = "kv-events")]
pub type Tokenizer = tokenizers::Tokenizer;
/// Without the `kv-events` feature there is no tokenizer, so no [`VllmKeys`] is ever made.
#[cfg(not(feature = "kv-events"))]
pub type Tokenizer = std::convert::Infallible;

/// The tokenizer and hash settings of the engines a router follows.
pub struct VllmKeys {
    tokenizer: Tokenizer,
    algo: HashAlgo,
    none_hash: Vec<u8>,
}

impl std::fmt::Debug for VllmKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VllmKeys")
            .field("algo", &self.algo)
            .finish_non_exhaustive()
    }
}

impl VllmKeys {
    /// A Hugging Face `tokenizer.json`, the engines' hash and their `PYTHONHASHSEED`.
    pub fn load(tokenizer: &Path, algo: HashAlgo, seed: &str) -> Result<VllmKeys, LiveError> {
        let file = tokenizer.display();
        if std::fs::metadata(tokenizer).is_ok_and(|m| !m.is_file()) {
            return Err(LiveError::Settings(format!(
                "--tokenizer {file}: not a regular file"
            )));
        }
        #[cfg(feature = "kv-events")]
        {
            let tokenizer = tokenizers::Tokenizer::from_file(tokenizer)
                .map_err(|e| LiveError::Settings(format!("--tokenizer {file}: {e}")))?;
            Ok(VllmKeys::new(tokenizer, algo, seed))
        }
        #[cfg(not(feature = "kv-events"))]
        {
            let _ = (file, algo, seed);
            Err(LiveError::WithoutKvEvents("--tokenizer"))
        }
    }

    /// From a tokenizer already built.
    pub fn new(tokenizer: Tokenizer, algo: HashAlgo, seed: &str) -> VllmKeys {
        let seed = if algo.cbor() {
            cbor_text(seed)
        } else {
            pickle_text(seed)
        };
        VllmKeys {
            tokenizer,
            algo,
            none_hash: algo.digest(&seed),
        }
    }

    /// The prompt's tokens, special tokens added as vLLM's completions API adds them.
    #[cfg(not(feature = "kv-events"))]
    pub fn tokenize(&self, _prompt: &str) -> Result<Tokens, String> {
        match self.tokenizer {}
    }

    /// The prompt's tokens, special tokens added as vLLM's completions API adds them.
    #[cfg(feature = "kv-events")]
    pub fn tokenize(&self, prompt: &str) -> Result<Tokens, String> {
        let encoding = self
            .tokenizer
            .encode(prompt, true)
            .map_err(|e| e.to_string())?;
        Ok(Tokens {
            ids: encoding.get_ids().to_vec(),
            ends: encoding.get_offsets().iter().map(|&(_, end)| end).collect(),
        })
    }

    /// The keys vLLM's events give the full blocks of `ids`, `block_size` tokens each.
    pub fn chain(&self, ids: &[u32], block_size: u32) -> Vec<u64> {
        let Ok(size) = usize::try_from(block_size) else {
            return Vec::new();
        };
        if size == 0 {
            return Vec::new();
        }
        let mut parent = self.none_hash.clone();
        ids.chunks_exact(size)
            .map(|block| {
                let input = if self.algo.cbor() {
                    cbor_block(&parent, block)
                } else {
                    pickle_block(&parent, block)
                };
                parent = self.algo.digest(&input);
                event_key(&parent)
            })
            .collect()
    }
}

/// The integer a vLLM KV event carries for a digest: its low 64 bits, big-endian.
pub fn event_key(digest: &[u8]) -> u64 {
    let tail = &digest[digest.len().saturating_sub(8)..];
    tail.iter().fold(0, |key, &b| (key << 8) | u64::from(b))
}

// Pickle opcodes (CPython's `Lib/pickle.py`).
const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const SHORT_BINBYTES: u8 = b'C';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const MEMOIZE: u8 = 0x94;
const MARK: u8 = b'(';
const TUPLE: u8 = b't';
const TUPLE_OF: [u8; 3] = [0x85, 0x86, 0x87];
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const NONE: u8 = b'N';
const STOP: u8 = b'.';

/// `pickle.dumps(body, protocol=5)` from the body's opcodes: the protocol, then one frame
/// (CPython frames any body of 4 bytes or more) ending with STOP.
fn pickled(mut body: Vec<u8>) -> Vec<u8> {
    body.push(STOP);
    let mut out = Vec::with_capacity(body.len() + 11);
    out.extend([PROTO, 5, FRAME]);
    out.extend((body.len() as u64).to_le_bytes());
    out.extend(body);
    out
}

fn pickle_text(text: &str) -> Vec<u8> {
    let mut body = Vec::new();
    match u8::try_from(text.len()) {
        Ok(n) => body.extend([SHORT_BINUNICODE, n]),
        Err(_) => {
            body.push(BINUNICODE);
            body.extend((text.len() as u32).to_le_bytes());
        }
    }
    body.extend(text.as_bytes());
    body.push(MEMOIZE);
    pickled(body)
}

fn pickle_int(body: &mut Vec<u8>, n: u32) {
    if let Ok(n) = u8::try_from(n) {
        body.extend([BININT1, n]);
    } else if let Ok(n) = u16::try_from(n) {
        body.push(BININT2);
        body.extend(n.to_le_bytes());
    } else if let Ok(n) = i32::try_from(n) {
        body.push(BININT);
        body.extend(n.to_le_bytes());
    } else {
        // Past 2^31: two's complement, little-endian, in 5 bytes (the sign byte 0).
        body.extend([LONG1, 5]);
        body.extend(n.to_le_bytes());
        body.push(0);
    }
}

/// `(parent, tuple(ids), None)` pickled: the bytes and each tuple memoized once.
fn pickle_block(parent: &[u8], ids: &[u32]) -> Vec<u8> {
    let mut body = Vec::with_capacity(parent.len() + 3 * ids.len() + 8);
    body.push(SHORT_BINBYTES);
    body.push(u8::try_from(parent.len()).unwrap_or(u8::MAX));
    body.extend(parent);
    body.push(MEMOIZE);
    match ids.len() {
        n @ 1..=3 => {
            for &id in ids {
                pickle_int(&mut body, id);
            }
            body.push(TUPLE_OF[n - 1]);
        }
        _ => {
            body.push(MARK);
            for &id in ids {
                pickle_int(&mut body, id);
            }
            body.push(TUPLE);
        }
    }
    body.push(MEMOIZE);
    body.push(NONE);
    body.push(TUPLE_OF[2]);
    body.push(MEMOIZE);
    pickled(body)
}

/// A CBOR head: major type and argument, in the shortest form.
fn cbor_head(out: &mut Vec<u8>, major: u8, n: u64) {
    let major = major << 5;
    if n < 24 {
        out.push(major | n as u8);
    } else if let Ok(n) = u8::try_from(n) {
        out.extend([major | 24, n]);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(major | 25);
        out.extend(n.to_be_bytes());
    } else if let Ok(n) = u32::try_from(n) {
        out.push(major | 26);
        out.extend(n.to_be_bytes());
    } else {
        out.push(major | 27);
        out.extend(n.to_be_bytes());
    }
}

fn cbor_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 9);
    cbor_head(&mut out, 3, text.len() as u64);
    out.extend(text.as_bytes());
    out
}

/// `cbor2.dumps((parent, tuple(ids), None), canonical=True)`: tuples are arrays.
fn cbor_block(parent: &[u8], ids: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parent.len() + 5 * ids.len() + 16);
    cbor_head(&mut out, 4, 3);
    cbor_head(&mut out, 2, parent.len() as u64);
    out.extend(parent);
    cbor_head(&mut out, 4, ids.len() as u64);
    for &id in ids {
        cbor_head(&mut out, 0, u64::from(id));
    }
    out.push(0xf6);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_take_the_smallest_pickle_opcode_that_holds_them() {
        let mut body = Vec::new();
        for n in [7, 300, 70_000, 3_000_000_000] {
            pickle_int(&mut body, n);
        }
        assert_eq!(
            body,
            [
                vec![BININT1, 7],
                vec![BININT2, 0x2c, 0x01],
                vec![BININT, 0x70, 0x11, 0x01, 0x00],
                vec![LONG1, 5, 0x00, 0x5e, 0xd0, 0xb2, 0x00],
            ]
            .concat()
        );
    }

    #[test]
    fn a_block_pickles_as_bytes_a_tuple_of_ints_and_none_in_one_frame() {
        let parent = [9u8; 32];
        let pickle = pickle_block(&parent, &[1, 2, 3, 4]);
        assert_eq!(&pickle[..3], &[PROTO, 5, FRAME]);
        let body = &pickle[11..];
        assert_eq!(
            u64::from_le_bytes(pickle[3..11].try_into().unwrap()),
            body.len() as u64
        );
        assert_eq!(&body[..2], &[SHORT_BINBYTES, 32]);
        assert_eq!(
            &body[34..],
            &[
                MEMOIZE, MARK, BININT1, 1, BININT1, 2, BININT1, 3, BININT1, 4, TUPLE, MEMOIZE,
                NONE, 0x87, MEMOIZE, STOP
            ]
        );
        // Up to three ids: a short tuple opcode and no mark.
        let short = pickle_block(&parent, &[5, 6]);
        assert_eq!(
            &short[11 + 35..],
            &[
                BININT1, 5, BININT1, 6, 0x86, MEMOIZE, NONE, 0x87, MEMOIZE, STOP
            ]
        );
    }

    #[test]
    fn cbor_heads_are_the_shortest_form() {
        let block = cbor_block(&[1, 2], &[0, 23, 24, 255, 256, 65_536]);
        assert_eq!(
            block,
            [
                0x83, 0x42, 1, 2, 0x86, 0x00, 0x17, 0x18, 24, 0x18, 255, 0x19, 1, 0, 0x1a, 0, 1, 0,
                0, 0xf6
            ]
        );
        assert_eq!(cbor_text("ab"), [0x62, b'a', b'b']);
    }

    #[test]
    fn event_keys_are_the_low_64_bits_big_endian() {
        let digest: Vec<u8> = (0..32).collect();
        assert_eq!(event_key(&digest), 0x18191a1b1c1d1e1f);
        assert_eq!(event_key(&[1, 2]), 0x0102);
    }

    #[cfg(feature = "kv-events")]
    #[test]
    fn the_chain_covers_whole_blocks_and_shares_a_prefix() {
        let tokenizer =
            tokenizers::Tokenizer::new(tokenizers::models::wordlevel::WordLevel::default());
        let keys = VllmKeys::new(tokenizer, HashAlgo::Sha256, "0");
        let a = keys.chain(&(0..40).collect::<Vec<_>>(), 16);
        let b = keys.chain(&(0..32).chain(100..110).collect::<Vec<_>>(), 16);
        assert_eq!(a.len(), 2);
        assert_eq!(a, b[..2]);
        let other_seed = VllmKeys::new(
            tokenizers::Tokenizer::new(tokenizers::models::wordlevel::WordLevel::default()),
            HashAlgo::Sha256,
            "1",
        );
        assert_ne!(other_seed.chain(&(0..16).collect::<Vec<_>>(), 16)[0], a[0]);
        assert!(keys.chain(&[1, 2, 3], 0).is_empty());
    }
}
