//! A host-memory tier below the GPU KV cache: the blocks an engine computed, kept in host
//! memory (least recently used out first) and loaded back instead of recomputed.
//!
//! The rules follow the default CPU path of vLLM's `OffloadingConnector` as NVIDIA Dynamo's
//! mocker models it (`lib/mocker/src/host_offload/`, `vllm_offloading_connector_defaults`,
//! its `HostOffloadManager` and the vLLM adapter's `compute_not_before`): the prompt blocks
//! a request completes in a step are stored at the step's end (only those the tier lacks)
//! as one transfer on the link's device-to-host lane, loadable when it ends; until then the
//! GPU blocks it reads are not written over, so a step that would write one starts when
//! the store ends; a request's reusable prefix is its GPU-cached leading run, then the run
//! of the blocks right after it that the tier holds; those are loaded on the host-to-device
//! lane (`latency_ms` + bytes over `h2d_gbps`, after the lane's earlier transfers and the
//! blocks' stores), and the request waits for the load while the engine's other requests
//! go on; the host keeps its copy; a lookup makes the blocks it matched the most recently
//! used (see the `tiers` module). What the lab leaves out: deferring a request whose blocks
//! are still being stored (it is admitted and waits for them instead), and vLLM's headroom
//! for the prefills of loads in flight.
//!
//! A shared tier ([`SharedStore`], engine key `shared_tier`) is one such store for the whole
//! fleet, as an LMCache server or a Mooncake store is: every engine that has the key stores
//! the prompt blocks it computes there and loads from it any block any of them stored, over
//! its own link (`d2h_gbps`, `h2d_gbps`, `latency_ms`); `blocks` is the store's capacity and
//! must be the same on every engine that names it. A request's reusable run goes on past
//! the GPU's, block by block, while the host tier or the shared store holds the next block
//! (the host tier first); the blocks of the shared store are loaded after those of the host
//! tier, so the request waits for both loads, one after the other.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use routerlab_core::hash::U64Map;
use serde::{Deserialize, Serialize};

use crate::transfer::delay_ns_of_ms;

/// A host tier's settings (engine config key `host_tier`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostTier {
    /// Blocks it holds (of the engine's block size).
    pub blocks: u32,
    /// Device-to-host bandwidth, GB/s (10^9 bytes a second), the engine's: every
    /// tensor-parallel GPU's link together, as a store moves the whole model's KV.
    pub d2h_gbps: f64,
    /// Host-to-device bandwidth, GB/s, the engine's as `d2h_gbps` is: what a load takes its
    /// time from.
    pub h2d_gbps: f64,
    /// Time to the first byte of a load, milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
    /// The engine's steps wait for this tier's transfers, as LMCache's vLLM connector made
    /// them (its `start_load_kv` loads a step's blocks before the forward pass, its
    /// `wait_for_save` stores them after it, neither layer by layer): a load holds back the
    /// step its request joins, and a step that completes blocks the tier lacks ends once
    /// they are stored. Without, the transfers run beside the steps (vLLM's
    /// `OffloadingConnector`, as NVIDIA Dynamo's mocker has it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocking: bool,
}

impl HostTier {
    /// Checks the settings of the tier under engine key `key` (`host_tier` or
    /// `shared_tier`); the message names the key.
    pub fn validate(&self, key: &str) -> Result<(), String> {
        if self.blocks == 0 {
            return Err(format!("engine `{key}.blocks` must be at least 1"));
        }
        if self.blocks > 1 << 26 {
            return Err(format!("engine `{key}.blocks` must be at most 67108864"));
        }
        for (field, value) in [("d2h_gbps", self.d2h_gbps), ("h2d_gbps", self.h2d_gbps)] {
            if !value.is_finite() || value <= 0.0 {
                return Err(format!(
                    "engine `{key}.{field}` must be a positive number, not {value}"
                ));
            }
        }
        if !self.latency_ms.is_finite() || !(0.0..=3_600_000.0).contains(&self.latency_ms) {
            return Err(format!(
                "engine `{key}.latency_ms` must be from 0 to an hour, not {}",
                self.latency_ms
            ));
        }
        Ok(())
    }

    /// Nanoseconds to load `bytes` back to the GPU (none for no bytes; past
    /// [`crate::transfer::LONGEST_DELAY_NS`] when longer than the simulator's clock can hold).
    pub fn load_ns(&self, bytes: u64) -> u64 {
        if bytes == 0 {
            return 0;
        }
        delay_ns_of_ms(self.latency_ms + bytes as f64 / (self.h2d_gbps * 1e6))
    }
}

/// One direction of a tier's link: transfers go through it one after another (first in,
/// first out), each taking its bytes over the bandwidth after the one before it ends.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lane {
    /// When the last transfer submitted ends, ns.
    tail_ns: u64,
}

impl Lane {
    /// Submits a transfer of `ns` that may start at `not_before_ns`; returns its end.
    pub fn submit(&mut self, not_before_ns: u64, ns: u64) -> u64 {
        self.tail_ns = not_before_ns.max(self.tail_ns).saturating_add(ns);
        self.tail_ns
    }
}

impl HostTier {
    /// Nanoseconds `bytes` take over a bandwidth of `gbps` GB/s (no latency).
    fn bytes_ns(bytes: u64, gbps: f64) -> u64 {
        delay_ns_of_ms(bytes as f64 / gbps / 1e6)
    }

    /// Nanoseconds to store `bytes` from the GPU (device to host), no latency.
    pub fn store_ns(&self, bytes: u64) -> u64 {
        HostTier::bytes_ns(bytes, self.d2h_gbps)
    }
}

