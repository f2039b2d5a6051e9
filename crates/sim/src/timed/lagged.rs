//! What a KV-event-fed router knows of the engines' caches when its events arrive late:
//! each engine's stores and removals, seen `lag` after they happen (NVIDIA Dynamo 1.6.1's
//! `kv_event_lag_ms`). Precise policies (`cached_prefix`, the GPU part of `cached_tiers`)
//! read this index instead of the engines; the report's decision quality still judges
//! against what the engines really held.

use std::collections::VecDeque;

use routerlab_core::hash::U64Map;
use routerlab_engine::{Engine, KvEvent};

/// One engine's blocks as the router's index has them.
#[derive(Default)]
struct Index {
    /// Hash -> held (present means cached, as far as the index knows).
    visible: U64Map<()>,
    /// Events not yet seen: (time, stored, hash), in order.
    pending: VecDeque<(u64, bool, u64)>,
}

/// The lagged indexes of a fleet.
pub(super) struct Lagged {
    lag_ns: u64,
    engines: Vec<Index>,
    scratch: Vec<KvEvent>,
}

impl Lagged {
    /// Indexes for `engines`, which start recording their events.
    pub(super) fn new(lag_ns: u64, engines: &mut [Engine]) -> Lagged {
        for engine in engines.iter_mut() {
            engine.record_kv_events();
        }
        Lagged {
            lag_ns,
            engines: (0..engines.len()).map(|_| Index::default()).collect(),
            scratch: Vec::new(),
        }
    }

    /// Takes the events engine `pos` recorded, as happened at `now`.
    pub(super) fn record(&mut self, pos: usize, now: u64, engine: &mut Engine) {
        engine.take_kv_events(&mut self.scratch);
        let index = &mut self.engines[pos];
        for event in self.scratch.drain(..) {
            index.pending.push_back(match event {
                KvEvent::Stored { hash, .. } => (now, true, hash),
                KvEvent::Removed { hash } => (now, false, hash),
            });
        }
    }

    /// Applies every event that the router has seen by `now`.
    pub(super) fn advance(&mut self, now: u64) {
        for index in &mut self.engines {
            while let Some(&(at, stored, hash)) = index.pending.front() {
                if at.saturating_add(self.lag_ns) > now {
                    break;
                }
                index.pending.pop_front();
                if stored {
                    index.visible.insert(hash, ());
                } else {
                    index.visible.remove(&hash);
                }
            }
        }
    }

    /// How many of `chain`'s leading blocks the index says engine `pos` holds.
    pub(super) fn prefix(&self, pos: usize, chain: &[u64]) -> usize {
        let visible = &self.engines[pos].visible;
        chain
            .iter()
            .take_while(|h| visible.contains_key(*h))
            .count()
    }
}
