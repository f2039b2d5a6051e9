//! A request as `serve` routes it, and why one gets no endpoint: the vocabulary the
//! state, the KV index and the LoRA books share (a leaf).

use routerlab_core::{Phase, Unit};
use routerlab_host::RequestData;
use routerlab_trace::blocks::prompt_tokens;

/// A request as the plugins see it, owned for the length of the proxying.
#[derive(Clone)]
pub(super) struct Routed {
    pub(super) seq: u64,
    pub(super) arrival_ns: u64,
    pub(super) prompt: Vec<u8>,
    /// Its tokens by the engines' tokenizer (`--tokenizer`), computed outside the lock.
    pub(super) tokens: Option<std::sync::Arc<crate::vllm_keys::Tokens>>,
    pub(super) hashes: Vec<u64>,
    pub(super) ids: Vec<u32>,
    pub(super) output_tokens: Option<u64>,
    pub(super) session: u64,
    pub(super) parent: u64,
    /// What it is being routed for now: whole, or one leg of a disaggregated request.
    pub(super) phase: Phase,
    /// The LoRA adapter it asks for, numbered and named (`None`: the base model).
    pub(super) adapter: Option<(u32, Box<str>)>,
    /// It is its session's last (`x-session-end`).
    pub(super) ends_session: bool,
}

impl Routed {
    pub(super) fn data(&self, block_size: u32, now_ns: u64) -> RequestData<'_> {
        RequestData {
            id: self.seq,
            arrival_ns: self.arrival_ns,
            prompt: &self.prompt,
            block_hashes: &self.hashes,
            block_ids: Some(&self.ids),
            block_size,
            unit: Unit::Bytes,
            prompt_len: self.prompt.len() as u64,
            output_tokens: self.output_tokens,
            session_id: self.session,
            parent_id: self.parent,
            ends_session: self.ends_session,
            now_ns,
            cached_prefix: None,
            phase: self.phase,
            cached_tiers: None,
            predict: None,
            lora: self
                .adapter
                .as_ref()
                .map(|(id, name)| routerlab_host::Lora {
                    id: u64::from(*id),
                    name: name.as_bytes(),
                    state: None,
                }),
        }
    }

    /// Its adapter's number (0: the base model).
    pub(super) fn adapter_id(&self) -> u32 {
        self.adapter.as_ref().map_or(0, |(id, _)| *id)
    }

    /// Prompt tokens, by the one estimate replays use.
    pub(super) fn tokens(&self) -> u64 {
        prompt_tokens(Unit::Bytes, self.prompt.len() as u64)
    }
}

impl Default for Routed {
    /// Nothing yet: a whole request with no prompt.
    fn default() -> Routed {
        Routed {
            seq: 0,
            arrival_ns: 0,
            prompt: Vec::new(),
            tokens: None,
            hashes: Vec::new(),
            ids: Vec::new(),
            output_tokens: None,
            session: 0,
            parent: 0,
            phase: Phase::Whole,
            adapter: None,
            ends_session: false,
        }
    }
}

/// Why a request gets no endpoint: the status and message of its error response.
#[derive(Debug, PartialEq)]
pub(super) struct Refusal(pub(super) u16, pub(super) String);
