//! The timed replay of a disaggregated fleet: a prefill pool and a decode pool, each with
//! its own router per replica, and the KV's move between them.
//!
//! A request's life (the split is the routers' [`Pools`], the KV's move the settings'
//! [`KvTransfer`]):
//! 1. With [`PdDecision::Always`], the prefill router picks a prefill endpoint at arrival;
//!    the request prefills there as a one-token request (chunked and queued like any).
//!    With a threshold, the decode router picks first; a prompt whose uncached part on that
//!    endpoint is within the threshold (or whose prefill matcher answers no endpoint) is
//!    served whole there, and only a longer one goes to the prefill router.
//! 2. When the prefill is done, the decode router picks a decode endpoint (unless it picked
//!    already); the KV moves there ([`KvTransfer`]: the whole prompt, or what it lacks).
//! 3. The decode endpoint admits the request with its prompt's KV present: the blocks are
//!    held and published (later requests there reuse them), the prompt costs no prefill
//!    time, and the step that takes it in produces the first token.
//!
//! TTFT is measured as NVIDIA Dynamo's disaggregated replay measures it: from the arrival
//! to the first token the decode endpoint produces; TPOT is the decode endpoint's.

use std::collections::VecDeque;

use routerlab_core::Phase;
use routerlab_engine::{KvTransfer, Sequence};
use routerlab_report::stats::{LatencyStat, ratio};
use routerlab_report::{PoolStats, PoolsReport, TtftSplit};
use routerlab_route::{ListPos, Pools, Replicas};

use super::Sim;
use super::events::Event;
use crate::SimError;

/// What a pool's router made of a request.
enum Pick {
    /// No endpoint could take it (now).
    Nothing,
    /// The endpoint chosen could never hold it (counted as too long).
    TooLong,
    /// This engine slot took it.
    At(usize),
}

/// Where one request is in a disaggregated run.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PdRequest {
    /// The phase its next plugin call is about.
    pub(super) phase: Option<Phase>,
    pub(super) prefill: Option<usize>,
    pub(super) decode: Option<usize>,
    /// Served whole on its decode endpoint.
    pub(super) local: bool,
    pub(super) prefill_scheduled_ns: u64,
    pub(super) prefill_done_ns: u64,
    pub(super) handoff_ns: u64,
    /// Prompt tokens the prefill endpoint held.
    pub(super) prefill_hit: u32,
}

#[derive(Default)]
struct PoolTally {
    requests: u64,
    prompt_tokens: u64,
    hit_tokens: u64,
}

impl PoolTally {
    fn add(&mut self, prompt: u32, hit: u32) {
        self.requests += 1;
        self.prompt_tokens += u64::from(prompt);
        self.hit_tokens += u64::from(hit);
    }
    fn finish(&self, endpoints: usize) -> PoolStats {
        PoolStats {
            endpoints: endpoints as u64,
            requests: self.requests,
            prompt_tokens: self.prompt_tokens,
            hit_tokens: self.hit_tokens,
            hit_ratio: ratio(self.hit_tokens, self.prompt_tokens),
        }
    }
}

/// The disaggregated run's own state beside the [`Sim`]'s.
pub(super) struct PdRun {
    pub(super) pools: Pools,
    pub(super) link: KvTransfer,
    pub(super) requests: Vec<PdRequest>,
    /// Per replica: prefilled requests waiting for a decode endpoint.
    pub(super) decode_queues: Vec<VecDeque<usize>>,
    prefill: PoolTally,
    decode: PoolTally,
    disaggregated: u64,
    local: u64,
    transfer_tokens: u64,
    transfer: LatencyStat,
    split: [LatencyStat; 4],
}

fn us(ns: u64) -> u64 {
    ns / 1000
}

impl PdRun {
    /// The pools' state before any request is read (each gets its own as it is).
    pub(super) fn new(pools: Pools, transfer: KvTransfer, replicas: usize) -> PdRun {
        PdRun {
            pools,
            link: transfer,
            requests: Vec::new(),
            decode_queues: vec![VecDeque::new(); replicas],
            prefill: PoolTally::default(),
            decode: PoolTally::default(),
            disaggregated: 0,
            local: 0,
            transfer_tokens: 0,
            transfer: LatencyStat::default(),
            split: Default::default(),
        }
    }

