//! `serve --kv-events`: what each engine holds, from its KV events. One thread per engine
//! subscribes to its PUB socket ([`crate::kv_events`]) and keeps a set of the block
//! hashes it stored and did not evict. A batch whose sequence number skips some is a gap:
//! the missed batches are asked of the engine's replay socket and applied first; when they
//! cannot all be had (no replay socket, no answer within a second, some no longer kept),
//! the set is emptied and rebuilt from what comes next: a router then under-counts what
//! an engine holds, never over-counts it. A sequence number going back (the engine
//! restarted) empties it too. A subscriber that joins late asks for everything from 0 and
//! applies it when the engine still keeps it all. A set holds at most [`MAX_BLOCKS`]; past
//! that it is emptied.
//!
//! A request's cached prefix on an engine is its prompt's block chain, in the engine's
//! block size as its events say, walked while the set has the block. The chain is
//! `routerlab engine`'s text chain, or with `serve --tokenizer` vLLM's keys of the
//! prompt's tokens ([`crate::vllm_keys`]); the prefix is then the bytes its held tokens
//! cover.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use routerlab_core::Unit;
use routerlab_trace::blocks::text_engine_chain;

use crate::LiveError;
use crate::kv_events::Change;
use crate::vllm_keys::{Tokens, VllmKeys};

/// What talks ZeroMQ: the subscriber threads and the replay fetch.
#[cfg(feature = "kv-events")]
mod follow;
/// Without ZeroMQ (the `kv-events` feature), `--kv-events` is refused.
#[cfg(not(feature = "kv-events"))]
mod follow {
    use std::sync::Arc;

    use super::{KvIndex, KvSubscription};
    use crate::LiveError;

    pub(super) fn subscribe(
        _index: &Arc<KvIndex>,
        subscriptions: &[KvSubscription],
    ) -> Result<(), LiveError> {
        match subscriptions {
            [] => Ok(()),
            _ => Err(LiveError::WithoutKvEvents("--kv-events")),
        }
    }
}

/// Blocks one engine's set holds at most.
pub const MAX_BLOCKS: usize = 1 << 24;
/// The largest message read from a publisher or its replay socket: a batch of one engine
/// step's events is kilobytes (a 128k-token prefill's is under 1 MiB). A larger one ends
/// the connection (it reconnects, and the batches lost show as a gap).
pub const MAX_MESSAGE_BYTES: i64 = 8 << 20;
/// Messages queued from one publisher before it drops them (they show as a gap): with
/// [`MAX_MESSAGE_BYTES`], at most 64 MiB waits per engine however fast it publishes.
pub const MAX_QUEUED_MESSAGES: i32 = 8;

/// One engine's events: where they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct KvSubscription {
    /// The engine, as named in `--endpoints`.
    pub endpoint: String,
    /// Its PUB socket.
    pub url: String,
    /// Its replay socket, if it has one.
    pub replay: Option<String>,
}

/// What one engine is known to hold.
#[derive(Default)]
struct Held {
    blocks: HashSet<u64>,
    block_size: Option<u32>,
    #[cfg_attr(not(feature = "kv-events"), allow(dead_code))]
    last_seq: Option<u64>,
}

impl Held {
    #[cfg_attr(not(feature = "kv-events"), allow(dead_code))]
    fn apply(&mut self, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::Stored { hashes, block_size } => {
                    self.block_size = Some(block_size);
                    self.blocks.extend(hashes);
                    if self.blocks.len() > MAX_BLOCKS {
                        self.blocks.clear();
                    }
                }
                Change::Removed { hashes } => {
                    for hash in hashes {
                        self.blocks.remove(&hash);
                    }
                }
                Change::Cleared => self.blocks.clear(),
            }
        }
    }
}

/// Counts of what the subscriptions saw, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KvCounts {
    /// Batches applied.
    pub batches: u64,
    /// Sequence gaps seen.
    pub gaps: u64,
    /// Gaps recovered through the replay socket.
    pub resynced: u64,
    /// Times the index started over (a gap not recovered, a restarted engine).
    pub lost: u64,
    /// Batches that did not decode.
    pub undecodable: u64,
    /// Times the connection to the publisher was closed under the subscriber (an
    /// oversized message ends it) and made afresh.
    pub reconnects: u64,
}

struct Slot {
    endpoint: String,
    held: Mutex<(Held, KvCounts)>,
}

/// Every subscribed engine's set.
pub struct KvIndex {
    slots: Vec<Slot>,
    /// How prompts become the engines' block keys, when they are vLLM's (`--tokenizer`);
    /// else the text engine chain of `routerlab engine`.
    keys: Option<Arc<VllmKeys>>,
}

impl KvIndex {
    /// Connects to every subscription and starts its thread; `keys` say how a prompt
    /// becomes the engines' block keys when they are vLLM's.
    pub fn start(
        subscriptions: &[KvSubscription],
        keys: Option<Arc<VllmKeys>>,
    ) -> Result<Arc<KvIndex>, LiveError> {
        let index = Arc::new(KvIndex {
            keys,
            slots: subscriptions
                .iter()
                .map(|s| Slot {
                    endpoint: s.endpoint.clone(),
                    held: Mutex::new((Held::default(), KvCounts::default())),
                })
                .collect(),
        });
        follow::subscribe(&index, subscriptions)?;
        Ok(index)
    }

