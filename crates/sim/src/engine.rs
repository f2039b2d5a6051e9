//! The engine model of the timed replay: one inference engine per endpoint, with a paged
//! KV cache with prefix caching, a FIFO scheduler with chunked prefill, and a step-time
//! model. It runs on a logical clock (nanoseconds) and never sleeps.
//!
//! The KV cache follows vLLM's prefix caching: a full block is identified by the chained
//! hash of its prefix; a request reuses the longest run of leading blocks already cached;
//! blocks held by running requests are pinned; blocks nobody holds stay cached but free, in
//! a queue evicted oldest first. A finished request frees its blocks deepest first, so
//! within a chain the deeper blocks are evicted before the shallow ones others share.
//!
//! The scheduler follows vLLM v1: each step has a token budget (`max_num_batched_tokens`)
//! and at most `max_num_seqs` running sequences. Running sequences go first (one token
//! each when decoding, a chunk when prefilling), then waiting requests are admitted in FIFO
//! order while the budget, the sequence limit and free blocks allow (a request that does
//! not fit blocks the queue, as in vLLM). A decoding sequence that needs a new block when
//! none is free preempts the most recently admitted running sequence, which frees its
//! blocks and returns to the head of the queue to be recomputed (counted as a preemption).
//!
//! Steps in which nothing but token counts changes (only decodes, nobody finishes, nobody
//! can be admitted) are identical, so they are simulated as one "macro step" of `k` steps;
//! the blocks the sequences fill during it are reserved at its start (so reported KV usage
//! leads by at most one run's blocks), and an arrival cuts it at the next step boundary.

use std::collections::VecDeque;

use routerlab_core::hash::U64Map;
use serde::{Deserialize, Serialize};

const NONE: u32 = u32::MAX;

/// How long a step takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", deny_unknown_fields)]
pub enum StepTime {
    /// NVIDIA Dynamo's mocker: prefill `P(T) = a T² + b T + c` ms for `T` uncached tokens
    /// computed in the step, decode `D(u) = d u² + e u + f` ms at KV utilisation `u`.
    Polynomial {
        /// Prefill coefficients `[a, b, c]`.
        prefill: [f64; 3],
        /// Decode coefficients `[d, e, f]`.
        decode: [f64; 3],
    },
    /// `overhead_ms + prefill_ms_per_token × T` when the step prefills, plus `decode_ms`
    /// when it decodes.
    Linear {
        /// Fixed cost of a step that prefills.
        overhead_ms: f64,
        /// Cost per prefilled (uncached) token.
        prefill_ms_per_token: f64,
        /// Cost of a step that decodes (the inter-token latency).
        decode_ms: f64,
    },
    /// A step's time grows with what its batch holds: `overhead_ms + prefill_ms_per_token
    /// × P + decode_ms_per_seq × D + context_ms_per_ktoken × C / 1000`, for `P` prompt
    /// tokens computed in the step, `D` sequences decoding a token, and `C` tokens of context
    /// the batch's attention reads (each sequence's KV so far). On a GPU: kernel launches,
    /// sampling and scheduling; the weights' matrix multiplies per prompt token; the
    /// per-sequence work of a decode step (its share of reading the weights, sampling);
    /// reading the KV cache, which grows with every sequence's context.
    Batched {
        /// Fixed cost of any step.
        overhead_ms: f64,
        /// Cost per prompt token computed in the step.
        prefill_ms_per_token: f64,
        /// Cost per sequence that decodes a token in the step.
        decode_ms_per_seq: f64,
        /// Cost per thousand tokens of context in the batch.
        context_ms_per_ktoken: f64,
    },
}

/// What a step's batch holds, as the step-time models read it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Batch {
    /// Prompt tokens computed in the step (uncached).
    pub prefill_tokens: u64,
    /// Sequences that decode one token in the step.
    pub decode_seqs: u64,
    /// Tokens of context the step's sequences attend to.
    pub context_tokens: u64,
    /// KV-cache usage, 0 to 1.
    pub kv_usage: f64,
}

