//! One engine: the FIFO scheduler of its sequences ([`Sequence`]) with chunked prefill and
//! preemption, and the macro steps that fold identical decode steps into one (see the
//! crate docs).

use std::collections::VecDeque;

use crate::config::EngineConfig;
use crate::host::{HostCache, SharedStore};
use crate::kv::KvCache;
use crate::lora::Residency;
pub use crate::sequence::Sequence;
use crate::step_time::Batch;
use crate::tiers::Tiers;

/// What an engine reports to the router.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineStatus {
    /// Running sequences.
    pub running: u64,
    /// Waiting requests.
    pub waiting: u64,
    /// KV blocks held.
    pub kv_blocks_used: u64,
    /// KV blocks in total.
    pub kv_blocks_total: u64,
    /// Its LoRA slots (all zero without them).
    pub lora: crate::LoraStatus,
}

/// The work of the step (or macro step) in flight.
#[derive(Debug)]
struct Plan {
    start_ns: u64,
    step_ns: u64,
    steps: u64,
    /// (running position, prefill tokens) for sequences prefilling in this step.
    prefill: Vec<(usize, u32)>,
    /// Running positions of the sequences decoding in this step.
    decode: Vec<usize>,
    /// With speculative decoding, the draft tokens each of `decode` verifies.
    drafts: Vec<u32>,
    /// Whether the plan is pure decode (and so may be cut short).
    pure_decode: bool,
}

/// One inference engine.
pub struct Engine {
    config: EngineConfig,
    kv: KvCache,
    /// The host and shared tiers below the GPU cache, when configured.
    tiers: Tiers,
    pub(crate) waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    plan: Option<Plan>,
    /// The last plan's lists, cleared, to reuse their allocations.
    spare: (Vec<(usize, u32)>, Vec<usize>),
    /// Sequences preempted (recomputed).
    pub preemptions: u64,
    /// With speculative decoding: sequence-steps of decoding, and the tokens they yielded.
    pub speculated: (u64, u64),
    /// Largest KV usage seen (fraction).
    pub peak_usage: f64,
    usage_integral: f64,
    usage_since_ns: u64,
    first_ns: Option<u64>,
    /// Requests whose first token the last step produced, until taken.
    first_tokens: Vec<usize>,
    /// No step computes before then: the stores reading blocks it writes end (0: none).
    compute_after_ns: u64,
    /// The LoRA adapters resident, when the config has slots for them.
    pub(crate) lora: Option<Residency>,
    /// A data-parallel rank stepping with others ([`Engine::stretch_step`]): one step at a
    /// time, never cut short.
    lockstep: bool,
    /// With async scheduling, when the step being planned was planned in vLLM (as the last
    /// one started): only requests queued by then join it (`u64::MAX`: any).
    admit_until_ns: u64,
}

impl Engine {
    /// An idle engine.
    pub fn new(config: EngineConfig) -> Engine {
        let kv = KvCache::new(config.num_gpu_blocks);
        let tiers = Tiers::new(&config);
        let lora = config.lora.map(Residency::new);
        let lockstep = config.step_time.lockstep_ranks() > 1;
        Engine {
            config,
            kv,
            tiers,
            waiting: VecDeque::new(),
            running: Vec::new(),
            plan: None,
            spare: (Vec::new(), Vec::new()),
            preemptions: 0,
            speculated: (0, 0),
            peak_usage: 0.0,
            usage_integral: 0.0,
            usage_since_ns: 0,
            first_ns: None,
            first_tokens: Vec::new(),
            compute_after_ns: 0,
            lora,
            lockstep,
            admit_until_ns: u64::MAX,
        }
    }

    /// Takes the requests (by `Sequence::request`) that produced their first token since
    /// the last call: their prefill is done.
    pub fn take_first_tokens(&mut self, into: &mut Vec<usize>) {
        into.clear();
        into.append(&mut self.first_tokens);
    }

    /// Tokens of `chain`'s leading blocks (engine blocks) this engine's KV cache holds now.
    pub fn cached_prefix_tokens(&self, chain: &[u64]) -> u64 {
        self.kv.cached_prefix(chain) as u64 * u64::from(self.config.engine_block_size)
    }

