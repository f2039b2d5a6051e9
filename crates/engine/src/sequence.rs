//! A request inside an engine: its prompt's chain, the blocks it holds, how far its
//! prefill and decode have come (the scheduler moves it along).

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
    /// The KV blocks it holds, in the chain's order: those with ids; `anon` more follow.
    pub(crate) blocks: Vec<u32>,
    /// Anonymous blocks it holds after `blocks` (see `KvCache::allocate_anon`): the
    /// blocks from `anon_from` on, which no other request will ask for.
    pub(crate) anon: u32,
    /// Of `anon`, the leading ones computed and published (they hold hashes).
    pub(crate) anon_hashed: u32,
    /// From which block on the blocks it is given are anonymous, fixed at admission.
    pub(crate) anon_from: usize,
    /// Tokens whose KV is computed (cached hits included).
    pub(crate) computed: u32,
    /// Tokens to compute before decoding, fixed at admission: the prompt, plus what was
    /// generated before a preemption. Decoding once `computed` reaches it.
    pub(crate) prefill_target: u32,
    /// Tokens generated so far.
    pub generated: u32,
    /// Blocks already published under their hash.
    pub(crate) published: usize,
    /// Leading blocks of `hashes` other requests' chains may have too; the hashes after
    /// them are this request's alone (see [`Sequence::shared_blocks`]).
    pub(crate) shared: usize,
    /// Prompt tokens found cached at the first admission.
    pub hit_tokens: Option<u32>,
    /// Blocks of the cached prefix as last looked up.
    pub(crate) hit_ids: Vec<u32>,
    /// When the first step that worked on it started.
    pub first_scheduled_ns: Option<u64>,
    /// When the first token came out.
    pub first_token_ns: Option<u64>,
    /// Whether the prompt's KV was computed elsewhere and moved here (the decode half of a
    /// disaggregated request): its prompt still takes blocks and the step's token budget,
    /// but costs no prefill time; the step that completes it costs a decode step.
    pub kv_transferred: bool,
    /// Of `hit_tokens`, the prompt tokens loaded from the host tier at the first admission.
    pub host_hit_tokens: Option<u32>,
    /// Of `hit_tokens`, the prompt tokens loaded from the shared tier at the first admission.
    pub shared_hit_tokens: Option<u32>,
    /// How long its host- and shared-tier loads took, nanoseconds (0: none).
    pub load_ns: u64,
    /// It waits for a host-tier load until then.
    pub(crate) ready_ns: u64,
    /// The LoRA adapter it runs with (0: the base model; see [`crate::lora`]).
    pub adapter: u32,
    /// Speculating: the tokens its decode steps have yielded on average so far, of which
    /// it has had the whole ones (see [`crate::speculative`]).
    pub(crate) spec_credit: f64,
    /// When it joined the waiting queue: with async scheduling, only a step planned after
    /// then takes it in.
    pub(crate) queued_ns: u64,
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
            anon: 0,
            anon_hashed: 0,
            anon_from: usize::MAX,
            computed: 0,
            prefill_target: 0,
            generated: 0,
            published: 0,
            shared: usize::MAX,
            hit_tokens: None,
            hit_ids: Vec::new(),
            first_scheduled_ns: None,
            first_token_ns: None,
            kv_transferred: false,
            host_hit_tokens: None,
            shared_hit_tokens: None,
            load_ns: 0,
            ready_ns: 0,
            adapter: 0,
            spec_credit: 0.0,
            queued_ns: 0,
        }
    }

    /// A sequence whose prompt KV arrives from a prefill endpoint (see
    /// [`Sequence::kv_transferred`]).
    pub fn transferred(
        request: usize,
        prompt_tokens: u32,
        output_tokens: u32,
        hashes: Vec<u64>,
    ) -> Sequence {
        Sequence {
            kv_transferred: true,
            ..Sequence::new(request, prompt_tokens, output_tokens, hashes)
        }
    }

    /// Says that only the first `shared` of its blocks' hashes are in other requests'
    /// chains (the rest none will ask for): the engine then publishes the rest without
    /// looking them up, and indexes them only if this request is preempted. Without it,
    /// every block may be shared. A hint that is wrong changes what the cache finds.
    pub fn shared_blocks(mut self, shared: usize) -> Sequence {
        self.shared = shared;
        self
    }

    pub(crate) fn prefilling(&self) -> bool {
        self.computed < self.prefill_target
    }

    /// The KV blocks it holds, with ids or not.
    #[inline]
    pub(crate) fn held(&self) -> usize {
        self.blocks.len() + self.anon as usize
    }
}