/// The least and the most of `c[0] x² + c[1] x + c[2]` for `x` in `[lo, hi]`: at the ends,
/// or at the vertex when it lies between them.
fn quadratic_range(c: [f64; 3], (lo, hi): (f64, f64)) -> (f64, f64) {
    let at = |x: f64| c[0] * x * x + c[1] * x + c[2];
    let mut points = vec![at(lo), at(hi)];
    if c[0] != 0.0 {
        let vertex = -c[1] / (2.0 * c[0]);
        if vertex > lo && vertex < hi {
            points.push(at(vertex));
        }
    }
    let min = points.iter().copied().fold(f64::INFINITY, f64::min);
    let max = points.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// The longest step the model may take: an hour. A step time past it is a unit mistake,
/// and it keeps every step well inside the clock's range.
const MAX_STEP_MS: f64 = 3_600_000.0;

impl StepTime {
    /// Checks that every coefficient is a finite number, that every step that prefills
    /// 1 to `max_batched` tokens or decodes at any KV usage takes a positive time, and that
    /// no step takes more than an hour (with `max_seqs` sequences and `max_context`
    /// tokens of context, for the batched model).
    pub fn validate(
        &self,
        max_batched: u32,
        max_seqs: u32,
        max_context: u64,
    ) -> Result<(), String> {
        if let StepTime::Batched {
            overhead_ms,
            prefill_ms_per_token,
            decode_ms_per_seq,
            context_ms_per_ktoken,
        } = self
        {
            let terms = [
                ("overhead_ms", *overhead_ms),
                ("prefill_ms_per_token", *prefill_ms_per_token),
                ("decode_ms_per_seq", *decode_ms_per_seq),
                ("context_ms_per_ktoken", *context_ms_per_ktoken),
            ];
            for (name, value) in terms {
                if !value.is_finite() || value < 0.0 {
                    return Err(format!(
                        "engine `step_time.{name}` must be a finite, non-negative number, not {value}"
                    ));
                }
            }
            if *overhead_ms <= 0.0 {
                return Err(
                    "engine `step_time.overhead_ms` must be positive: every step must take a positive time"
                        .into(),
                );
            }
            let longest = overhead_ms
                + prefill_ms_per_token * f64::from(max_batched)
                + decode_ms_per_seq * f64::from(max_seqs)
                + context_ms_per_ktoken * max_context as f64 / 1000.0;
            if longest > MAX_STEP_MS {
                return Err(format!(
                    "engine `step_time` gives a step of up to {longest:.3e} ms, more than an hour (are the units milliseconds?)"
                ));
            }
            return Ok(());
        }
        let (prefill, decode, names): ([f64; 3], [f64; 3], [&str; 6]) = match self {
            StepTime::Polynomial { prefill, decode } => (
                *prefill,
                *decode,
                [
                    "prefill[0]",
                    "prefill[1]",
                    "prefill[2]",
                    "decode[0]",
                    "decode[1]",
                    "decode[2]",
                ],
            ),
            StepTime::Linear {
                overhead_ms,
                prefill_ms_per_token,
                decode_ms,
            } => (
                [0.0, *prefill_ms_per_token, *overhead_ms],
                [0.0, 0.0, *decode_ms],
                [
                    "",
                    "prefill_ms_per_token",
                    "overhead_ms",
                    "",
                    "",
                    "decode_ms",
                ],
            ),
            StepTime::Batched { .. } => unreachable!("checked above"),
        };
        for (value, name) in prefill.iter().chain(&decode).zip(names) {
            if !value.is_finite() {
                return Err(format!(
                    "engine `step_time.{name}` must be a finite number, not {value}"
                ));
            }
        }
        let tokens = (1.0, f64::from(max_batched.max(1)));
        let (prefill_min, prefill_max) = quadratic_range(prefill, tokens);
        let (decode_min, decode_max) = quadratic_range(decode, (0.0, 1.0));
        if prefill_min.is_nan() || prefill_min <= 0.0 {
            return Err(format!(
                "engine `step_time` gives a prefill step of 1 to {max_batched} tokens {prefill_min:.3} ms at the least; every step must take a positive time"
            ));
        }
        if decode_min.is_nan() || decode_min <= 0.0 {
            return Err(format!(
                "engine `step_time` gives a decode step {decode_min:.3} ms at the least (KV usage 0 to 1); every step must take a positive time"
            ));
        }
        let longest = prefill_max + decode_max;
        if longest.is_nan() || longest > MAX_STEP_MS {
            return Err(format!(
                "engine `step_time` gives a step of up to {longest:.3e} ms, more than an hour (are the units milliseconds?)"
            ));
        }
        Ok(())
    }

    /// Duration of a step, in milliseconds, as the model says.
    fn step_ms(&self, batch: &Batch) -> f64 {
        let (prefill_tokens, decoding, kv_usage) =
            (batch.prefill_tokens, batch.decode_seqs > 0, batch.kv_usage);
        let t = prefill_tokens as f64;
        match self {
            StepTime::Polynomial { prefill, decode } => {
                let p = if prefill_tokens > 0 {
                    prefill[0] * t * t + prefill[1] * t + prefill[2]
                } else {
                    0.0
                };
                let u = kv_usage;
                let d = if decoding {
                    decode[0] * u * u + decode[1] * u + decode[2]
                } else {
                    0.0
                };
                p + d
            }
            StepTime::Linear {
                overhead_ms,
                prefill_ms_per_token,
                decode_ms,
            } => {
                let p = if prefill_tokens > 0 {
                    overhead_ms + prefill_ms_per_token * t
                } else {
                    0.0
                };
                p + if decoding { *decode_ms } else { 0.0 }
            }
            StepTime::Batched {
                overhead_ms,
                prefill_ms_per_token,
                decode_ms_per_seq,
                context_ms_per_ktoken,
            } => {
                overhead_ms
                    + prefill_ms_per_token * t
                    + decode_ms_per_seq * batch.decode_seqs as f64
                    + context_ms_per_ktoken * batch.context_tokens as f64 / 1000.0
            }
        }
    }

    /// Duration of a step, in nanoseconds (at least 1). Validated models keep it within
    /// an hour; the conversion saturates rather than wraps for any other.
    pub fn step_ns(&self, batch: &Batch) -> u64 {
        let ms = self.step_ms(batch);
        ((ms.max(0.0) * 1e6).round() as u64).max(1)
    }
}

/// One engine's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// KV-cache blocks.
    pub num_gpu_blocks: u32,
    /// Tokens per KV block.
    pub engine_block_size: u32,
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Token budget of one step.
    pub max_num_batched_tokens: u32,
    /// Step-time model.
    pub step_time: StepTime,
}