    /// Whether this engine's KV cache holds the block of hash `hash` now (wherever it is in
    /// a chain).
    pub fn holds_block(&self, hash: u64) -> bool {
        self.kv.cached(hash).is_some()
    }

    /// Its settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Whether a request of this size can ever run here: prompt and output together fit in
    /// the whole KV cache (otherwise it would wait, or preempt itself, forever).
    pub fn can_ever_fit(&self, prompt_tokens: u32, output_tokens: u32) -> bool {
        Engine::tokens_held(prompt_tokens, output_tokens) <= self.room_tokens()
    }

    /// The tokens a request of this size holds at its end, prompt and output (each at
    /// least 1): what [`Engine::can_ever_fit`] compares with [`Engine::room_tokens`].
    pub fn tokens_held(prompt_tokens: u32, output_tokens: u32) -> u64 {
        u64::from(prompt_tokens.max(1)) + u64::from(output_tokens.max(1))
    }

    /// The whole KV cache in tokens: a request fits if its tokens take no more blocks than
    /// the cache has, that is, no more tokens than this.
    pub fn room_tokens(&self) -> u64 {
        u64::from(self.kv.capacity()) * u64::from(self.config.engine_block_size)
    }

    /// Records its KV cache's stores and removals from now on, for [`Engine::take_kv_events`].
    pub fn record_kv_events(&mut self) {
        self.kv.record_events();
    }

    /// The blocks its KV cache stored and removed since the last call, in order: what its
    /// KV events publish.
    pub fn take_kv_events(&mut self, into: &mut Vec<crate::KvEvent>) {
        self.kv.take_events(into);
    }

    /// The host tier, when configured.
    pub fn host(&self) -> Option<&HostCache> {
        self.tiers.host.as_ref()
    }

    /// The shared tier this engine reaches, when configured.
    pub fn shared(&self) -> Option<&SharedStore> {
        self.tiers.shared.as_ref()
    }

    /// Makes this engine use `store` as its shared tier (one store for the fleet), in place
    /// of the one of its own it started with. Ignored without a `shared_tier`.
    pub fn join_shared(&mut self, store: &SharedStore) {
        if self.tiers.shared.is_some() {
            self.tiers.shared = Some(store.clone());
        }
    }

    /// Tokens of `chain`'s leading blocks per tier: the GPU-cached run, then, of the run
    /// right after it that the lower tiers hold, those loaded from the host tier and those
    /// from the shared tier (what a request would load instead of computing).
    pub fn tier_prefix_tokens(&self, chain: &[u64]) -> [u64; 3] {
        let gpu = self.kv.cached_prefix(chain);
        let (host, shared) = self.tiers.lower_run(&chain[gpu..], chain.len() - gpu);
        let block = u64::from(self.config.engine_block_size);
        [
            gpu as u64 * block,
            host as u64 * block,
            shared as u64 * block,
        ]
    }

    /// The status routers see.
    pub fn status(&self) -> EngineStatus {
        EngineStatus {
            running: self.running.len() as u64,
            waiting: self.waiting.len() as u64,
            kv_blocks_used: u64::from(self.kv.used()),
            kv_blocks_total: u64::from(self.kv.capacity()),
            lora: self.lora_status().unwrap_or_default(),
        }
    }

    /// The sequences running now, in admission order (a live engine streams their tokens).
    pub fn running(&self) -> &[Sequence] {
        &self.running
    }

    /// The step in flight: its start, the length of one step and how many identical steps
    /// it stands for (more than one only when every running sequence just decodes: each
    /// step then gives each of them one token). `None` when idle.
    pub fn step_in_flight(&self) -> Option<(u64, u64, u64)> {
        self.plan.as_ref().map(|p| (p.start_ns, p.step_ns, p.steps))
    }

    /// Tokens per KV block.
    pub fn block_tokens(&self) -> u32 {
        self.config.engine_block_size
    }

    fn usage(&self) -> f64 {
        f64::from(self.kv.used()) / f64::from(self.kv.capacity())
    }

    /// The blocks the running sequences hold, a block counted once for every sequence that
    /// holds it, over the capacity: what a step's attention reads, as Dynamo's mocker
    /// counts its utilisation for the polynomial decode time (a prefix many sequences
    /// share is read by each; it can pass 1).
    fn held_usage(&self) -> f64 {
        let held: usize = self.running.iter().map(Sequence::held).sum();
        held as f64 / f64::from(self.kv.capacity())
    }

