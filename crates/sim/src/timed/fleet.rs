//! The engines of a timed replay, one per endpoint, and what each router replica knows of
//! them (its own in-flight counts, its own metric snapshot). The data-parallel ranks of a
//! mixture-of-experts engine step in lockstep: consecutive endpoints, one group, one step
//! event for the group (its first rank's), every rank's step ending with the slowest's.

use std::ops::Range;

use routerlab_engine::{Engine, EngineConfig, EngineStatus, Sequence};
use routerlab_host::EndpointLoad;

use super::events::{Event, Events};

/// The engines, one per endpoint, and what each router replica knows of them.
pub(super) struct Fleet {
    pub(super) engines: Vec<Engine>,
    /// Generation of each engine's pending step event; older events are stale.
    pub(super) generation: Vec<u64>,
    /// Each engine's lockstep group: the first rank and how many (itself and 1 when alone).
    group: Vec<(usize, usize)>,
    /// What each engine's last step finished, until taken.
    pub(super) finished: Vec<Vec<Sequence>>,
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
            group: groups(&engines),
            room_everywhere: engines
                .iter()
                .map(Engine::room_tokens)
                .min()
                .unwrap_or(u64::MAX),
            engines,
            generation: vec![0; n],
            finished: (0..n).map(|_| Vec::new()).collect(),
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
        let group = self.ranks(pos);
        if group.len() > 1 {
            // A rank's arrival waits for its group's step in flight, if any.
            let busy = group.clone().any(|p| !self.engines[p].is_idle());
            let started = self.engines[pos].enqueue_batched(sequence, now);
            debug_assert!(started.is_none(), "a lockstep rank starts with its group");
            if !busy && !self.starting[group.start] {
                self.starting[group.start] = true;
                events.push(now, Event::Start(group.start));
            }
            return;
        }
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
        let group = self.ranks(pos);
        if group.len() > 1 {
            if group.clone().all(|p| self.engines[p].is_idle()) {
                for p in group.clone() {
                    self.engines[p].start_if_idle(now);
                }
                self.align(group, events);
            }
            return;
        }
        if let Some(end) = self.engines[pos].start_if_idle(now) {
            self.next_step(pos, end, events);
        }
    }

    /// A new step of engine `pos` ends at `end`: supersedes its pending step event.
    pub(super) fn next_step(&mut self, pos: usize, end: u64, events: &mut Events) {
        self.generation[pos] += 1;
        events.push(end, Event::Step(pos, self.generation[pos]));
    }

    /// The engines stepping with `pos`, itself among them.
    pub(super) fn ranks(&self, pos: usize) -> Range<usize> {
        let (first, count) = self.group[pos];
        first..first + count
    }

    /// The step of `pos` (and of its lockstep group) ending now: each engine that stepped
    /// finishes (what it finished left in [`Fleet::finished`]) and starts its next step,
    /// an idle rank of the group too; the engines that stepped.
    pub(super) fn finish_steps(
        &mut self,
        pos: usize,
        now: u64,
        events: &mut Events,
    ) -> Range<usize> {
        let group = self.ranks(pos);
        if group.len() == 1 {
            self.finished[pos] = self.engines[pos].finish_step(now);
            if let Some(end) = self.engines[pos].step_end() {
                self.next_step(pos, end, events);
            }
            return group;
        }
        for p in group.clone() {
            if self.engines[p].is_idle() {
                self.engines[p].start_if_idle(now);
            } else {
                self.finished[p] = self.engines[p].finish_step(now);
            }
        }
        self.align(group.clone(), events);
        group
    }

    /// The group's steps just planned end together, with the longest: one step event.
    fn align(&mut self, group: Range<usize>, events: &mut Events) {
        let Some(end) = group
            .clone()
            .filter_map(|p| self.engines[p].step_end())
            .max()
        else {
            return;
        };
        for p in group.clone() {
            self.engines[p].stretch_step(end);
        }
        self.next_step(group.start, end, events);
    }
}

/// Each engine's lockstep group, the first rank and how many: consecutive engines, as many
/// as the first one's [`routerlab_engine::StepTime::lockstep_ranks`] (the settings were
/// checked to make whole groups of alike ranks).
fn groups(engines: &[Engine]) -> Vec<(usize, usize)> {
    let mut group = Vec::with_capacity(engines.len());
    while group.len() < engines.len() {
        let first = group.len();
        let ranks = engines[first].config().step_time.lockstep_ranks() as usize;
        let count = ranks.clamp(1, engines.len() - first);
        group.extend(std::iter::repeat_n((first, count), count));
    }
    group
}
