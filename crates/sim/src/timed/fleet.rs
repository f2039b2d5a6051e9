//! The engines of a timed replay, one per endpoint, and what each router replica knows of
//! them (its own in-flight counts, its own metric snapshot).

use routerlab_engine::{Engine, EngineConfig, EngineStatus};
use routerlab_host::EndpointLoad;

use super::events::{Event, Events};

/// The engines, one per endpoint, and what each router replica knows of them.
pub(super) struct Fleet {
    pub(super) engines: Vec<Engine>,
    /// Generation of each engine's pending step event; older events are stale.
    pub(super) generation: Vec<u64>,
    /// Engines with a start pending at the current instant (an `Event::Start` queued).
    starting: Vec<bool>,
    /// Per replica: statuses as of its last refresh (with a metrics interval).
    pub(super) snapshots: Vec<Vec<EngineStatus>>,
    /// Per replica: prompt tokens it routed to each endpoint and not finished.
    pub(super) inflight_tokens: Vec<Vec<u64>>,
    /// Per replica: requests it routed to each endpoint and not finished.
    pub(super) inflight_requests: Vec<Vec<u64>>,
    /// What each replica knows of its peers, when they share their state.
    pub(super) sync: Option<Box<routerlab_route::Syncer>>,
    /// The smallest engine's KV cache in tokens: a request holding no more fits in every
    /// engine (asked at each decision, where asking each engine costs a division each).
    room_everywhere: u64,
}

impl Fleet {
    pub(super) fn new(engines: &[EngineConfig], replicas: usize) -> Fleet {
        let n = engines.len();
        let mut engines: Vec<Engine> = engines.iter().cloned().map(Engine::new).collect();
        // The engines with a shared tier share the first one's store.
        if let Some(store) = engines.iter().find_map(|e| e.shared().cloned()) {
            for engine in &mut engines {
                engine.join_shared(&store);
            }
        }
        Fleet {
            room_everywhere: engines
                .iter()
                .map(Engine::room_tokens)
                .min()
                .unwrap_or(u64::MAX),
            engines,
            generation: vec![0; n],
            starting: vec![false; n],
            snapshots: vec![vec![EngineStatus::default(); n]; replicas],
            inflight_tokens: vec![vec![0; n]; replicas],
            inflight_requests: vec![vec![0; n]; replicas],
            sync: None,
        }
    }

    /// Whether a request of this size can run in every engine ([`Engine::can_ever_fit`]).
    pub(super) fn fits_everywhere(&self, prompt_tokens: u32, output_tokens: u32) -> bool {
        Engine::tokens_held(prompt_tokens, output_tokens) <= self.room_everywhere
    }

    /// Takes a new snapshot for replica `r`; whether it differs from its last.
    pub(super) fn refresh(&mut self, r: usize) -> bool {
        let mut changed = false;
        for (seen, engine) in self.snapshots[r].iter_mut().zip(&self.engines) {
            let fresh = engine.status();
            changed |= fresh != *seen;
            *seen = fresh;
        }
        changed
    }

    /// What plugins of replica `r` see of endpoint `pos`.
    pub(super) fn load(&self, pos: usize, live: bool, r: usize) -> EndpointLoad {
        let status = if live {
            self.engines[pos].status()
        } else {
            self.snapshots[r][pos]
        };
        let (peer_tokens, peer_requests) =
            (self.sync.as_ref()).map_or((0, 0), |s| s.peer_load(r, pos));
        EndpointLoad {
            running: status.running,
            waiting: status.waiting,
            kv_blocks_used: status.kv_blocks_used,
            kv_blocks_total: status.kv_blocks_total,
            inflight_prompt_tokens: self.inflight_tokens[r][pos] + peer_tokens,
            inflight_requests: self.inflight_requests[r][pos] + peer_requests,
            kv_block_tokens: u64::from(self.engines[pos].block_tokens()),
            lora: {
                let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
                routerlab_core::LoraSlots {
                    used: small(status.lora.slots_used),
                    total: small(status.lora.slots_total),
                    active: small(status.lora.active),
                    waiting: small(status.lora.waiting_adapters),
                }
            },
        }
    }

    /// Queues `sequence` on engine `pos` at `now`. An idle engine starts its step once
    /// everything arriving at `now` is queued (an `Event::Start` after them), not at the
    /// first arrival.
    pub(super) fn submit(
        &mut self,
        pos: usize,
        sequence: routerlab_engine::Sequence,
        now: u64,
        events: &mut Events,
    ) {
        let idle = self.engines[pos].is_idle();
        if let Some(end) = self.engines[pos].enqueue_batched(sequence, now) {
            self.next_step(pos, end, events);
        } else if idle && !self.starting[pos] {
            self.starting[pos] = true;
            events.push(now, Event::Start(pos));
        }
    }

    /// The start queued by [`Fleet::submit`] is due.
    pub(super) fn start(&mut self, pos: usize, now: u64, events: &mut Events) {
        self.starting[pos] = false;
        if let Some(end) = self.engines[pos].start_if_idle(now) {
            self.next_step(pos, end, events);
        }
    }

    /// A new step of engine `pos` ends at `end`: supersedes its pending step event.
    pub(super) fn next_step(&mut self, pos: usize, end: u64, events: &mut Events) {
        self.generation[pos] += 1;
        events.push(end, Event::Step(pos, self.generation[pos]));
    }
}
