//! LoRA adapters on an engine, as vLLM serves them and BLIS models them: a fixed number of
//! GPU slots (vLLM's `--max-loras`), each holding one adapter; a request that names an
//! adapter runs only while its adapter holds a slot, and the running requests pin theirs.
//! An adapter not resident is loaded into a free slot, or into the least recently used one
//! no running request pins (evicting its adapter), and the requests that need it wait
//! `load_ms` for it; when every slot is pinned by other adapters the request is skipped
//! and later waiting requests may go first, as vLLM V1's scheduler skips a request whose
//! adapter would exceed `max_loras`. A step costs `1 + step_overhead × A` times its base
//! time, for the A distinct adapters among the running requests (BLIS's step-overhead
//! factor with one tier).
//!
//! What it does not model: the host (CPU) cache of adapters (`--max-cpu-loras`) and loads
//! from disk apart from it (every load costs `load_ms`), adapter ranks (every slot is the
//! same size and the KV budget is not reduced by them), and the punica kernels' dependence
//! on batch shape beyond the count of adapters.

use serde::{Deserialize, Serialize};

/// An engine's LoRA settings (engine config key `lora`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// Adapters resident at once (vLLM's `--max-loras`).
    pub slots: u32,
    /// Milliseconds to load an adapter into a slot.
    pub load_ms: f64,
    /// Extra step time per distinct adapter in the batch, as a fraction of the base step.
    #[serde(default)]
    pub step_overhead: f64,
}

impl LoraConfig {
    /// How long a load takes, nanoseconds.
    pub fn load_ns(&self) -> u64 {
        (self.load_ms * 1e6).round() as u64
    }

    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.slots == 0 {
            return Err("engine `lora.slots` must be at least 1".into());
        }
        for (key, value) in [
            ("load_ms", self.load_ms),
            ("step_overhead", self.step_overhead),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(format!(
                    "engine `lora.{key}` must be a finite number of at least 0, not {value}"
                ));
            }
        }
        if self.load_ms * 1e6 >= u64::MAX as f64 / 2.0 {
            return Err(format!(
                "engine `lora.load_ms` of {} ms does not fit in 64-bit nanoseconds",
                self.load_ms
            ));
        }
        Ok(())
    }
}

/// One slot and the adapter in it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    adapter: u32,
    /// Running requests that use it.
    pins: u32,
    /// When it was last pinned (an admission counter): least recent goes first.
    used: u64,
    /// When its load ends, ns.
    ready_ns: u64,
}

/// The adapters resident on one engine.
#[derive(Debug, Clone)]
pub(crate) struct Residency {
    config: LoraConfig,
    slots: Vec<Slot>,
    clock: u64,
    /// Adapters loaded so far.
    pub(crate) loads: u64,
    /// Adapters evicted to make room.
    pub(crate) evictions: u64,
}

impl Residency {
    pub(crate) fn new(config: LoraConfig) -> Residency {
        Residency {
            config,
            slots: Vec::with_capacity(config.slots as usize),
            clock: 0,
            loads: 0,
            evictions: 0,
        }
    }

    /// A request of `adapter` is admitted at `now_ns`: its adapter is pinned, loaded first
    /// if it is not resident. Returns when the adapter is ready, or `None` (nothing
    /// changed) when every slot is pinned by other adapters.
    pub(crate) fn admit(&mut self, adapter: u32, now_ns: u64) -> Option<u64> {
        self.clock += 1;
        if let Some(slot) = self.slots.iter_mut().find(|s| s.adapter == adapter) {
            slot.pins += 1;
            slot.used = self.clock;
            return Some(slot.ready_ns);
        }
        let load_ns = self.config.load_ns();
        let slot = Slot {
            adapter,
            pins: 1,
            used: self.clock,
            ready_ns: now_ns.saturating_add(load_ns),
        };
        if self.slots.len() < self.config.slots as usize {
            self.slots.push(slot);
        } else {
            let victim = self
                .slots
                .iter_mut()
                .filter(|s| s.pins == 0)
                .min_by_key(|s| s.used)?;
            *victim = slot;
            self.evictions += 1;
        }
        self.loads += 1;
        Some(slot.ready_ns)
    }

    /// When `adapter`'s load ends (or ended), if it holds a slot.
    pub(crate) fn ready_ns(&self, adapter: u32) -> Option<u64> {
        (self.slots.iter())
            .find(|s| s.adapter == adapter)
            .map(|s| s.ready_ns)
    }

