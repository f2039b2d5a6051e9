//! An engine's KV tiers below its GPU cache, and the transfers between them: what it
//! stores, what a request can load, and when the bytes arrive (see [`crate::host`] for
//! the rules).
//!
//! Each tier the engine reaches has a link of two lanes, device to host and host to
//! device, each first in, first out (NVIDIA Dynamo's mocker: `FifoTransferLane`). The
//! prompt blocks a request completes in a step are stored as one transfer at the step's
//! end, and become loadable when it ends; until then the GPU blocks they are read from
//! cannot be written over: the engine's next step waits for it when it would write one
//! (Dynamo's source-reuse fence, engine-wide as its vLLM adapter's `compute_not_before`).
//! A load starts once its blocks are stored, its destination blocks are free of such
//! stores, and the lane is free. A blocking tier (`HostTier::blocking`, LMCache's
//! connector) moves its blocks within the steps instead: a step's stores are part of its
//! time and fence nothing, and a load holds back the step its request joins.

use crate::config::EngineConfig;
use crate::host::{HostCache, HostTier, Lane, SharedStore};

/// One tier as an engine reaches it: its link's settings and lanes.
#[derive(Debug, Clone, Copy)]
struct Link {
    tier: HostTier,
    d2h: Lane,
    h2d: Lane,
}

impl Link {
    fn new(tier: HostTier) -> Link {
        Link {
            tier,
            d2h: Lane::default(),
            h2d: Lane::default(),
        }
    }
}

/// What a load brought in, and when it is done.
pub(crate) struct Loaded {
    /// Blocks from the host tier.
    pub(crate) host: usize,
    /// Blocks from the shared tier.
    pub(crate) shared: usize,
    /// When the last of them is on the GPU.
    pub(crate) ready_ns: u64,
    /// Whether a tier it came from is blocking: the step waits for it, not the request.
    pub(crate) blocking: bool,
}

/// The tiers of one engine.
pub(crate) struct Tiers {
    pub(crate) host: Option<HostCache>,
    pub(crate) shared: Option<SharedStore>,
    host_link: Option<Link>,
    shared_link: Option<Link>,
    /// KV bytes of one block.
    block_bytes: u64,
    /// Per GPU block, when the store reading it ends (empty without tiers).
    fence_ns: Vec<u64>,
    /// The blocks a request completed in a step, to store (reused allocation).
    cohort: Vec<(u32, u64)>,
}

impl Tiers {
    /// Forgets when stores into GPU blocks end: the GPU cache they read is gone.
    pub(crate) fn reset_fences(&mut self) {
        self.fence_ns.iter_mut().for_each(|f| *f = 0);
    }

    pub(crate) fn new(config: &EngineConfig) -> Tiers {
        let any = config.host_tier.is_some() || config.shared_tier.is_some();
        Tiers {
            host: config.host_tier.map(|t| HostCache::new(t.blocks)),
            shared: config.shared_tier.map(|t| SharedStore::new(t.blocks)),
            host_link: config.host_tier.map(Link::new),
            shared_link: config.shared_tier.map(Link::new),
            block_bytes: u64::from(config.engine_block_size)
                * config.kv_bytes_per_token.unwrap_or(0),
            fence_ns: if any {
                vec![0; config.num_gpu_blocks as usize]
            } else {
                Vec::new()
            },
            cohort: Vec::new(),
        }
    }

    /// Whether there is any tier below the GPU.
    pub(crate) fn any(&self) -> bool {
        !self.fence_ns.is_empty()
    }

    /// A request computed these blocks (GPU block, hash) in the step that ends at `now`:
    /// each tier that lacks some of them stores those, as one transfer on its lane.
    pub(crate) fn store_computed(&mut self, now_ns: u64) {
        if self.cohort.is_empty() {
            return;
        }
        if let (Some(host), Some(link)) = (&mut self.host, &mut self.host_link) {
            store_into(
                host,
                link,
                &self.cohort,
                self.block_bytes,
                &mut self.fence_ns,
                now_ns,
            );
        }
        if let (Some(shared), Some(link)) = (&self.shared, &mut self.shared_link) {
            let mut store = shared.lock();
            store_into(
                &mut store,
                link,
                &self.cohort,
                self.block_bytes,
                &mut self.fence_ns,
                now_ns,
            );
        }
        self.cohort.clear();
    }

    /// Adds a request's computed blocks to its cohort (see [`Tiers::store_computed`]).
    pub(crate) fn computed(&mut self, ids: &[u32], hashes: &[u64]) {
        if self.any() {
            self.cohort
                .extend(ids.iter().copied().zip(hashes.iter().copied()));
        }
    }

    /// Of `chain`'s leading blocks, at most `most`, the run the lower tiers hold, block by
    /// block the host tier's first: (blocks of the host tier, blocks of the shared tier).
    pub(crate) fn lower_run(&self, chain: &[u64], most: usize) -> (usize, usize) {
        let (mut host, mut shared) = (0, 0);
        let store = self.shared.as_ref().map(SharedStore::lock);
        for hash in chain.iter().take(most) {
            if self.host.as_ref().is_some_and(|h| h.holds(*hash)) {
                host += 1;
            } else if store.as_ref().is_some_and(|s| s.holds(*hash)) {
                shared += 1;
            } else {
                break;
            }
        }
        (host, shared)
    }