impl EngineConfig {
    /// NVIDIA Dynamo's mocker defaults: 16,384 blocks of 64 tokens, 256 sequences, 8,192
    /// tokens a step, the polynomial step time.
    pub fn dynamo() -> EngineConfig {
        EngineConfig {
            num_gpu_blocks: 16_384,
            engine_block_size: 64,
            max_num_seqs: 256,
            max_num_batched_tokens: 8_192,
            step_time: StepTime::Polynomial {
                prefill: [4.21e-7, 0.01518, 16.5],
                decode: [-25.74, 54.01, 5.74],
            },
        }
    }

    /// Checks the settings; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("num_gpu_blocks", self.num_gpu_blocks),
            ("engine_block_size", self.engine_block_size),
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
        ] {
            if value == 0 {
                return Err(format!("engine `{key}` must be at least 1"));
            }
        }
        self.step_time.validate(
            self.max_num_batched_tokens,
            self.max_num_seqs,
            u64::from(self.num_gpu_blocks) * u64::from(self.engine_block_size),
        )?;
        // Every block is simulated: keep the model's memory bounded (16 M blocks is ~400 MB).
        if self.num_gpu_blocks > 1 << 24 {
            return Err("engine `num_gpu_blocks` must be at most 16777216".into());
        }
        // Token counts are 32-bit: a cache that could hold more than 2^31 tokens could let a
        // request's length overflow them.
        if u64::from(self.num_gpu_blocks) * u64::from(self.engine_block_size) > 1 << 31 {
            return Err(
                "engine `num_gpu_blocks` × `engine_block_size` must be at most 2^31 tokens".into(),
            );
        }
        Ok(())
    }
}

/// One KV block. The hash and its flag are kept apart (not an `Option<u64>`) so a block
/// takes 24 bytes, not 32: the eviction list is walked and relinked across the whole cache,
/// and with several busy engines their blocks compete for the same CPU caches.
struct Block {
    /// The prefix hash the block holds, when `hashed`.
    hash: u64,
    hashed: bool,
    refs: u32,
    newer: u32,
    older: u32,
}

/// A paged KV cache with prefix caching.
pub struct KvCache {
    blocks: Vec<Block>,
    by_hash: U64Map<u32>,
    /// Free blocks (no holder), oldest at `free_head`; cached ones keep their hash.
    free_head: u32,
    free_tail: u32,
    free: u32,
    /// Cached blocks evicted to make room.
    pub evictions: u64,
}

impl KvCache {
    /// A cache of `capacity` free, empty blocks.
    pub fn new(capacity: u32) -> KvCache {
        let mut cache = KvCache {
            blocks: Vec::with_capacity(capacity as usize),
            // Room for every block up front, up to a bound: growing the index while the
            // cache fills costs rehashes in every engine that gets traffic.
            by_hash: U64Map::with_capacity_and_hasher(
                capacity.min(1 << 14) as usize,
                Default::default(),
            ),
            free_head: NONE,
            free_tail: NONE,
            free: 0,
            evictions: 0,
        };
        for id in 0..capacity {
            cache.blocks.push(Block {
                hash: 0,
                hashed: false,
                refs: 0,
                newer: NONE,
                older: NONE,
            });
            cache.push_free(id);
        }
        cache
    }