    /// Whether [`Residency::admit`] of `adapter` would find a slot now.
    pub(crate) fn can_admit(&self, adapter: u32) -> bool {
        self.slots.len() < self.config.slots as usize
            || self
                .slots
                .iter()
                .any(|s| s.adapter == adapter || s.pins == 0)
    }

    /// A running request of `adapter` left (finished or preempted).
    pub(crate) fn release(&mut self, adapter: u32) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.adapter == adapter) {
            slot.pins = slot.pins.saturating_sub(1);
        }
    }

    /// Whether `adapter` holds a slot (loaded or loading).
    pub(crate) fn resident(&self, adapter: u32) -> bool {
        self.slots.iter().any(|s| s.adapter == adapter)
    }

    /// Whether running requests use `adapter` (they pin its slot).
    pub(crate) fn running(&self, adapter: u32) -> bool {
        self.slots
            .iter()
            .any(|s| s.adapter == adapter && s.pins > 0)
    }

    /// The distinct adapters running requests use.
    pub(crate) fn active(&self) -> u64 {
        self.slots.iter().filter(|s| s.pins > 0).count() as u64
    }

    /// Slots holding an adapter.
    pub(crate) fn used(&self) -> u64 {
        self.slots.len() as u64
    }

    /// A step's time with the adapters' overhead, from its base time.
    pub(crate) fn step_ns(&self, base_ns: u64) -> u64 {
        let active = self.active();
        if active == 0 || self.config.step_overhead == 0.0 {
            return base_ns;
        }
        (base_ns as f64 * (1.0 + self.config.step_overhead * active as f64)).round() as u64
    }
}

/// What an engine's LoRA slots hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoraStatus {
    /// Slots holding an adapter.
    pub slots_used: u64,
    /// Slots.
    pub slots_total: u64,
    /// Adapters in use by running requests.
    pub active: u64,
    /// Adapters loaded so far.
    pub loads: u64,
    /// Adapters evicted so far to make room.
    pub evictions: u64,
    /// Distinct adapters of the waiting requests that no running request uses.
    pub waiting_adapters: u64,
}

impl crate::Sequence {
    /// The sequence, run with LoRA adapter `adapter` (0: the base model).
    pub fn with_adapter(mut self, adapter: u32) -> crate::Sequence {
        self.adapter = adapter;
        self
    }
}

impl crate::Engine {
    /// Whether `adapter` holds one of this engine's LoRA slots (loaded or loading);
    /// `false` without slots.
    pub fn adapter_resident(&self, adapter: u32) -> bool {
        self.lora.as_ref().is_some_and(|l| l.resident(adapter))
    }

    /// How long from `now_ns` a request of `adapter` would wait for its adapter alone: the
    /// rest of its load when it is loading, 0 when it is loaded, for the base model (0) or
    /// without slots; a whole load (`load_ms`) when it holds no slot, after the first slot
    /// to free does when every slot is pinned (its adapter's running requests all
    /// finished, each decoding at the pace of a step of the batch now).
    pub fn adapter_wait_ns(&self, adapter: u32, now_ns: u64) -> u64 {
        let Some(l) = self.lora.as_ref().filter(|_| adapter != 0) else {
            return 0;
        };
        if let Some(ready) = l.ready_ns(adapter) {
            return ready.saturating_sub(now_ns);
        }
        let load_ns = l.config.load_ns();
        if l.can_admit(adapter) {
            return load_ns;
        }
        let step_ns = self.predict_tpot_ns(1);
        let mut last_done: Vec<(u32, u64)> = Vec::new();
        for seq in self.running().iter().filter(|s| s.adapter != 0) {
            let left = u64::from(seq.output_tokens.saturating_sub(seq.generated));
            let done = left.saturating_mul(step_ns);
            match last_done.iter_mut().find(|(a, _)| *a == seq.adapter) {
                Some((_, at)) => *at = (*at).max(done),
                None => last_done.push((seq.adapter, done)),
            }
        }
        let frees = last_done.iter().map(|(_, at)| *at).min().unwrap_or(0);
        frees.saturating_add(load_ns)
    }

    /// Requests of `adapter` (non-zero) running and waiting here.
    pub fn adapter_requests(&self, adapter: u32) -> (u64, u64) {
        let count = |seqs: &mut dyn Iterator<Item = &crate::Sequence>| {
            seqs.filter(|s| s.adapter == adapter).count() as u64
        };
        (
            count(&mut self.running().iter()),
            count(&mut self.waiting.iter()),
        )
    }

