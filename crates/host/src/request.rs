//! A request as the host hands it to a matcher ([`RequestData`]) and the callbacks it
//! lends, and its ABI view.

use std::mem::size_of;

use routerlab_core::abi::*;
use routerlab_core::{Phase, Unit};

use crate::callbacks::{
    adapter_state_trampoline, cached_prefix_trampoline, cached_tiers_trampoline, predict_trampoline,
};

/// How much of the routed request's prefix an endpoint (by stable index) holds, in the
/// request's unit; `None` for an unknown endpoint. Lent to plugins as ABI 1.2's lazy
/// `cached_prefix` callback.
pub type CachedPrefix<'a> = &'a dyn Fn(u32) -> Option<u64>;

/// What an endpoint holds of a request's prefix in each tier (GPU, then host, then
/// shared), for the ABI 1.3 `cached_tiers` callback.
pub type CachedTiers<'a> = &'a dyn Fn(u32) -> Option<[u64; 3]>;

/// The engine model's forecast for the request on an endpoint (time to first token from
/// the decision, time per output token), for the ABI 1.4 `predict` callback.
pub type Predict<'a> = &'a dyn Fn(u32) -> Option<RlPrediction>;

/// What an endpoint holds of LoRA adapters for the request, for the ABI 1.5
/// `adapter_state` callback.
pub type AdapterState<'a> = &'a dyn Fn(u32) -> Option<RlAdapterState>;

/// The LoRA adapter a request asks for (ABI 1.5).
#[derive(Clone, Copy)]
pub struct Lora<'a> {
    /// The host's number for it, from 1.
    pub id: u64,
    /// Its name.
    pub name: &'a [u8],
    /// What each endpoint holds of adapters, if the host can say.
    pub state: Option<AdapterState<'a>>,
}

/// A request as the host hands it to a matcher; converted to the ABI view per call.
#[derive(Clone, Copy)]
pub struct RequestData<'a> {
    /// Request id, unique within a replay.
    pub id: u64,
    /// Arrival time, logical nanoseconds.
    pub arrival_ns: u64,
    /// Prompt text (empty for hash-only traces).
    pub prompt: &'a [u8],
    /// Prefix-block hash chain.
    pub block_hashes: &'a [u64],
    /// Dense ids of the same blocks (ABI 1.1), from one [`routerlab_core::hash::BlockInterner`]
    /// per replay; `None`, or a slice of another length, is passed as "not provided".
    pub block_ids: Option<&'a [u32]>,
    /// Block size in `unit`s.
    pub block_size: u32,
    /// Unit of `block_size` and `prompt_len`.
    pub unit: Unit,
    /// Prompt length in `unit`s.
    pub prompt_len: u64,
    /// Expected output tokens, if known.
    pub output_tokens: Option<u64>,
    /// Session id, 0 = none.
    pub session_id: u64,
    /// Parent request id, 0 = none.
    pub parent_id: u64,
    /// It is its session's last: the client ends the session once it completes (ABI 1.6).
    pub ends_session: bool,
    /// Time of the decision (ABI 1.2): the arrival, or later after waiting at the router.
    pub now_ns: u64,
    /// What each endpoint holds of this request's prefix (ABI 1.2), if the host can say.
    pub cached_prefix: Option<CachedPrefix<'a>>,
    /// What it is routed for (ABI 1.3): whole, or one phase of a disaggregated request.
    pub phase: Phase,
    /// What each endpoint holds of this request's prefix per KV tier (ABI 1.3), if the
    /// host can say.
    pub cached_tiers: Option<CachedTiers<'a>>,
    /// The engine model's forecast on each endpoint (ABI 1.4), if the host has one.
    pub predict: Option<Predict<'a>>,
    /// The LoRA adapter it asks for (ABI 1.5); `None`: the base model.
    pub lora: Option<Lora<'a>>,
}

impl std::fmt::Debug for RequestData<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestData")
            .field("id", &self.id)
            .field("arrival_ns", &self.arrival_ns)
            .field("now_ns", &self.now_ns)
            .field("blocks", &self.block_hashes.len())
            .field("prompt_len", &self.prompt_len)
            .finish_non_exhaustive()
    }
}

impl RequestData<'_> {
    /// The ABI view; borrows `self` (the callback context points into it).
    #[inline]
    pub(crate) fn raw_view(&self) -> RlRequest {
        RlRequest {
            struct_size: size_of::<RlRequest>() as u32,
            unit: match self.unit {
                Unit::Bytes => RL_UNIT_BYTES,
                Unit::Tokens => RL_UNIT_TOKENS,
            },
            id: self.id,
            arrival_ns: self.arrival_ns,
            prompt: RlStr {
                ptr: self.prompt.as_ptr(),
                len: self.prompt.len() as u64,
            },
            block_hashes: self.block_hashes.as_ptr(),
            block_count: self.block_hashes.len() as u64,
            block_size: self.block_size,
            flags: if self.ends_session {
                routerlab_core::abi::RL_REQUEST_ENDS_SESSION
            } else {
                0
            },
            prompt_len: self.prompt_len,
            output_tokens: self.output_tokens.unwrap_or(RL_UNKNOWN),
            session_id: self.session_id,
            parent_id: self.parent_id,
            block_ids: self
                .block_ids
                .filter(|ids| ids.len() == self.block_hashes.len())
                .map_or(std::ptr::null(), <[u32]>::as_ptr),
            now_ns: self.now_ns,
            cached_prefix: self
                .cached_prefix
                .is_some()
                .then_some(cached_prefix_trampoline),
            cached_prefix_ctx: match &self.cached_prefix {
                Some(ask) => (ask as *const CachedPrefix<'_>).cast(),
                None => std::ptr::null(),
            },
            phase: self.phase.raw(),
            _reserved_1_3: 0,
            cached_tiers: self
                .cached_tiers
                .is_some()
                .then_some(cached_tiers_trampoline),
            cached_tiers_ctx: match &self.cached_tiers {
                Some(ask) => (ask as *const CachedTiers<'_>).cast(),
                None => std::ptr::null(),
            },
            predict: self.predict.is_some().then_some(predict_trampoline),
            predict_ctx: match &self.predict {
                Some(ask) => (ask as *const Predict<'_>).cast(),
                None => std::ptr::null(),
            },
            adapter_id: self.lora.map_or(0, |l| l.id),
            adapter: match &self.lora {
                Some(lora) => RlStr {
                    ptr: lora.name.as_ptr(),
                    len: lora.name.len() as u64,
                },
                None => RlStr {
                    ptr: std::ptr::null(),
                    len: 0,
                },
            },
            adapter_state: self
                .lora
                .is_some_and(|l| l.state.is_some())
                .then_some(adapter_state_trampoline),
            adapter_state_ctx: match &self.lora {
                Some(Lora {
                    state: Some(ask), ..
                }) => (ask as *const AdapterState<'_>).cast(),
                _ => std::ptr::null(),
            },
        }
    }
}