    /// Time-weighted mean KV usage from the first arrival to `now`.
    pub fn mean_usage(&self, now_ns: u64) -> f64 {
        let Some(first) = self.first_ns else {
            return 0.0;
        };
        let integral = self.usage_integral
            + self.usage() * (now_ns.saturating_sub(self.usage_since_ns)) as f64;
        let span = now_ns.saturating_sub(first);
        if span == 0 {
            0.0
        } else {
            integral / span as f64
        }
    }

    /// A running sequence of `adapter` left: it no longer pins its slot.
    fn unpin(&mut self, adapter: u32) {
        if let Some(lora) = &mut self.lora
            && adapter != 0
        {
            lora.release(adapter);
        }
    }

    /// Accounts usage up to `now` before it changes.
    fn account(&mut self, now_ns: u64) {
        if self.first_ns.is_none() {
            self.first_ns = Some(now_ns);
            self.usage_since_ns = now_ns;
        }
        self.usage_integral += self.usage() * now_ns.saturating_sub(self.usage_since_ns) as f64;
        self.usage_since_ns = now_ns;
    }

    /// Queues a request. Returns `Some(end)` when the engine was idle and a step (ending at
    /// `end`) was started; when busy with a macro step, the step is cut at the next
    /// boundary (scheduling ahead, the one after) and the new end returned.
    pub fn enqueue(&mut self, mut sequence: Sequence, now_ns: u64) -> Option<u64> {
        self.account(now_ns);
        sequence.queued_ns = now_ns;
        self.waiting.push_back(sequence);
        match &mut self.plan {
            None => {
                self.admit_until_ns = u64::MAX;
                self.start_step(now_ns)
            }
            // Its step ends with its peers'.
            Some(_) if self.lockstep => None,
            // Only waiting for a host load: the arrival may be admitted now.
            Some(plan) if plan.prefill.is_empty() && plan.decode.is_empty() => {
                plan.step_ns = now_ns.saturating_sub(plan.start_ns).max(1);
                Some(plan.start_ns + plan.step_ns)
            }
            Some(plan) if plan.pure_decode && plan.steps > 1 => {
                let elapsed = now_ns.saturating_sub(plan.start_ns);
                // Scheduling ahead, the step after the next is the first planned after it came.
                let ahead = u64::from(self.config.async_scheduling);
                let steps = (elapsed.div_ceil(plan.step_ns) + ahead).clamp(1, plan.steps);
                if steps < plan.steps {
                    plan.steps = steps;
                    return Some(plan.start_ns + plan.steps * plan.step_ns);
                }
                None
            }
            Some(_) => None,
        }
    }

    /// Queues a request as [`Engine::enqueue`] does, except that an idle engine does not
    /// start a step: the caller starts it with [`Engine::start_if_idle`] once every request
    /// arriving at the same instant is queued, so they share the first step (NVIDIA
    /// Dynamo's mocker takes in everything that arrived before it steps).
    pub fn enqueue_batched(&mut self, mut sequence: Sequence, now_ns: u64) -> Option<u64> {
        if self.plan.is_some() {
            return self.enqueue(sequence, now_ns);
        }
        self.account(now_ns);
        sequence.queued_ns = now_ns;
        self.waiting.push_back(sequence);
        None
    }

    /// Starts a step when none is in flight; its end, if there was work.
    pub fn start_if_idle(&mut self, now_ns: u64) -> Option<u64> {
        if self.plan.is_some() {
            return None;
        }
        self.admit_until_ns = u64::MAX;
        self.start_step(now_ns)
    }

    /// Whether no step is in flight.
    pub fn is_idle(&self) -> bool {
        self.plan.is_none()
    }

    /// When the step in flight ends, if any.
    pub fn step_end(&self) -> Option<u64> {
        self.plan.as_ref().map(|p| p.start_ns + p.steps * p.step_ns)
    }