    pub(super) fn report(&self, endpoints: usize) -> PoolsReport {
        let [prefill_queue, prefill, transfer, decode] = &self.split;
        PoolsReport {
            prefill: self.prefill.finish(self.pools.prefill),
            decode: self.decode.finish(endpoints - self.pools.prefill),
            disaggregated: self.disaggregated,
            local: self.local,
            decision: self.pools.decision.name(),
            transfer_tokens: self.transfer_tokens,
            transfer: self.transfer.summary(),
            ttft_split: TtftSplit {
                prefill_queue: prefill_queue.summary(),
                prefill: prefill.summary(),
                transfer: transfer.summary(),
                decode: decode.summary(),
            },
        }
    }
}

impl Sim<'_> {
    fn pd(&mut self) -> &mut PdRun {
        self.pd.as_mut().expect("a disaggregated run")
    }

    /// Whether engine slot `pos` is in the prefill pool (its slots come first).
    pub(super) fn is_prefill_pos(&self, pos: usize) -> bool {
        self.pd.as_ref().is_some_and(|pd| pos < pd.pools.prefill)
    }

    /// One routing decision of a disaggregated request at arrival (or after waiting at
    /// the router): `false` when no endpoint could take it.
    pub(super) fn try_route_pd(
        &mut self,
        index: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<bool, SimError> {
        let decision = self.pd().pools.decision;
        let prompt = self.feed.request(index).prompt_tokens;
        if !decision.decode_first() {
            match self.pick(index, now, replicas, Phase::Prefill)? {
                Pick::Nothing => return Ok(false),
                Pick::TooLong => self.reject(index, now)?,
                Pick::At(pos) => self.start_prefill(index, pos, now),
            }
            return Ok(true);
        }
        let decode = match self.pd().requests[index].decode {
            Some(pos) => pos,
            None => match self.pick(index, now, replicas, Phase::Decode)? {
                Pick::At(pos) => pos,
                Pick::Nothing => return Ok(false),
                Pick::TooLong => {
                    self.reject(index, now)?;
                    return Ok(true);
                }
            },
        };
        self.pd().requests[index].decode = Some(decode);
        let cached = self.engine_cached_tokens(index, decode);
        let remote = if decision.disaggregate(u64::from(prompt), cached) {
            self.pick(index, now, replicas, Phase::Prefill)?
        } else {
            Pick::Nothing
        };
        match remote {
            Pick::At(pos) => self.start_prefill(index, pos, now),
            // Too long for the prefill endpoint chosen, or none available: prefilled where
            // it decodes, which holds it (it was chosen for the whole request).
            Pick::Nothing | Pick::TooLong => {
                // Prefilled where it decodes: a whole request on that engine.
                let pd = self.pd();
                pd.requests[index].local = true;
                pd.requests[index].phase = Some(Phase::Decode);
                pd.local += 1;
                self.enqueue_at(index, decode, now, false);
            }
        }
        Ok(true)
    }

    /// Asks replica `r`'s router of `phase`'s pool; books the pick.
    fn pick(
        &mut self,
        index: usize,
        now: u64,
        replicas: &mut Replicas,
        phase: Phase,
    ) -> Result<Pick, SimError> {
        self.pd().requests[index].phase = Some(phase);
        let r = self.requests[index].replica;
        let prompt_tokens = self.feed.request(index).prompt_tokens;
        let output_tokens = self.requests[index].output_tokens;
        let router = match phase {
            Phase::Decode => replicas.decode_router_mut(r),
            _ => replicas.router_mut(r),
        };
        let decision = self.decide_with(router, index, now)?;
        self.requests[index].constrained |= decision.constrained;
        let Some(ListPos(listed)) = decision.endpoint else {
            return Ok(Pick::Nothing);
        };
        let pos = self.listed[listed];
        // A prefill holds the prompt and one token; a decode the prompt and the output.
        let holds = if phase == Phase::Prefill {
            1
        } else {
            output_tokens
        };
        if !self.fleet.engines[pos].can_ever_fit(prompt_tokens, holds) {
            // The matcher chose an engine too small for it (possible in mixed fleets).
            self.stats.too_long += 1;
            return Ok(Pick::TooLong);
        }
        if !decision.learned {
            router
                .learn(&self.data(index, now, None), ListPos(listed))
                .map_err(self.plugin_error(index))?;
        }
        let flags = router.unavailable().to_vec();
        if phase == Phase::Prefill || self.pd().pools.decision.decode_first() {
            self.judge(index, pos, &decision, &flags);
        }
        self.fleet.inflight_tokens[r][pos] += u64::from(prompt_tokens);
        self.fleet.inflight_requests[r][pos] += 1;
        Ok(Pick::At(pos))
    }

    /// What engine `pos` holds of request `index`'s prompt, in tokens.
    fn engine_cached_tokens(&self, index: usize, pos: usize) -> u64 {
        let block = self.settings.engines[pos].engine_block_size;
        let chain = self.chain(index, block);
        self.fleet.engines[pos].cached_prefix_tokens(chain)
    }

    fn start_prefill(&mut self, index: usize, pos: usize, now: u64) {
        let pd = self.pd();
        pd.requests[index].prefill = Some(pos);
        pd.disaggregated += 1;
        // The prefill endpoint computes the prompt and samples one token.
        let engine_block = self.settings.engines[pos].engine_block_size;
        let chain = self.chain(index, engine_block).to_vec();
        let prompt = self.feed.request(index).prompt_tokens;
        let adapter = self.feed.request(index).adapter;
        let sequence = Sequence::new(index, prompt, 1, chain).with_adapter(adapter);
        let sequence = self.told_sharing(index, engine_block, sequence);
        self.fleet.submit(pos, sequence, now, &mut self.events);
    }

    /// Queues request `index` on engine `pos`: whole, or with its KV moved in.
    fn enqueue_at(&mut self, index: usize, pos: usize, now: u64, moved: bool) {
        self.requests[index].endpoint = Some(pos);
        let engine_block = self.settings.engines[pos].engine_block_size;
        let chain = self.chain(index, engine_block).to_vec();
        let prompt = self.feed.request(index).prompt_tokens;
        let output = self.requests[index].output_tokens;
        let sequence = if moved {
            Sequence::transferred(index, prompt, output, chain)
        } else {
            Sequence::new(index, prompt, output, chain)
        };
        let sequence = sequence.with_adapter(self.feed.request(index).adapter);
        let sequence = self.told_sharing(index, engine_block, sequence);
        self.fleet.submit(pos, sequence, now, &mut self.events);
    }

    /// Request `index`'s prefill finished on prefill endpoint `pos` at `now`: tell the
    /// prefill router, then route and start its KV's move.
    pub(super) fn prefill_done(
        &mut self,
        sequence: Sequence,
        pos: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<(), SimError> {
        let index = sequence.request;
        let r = self.requests[index].replica;
        let listed = self.pos_of[pos].expect("an engine at work is listed");
        replicas
            .router_mut(r)
            .complete(&self.data(index, now, None), ListPos(listed))
            .map_err(self.plugin_error(index))?;
        if let Some(tiers) = &mut self.stats.tiers {
            tiers.add(&sequence);
        }
        let prompt = self.feed.request(index).prompt_tokens;
        self.fleet.inflight_tokens[r][pos] -= u64::from(prompt);
        self.fleet.inflight_requests[r][pos] -= 1;
        let hit = sequence.hit_tokens.unwrap_or(0);
        let tally = &mut self.stats.per_endpoint[pos];
        tally.requests += 1;
        tally.prompt_tokens += u64::from(prompt);
        let pd = self.pd();
        pd.prefill.add(prompt, hit);
        let state = &mut pd.requests[index];
        state.prefill_hit = hit;
        state.prefill_scheduled_ns = sequence.first_scheduled_ns.unwrap_or(now);
        state.prefill_done_ns = now;
        if state.decode.is_some() {
            return self.start_transfer(index, now);
        }
        if !self.pd().decode_queues[r].is_empty() || !self.route_decode(index, now, replicas)? {
            self.pd().decode_queues[r].push_back(index);
        }
        Ok(())
    }

    /// Picks the decode endpoint of a prefilled request; `false` when none is available.
    fn route_decode(
        &mut self,
        index: usize,
        now: u64,
        replicas: &mut Replicas,
    ) -> Result<bool, SimError> {
        match self.pick(index, now, replicas, Phase::Decode)? {
            Pick::At(pos) => {
                self.pd().requests[index].decode = Some(pos);
                self.start_transfer(index, now)?;
                Ok(true)
            }
            Pick::TooLong => {
                self.reject(index, now)?;
                Ok(true)
            }
            // Its KV is computed: whatever the unavailable policy, it waits for a decode
            // endpoint rather than be thrown away.
            Pick::Nothing => Ok(false),
        }
    }

    /// Routes the prefilled requests waiting at replica `r` for a decode endpoint, in order.
    pub(super) fn drain_decode_queue(
        &mut self,
        now: u64,
        replicas: &mut Replicas,
        r: usize,
    ) -> Result<(), SimError> {
        if self.pd.is_none() {
            return Ok(());
        }
        while let Some(index) = self.pd().decode_queues[r].pop_front() {
            if !self.route_decode(index, now, replicas)? {
                self.pd().decode_queues[r].push_front(index);
                break;
            }
        }
        Ok(())
    }

    /// Starts moving request `index`'s KV to its decode endpoint.
    fn start_transfer(&mut self, index: usize, now: u64) -> Result<(), SimError> {
        let decode = self.pd().requests[index].decode.expect("a decode endpoint");
        let prompt = u64::from(self.feed.request(index).prompt_tokens);
        let cached = self.engine_cached_tokens(index, decode);
        let transfer = self.pd().link;
        let tokens = transfer.tokens(prompt, cached);
        let delay = transfer.delay_ns(tokens);
        if delay > routerlab_engine::transfer::LONGEST_DELAY_NS {
            return Err(SimError::Input(format!(
                "a KV transfer of {tokens} tokens at kv_transfer `bandwidth_gbps` {:e} and `kv_bytes_per_token` {} takes longer than {}",
                transfer.bandwidth_gbps,
                transfer.kv_bytes_per_token,
                crate::timed::CLOCK_RANGE
            )));
        }
        let pd = self.pd();
        pd.transfer_tokens += tokens;
        pd.transfer.record(us(delay));
        if delay == 0 {
            self.handoff(index, now);
        } else {
            self.events.push(now + delay, Event::Handoff(index));
        }
        Ok(())
    }

    /// Request `index`'s KV reached its decode endpoint at `now`.
    pub(super) fn handoff(&mut self, index: usize, now: u64) {
        let pd = self.pd();
        let decode = pd.requests[index].decode.expect("a decode endpoint");
        pd.requests[index].handoff_ns = now;
        pd.requests[index].phase = Some(Phase::Decode);
        self.enqueue_at(index, decode, now, true);
    }

    /// The decode endpoint finished request `index`: the pools' books. Returns the
    /// endpoint and prompt tokens reused where the prompt was computed.
    pub(super) fn pd_finished(
        &mut self,
        index: usize,
        sequence: &Sequence,
        pos: usize,
    ) -> (usize, u32) {
        let prompt = self.feed.request(index).prompt_tokens;
        let pd = self.pd();
        let hit = sequence.hit_tokens.unwrap_or(0);
        pd.decode.add(prompt, hit);
        let state = pd.requests[index];
        if state.local {
            return (pos, hit);
        }
        let first = sequence.first_token_ns.unwrap_or(state.handoff_ns);
        let arrival = self.requests[index].arrival_ns;
        let pd = self.pd();
        let parts = [
            state.prefill_scheduled_ns - arrival,
            state.prefill_done_ns - state.prefill_scheduled_ns,
            state.handoff_ns - state.prefill_done_ns,
            first - state.handoff_ns,
        ];
        for (stat, ns) in pd.split.iter_mut().zip(parts) {
            stat.record(us(ns));
        }
        (state.prefill.expect("prefilled"), state.prefill_hit)
    }

    /// The phase request `index`'s plugin calls are about now.
    pub(super) fn phase_of(&self, index: usize) -> Phase {
        match &self.pd {
            Some(pd) => pd.requests[index].phase.unwrap_or(Phase::Whole),
            None => Phase::Whole,
        }
    }
}

#[cfg(test)]
mod tests;
