//! What the timed replay's routers see of a request and may ask of the engines: how much
//! of its prompt each one holds, per tier, and each one's forecast of its first token; and
//! how a decision is judged against what the others held.

use routerlab_core::abi::{RlAdapterState, RlPrediction};
use routerlab_host::{CachedPrefix, Lora, RequestData};
use routerlab_route::{Decision, ListPos, RequestSeq};

use super::Sim;

impl Sim<'_> {
    /// Records how good the pick of engine slot `pos` was, against the endpoints the
    /// matcher could choose, in blocks of the trace's block size.
    pub(super) fn judge(&mut self, index: usize, pos: usize, decision: &Decision, flags: &[bool]) {
        let r = self.requests[index].replica;
        self.note_sharing(index);
        let block = u64::from(self.feed.workload().block_size.max(1));
        let picked = self.pos_of[pos].expect("a picked endpoint is listed");
        let achieved = if decision.allowed(flags, ListPos(picked)) {
            self.cached_units(index, pos) / block
        } else {
            0
        };
        // First, which other endpoints could beat the pick at all: each must hold the
        // block that would carry its run past `achieved`. With many engines each such
        // lookup is likely a cache miss; asked of all in a row, with little else between
        // them, the CPU overlaps their reads. The block asked for is the same for engines
        // of one block size, so it is found once for a run of them.
        let mut rivals = std::mem::take(&mut self.rivals);
        rivals.clear();
        let past = (achieved + 1) * block;
        // The engine block size `reach` was found for.
        let (mut asked, mut reach) = (None, Reach::Never);
        for (listed, &p) in self.listed.iter().enumerate() {
            if p == pos || !decision.allowed(flags, ListPos(listed)) {
                continue;
            }
            let engine_block = self.settings.engines[p].engine_block_size;
            if asked != Some(engine_block) {
                asked = Some(engine_block);
                reach = self.reach(index, engine_block, past);
            }
            if reach.held_by(&self.fleet.engines[p]) {
                rivals.push(p);
            }
        }
        // Then the rivals in list order, each looked at in full when it may hold more than
        // the best so far. An endpoint left out holds no more than `achieved`, so no more
        // than any best.
        let mut best = achieved;
        for &p in &rivals {
            if self.may_hold_more(index, p, (best + 1) * block) {
                best = best.max(self.cached_units(index, p) / block);
            }
        }
        self.rivals = rivals;
        self.stats.base.each(r, |s| s.judge(best, achieved));
        if let Some(graph) = &mut self.agentic {
            graph.routed(index, achieved == best && achieved > 0);
        }
    }

    /// Request `index`'s chain for engine blocks of `engine_block` tokens.
    pub(super) fn chain(&self, index: usize, engine_block: u32) -> &[u64] {
        self.feed.chain(index, engine_block)
    }

    /// What plugins see of request `index` at time `now`.
    pub(super) fn data<'s>(
        &'s self,
        index: usize,
        now: u64,
        cached_prefix: Option<CachedPrefix<'s>>,
    ) -> RequestData<'s> {
        let request = self.feed.request(index);
        // Whatever plugin call follows is about this request: name its line if it crashes.
        routerlab_os::crash::set_trace_line(request.line as u64);
        let state = &self.requests[index];
        RequestData {
            id: RequestSeq::of_index(index).0,
            arrival_ns: state.arrival_ns,
            prompt: &request.prompt,
            block_hashes: &request.blocks,
            block_ids: Some(&request.block_ids),
            block_size: self.feed.workload().block_size,
            unit: self.feed.workload().unit,
            prompt_len: request.prompt_len,
            output_tokens: Some(u64::from(state.output_tokens)),
            session_id: request.session,
            parent_id: request.parent.map_or(0, |p| RequestSeq::of_index(p).0),
            ends_session: request.session_end,
            now_ns: now,
            cached_prefix,
            phase: self.phase_of(index),
            cached_tiers: None,
            predict: None,
            lora: (self.feed.workload().adapters)
                .name(request.adapter)
                .map(|name| Lora {
                    id: u64::from(request.adapter),
                    name: name.as_bytes(),
                    state: None,
                }),
        }
    }

    /// What the engine of endpoint `endpoint_index` holds of LoRA adapters, and of
    /// request `index`'s (ABI 1.5 `adapter_state`); `None` for an engine without slots.
    pub(super) fn adapter_state(
        &self,
        index: usize,
        endpoint_index: u32,
    ) -> Option<RlAdapterState> {
        let pos = (*self.position_of.get(endpoint_index as usize)?)?;
        let engine = &self.fleet.engines[pos];
        let status = engine.lora_status()?;
        let adapter = self.feed.request(index).adapter;
        let (running, waiting) = engine.adapter_requests(adapter);
        let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Some(RlAdapterState {
            resident: u32::from(engine.adapter_resident(adapter)),
            running: small(running),
            waiting: small(waiting),
            active: small(status.active),
            slots_used: small(status.slots_used),
            slots_total: small(status.slots_total),
            waiting_adapters: small(status.waiting_adapters),
            _reserved: 0,
        })
    }

    /// How much of request `index`'s prompt the engine of endpoint `endpoint_index` holds
    /// now, in the workload's unit (text: 4 bytes a token).
    pub(super) fn cached_prefix(&self, index: usize, endpoint_index: u32) -> Option<u64> {
        let pos = (*self.position_of.get(endpoint_index as usize)?)?;
        Some(self.indexed_units(index, pos))
    }

    /// What the routers' KV-event index says engine `pos` holds of request `index`'s
    /// prompt: the engine's cache, or the lagged index when events arrive late.
    fn indexed_units(&self, index: usize, pos: usize) -> u64 {
        match &self.lagged {
            None => self.cached_units(index, pos),
            Some(lagged) => self.prefix_units(index, pos, |chain, block| {
                lagged.prefix(pos, chain) as u64 * u64::from(block)
            }),
        }
    }

    /// What the engine of endpoint `endpoint_index` holds of request `index`'s prompt per
    /// tier (the GPU's run, then of the run right after it what the host tier and what the
    /// shared tier would load), in the workload's unit.
    pub(super) fn cached_tiers(&self, index: usize, endpoint_index: u32) -> Option<[u64; 3]> {
        let pos = (*self.position_of.get(endpoint_index as usize)?)?;
        let block = self.settings.engines[pos].engine_block_size;
        let chain = self.chain(index, block);
        let mut left = self.feed.request(index).prompt_len;
        let mut tiers = self.fleet.engines[pos]
            .tier_prefix_tokens(chain)
            .map(|tokens| {
                let units = self.feed.workload().unit.of_tokens(tokens).min(left);
                left -= units;
                units
            });
        // The GPU tier as the KV-event index has it (late events); the lower tiers as held.
        if self.lagged.is_some() {
            tiers[0] = self.indexed_units(index, pos);
        }
        Some(tiers)
    }

    /// The engine of endpoint `endpoint_index`'s forecast for request `index` were it
    /// enqueued at `now` (ABI 1.4 `predict`).
    pub(super) fn predict(
        &self,
        index: usize,
        endpoint_index: u32,
        now: u64,
    ) -> Option<RlPrediction> {
        let pos = (*self.position_of.get(endpoint_index as usize)?)?;
        let block = self.settings.engines[pos].engine_block_size;
        let chain = self.chain(index, block);
        let prompt_tokens = self.feed.request(index).prompt_tokens;
        let engine = &self.fleet.engines[pos];
        let adapter = self.feed.request(index).adapter;
        Some(RlPrediction {
            ttft_ns: (engine.predict_ttft_ns(prompt_tokens, chain, now))
                .saturating_add(engine.adapter_wait_ns(adapter, now)),
            tpot_ns: engine.predict_tpot_ns(prompt_tokens),
        })
    }

    /// As [`Sim::cached_prefix`], by list position.
    pub(super) fn cached_units(&self, index: usize, pos: usize) -> u64 {
        let engine = &self.fleet.engines[pos];
        self.prefix_units(index, pos, |chain, _| engine.cached_prefix_tokens(chain))
    }

    /// The tokens `held` says engine `pos` holds of request `index`'s engine chain (given the
    /// chain and the engine's block size), in the workload's unit, at most the prompt.
    fn prefix_units(&self, index: usize, pos: usize, held: impl Fn(&[u64], u32) -> u64) -> u64 {
        let block = self.settings.engines[pos].engine_block_size;
        let chain = self.chain(index, block);
        let tokens = held(chain, block);
        let len = self.feed.workload().unit.of_tokens(tokens);
        len.min(self.feed.request(index).prompt_len)
    }

    /// Whether [`Sim::cached_units`] of request `index` at list position `pos` can reach
    /// `units`: only if the engine holds the block that would carry its cached run that
    /// far (a run of leading blocks cannot pass a block that is missing). One lookup where
    /// walking the run would take one a block, for each endpoint judged a decision.
    pub(super) fn may_hold_more(&self, index: usize, pos: usize, units: u64) -> bool {
        let block = self.settings.engines[pos].engine_block_size;
        self.reach(index, block, units)
            .held_by(&self.fleet.engines[pos])
    }

    /// What an engine of `engine_block`-token blocks must hold for request `index`'s
    /// cached run there to reach `units` (see [`Sim::may_hold_more`]), while it is being
    /// routed (before it runs).
    pub(super) fn reach(&self, index: usize, engine_block: u32, units: u64) -> Reach {
        if units > self.feed.request(index).prompt_len {
            return Reach::Never;
        }
        let tokens = self.feed.workload().unit.tokens(units);
        let needed = tokens.div_ceil(u64::from(engine_block.max(1)));
        match needed.checked_sub(1) {
            None => Reach::Always,
            // A block only this request has is in no engine before it runs.
            Some(last)
                if self
                    .shared_blocks(index, engine_block)
                    .is_some_and(|s| last as usize >= s) =>
            {
                Reach::Never
            }
            Some(last) => match self.chain(index, engine_block).get(last as usize) {
                Some(hash) => Reach::Holds(*hash),
                None => Reach::Never,
            },
        }
    }
}

/// What an engine must hold for a cached run to reach a length ([`Sim::reach`]).
#[derive(Clone, Copy)]
pub(super) enum Reach {
    /// Nothing: any run reaches it.
    Always,
    /// The block of this hash.
    Holds(u64),
    /// No run can reach it.
    Never,
}

impl Reach {
    /// Whether `engine` holds what it takes.
    pub(super) fn held_by(self, engine: &routerlab_engine::Engine) -> bool {
        match self {
            Reach::Always => true,
            Reach::Holds(hash) => engine.holds_block(hash),
            Reach::Never => false,
        }
    }
}