    /// Blocks in total.
    pub fn capacity(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks no request holds (cached or empty).
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Blocks held by requests.
    pub fn used(&self) -> u32 {
        self.capacity() - self.free
    }

    /// How many leading hashes of `chain` are cached.
    pub fn cached_prefix(&self, chain: &[u64]) -> usize {
        chain
            .iter()
            .take_while(|h| self.by_hash.contains_key(*h))
            .count()
    }

    /// Brings `ids` (empty, or a previous answer for `chain`) up to the blocks of the cached
    /// leading run of `chain`: keeps the leading ids whose blocks still hold their hash,
    /// then extends the run.
    fn refresh_cached_ids(&self, chain: &[u64], ids: &mut Vec<u32>) {
        let valid = ids
            .iter()
            .zip(chain)
            .take_while(|(id, hash)| {
                let block = &self.blocks[**id as usize];
                block.hashed && block.hash == **hash
            })
            .count();
        ids.truncate(valid);
        ids.extend(
            chain[valid..]
                .iter()
                .map_while(|h| self.by_hash.get(h).copied()),
        );
    }

    /// How many of these blocks nobody holds (taking them uses up free blocks).
    fn unheld(&self, ids: &[u32]) -> u32 {
        ids.iter()
            .filter(|id| self.blocks[**id as usize].refs == 0)
            .count() as u32
    }

    /// Takes a hold on a cached block.
    fn hold(&mut self, id: u32) {
        if self.blocks[id as usize].refs == 0 {
            self.unlink_free(id);
        }
        self.blocks[id as usize].refs += 1;
    }

    /// Takes the oldest free block, evicting its cached content; `None` when all are held.
    fn allocate(&mut self) -> Option<u32> {
        let id = self.free_head;
        if id == NONE {
            return None;
        }
        self.unlink_free(id);
        let block = &mut self.blocks[id as usize];
        if block.hashed {
            block.hashed = false;
            let hash = block.hash;
            self.by_hash.remove(&hash);
            self.evictions += 1;
        }
        self.blocks[id as usize].refs = 1;
        Some(id)
    }

    /// Publishes a computed full block under its prefix hash (first writer wins).
    fn publish(&mut self, id: u32, hash: u64) {
        if !self.blocks[id as usize].hashed && !self.by_hash.contains_key(&hash) {
            self.blocks[id as usize].hash = hash;
            self.blocks[id as usize].hashed = true;
            self.by_hash.insert(hash, id);
        }
    }

    /// Drops a request's holds, deepest block first, so deeper blocks are evicted first.
    fn release(&mut self, ids: &[u32]) {
        for &id in ids.iter().rev() {
            let block = &mut self.blocks[id as usize];
            block.refs -= 1;
            if block.refs == 0 {
                self.push_free(id);
            }
        }
    }

    fn push_free(&mut self, id: u32) {
        let previous = self.free_tail;
        self.blocks[id as usize].older = previous;
        self.blocks[id as usize].newer = NONE;
        match previous {
            NONE => self.free_head = id,
            p => self.blocks[p as usize].newer = id,
        }
        self.free_tail = id;
        self.free += 1;
    }

    fn unlink_free(&mut self, id: u32) {
        let (newer, older) = (
            self.blocks[id as usize].newer,
            self.blocks[id as usize].older,
        );
        match older {
            NONE => self.free_head = newer,
            o => self.blocks[o as usize].newer = newer,
        }
        match newer {
            NONE => self.free_tail = older,
            n => self.blocks[n as usize].older = older,
        }
        self.free -= 1;
    }
}

/// A request inside an engine.
#[derive(Debug)]
pub struct Sequence {
    /// The caller's handle for the request.
    pub request: usize,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens to generate (at least 1).
    pub output_tokens: u32,
    /// Prefix hashes of the prompt's full blocks, in this engine's block size.
    pub hashes: Vec<u64>,
    blocks: Vec<u32>,
    /// Tokens whose KV is computed (cached hits included).
    computed: u32,
    /// Tokens to compute before decoding, fixed at admission: the prompt, plus what was
    /// generated before a preemption. Decoding once `computed` reaches it.
    prefill_target: u32,
    /// Tokens generated so far.
    pub generated: u32,
    /// Blocks already published under their hash.
    published: usize,
    /// Prompt tokens found cached at the first admission.
    pub hit_tokens: Option<u32>,
    /// Blocks of the cached prefix as last looked up.
    hit_ids: Vec<u32>,
    /// When the first step that worked on it started.
    pub first_scheduled_ns: Option<u64>,
    /// When the first token came out.
    pub first_token_ns: Option<u64>,
}

impl Sequence {
    /// A sequence for `request`, not yet admitted.
    pub fn new(
        request: usize,
        prompt_tokens: u32,
        output_tokens: u32,
        hashes: Vec<u64>,
    ) -> Sequence {
        Sequence {
            request,
            prompt_tokens: prompt_tokens.max(1),
            output_tokens: output_tokens.max(1),
            hashes,
            blocks: Vec::new(),
            computed: 0,
            prefill_target: 0,
            generated: 0,
            published: 0,
            hit_tokens: None,
            hit_ids: Vec::new(),
            first_scheduled_ns: None,
            first_token_ns: None,
        }
    }

    fn prefilling(&self) -> bool {
        self.computed < self.prefill_target
    }
}

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
    /// Whether the plan is pure decode (and so may be cut short).
    pure_decode: bool,
}

/// One inference engine.
pub struct Engine {
    config: EngineConfig,
    kv: KvCache,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    plan: Option<Plan>,
    /// The last plan's lists, cleared, to reuse their allocations.
    spare: (Vec<(usize, u32)>, Vec<usize>),
    /// Sequences preempted (recomputed).
    pub preemptions: u64,
    /// Largest KV usage seen (fraction).
    pub peak_usage: f64,
    usage_integral: f64,
    usage_since_ns: u64,
    first_ns: Option<u64>,
    /// Requests whose first token the last step produced, until taken.
    first_tokens: Vec<usize>,
}