    /// Its LoRA slots now; `None` when the config has none.
    pub fn lora_status(&self) -> Option<LoraStatus> {
        self.lora.as_ref().map(|l| LoraStatus {
            slots_used: l.used(),
            slots_total: u64::from(l.config.slots),
            active: l.active(),
            loads: l.loads,
            evictions: l.evictions,
            waiting_adapters: {
                // A running request pins its adapter's slot: a pinned slot is a running one.
                let mut waiting: Vec<u32> = (self.waiting.iter())
                    .map(|s| s.adapter)
                    .filter(|&a| a != 0 && !l.running(a))
                    .collect();
                waiting.sort_unstable();
                waiting.dedup();
                waiting.len() as u64
            },
        })
    }

    /// The distinct adapters of its running requests and of its waiting ones, each in
    /// ascending order (an adapter with requests of both kinds is in both, as in vLLM's
    /// `running_lora_adapters` and `waiting_lora_adapters`); `None` without slots.
    pub fn lora_adapters(&self) -> Option<(Vec<u32>, Vec<u32>)> {
        self.lora.as_ref()?;
        let distinct = |seqs: &mut dyn Iterator<Item = &crate::Sequence>| {
            let mut adapters: Vec<u32> = seqs.map(|s| s.adapter).filter(|&a| a != 0).collect();
            adapters.sort_unstable();
            adapters.dedup();
            adapters
        };
        Some((
            distinct(&mut self.running().iter()),
            distinct(&mut self.waiting.iter()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_slots() -> Residency {
        Residency::new(LoraConfig {
            slots: 2,
            load_ms: 5.0,
            step_overhead: 0.1,
        })
    }

    #[test]
    fn a_cold_adapter_loads_and_a_warm_one_is_ready() {
        let mut r = two_slots();
        assert_eq!(r.admit(7, 1_000), Some(5_001_000), "cold: 5 ms");
        assert_eq!(r.admit(7, 2_000), Some(5_001_000), "loading: the same load");
        assert_eq!(r.admit(7, 9_000_000), Some(5_001_000), "warm: ready since");
        assert_eq!((r.loads, r.evictions, r.active()), (1, 0, 1));
    }

    #[test]
    fn pinned_slots_are_never_evicted_and_the_least_recent_free_one_is() {
        let mut r = two_slots();
        r.admit(1, 0);
        r.admit(2, 0);
        assert!(!r.can_admit(3) && r.can_admit(1));
        assert_eq!(r.admit(3, 0), None, "both pinned");
        assert_eq!(r.loads, 2, "nothing changed");
        r.release(1);
        r.release(2);
        r.admit(2, 10);
        r.release(2);
        // 1 was used least recently: it goes.
        assert_eq!(r.admit(3, 100), Some(5_000_100));
        assert!(!r.resident(1) && r.resident(2) && r.resident(3));
        assert_eq!((r.loads, r.evictions), (3, 1));
    }

    #[test]
    fn each_active_adapter_adds_its_overhead_to_a_step() {
        let mut r = two_slots();
        assert_eq!(r.step_ns(1_000), 1_000);
        r.admit(1, 0);
        r.admit(1, 0);
        assert_eq!(r.step_ns(1_000), 1_100, "one distinct adapter");
        r.admit(2, 0);
        assert_eq!(r.step_ns(1_000), 1_200);
    }

    #[test]
    fn bad_settings_name_their_key() {
        let ok = LoraConfig {
            slots: 1,
            load_ms: 1.0,
            step_overhead: 0.0,
        };
        assert!(ok.validate().is_ok());
        let no_slots = LoraConfig { slots: 0, ..ok };
        assert!(no_slots.validate().unwrap_err().contains("lora.slots"));
        let negative = LoraConfig {
            load_ms: -1.0,
            ..ok
        };
        assert!(negative.validate().unwrap_err().contains("lora.load_ms"));
        let nan = LoraConfig {
            step_overhead: f64::NAN,
            ..ok
        };
        assert!(nan.validate().unwrap_err().contains("lora.step_overhead"));
        let huge = LoraConfig {
            load_ms: 1e300,
            ..ok
        };
        assert!(huge.validate().unwrap_err().contains("does not fit"));
    }
}