    /// When the GPU blocks `ids` can be written: once the stores reading them end.
    pub(crate) fn fence(&self, ids: &[u32]) -> u64 {
        if self.fence_ns.is_empty() {
            return 0;
        }
        ids.iter()
            .map(|id| self.fence_ns[*id as usize])
            .max()
            .unwrap_or(0)
    }

    /// Loads `run` (blocks right after a request's GPU hits, each held by the host tier or
    /// else by the shared tier), not before `not_before_ns`: the host tier's blocks over
    /// its link, then the shared tier's over its own. The blocks loaded become their
    /// tier's most recently used, in reverse order as vLLM's connector touches them (a
    /// prefix's first block ends the most recent, so its deeper blocks leave first).
    pub(crate) fn load(&mut self, run: &[u64], now_ns: u64, not_before_ns: u64) -> Loaded {
        let mut store = self.shared.as_ref().map(SharedStore::lock);
        let (mut host_blocks, mut shared_blocks) = (0u64, 0u64);
        let (mut host_stored, mut shared_stored) = (0u64, 0u64);
        for hash in run.iter().rev() {
            match &mut self.host {
                Some(host) if host.holds(*hash) => {
                    host_stored = host_stored.max(host.ready_at(*hash).unwrap_or(0));
                    host.touch(*hash);
                    host_blocks += 1;
                }
                _ => {
                    if let Some(store) = &mut store {
                        shared_stored = shared_stored.max(store.ready_at(*hash).unwrap_or(0));
                        store.touch(*hash);
                    }
                    shared_blocks += 1;
                }
            }
        }
        let blocking = self
            .host_link
            .is_some_and(|l| l.tier.blocking && host_blocks > 0)
            || self
                .shared_link
                .is_some_and(|l| l.tier.blocking && shared_blocks > 0);
        let start = now_ns.max(not_before_ns);
        let mut ready = start;
        for (link, blocks, stored) in [
            (&mut self.host_link, host_blocks, host_stored),
            (&mut self.shared_link, shared_blocks, shared_stored),
        ] {
            if let Some(link) = link
                && blocks > 0
            {
                let ns = link.tier.load_ns(blocks * self.block_bytes);
                ready = link.h2d.submit(ready.max(stored), ns);
            }
        }
        Loaded {
            host: host_blocks as usize,
            shared: shared_blocks as usize,
            ready_ns: ready,
            blocking,
        }
    }

    /// How long a step takes to store, into the blocking tiers, those of `hashes` (the
    /// blocks it completes) each lacks: the host tier's, then the shared tier's.
    pub(crate) fn blocking_store_ns<'a>(&self, hashes: impl Iterator<Item = &'a u64>) -> u64 {
        let host = self
            .host
            .as_ref()
            .zip(self.host_link)
            .filter(|(_, l)| l.tier.blocking);
        let store = self
            .shared
            .as_ref()
            .zip(self.shared_link)
            .filter(|(_, l)| l.tier.blocking);
        if host.is_none() && store.is_none() {
            return 0;
        }
        let store = store.map(|(s, l)| (s.lock(), l));
        let (mut to_host, mut to_shared) = (0u64, 0u64);
        for hash in hashes {
            to_host += u64::from(host.is_some_and(|(h, _)| !h.holds(*hash)));
            to_shared += u64::from(store.as_ref().is_some_and(|(s, _)| !s.holds(*hash)));
        }
        let ns = |link: Option<Link>, blocks: u64| {
            link.map_or(0, |l| l.tier.store_ns(blocks * self.block_bytes))
        };
        ns(host.map(|(_, l)| l), to_host) + ns(store.as_ref().map(|(_, l)| *l), to_shared)
    }
}

/// Stores into `tier` the blocks of `cohort` it lacks, as one transfer over `link`'s
/// device-to-host lane from `now`; fences their GPU blocks until it ends. A blocking tier's
/// store was part of the step that ends at `now` ([`Tiers::blocking_store_ns`]): its blocks
/// are stored by then.
fn store_into(
    tier: &mut HostCache,
    link: &mut Link,
    cohort: &[(u32, u64)],
    block_bytes: u64,
    fence_ns: &mut [u64],
    now_ns: u64,
) {
    let missing = cohort.iter().filter(|(_, h)| !tier.holds(*h)).count() as u64;
    if missing == 0 {
        return;
    }
    if link.tier.blocking {
        for (_, hash) in cohort {
            tier.store(*hash, now_ns);
        }
        return;
    }
    let end = link
        .d2h
        .submit(now_ns, link.tier.store_ns(missing * block_bytes));
    for (id, hash) in cohort {
        if tier.store(*hash, end) {
            let fence = &mut fence_ns[*id as usize];
            *fence = (*fence).max(end);
        }
    }
}
