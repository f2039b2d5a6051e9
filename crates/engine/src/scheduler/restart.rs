//! An engine starting over: cold, as a new process would, or counting afresh after a
//! warm-up.

use super::Engine;
use crate::host::HostCache;
use crate::kv::KvCache;
use crate::lora::Residency;

impl Engine {
    /// Starts again as a new process would, its GPU cache and host tier empty (a shared
    /// tier outlives it); what it counted so far stays. Only an idle engine restarts.
    pub fn cold_start(&mut self) {
        debug_assert!(self.is_idle(), "only an idle engine restarts");
        let recording = self.kv.recording();
        let evictions = self.kv.evictions;
        self.kv = KvCache::new(self.config.num_gpu_blocks);
        self.kv.evictions = evictions;
        if recording {
            self.kv.record_events();
        }
        if let Some(host) = &mut self.tiers.host {
            let mut fresh = HostCache::new(host.capacity() as u32);
            (fresh.peak, fresh.stores, fresh.evictions) = (host.peak, host.stores, host.evictions);
            *host = fresh;
        }
        self.tiers.reset_fences();
        self.lora = self.config.lora.map(Residency::new);
    }

    /// Cached blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.kv.evictions
    }

    /// Counts again from `now` (a warm-up's end): what it holds stays, what it counted
    /// (peak and mean KV usage, evictions, preemptions, speculated steps, its tiers'
    /// stores, evictions and peaks) starts over.
    pub fn restart_counters(&mut self, now_ns: u64) {
        self.preemptions = 0;
        self.speculated = (0, 0);
        self.peak_usage = self.usage();
        self.usage_integral = 0.0;
        self.first_ns = None;
        self.usage_since_ns = now_ns;
        self.kv.evictions = 0;
        let restart = |tier: &mut HostCache| {
            tier.stores = 0;
            tier.evictions = 0;
            tier.peak = tier.len() as u64;
        };
        if let Some(host) = &mut self.tiers.host {
            restart(host);
        }
        if let Some(shared) = &self.tiers.shared {
            restart(&mut shared.lock());
        }
    }
}