/// The blocks a host tier holds, by prefix hash, least recently used first out; each with
/// the time its store ends (before then it is on its way, not yet loadable).
pub struct HostCache {
    capacity: usize,
    /// Hash -> (its last use, when its store ends).
    stamp_of: U64Map<(u64, u64)>,
    /// Last use -> hash, oldest first.
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
    /// Blocks stored (a block stored again after its eviction counts again).
    pub stores: u64,
    /// Blocks evicted to make room.
    pub evictions: u64,
    /// The most blocks it held at once.
    pub peak: u64,
}

impl HostCache {
    /// An empty tier of `capacity` blocks.
    pub fn new(capacity: u32) -> HostCache {
        HostCache {
            capacity: capacity.max(1) as usize,
            stamp_of: U64Map::default(),
            by_stamp: BTreeMap::new(),
            clock: 0,
            stores: 0,
            evictions: 0,
            peak: 0,
        }
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.stamp_of.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.stamp_of.is_empty()
    }

    /// Its capacity in blocks.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether it holds the block `hash` (stored, or on its way).
    pub fn holds(&self, hash: u64) -> bool {
        self.stamp_of.contains_key(&hash)
    }

    /// When the store of the block `hash` ends, if it holds it.
    pub fn ready_at(&self, hash: u64) -> Option<u64> {
        self.stamp_of.get(&hash).map(|(_, ready)| *ready)
    }

    /// Makes the block `hash`, if held, the most recently used.
    pub fn touch(&mut self, hash: u64) {
        self.clock += 1;
        if let Some((stamp, _)) = self.stamp_of.get_mut(&hash) {
            self.by_stamp.remove(stamp);
            *stamp = self.clock;
            self.by_stamp.insert(self.clock, hash);
        }
    }

    /// Stores the block `hash`, loadable from `ready_ns`, unless it is held already; the
    /// least recently used block leaves when the tier is full. Whether it stored it.
    pub fn store(&mut self, hash: u64, ready_ns: u64) -> bool {
        if self.stamp_of.contains_key(&hash) {
            return false;
        }
        if self.stamp_of.len() >= self.capacity
            && let Some((_, oldest)) = self.by_stamp.pop_first()
        {
            self.stamp_of.remove(&oldest);
            self.evictions += 1;
        }
        self.clock += 1;
        self.stamp_of.insert(hash, (self.clock, ready_ns));
        self.by_stamp.insert(self.clock, hash);
        self.stores += 1;
        self.peak = self.peak.max(self.stamp_of.len() as u64);
        true
    }

    /// How many of `chain`'s blocks, from the first, it holds (changing nothing).
    pub fn run(&self, chain: &[u64]) -> usize {
        chain
            .iter()
            .take_while(|h| self.stamp_of.contains_key(*h))
            .count()
    }
}

/// The fleet's shared tier: one [`HostCache`] every engine with a `shared_tier` reaches
/// (cloning gives another handle to the same store).
#[derive(Clone)]
pub struct SharedStore(Arc<Mutex<HostCache>>);

impl SharedStore {
    /// An empty store of `capacity` blocks.
    pub fn new(capacity: u32) -> SharedStore {
        SharedStore(Arc::new(Mutex::new(HostCache::new(capacity))))
    }

    /// The store, locked. (One engine at a time works on it; every change to it is
    /// complete before the lock is let go, so a lock poisoned by a panic elsewhere is taken
    /// as it is.)
    pub fn lock(&self) -> MutexGuard<'_, HostCache> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `other` is a handle to the same store.
    pub fn same_as(&self, other: &SharedStore) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = self.lock();
        let (len, capacity) = (store.len(), store.capacity());
        write!(f, "SharedStore({len}/{capacity} blocks)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_tier_evicts_the_least_recently_used_block() {
        let mut host = HostCache::new(3);
        for hash in [10, 11, 12] {
            host.store(hash, 0);
        }
        // Using 10 makes 11 the oldest.
        host.touch(10);
        host.store(13, 5);
        assert_eq!(host.evictions, 1);
        assert_eq!(host.run(&[11]), 0, "11 was the least recently used");
        assert_eq!(host.run(&[10]), 1);
        assert_eq!(host.run(&[12, 13]), 2);
        assert_eq!(host.ready_at(13), Some(5));
        // Storing what it holds changes nothing.
        assert!(!host.store(13, 9));
        assert_eq!(host.ready_at(13), Some(5));
        assert_eq!((host.len(), host.stores, host.peak), (3, 4, 3));
        assert_eq!(
            host.run(&[12, 13, 10, 11]),
            3,
            "a run stops at a block it lacks"
        );
    }

    #[test]
    fn a_load_takes_its_latency_plus_its_bytes_over_the_bandwidth() {
        let tier = HostTier {
            blocks: 65_536,
            d2h_gbps: 25.0,
            h2d_gbps: 25.0,
            latency_ms: 0.0,
            blocking: false,
        };
        // One 64-token block of 131,072 bytes a token: 8,388,608 bytes at 25 GB/s.
        assert_eq!(tier.load_ns(64 * 131_072), 335_544);
        let slow = HostTier {
            latency_ms: 1.5,
            h2d_gbps: 1.0,
            ..tier
        };
        assert_eq!(slow.load_ns(1_000_000), 2_500_000, "1.5 ms + 1 ms");
        assert_eq!(slow.load_ns(0), 0, "no bytes, no latency");
        assert!(tier.validate("host_tier").is_ok());
        let zero = HostTier {
            h2d_gbps: 0.0,
            ..tier
        };
        assert_eq!(
            zero.validate("shared_tier").unwrap_err(),
            "engine `shared_tier.h2d_gbps` must be a positive number, not 0"
        );
    }
}