    /// Finishes the step in flight at `now`: applies its effects, returns the finished
    /// sequences, and starts the next step if there is work (its end via `step_end`).
    pub fn finish_step(&mut self, now_ns: u64) -> Vec<Sequence> {
        let Some(plan) = self.plan.take() else {
            return Vec::new();
        };
        // Scheduling ahead, vLLM planned the next step as this one's last step started.
        let worked = !(plan.prefill.is_empty() && plan.decode.is_empty());
        self.admit_until_ns = if self.config.async_scheduling && worked {
            plan.start_ns + (plan.steps - 1) * plan.step_ns
        } else {
            u64::MAX
        };
        for (pos, tokens) in &plan.prefill {
            let block_tokens = self.config.engine_block_size;
            let seq = &mut self.running[*pos];
            // Publish the full prompt blocks now computed.
            let end = published_after(seq, *tokens, block_tokens, self.config.prefix_caching);
            seq.computed += tokens;
            let start = seq.published;
            let parent = start.checked_sub(1).map(|p| seq.hashes[p]);
            // The blocks with ids, then the anonymous ones, which only count.
            let named = named_until(seq, end);
            let (ids, hashes) = (&seq.blocks[named.clone()], &seq.hashes[named.clone()]);
            let shared = seq.shared.saturating_sub(start);
            self.kv.publish_run(ids, hashes, parent, shared);
            self.tiers.computed(ids, hashes);
            seq.anon_hashed += (end - start - named.len()) as u32;
            seq.published = end;
            self.tiers.store_computed(now_ns);
            if !seq.prefilling() {
                // The step that completes a prefill samples a token.
                seq.generated += 1;
                if seq.first_token_ns.is_none() {
                    seq.first_token_ns = Some(now_ns);
                    self.first_tokens.push(seq.request);
                }
            }
        }
        for (i, pos) in plan.decode.iter().enumerate() {
            let seq = &mut self.running[*pos];
            let tokens = match (&self.config.speculative, plan.drafts.get(i)) {
                (Some(spec), Some(&drafts)) => {
                    // The whole tokens the mean yield has earned it, never past its output.
                    let before = seq.spec_credit.floor();
                    seq.spec_credit += spec.tokens_per_step_with(drafts);
                    let earned = (seq.spec_credit.floor() - before) as u32;
                    let tokens = earned.clamp(1, seq.output_tokens - seq.generated);
                    self.speculated.0 += 1;
                    self.speculated.1 += u64::from(tokens);
                    tokens
                }
                _ => plan.steps as u32,
            };
            seq.computed += tokens;
            seq.generated += tokens;
        }
        let (mut prefill, mut decode) = (plan.prefill, plan.decode);
        prefill.clear();
        decode.clear();
        self.spare = (prefill, decode);
        self.account(now_ns);
        // The finished leave in one pass (the others keep their order), then give back
        // their blocks and adapters in that order.
        let done = |seq: &mut Sequence| !seq.prefilling() && seq.generated >= seq.output_tokens;
        let finished: Vec<Sequence> = self.running.extract_if(.., done).collect();
        for seq in &finished {
            self.kv
                .release_anon(seq.anon - seq.anon_hashed, seq.anon_hashed);
            self.kv.release(&seq.blocks);
            self.unpin(seq.adapter);
        }
        self.start_step(now_ns);
        finished
    }

    /// Plans the next step at `now`; returns its end, or `None` when idle.
    fn start_step(&mut self, now_ns: u64) -> Option<u64> {
        // vLLM V0: a step of prefills alone while a request waits and may be admitted.
        let v0 = self.config.scheduler == crate::Scheduler::V0;
        if v0
            && !self.waiting.is_empty()
            && (self.running.len() as u32) < self.config.max_num_seqs
            && let Some(end) = self.plan_step(now_ns, true)
        {
            return Some(end);
        }
        self.plan_step(now_ns, false)
    }