    /// The endpoints subscribed, in `--kv-events` order.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.slots.iter().map(|s| s.endpoint.as_str())
    }

    /// The slot of `endpoint`, if it is subscribed.
    pub fn slot_of(&self, endpoint: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.endpoint == endpoint)
    }

    /// The counts of slot `slot`.
    pub fn counts(&self, slot: usize) -> KvCounts {
        self.slots[slot]
            .held
            .lock()
            .map_or_else(|p| p.into_inner().1, |g| g.1)
    }

    /// Whether slot `slot` holds `hash` now (tests).
    #[cfg(all(test, feature = "kv-events"))]
    fn holds(&self, slot: usize, hash: u64) -> bool {
        self.slots[slot]
            .held
            .lock()
            .unwrap()
            .0
            .blocks
            .contains(&hash)
    }

    /// Leading blocks of `chain` slot `slot` holds, and its block size, if it said one.
    fn held_prefix(&self, slot: usize, chain_for: &dyn Fn(u32) -> Vec<u64>) -> u64 {
        let guard = self.slots[slot]
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = &guard.0;
        let Some(block) = held.block_size else {
            return 0;
        };
        let chain = chain_for(block);
        let blocks = chain.iter().take_while(|h| held.blocks.contains(h)).count() as u64;
        blocks * u64::from(block)
    }

    #[cfg_attr(not(feature = "kv-events"), allow(dead_code))]
    fn lock(&self, slot: usize) -> std::sync::MutexGuard<'_, (Held, KvCounts)> {
        self.slots[slot]
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `cached_prefix` for a request from the index: by stable endpoint index, in the
/// request's unit (bytes of a prompt), the chain computed once per block size: from the
/// prompt's tokens with `--tokenizer` (tokenized before the plugins' lock was taken).
struct Lookup<'a> {
    index: &'a KvIndex,
    /// (stable index, slot).
    slots: Vec<(u32, usize)>,
    prompt: &'a [u8],
    tokens: Option<&'a Tokens>,
    chain: RefCell<Option<(u32, Vec<u64>)>>,
}

impl<'a> Lookup<'a> {
    fn new(
        index: &'a KvIndex,
        slots: Vec<(u32, usize)>,
        prompt: &'a [u8],
        tokens: Option<&'a Tokens>,
    ) -> Self {
        Lookup {
            index,
            slots,
            prompt,
            tokens,
            chain: RefCell::new(None),
        }
    }

    /// What endpoint `stable` holds of the prompt, bytes; `None` when it is not subscribed.
    fn units(&self, stable: u32) -> Option<u64> {
        let &(_, slot) = self.slots.iter().find(|(i, _)| *i == stable)?;
        let keys = self.index.keys.as_ref();
        let chain_for = |block: u32| {
            let mut cached = self.chain.borrow_mut();
            match &*cached {
                Some((size, chain)) if *size == block => chain.clone(),
                _ => {
                    let chain = match keys {
                        Some(keys) => self
                            .tokens
                            .map_or_else(Vec::new, |tokens| keys.chain(&tokens.ids, block)),
                        None => text_engine_chain(self.prompt, block),
                    };
                    *cached = Some((block, chain.clone()));
                    chain
                }
            }
        };
        let tokens = self.index.held_prefix(slot, &chain_for);
        let bytes = match keys {
            Some(_) => self.tokens.map_or(0, |held| {
                held.bytes_of(usize::try_from(tokens).unwrap_or(usize::MAX))
            }),
            None => Unit::Bytes.of_tokens(tokens),
        };
        Some(bytes.min(self.prompt.len() as u64))
    }
}

/// Calls `f` with `data` (of `routed`), lending it `cached_prefix` from `index` (the
/// endpoints of `slots`: stable index, slot) when KV events are followed.
pub(super) fn lend<R>(
    index: Option<&KvIndex>,
    slots: Vec<(u32, usize)>,
    routed: &super::routed::Routed,
    data: routerlab_host::RequestData<'_>,
    f: impl FnOnce(&routerlab_host::RequestData<'_>) -> R,
) -> R {
    let Some(index) = index else {
        return f(&data);
    };
    let lookup = Lookup::new(index, slots, &routed.prompt, routed.tokens.as_deref());
    let answer = |i| lookup.units(i);
    let mut data: routerlab_host::RequestData<'_> = data;
    data.cached_prefix = Some(&answer);
    f(&data)
}

/// What endpoint `slot` of `index` holds of `routed`'s prompt, bytes.
pub(super) fn held_units(index: &KvIndex, slot: usize, routed: &super::routed::Routed) -> u64 {
    Lookup::new(
        index,
        vec![(0, slot)],
        &routed.prompt,
        routed.tokens.as_deref(),
    )
    .units(0)
    .unwrap_or(0)
}