impl Engine {
    /// An idle engine.
    pub fn new(config: EngineConfig) -> Engine {
        let kv = KvCache::new(config.num_gpu_blocks);
        Engine {
            config,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            plan: None,
            spare: (Vec::new(), Vec::new()),
            preemptions: 0,
            peak_usage: 0.0,
            usage_integral: 0.0,
            usage_since_ns: 0,
            first_ns: None,
            first_tokens: Vec::new(),
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
        self.kv.by_hash.contains_key(&hash)
    }

    /// Its settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Whether a request of this size can ever run here: prompt and output together fit in
    /// the whole KV cache (otherwise it would wait, or preempt itself, forever).
    pub fn can_ever_fit(&self, prompt_tokens: u32, output_tokens: u32) -> bool {
        let tokens = u64::from(prompt_tokens.max(1)) + u64::from(output_tokens.max(1));
        tokens.div_ceil(u64::from(self.config.engine_block_size)) <= u64::from(self.kv.capacity())
    }

    /// Cached blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.kv.evictions
    }

    /// The status routers see.
    pub fn status(&self) -> EngineStatus {
        EngineStatus {
            running: self.running.len() as u64,
            waiting: self.waiting.len() as u64,
            kv_blocks_used: u64::from(self.kv.used()),
            kv_blocks_total: u64::from(self.kv.capacity()),
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
    /// boundary and the new end returned.
    pub fn enqueue(&mut self, sequence: Sequence, now_ns: u64) -> Option<u64> {
        self.account(now_ns);
        self.waiting.push_back(sequence);
        match &mut self.plan {
            None => self.start_step(now_ns),
            Some(plan) if plan.pure_decode && plan.steps > 1 => {
                let elapsed = now_ns.saturating_sub(plan.start_ns);
                let steps = elapsed.div_ceil(plan.step_ns).clamp(1, plan.steps);
                if steps < plan.steps {
                    plan.steps = steps;
                    return Some(plan.start_ns + plan.steps * plan.step_ns);
                }
                None
            }
            Some(_) => None,
        }
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
        for (pos, tokens) in &plan.prefill {
            let block_tokens = self.config.engine_block_size;
            let seq = &mut self.running[*pos];
            seq.computed += tokens;
            // Publish the full prompt blocks now computed.
            let full = (seq.computed / block_tokens) as usize;
            while seq.published < full.min(seq.hashes.len()) {
                let (id, hash) = (seq.blocks[seq.published], seq.hashes[seq.published]);
                self.kv.publish(id, hash);
                seq.published += 1;
            }
            if !seq.prefilling() {
                // The step that completes a prefill samples a token.
                seq.generated += 1;
                if seq.first_token_ns.is_none() {
                    seq.first_token_ns = Some(now_ns);
                    self.first_tokens.push(seq.request);
                }
            }
        }
        for pos in &plan.decode {
            let seq = &mut self.running[*pos];
            seq.computed += plan.steps as u32;
            seq.generated += plan.steps as u32;
        }
        let (mut prefill, mut decode) = (plan.prefill, plan.decode);
        prefill.clear();
        decode.clear();
        self.spare = (prefill, decode);
        self.account(now_ns);
        let mut finished = Vec::new();
        let mut pos = 0;
        while pos < self.running.len() {
            if !self.running[pos].prefilling()
                && self.running[pos].generated >= self.running[pos].output_tokens
            {
                let seq = self.running.remove(pos);
                self.kv.release(&seq.blocks);
                finished.push(seq);
            } else {
                pos += 1;
            }
        }
        self.start_step(now_ns);
        finished
    }

    /// Plans the next step at `now`; returns its end, or `None` when idle.
    fn start_step(&mut self, now_ns: u64) -> Option<u64> {
        let block_tokens = self.config.engine_block_size;
        let mut budget = self.config.max_num_batched_tokens;
        let (mut prefill, mut decode) = std::mem::take(&mut self.spare);
        let mut prefill_tokens = 0u64;
        // Running sequences first, in admission order.
        let mut pos = 0;
        while pos < self.running.len() && budget > 0 {
            if self.running[pos].prefilling() {
                let seq = &self.running[pos];
                let tokens = (seq.prefill_target - seq.computed).min(budget);
                budget -= tokens;
                prefill_tokens += u64::from(tokens);
                prefill.push((pos, tokens));
                pos += 1;
                continue;
            }
            // Decoding computes one more token: room for it, preempting from the back if needed.
            let needed = (self.running[pos].computed + 1).div_ceil(block_tokens);
            if needed as usize > self.running[pos].blocks.len() {
                match self.grow(pos) {
                    Some(true) => {}
                    Some(false) => continue, // `pos` itself was preempted; the next moved in
                    None => break,
                }
            }
            budget -= 1;
            decode.push(pos);
            pos += 1;
        }
        // Then admissions, FIFO, while they fit.
        let mut admitted = false;
        while budget > 0 && (self.running.len() as u32) < self.config.max_num_seqs {
            let Some(head) = self.waiting.front_mut() else {
                break;
            };
            // A head that keeps waiting is not looked up from scratch every step: its known
            // hits are re-checked in place (a block still holding its hash) and extended.
            self.kv.refresh_cached_ids(&head.hashes, &mut head.hit_ids);
            let head = self.waiting.front().expect("head exists");
            let target = head.prompt_tokens + head.generated;
            let hits = head.hit_ids.len();
            // As vLLM: the last prompt token is always computed, to sample from it.
            let hit_tokens = (hits as u32 * block_tokens).min(target - 1);
            let hits = (hit_tokens / block_tokens) as usize;
            let hit_tokens = hits as u32 * block_tokens;
            let total_blocks = target.div_ceil(block_tokens) as usize;
            let new_blocks = (total_blocks - hits) as u32;
            if new_blocks + self.kv.unheld(&head.hit_ids[..hits]) > self.kv.free() {
                break;
            }
            let mut seq = self.waiting.pop_front().expect("head exists");
            for &id in &seq.hit_ids[..hits] {
                self.kv.hold(id);
                seq.blocks.push(id);
            }
            for _ in hits..total_blocks {
                let id = self.kv.allocate().expect("checked free blocks");
                seq.blocks.push(id);
            }
            seq.published = hits;
            seq.computed = hit_tokens;
            seq.prefill_target = target;
            seq.hit_tokens.get_or_insert(hit_tokens);
            seq.first_scheduled_ns.get_or_insert(now_ns);
            let tokens = (seq.prefill_target - seq.computed).min(budget);
            budget -= tokens;
            prefill_tokens += u64::from(tokens);
            prefill.push((self.running.len(), tokens));
            self.running.push(seq);
            admitted = true;
        }
        if prefill.is_empty() && decode.is_empty() {
            self.spare = (prefill, decode);
            return None;
        }
        // Every running sequence decodes and nothing else happens: identical steps follow.
        let pure_decode = prefill.is_empty() && !admitted && decode.len() == self.running.len();
        let steps = if pure_decode {
            self.reserve_decode_run()
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
        let step_ns = self.config.step_time.step_ns(&Batch {
            prefill_tokens,
            decode_seqs: decode.len() as u64,
            context_tokens: context,
            kv_usage: usage,
        });
        self.plan = Some(Plan {
            start_ns: now_ns,
            step_ns,
            steps,
            prefill,
            decode,
            pure_decode,
        });
        Some(now_ns + steps * step_ns)
    }

    /// Length of the decode run starting now: until the first sequence finishes, with the
    /// blocks every sequence fills during the run reserved up front (so KV usage leads by at
    /// most one run's blocks). Without enough free blocks, only until someone needs a block.
    fn reserve_decode_run(&mut self) -> u64 {
        let block_tokens = self.config.engine_block_size;
        let until_finish = self
            .running
            .iter()
            .map(|s| s.output_tokens - s.generated)
            .min()
            .unwrap_or(1)
            .max(1);
        let extra = |seq: &Sequence| {
            ((seq.computed + until_finish).div_ceil(block_tokens) as usize)
                .saturating_sub(seq.blocks.len()) as u32
        };
        let needed: u32 = self.running.iter().map(extra).sum();
        if needed > self.kv.free() {
            return self.decode_run();
        }
        for pos in 0..self.running.len() {
            for _ in 0..extra(&self.running[pos]) {
                let id = self.kv.allocate().expect("checked free blocks");
                self.running[pos].blocks.push(id);
            }
        }
        u64::from(until_finish)
    }

    /// Identical decode steps possible from here: until someone finishes or needs a block.
    fn decode_run(&self) -> u64 {
        let block_tokens = self.config.engine_block_size;
        self.running
            .iter()
            .map(|seq| {
                let room = seq.blocks.len() as u32 * block_tokens - seq.computed;
                let remaining = seq.output_tokens - seq.generated;
                u64::from(room.min(remaining)).max(1)
            })
            .min()
            .unwrap_or(1)
    }

    /// Gives running sequence `pos` one more block, preempting the most recently admitted
    /// sequences if needed. `Some(true)`: done; `Some(false)`: `pos` itself was preempted;
    /// `None`: impossible (nothing left to preempt).
    fn grow(&mut self, pos: usize) -> Option<bool> {
        loop {
            if let Some(id) = self.kv.allocate() {
                self.running[pos].blocks.push(id);
                return Some(true);
            }
            let victim = self.running.len() - 1;
            let mut seq = self.running.pop()?;
            self.kv.release(&seq.blocks);
            seq.blocks.clear();
            seq.computed = 0;
            seq.prefill_target = 0;
            seq.published = 0;
            self.waiting.push_front(seq);
            self.preemptions += 1;
            if victim == pos {
                return Some(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(num_gpu_blocks: u32, max_num_seqs: u32, budget: u32) -> EngineConfig {
        EngineConfig {
            num_gpu_blocks,
            engine_block_size: 4,
            max_num_seqs,
            max_num_batched_tokens: budget,
            step_time: StepTime::Linear {
                overhead_ms: 1.0,
                prefill_ms_per_token: 0.5,
                decode_ms: 2.0,
            },
        }
    }

    #[test]
    fn kv_reuses_prefixes_pins_held_blocks_and_evicts_deepest_first() {
        let mut kv = KvCache::new(4);
        let a: Vec<u32> = (0..3).map(|_| kv.allocate().unwrap()).collect();
        for (i, id) in a.iter().enumerate() {
            kv.publish(*id, 100 + i as u64);
        }
        assert_eq!(kv.cached_prefix(&[100, 101, 102, 999]), 3);
        assert_eq!(kv.cached_prefix(&[100, 555, 102]), 1);
        // Held blocks are pinned: only the one empty block can be allocated.
        let spare = kv.allocate().unwrap();
        assert_eq!(kv.allocate(), None);
        kv.release(&[spare]);
        // Releasing a chain frees its deepest block first: it is evicted first.
        kv.release(&a);
        assert_eq!(kv.free(), 4);
        let _ = kv.allocate().unwrap(); // the empty block freed earlier
        assert_eq!(kv.evictions, 0);
        let _ = kv.allocate().unwrap();
        assert_eq!(kv.evictions, 1);
        assert_eq!(
            kv.cached_prefix(&[100, 101, 102]),
            2,
            "hash 102 (deepest) went first"
        );
        let _ = kv.allocate().unwrap();
        assert_eq!(kv.cached_prefix(&[100, 101, 102]), 1);
        // A cached free block taken by a new holder leaves the free queue.
        let mut ids = Vec::new();
        kv.refresh_cached_ids(&[100, 101], &mut ids);
        assert_eq!(ids.len(), 1);
        kv.hold(ids[0]);
        assert_eq!(kv.free(), 0);
        kv.release(&ids);
        assert_eq!(kv.cached_prefix(&[100]), 1);
    }

    #[test]
    fn chunked_prefill_respects_the_token_budget() {
        // Budget 8 tokens a step; a 20-token prompt prefills in chunks 8, 8, 4.
        let mut engine = Engine::new(linear(100, 4, 8));
        let end = engine.enqueue(Sequence::new(0, 20, 2, vec![]), 0).unwrap();
        assert_eq!(end, 5_000_000, "1 + 8 × 0.5 ms");
        assert!(engine.finish_step(end).is_empty());
        let end2 = engine.step_end().unwrap();
        assert_eq!(end2 - end, 5_000_000);
        assert!(engine.finish_step(end2).is_empty());
        let end3 = engine.step_end().unwrap();
        assert_eq!(
            end3 - end2,
            3_000_000,
            "1 + 4 × 0.5 ms; the first token comes out"
        );
        assert!(engine.finish_step(end3).is_empty());
        assert_eq!(engine.running[0].first_token_ns, Some(end3));
        // One decode step (2 ms) makes the second and last token.
        let end4 = engine.step_end().unwrap();
        assert_eq!(end4 - end3, 2_000_000);
        let done = engine.finish_step(end4);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].generated, 2);
        assert_eq!(engine.step_end(), None);
        assert_eq!(engine.status().kv_blocks_used, 0);
    }

    #[test]
    fn decode_and_admission_share_the_budget_and_sequence_limit() {
        // Budget 5: a decoding sequence takes 1 token, leaving 4 for the next prefill.
        let mut engine = Engine::new(linear(100, 2, 5));
        let end = engine.enqueue(Sequence::new(0, 4, 10, vec![]), 0).unwrap();
        engine.finish_step(end); // prefilled, first token; a decode run starts at `end`
        // Arrivals join at the next step boundary: the run is cut to one step.
        assert_eq!(
            engine.enqueue(Sequence::new(1, 8, 3, vec![]), end),
            Some(end + 2_000_000)
        );
        engine.enqueue(Sequence::new(2, 8, 3, vec![]), end);
        engine.finish_step(end + 2_000_000);
        let plan = engine.plan.as_ref().unwrap();
        assert!(!plan.pure_decode);
        // Decode (1) + the first 4 tokens of request 1; request 2 waits (max_num_seqs 2).
        assert_eq!(plan.prefill, vec![(1, 4)]);
        assert_eq!(engine.status().running, 2);
        assert_eq!(engine.status().waiting, 1);
    }

    #[test]
    fn the_batched_model_charges_overhead_prompt_sequences_and_context() {
        let model = StepTime::Batched {
            overhead_ms: 5.0,
            prefill_ms_per_token: 0.1,
            decode_ms_per_seq: 0.2,
            context_ms_per_ktoken: 2.0,
        };
        let batch = Batch {
            prefill_tokens: 100,
            decode_seqs: 10,
            context_tokens: 5000,
            kv_usage: 0.0,
        };
        // 5 + 10 + 2 + 10 ms.
        assert_eq!(model.step_ns(&batch), 27_000_000);
        assert!(model.validate(2048, 128, 1 << 20).is_ok());
        let batched = |overhead_ms, decode_ms_per_seq| StepTime::Batched {
            overhead_ms,
            prefill_ms_per_token: 0.1,
            decode_ms_per_seq,
            context_ms_per_ktoken: 2.0,
        };
        let negative = batched(5.0, -0.1).validate(2048, 128, 1 << 20);
        assert!(negative.unwrap_err().contains("decode_ms_per_seq"));
        let free = batched(0.0, 0.2).validate(2048, 128, 1 << 20);
        assert!(free.unwrap_err().contains("positive"));
        // A longer context makes the same request finish later.
        let finish = |context_ms_per_ktoken| {
            let mut config = linear(1000, 4, 100);
            config.step_time = StepTime::Batched {
                overhead_ms: 1.0,
                prefill_ms_per_token: 0.01,
                decode_ms_per_seq: 0.5,
                context_ms_per_ktoken,
            };
            let mut engine = Engine::new(config);
            let mut end = engine
                .enqueue(Sequence::new(0, 400, 20, vec![]), 0)
                .unwrap();
            loop {
                if !engine.finish_step(end).is_empty() {
                    return end;
                }
                end = engine.step_end().unwrap();
            }
        };
        assert!(finish(50.0) > finish(0.0));
    }

    #[test]
    fn a_second_request_reuses_the_first_ones_prefix() {
        let mut engine = Engine::new(linear(100, 4, 100));
        let end = engine
            .enqueue(Sequence::new(0, 12, 1, vec![1, 2, 3]), 0)
            .unwrap();
        assert_eq!(engine.finish_step(end).len(), 1);
        // Same first two blocks, different third: 8 of 12 tokens are reused.
        let end = engine
            .enqueue(Sequence::new(1, 12, 1, vec![1, 2, 9]), end)
            .unwrap();
        assert_eq!(engine.running[0].hit_tokens, Some(8));
        let done = engine.finish_step(end);
        assert_eq!(done[0].hit_tokens, Some(8));
        // Fully cached prompt: the last token is still computed.
        engine.enqueue(Sequence::new(2, 12, 1, vec![1, 2, 3]), end);
        assert_eq!(
            engine.running[0].hit_tokens,
            Some(8),
            "11 of 12 is capped to full blocks"
        );
    }

    #[test]
    fn macro_steps_skip_identical_decodes_and_arrivals_cut_them() {
        let mut engine = Engine::new(linear(100, 4, 100));
        let end = engine.enqueue(Sequence::new(0, 4, 9, vec![]), 0).unwrap();
        engine.finish_step(end);
        // 8 tokens left: the engine reserves the blocks they need (12 tokens: 3 blocks) and
        // runs the 8 decode steps as one macro step.
        let plan = engine.plan.as_ref().unwrap();
        assert!(plan.pure_decode);
        assert_eq!(plan.steps, 8);
        assert_eq!(engine.status().kv_blocks_used, 3);
        assert_eq!(engine.step_end(), Some(end + 16_000_000));
        let run_start = end;
        // An arrival 1 ms in cuts the run at the first boundary (2 ms).
        let cut = engine
            .enqueue(Sequence::new(1, 4, 1, vec![]), run_start + 1_000_000)
            .unwrap();
        assert_eq!(cut, run_start + 2_000_000);
    }

    #[test]
    fn out_of_blocks_preempts_the_newest_sequence() {
        // 3 blocks of 4 tokens. Request 0 prefills alone (1 block); the next step it decodes
        // (a 2nd block) while request 1 is admitted (the 3rd). Then request 1 needs a 4th.
        let mut engine = Engine::new(linear(3, 4, 100));
        engine.enqueue(Sequence::new(0, 4, 8, vec![]), 0);
        engine.enqueue(Sequence::new(1, 4, 8, vec![]), 0);
        let end = engine.step_end().unwrap();
        engine.finish_step(end);
        assert_eq!((engine.preemptions, engine.status().running), (0, 2));
        assert_eq!(engine.status().kv_blocks_used, 3);
        let end = engine.step_end().unwrap();
        engine.finish_step(end);
        assert_eq!(engine.preemptions, 1);
        assert_eq!(engine.status().running, 1);
        assert_eq!(engine.status().waiting, 1);
        assert_eq!(
            engine.waiting[0].request, 1,
            "the most recently admitted went back"
        );
    }

    #[test]
    fn polynomial_matches_dynamos_published_coefficients() {
        let model = EngineConfig::dynamo().step_time;
        // P(1000) = 4.21e-7·1e6 + 15.18 + 16.5 = 32.101 ms; no decode.
        let batch = |prefill_tokens, decode_seqs| Batch {
            prefill_tokens,
            decode_seqs,
            context_tokens: 0,
            kv_usage: 0.5,
        };
        assert_eq!(model.step_ns(&batch(1000, 0)), 32_101_000);
        // D(0.5) = -6.435 + 27.005 + 5.74 = 26.31 ms.
        assert_eq!(model.step_ns(&batch(0, 1)), 26_310_000);
    }
}