    /// Plans a step: with `prefills_only` (V0), admissions alone, each whole prompt within
    /// the budget, and nothing planned when none is admitted.
    fn plan_step(&mut self, now_ns: u64, prefills_only: bool) -> Option<u64> {
        let block_tokens = self.config.engine_block_size;
        let mut budget = self.config.max_num_batched_tokens;
        let (mut prefill, mut decode) = std::mem::take(&mut self.spare);
        let mut prefill_tokens = 0u64;
        let speculating = self.config.speculative.is_some();
        let lookahead = self.config.speculative.as_ref().map_or(0, |s| s.num_tokens);
        let mut drafts_of: Vec<u32> = Vec::new();
        // Running sequences first, in admission order.
        let mut pos = 0;
        while !prefills_only && pos < self.running.len() && budget > 0 {
            if self.running[pos].ready_ns > now_ns {
                // Its KV is still coming from the host tier.
                pos += 1;
                continue;
            }
            if self.running[pos].prefilling() {
                let seq = &self.running[pos];
                let tokens = (seq.prefill_target - seq.computed).min(budget);
                budget -= tokens;
                if !seq.kv_transferred {
                    prefill_tokens += u64::from(tokens);
                }
                prefill.push((pos, tokens));
                pos += 1;
                continue;
            }
            // Decoding computes one more token (and verifies the drafts, speculating): room
            // for them, preempting from the back if needed.
            let drafts = lookahead.min(budget - 1);
            let needed = (self.running[pos].computed + 1 + drafts).div_ceil(block_tokens);
            if needed as usize > self.running[pos].held() {
                let mut grown = Some(true);
                while grown == Some(true) && needed as usize > self.running[pos].held() {
                    grown = self.grow(pos);
                }
                match grown {
                    Some(true) => {}
                    Some(false) => continue, // `pos` itself was preempted; the next moved in
                    None => break,
                }
                // A block a store still reads is written once the store ends (with tiers,
                // every block has an id).
                if let Some(&block) = self.running[pos].blocks.last() {
                    let fence = self.tiers.fence(&[block]);
                    self.compute_after_ns = self.compute_after_ns.max(fence);
                }
            }
            budget -= 1 + drafts;
            if speculating {
                drafts_of.push(drafts);
            }
            decode.push(pos);
            pos += 1;
        }
        // Then admissions, FIFO, while they fit: scheduling ahead, those queued when the step
        // was planned, unless it has nothing else to do (vLLM plans none ahead then).
        let admit_until = if prefill.is_empty() && decode.is_empty() {
            u64::MAX
        } else {
            self.admit_until_ns
        };
        let mut admitted = false;
        // Whether a request waits for a later step's planning.
        let mut deferred = false;
        // A padded V0 batch's prompts so far: how many, their longest and their sum.
        let padding = self.config.max_paddings.filter(|_| prefills_only);
        let (mut prompts, mut longest, mut unpadded) = (0u64, 0u64, 0u64);
        // Requests passed over because their adapter has no slot (vLLM V1 skips them).
        let mut at = 0;
        while budget > 0 && (self.running.len() as u32) < self.config.max_num_seqs {
            let Some(head) = self.waiting.get_mut(at) else {
                break;
            };
            if head.queued_ns > admit_until {
                deferred = true;
                break;
            }
            // As vLLM V1: a request whose adapter cannot have a slot is passed over before
            // anything else is checked.
            if head.adapter != 0
                && let Some(lora) = &self.lora
                && !lora.can_admit(head.adapter)
            {
                at += 1;
                continue;
            }
            // A head that keeps waiting is not looked up from scratch every step: its known
            // hits are re-checked in place (a block still holding its hash) and extended.
            self.kv.refresh_cached_ids(&head.hashes, &mut head.hit_ids);
            let head = &self.waiting[at];
            let target = head.prompt_tokens + head.generated;
            let hits = if self.config.prefix_caching {
                head.hit_ids.len()
            } else {
                0
            };
            // As vLLM: the last prompt token is always computed, to sample from it.
            let most = ((target - 1) / block_tokens) as usize;
            let hits = hits.min(most);
            // Then the run the lower tiers hold right after the GPU's, loaded instead.
            let (host_run, shared_run) = if hits < most {
                (self.tiers).lower_run(&head.hashes[hits.min(head.hashes.len())..], most - hits)
            } else {
                (0, 0)
            };
            let hit_tokens = hits as u32 * block_tokens;
            let total_blocks = target.div_ceil(block_tokens) as usize;
            let new_blocks = (total_blocks - hits) as u32;
            if new_blocks + self.kv.unheld(&head.hit_ids[..hits]) > self.kv.free() {
                break;
            }
            // V0 computes a prompt whole (one longer than any budget is chunked instead).
            let whole = target - hit_tokens;
            if prefills_only && whole > budget && whole <= self.config.max_num_batched_tokens {
                break;
            }
            if let Some(most_padding) = padding
                && prompts > 0
            {
                // vLLM ≤ 0.3: the batch is computed padded to its longest prompt.
                let wide = longest.max(u64::from(whole));
                let padded = (prompts + 1) * wide;
                if padded > u64::from(self.config.max_num_batched_tokens)
                    || padded - (unpadded + u64::from(whole)) > u64::from(most_padding)
                {
                    break;
                }
            }
            // Its adapter needs a slot: loaded, loading, or one to load it into.
            let adapter_ready = match (&mut self.lora, head.adapter) {
                (Some(lora), adapter) if adapter != 0 => lora
                    .admit(adapter, now_ns)
                    .expect("can_admit found it a slot above"),
                _ => 0,
            };
            let mut seq = self.waiting.remove(at).expect("head exists");
            // Room for every block it will hold, its output's too (it fits the cache: no
            // more than that), so the decode steps never grow the list.
            let all = (u64::from(seq.prompt_tokens) + u64::from(seq.output_tokens))
                .div_ceil(u64::from(block_tokens))
                .min(u64::from(self.kv.capacity())) as usize;
            // The blocks no other request will ask for are anonymous, when no tier or event
            // needs them named.
            seq.anon_from = match self.tiers.any() || self.kv.recording() {
                true => usize::MAX,
                false => seq.shared.max(hits),
            };
            seq.blocks.reserve(all.max(total_blocks).min(seq.anon_from));
            for &id in &seq.hit_ids[..hits] {
                self.kv.hold(id);
                seq.blocks.push(id);
            }
            give(&mut self.kv, &mut seq, new_blocks);
            seq.published = hits;
            seq.computed = hit_tokens;
            seq.prefill_target = target;
            seq.first_scheduled_ns.get_or_insert(now_ns);
            // New blocks are written once the stores reading them end.
            let fence = self.tiers.fence(&seq.blocks[hits..]);
            if host_run + shared_run > 0 {
                let run = &seq.hashes[hits..hits + host_run + shared_run];
                let loaded = self.tiers.load(run, now_ns, fence);
                let (host, shared) = (
                    loaded.host as u32 * block_tokens,
                    loaded.shared as u32 * block_tokens,
                );
                seq.computed += host + shared;
                if loaded.blocking {
                    // The step waits for the load and computes the rest after it.
                    self.compute_after_ns = self.compute_after_ns.max(loaded.ready_ns);
                } else {
                    seq.ready_ns = loaded.ready_ns;
                }
                seq.load_ns += loaded.ready_ns - now_ns;
                seq.host_hit_tokens.get_or_insert(host);
                seq.shared_hit_tokens.get_or_insert(shared);
            }
            // The engine computes nothing until they are free (vLLM's connector fences the
            // whole step: `compute_not_before` in Dynamo's adapter).
            self.compute_after_ns = self.compute_after_ns.max(fence);
            seq.hit_tokens.get_or_insert(seq.computed);
            seq.host_hit_tokens.get_or_insert(0);
            seq.shared_hit_tokens.get_or_insert(0);
            seq.ready_ns = seq.ready_ns.max(adapter_ready);
            admitted = true;
            if seq.ready_ns > now_ns {
                // It waits for its load; the others go on.
                self.running.push(seq);
                continue;
            }
            let tokens = (seq.prefill_target - seq.computed).min(budget);
            budget -= tokens;
            if !seq.kv_transferred {
                prefill_tokens += u64::from(tokens);
            }
            if padding.is_some() {
                prompts += 1;
                longest = longest.max(u64::from(tokens));
                unpadded += u64::from(tokens);
            }
            prefill.push((self.running.len(), tokens));
            self.running.push(seq);
        }
        if padding.is_some() {
            // The step computes the padding too.
            prefill_tokens += prompts * longest - unpadded;
        }
        if prefills_only && prefill.is_empty() && !admitted {
            // Nothing admitted: the step decodes instead.
            self.spare = (prefill, decode);
            return None;
        }
        if prefill.is_empty() && decode.is_empty() {
            // Nothing to compute: idle, or waiting for a load to end.
            let Some(ready) = self
                .running
                .iter()
                .map(|s| s.ready_ns)
                .filter(|r| *r > now_ns)
                .min()
            else {
                self.spare = (prefill, decode);
                return None;
            };
            self.plan = Some(Plan {
                start_ns: now_ns,
                step_ns: ready - now_ns,
                steps: 1,
                prefill,
                decode,
                drafts: drafts_of,
                pure_decode: false,
            });
            return Some(ready);
        }
        // Every running sequence decodes and nothing else happens: identical steps follow.
        // (Speculating, each step yields what its sequences have earned: one at a time.)
        let pure_decode =
            prefill.is_empty() && !admitted && decode.len() == self.running.len() && !speculating;
        let steps = if pure_decode && !self.lockstep && !deferred {
            self.reserve_decode_run(now_ns)
        } else {
            1
        };
        let usage = self.usage();
        self.peak_usage = self.peak_usage.max(usage);
        // Context the batch attends to: each prefilling sequence's KV after its chunk, each
        // decoding one's before its token. Over a run of identical decode steps it grows by
        // one token per sequence a step; the run's middle step stands for all of them (exact
        // in total for a model linear in context).
        let context: u64 = prefill
            .iter()
            .map(|(pos, tokens)| u64::from(self.running[*pos].computed + tokens))
            .chain(
                decode
                    .iter()
                    .map(|pos| u64::from(self.running[*pos].computed)),
            )
            .sum::<u64>()
            + decode.len() as u64 * (steps - 1) / 2;
        // Query-key pairs: a chunk of n tokens after c computed attends to c + 1 .. c + n;
        // a decoded token to its context (the run's middle step for a run).
        let pairs: u64 = prefill
            .iter()
            .map(|(pos, tokens)| {
                let (c, n) = (u64::from(self.running[*pos].computed), u64::from(*tokens));
                n * c + n * (n + 1) / 2
            })
            .sum::<u64>()
            + decode
                .iter()
                .map(|pos| u64::from(self.running[*pos].computed) + 1)
                .sum::<u64>()
            + decode.len() as u64 * (steps - 1) / 2
            // A sequence verifying d drafts attends from d more positions, each one further.
            + drafts_of
                .iter()
                .zip(&decode)
                .map(|(&d, pos)| {
                    let d = u64::from(d);
                    d * (u64::from(self.running[*pos].computed) + 1) + d * (d + 1) / 2
                })
                .sum::<u64>();
        let decode_tokens =
            decode.len() as u64 + drafts_of.iter().map(|&d| u64::from(d)).sum::<u64>();
        // A moved-in prompt that completes here samples its first token: a decode's work.
        let arrived_kv = prefill
            .iter()
            .filter(|(pos, tokens)| {
                let seq = &self.running[*pos];
                seq.kv_transferred && seq.computed + tokens >= seq.prefill_target
            })
            .count() as u64;
        let mut step_ns = self.config.step_time.step_ns(&Batch {
            prefill_tokens,
            decode_seqs: decode.len() as u64 + arrived_kv,
            decode_tokens: decode_tokens + arrived_kv,
            context_tokens: context,
            attention_pairs: pairs,
            kv_usage: self.held_usage(),
        });
        if let Some(spec) = &self.config.speculative
            && !decode.is_empty()
        {
            // The drafts: as many passes as the most drafts a sequence has, each a share of
            // a plain decode step of the batch.
            let passes = drafts_of.iter().copied().max().unwrap_or(0);
            let plain = self.config.step_time.step_ns(&Batch {
                decode_seqs: decode.len() as u64,
                decode_tokens: decode.len() as u64,
                context_tokens: context,
                kv_usage: self.held_usage(),
                ..Batch::default()
            });
            step_ns += (f64::from(passes) * spec.draft_cost() * plain as f64).round() as u64;
        }
        if let Some(lora) = &self.lora {
            step_ns = lora.step_ns(step_ns);
        }
        step_ns += self.blocking_stores_ns(&prefill);
        // The step starts once the stores reading the blocks it writes end.
        let start_ns = now_ns.max(self.compute_after_ns);
        self.plan = Some(Plan {
            start_ns,
            step_ns,
            steps,
            prefill,
            decode,
            drafts: drafts_of,
            pure_decode,
        });
        Some(start_ns + steps * step_ns)
    }
}

mod blocks;
use blocks::{give, named_until, published_after};
mod lockstep;
mod predict;
mod restart;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_async;
#[cfg(test)]
mod tests_blocking;
#[cfg(test)]
mod tests_speculative;
