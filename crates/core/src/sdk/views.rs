//! Safe views of what the host lends a plugin for one call: a request, one endpoint's
//! status, the endpoint list.
//!
//! A request from a host of this minor or newer is referenced in place: copying its 128
//! bytes on every call was a third of what a decision through the ABI cost. An older host
//! has written fewer bytes (an ABI 1.0 host writes 96 of 128), and a Rust reference to the
//! whole struct would claim bytes that do not exist; its request is copied into a zeroed
//! `RlRequest` in the shim's frame, exactly `struct_size` bytes, and referenced there.
//! Accessors of later fields also check `struct_size`, so a whole struct that says it was
//! built by an older host shows the same as one that was.
//! Endpoint statuses are read field by field through a pointer for the same reason: a 1.1
//! host's list has a stride of 72 bytes, today's status is 80.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::abi::*;

/// The unit a request's lengths and blocks are measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Bytes of prompt text.
    Bytes,
    /// Tokens.
    Tokens,
}

impl Unit {
    /// The ABI constant (`RL_UNIT_*`).
    pub fn to_raw(self) -> u32 {
        match self {
            Unit::Bytes => RL_UNIT_BYTES,
            Unit::Tokens => RL_UNIT_TOKENS,
        }
    }

    /// The unit named by an ABI constant; `None` for a value this ABI does not define.
    #[inline]
    pub fn from_raw(raw: u32) -> Option<Unit> {
        match raw {
            RL_UNIT_BYTES => Some(Unit::Bytes),
            RL_UNIT_TOKENS => Some(Unit::Tokens),
            _ => None,
        }
    }

    /// The lowercase name used in reports: `bytes` or `tokens`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Tokens => "tokens",
        }
    }

    /// Tokens in `len` of this unit: exact for tokens, [`BYTES_PER_TOKEN`] bytes a token
    /// (rounded up) for text. The one estimate the host, the replays, `serve` and the
    /// built-in policies use.
    #[inline]
    pub fn tokens(self, len: u64) -> u64 {
        match self {
            Unit::Tokens => len,
            Unit::Bytes => len.div_ceil(BYTES_PER_TOKEN),
        }
    }

    /// `tokens` tokens in this unit (saturating): the inverse of [`Unit::tokens`].
    #[inline]
    pub fn of_tokens(self, tokens: u64) -> u64 {
        match self {
            Unit::Tokens => tokens,
            Unit::Bytes => tokens.saturating_mul(BYTES_PER_TOKEN),
        }
    }
}

/// Bytes of prompt text a token stands for, where only text is known: the estimate every
/// part of routerlab shares (engines tokenise; a router in front of them cannot).
pub const BYTES_PER_TOKEN: u64 = 4;

/// An endpoint's stable index: what `match_request` returns and `update` receives.
///
/// It is not a position in the [`Endpoints`] list (use [`Endpoints::get`] for those): the
/// list loses members when endpoints leave, stable indices are never reused. The newtype
/// keeps the two apart.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId(pub u32);

impl EndpointId {
    /// The index as a number, e.g. to index an array of per-endpoint state.
    #[inline]
    pub fn get(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for EndpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A request, borrowed from the host for one call.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The host's struct, or a zero-padded copy of an older host's shorter one.
    raw: &'a RlRequest,
    unit: Unit,
}

/// Refuses a request smaller than any ABI version's.
#[inline]
fn check_size(struct_size: u32) -> Result<(), String> {
    if struct_size < RL_REQUEST_SIZE_V1_0 {
        return Err(size_error(struct_size));
    }
    Ok(())
}

#[cold]
fn size_error(struct_size: u32) -> String {
    format!("request struct_size {struct_size} is below the v1.0 size {RL_REQUEST_SIZE_V1_0}")
}

/// The request's unit, or why it is none this ABI defines.
#[inline]
fn check_unit(raw: u32) -> Result<Unit, String> {
    match Unit::from_raw(raw) {
        Some(unit) => Ok(unit),
        None => Err(unit_error(raw)),
    }
}

#[cold]
fn unit_error(raw: u32) -> String {
    format!("request unit {raw} is neither RL_UNIT_BYTES (0) nor RL_UNIT_TOKENS (1)")
}

impl<'a> Request<'a> {
    /// A view of a whole raw request, for hosts and benchmarks that call a matcher directly.
    /// Fails on a `struct_size` below the v1.0 size or an unknown unit.
    ///
    /// # Safety
    /// Every pointer in `raw` must be valid for reads of its stated length for `'a`.
    #[inline]
    pub unsafe fn from_raw(raw: &'a RlRequest) -> Result<Request<'a>, String> {
        check_size(raw.struct_size)?;
        let unit = check_unit(raw.unit)?;
        Ok(Request { raw, unit })
    }

    /// Reads the request at `ptr`, of which only `struct_size` bytes may exist: in place
    /// when the struct is whole, else copied into `scratch`.
    ///
    /// # Safety
    /// `ptr` must be non-null and point at a request whose first `struct_size` bytes (at
    /// least the 8 of `struct_size` and `unit`) are readable and unchanged for `'a`, and
    /// whose pointers are valid for reads of their stated lengths for `'a`.
    #[inline]
    pub(crate) unsafe fn read(
        ptr: *const RlRequest,
        scratch: &'a mut MaybeUninit<RlRequest>,
    ) -> Result<Request<'a>, String> {
        // SAFETY: the caller guarantees at least the leading `struct_size` field is
        // readable; it is the first field of every version.
        let size = unsafe { std::ptr::addr_of!((*ptr).struct_size).read_unaligned() };
        check_size(size)?;
        let raw: &'a RlRequest = if size as usize >= size_of::<RlRequest>() {
            // SAFETY: the caller guarantees `size >= size_of::<RlRequest>()` readable,
            // unchanged bytes for `'a`; every field is an integer or a raw pointer, valid
            // for any bytes. A host's struct is aligned (it is a C struct of this layout).
            unsafe { &*ptr }
        } else {
            let copy = scratch.write(zeroed_request());
            // SAFETY: the caller guarantees `size` readable bytes at `ptr`; `copy` is a
            // distinct `size_of::<RlRequest>() > size` bytes. Every field is an integer or a
            // raw pointer, so any bytes (and zero) are valid values.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.cast::<u8>(),
                    std::ptr::from_mut(copy).cast::<u8>(),
                    size as usize,
                );
            }
            copy
        };
        let unit = check_unit(raw.unit)?;
        Ok(Request { raw, unit })
    }

    /// Request id, unique within a replay.
    #[inline]
    pub fn id(&self) -> u64 {
        self.raw.id
    }
    /// Arrival time in logical nanoseconds.
    #[inline]
    pub fn arrival_ns(&self) -> u64 {
        self.raw.arrival_ns
    }
    /// Time of this decision in logical nanoseconds: the arrival, or later when the request
    /// waited at the router. A host older than ABI 1.2 does not say; then the arrival.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        if self.raw.struct_size >= RL_REQUEST_SIZE_V1_2 {
            self.raw.now_ns
        } else {
            self.raw.arrival_ns
        }
    }
    /// How much of this request's prefix the endpoint `id` holds now, in
    /// [`Request::unit`]s: the engine's KV cache in a timed replay, the prefix-cache model
    /// in a time-free one. `None` from a host older than ABI 1.2 or one that cannot say
    /// (a policy then keeps its own index from `update`). The host computes it on each
    /// call, so ask only for the endpoints you need.
    #[inline]
    pub fn cached_prefix(&self, id: EndpointId) -> Option<u64> {
        if self.raw.struct_size < RL_REQUEST_SIZE_V1_2 {
            return None;
        }
        let ask = self.raw.cached_prefix?;
        let mut len = 0u64;
        // SAFETY: a non-null callback was written by an ABI 1.2 host (older hosts' bytes
        // stop before it and the copy is zero there), which guarantees it and its context
        // for the duration of this call; `len` is a valid out slot.
        let status = unsafe { ask(self.raw.cached_prefix_ctx, id.get(), &mut len) };
        (status == RL_OK).then_some(len)
    }
    /// Prompt text (empty for hash-only traces).
    #[inline]
    pub fn prompt(&self) -> &'a [u8] {
        // SAFETY: the host guarantees `prompt` points at `len` readable bytes for this call;
        // `raw_bytes` handles the null/empty case.
        unsafe { raw_bytes(self.raw.prompt) }
    }
    /// Prefix-block hashes; hash `i` identifies the whole prefix up to block `i`.
    #[inline]
    pub fn block_hashes(&self) -> &'a [u64] {
        if self.raw.block_count == 0 || self.raw.block_hashes.is_null() {
            return &[];
        }
        // SAFETY: the host guarantees `block_count` readable, aligned u64s for this call.
        unsafe { std::slice::from_raw_parts(self.raw.block_hashes, self.raw.block_count as usize) }
    }
    /// Dense ids of the blocks, one per hash (see [`crate::hash::BlockInterner`]): equal
    /// hashes have equal ids for the whole replay, and ids count up from 0 in order of first
    /// appearance, so per-block state fits in arrays indexed by id. `None` from a host older
    /// than ABI 1.1, which a plugin handles by interning the hashes itself.
    #[inline]
    pub fn block_ids(&self) -> Option<&'a [u32]> {
        // Zero (null) when the host's struct ends before this field: see `read`.
        if self.raw.struct_size < RL_REQUEST_SIZE_V1_1 || self.raw.block_ids.is_null() {
            return None;
        }
        if self.raw.block_count == 0 {
            return Some(&[]);
        }
        // SAFETY: a non-null `block_ids` was written by an ABI 1.1 host (older hosts' bytes
        // stop before it and the copy is zero there) and points at `block_count` readable,
        // aligned u32s for this call.
        Some(unsafe {
            std::slice::from_raw_parts(self.raw.block_ids, self.raw.block_count as usize)
        })
    }
    /// Block size in [`Request::unit`]s.
    #[inline]
    pub fn block_size(&self) -> u32 {
        self.raw.block_size
    }
    /// Unit of the block size and the prompt length.
    #[inline]
    pub fn unit(&self) -> Unit {
        self.unit
    }
    /// Prompt length in [`Request::unit`]s.
    #[inline]
    pub fn prompt_len(&self) -> u64 {
        self.raw.prompt_len
    }
    /// Expected output tokens, when the trace says.
    #[inline]
    pub fn output_tokens(&self) -> Option<u64> {
        (self.raw.output_tokens != RL_UNKNOWN).then_some(self.raw.output_tokens)
    }
    /// Session id, if any.
    #[inline]
    pub fn session_id(&self) -> Option<u64> {
        (self.raw.session_id != 0).then_some(self.raw.session_id)
    }
    /// Id of the request this one continues, if any.
    #[inline]
    pub fn parent_id(&self) -> Option<u64> {
        (self.raw.parent_id != 0).then_some(self.raw.parent_id)
    }
    /// What the request is being routed for (ABI 1.3): [`Phase::Whole`] in an aggregated
    /// fleet and from older hosts; in a disaggregated one the host asks once for
    /// [`Phase::Prefill`] and once for [`Phase::Decode`], each time with only that pool
    /// available.
    #[inline]
    pub fn phase(&self) -> Phase {
        if self.raw.struct_size < RL_REQUEST_SIZE_WITH_PHASE {
            return Phase::Whole;
        }
        Phase::from_raw(self.raw.phase)
    }
    /// How long a prefix of this request the endpoint `id` holds in each KV tier (ABI
    /// 1.3), in [`Request::unit`]s: the GPU cache's leading run, then the host tier's run
    /// right after it, then a shared tier's. `None` from a host that cannot say (a
    /// one-tier engine's host says `host: 0`). Computed on each call.
    #[inline]
    pub fn cached_tiers(&self, id: EndpointId) -> Option<RlCachedTiers> {
        if self.raw.struct_size < RL_REQUEST_SIZE_V1_3 {
            return None;
        }
        let ask = self.raw.cached_tiers?;
        let mut tiers = RlCachedTiers::default();
        // SAFETY: a non-null callback was written by a host whose struct covers it (older
        // hosts' bytes stop before it and the copy is zero there), which guarantees it and
        // its context for this call; `tiers` is a valid out slot.
        let status = unsafe { ask(self.raw.cached_tiers_ctx, id.get(), &mut tiers) };
        (status == RL_OK).then_some(tiers)
    }
    /// The host's engine model's forecast for this request on the endpoint `id` (ABI 1.4):
    /// its time to first token from [`Request::now_ns`] and its time per output token,
    /// given that endpoint's queue, batch and cache now. `None` from a host without an
    /// engine model (a time-free replay) or an older one. Each call costs the host a short
    /// simulation.
    #[inline]
    pub fn predict(&self, id: EndpointId) -> Option<RlPrediction> {
        if self.raw.struct_size < RL_REQUEST_SIZE_V1_4 {
            return None;
        }
        let ask = self.raw.predict?;
        let mut forecast = RlPrediction::default();
        // SAFETY: a non-null callback was written by a host whose struct covers it, which
        // guarantees it and its context for this call; `forecast` is a valid out slot.
        let status = unsafe { ask(self.raw.predict_ctx, id.get(), &mut forecast) };
        (status == RL_OK).then_some(forecast)
    }
    /// Whether the request is the last of its session, whose client ends the session once
    /// it completes (ABI 1.6); `false` from an older host.
    #[inline]
    pub fn ends_session(&self) -> bool {
        self.raw.flags & crate::abi::RL_REQUEST_ENDS_SESSION != 0
    }
    /// The LoRA adapter the request asks for (ABI 1.5): the host's number for it (from 1,
    /// the same all run) and its name; `None` for the base model or from an older host.
    #[inline]
    pub fn adapter(&self) -> Option<(u64, &'a [u8])> {
        if self.raw.struct_size < RL_REQUEST_SIZE_V1_5 || self.raw.adapter_id == 0 {
            return None;
        }
        // SAFETY: the host guarantees `adapter` points at `len` readable bytes for this
        // call; `raw_bytes` handles the null/empty case.
        Some((self.raw.adapter_id, unsafe { raw_bytes(self.raw.adapter) }))
    }
    /// What the endpoint `id` holds of LoRA adapters, and of this request's (ABI 1.5):
    /// `None` from a host that models no adapter slots, for a request without an adapter,
    /// or from an older host. Computed on each call.
    #[inline]
    pub fn adapter_state(&self, id: EndpointId) -> Option<RlAdapterState> {
        if self.raw.struct_size < RL_REQUEST_SIZE_V1_5 {
            return None;
        }
        let ask = self.raw.adapter_state?;
        let mut state = RlAdapterState::default();
        // SAFETY: a non-null callback was written by a host whose struct covers it, which
        // guarantees it and its context for this call; `state` is a valid out slot.
        let status = unsafe { ask(self.raw.adapter_state_ctx, id.get(), &mut state) };
        (status == RL_OK).then_some(state)
    }
}

/// `RlRequest::struct_size` of an ABI 1.5 host (adds the adapter and `adapter_state`).
const RL_REQUEST_SIZE_V1_5: u32 = 208;

/// `RlRequest::struct_size` from which `phase` is there (an ABI 1.3 host's is larger).
const RL_REQUEST_SIZE_WITH_PHASE: u32 = 136;
/// `RlEndpointStatus::struct_size` of an ABI 1.3 host (adds `role`).
const ENDPOINT_STATUS_SIZE_V1_3: u32 = 96;

/// What a request is routed for (ABI 1.3 `RlRequest::phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Prefill and decode on one endpoint: an aggregated fleet.
    Whole,
    /// The prefill of a disaggregated request, among the prefill pool.
    Prefill,
    /// The decode of a disaggregated request, among the decode pool.
    Decode,
    /// A value a newer host defines.
    Other(u32),
}

impl Phase {
    /// The phase a raw `RL_PHASE_*` value names.
    pub fn from_raw(raw: u32) -> Phase {
        match raw {
            RL_PHASE_WHOLE => Phase::Whole,
            RL_PHASE_PREFILL => Phase::Prefill,
            RL_PHASE_DECODE => Phase::Decode,
            other => Phase::Other(other),
        }
    }
    /// Its raw `RL_PHASE_*` value.
    pub fn raw(self) -> u32 {
        match self {
            Phase::Whole => RL_PHASE_WHOLE,
            Phase::Prefill => RL_PHASE_PREFILL,
            Phase::Decode => RL_PHASE_DECODE,
            Phase::Other(raw) => raw,
        }
    }
}

/// An endpoint's pool (ABI 1.3 `RlEndpointStatus::role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Serves whole requests.
    Aggregated,
    /// Prefills and hands the KV on.
    Prefill,
    /// Decodes (and serves whole the requests sent to it whole).
    Decode,
    /// A value a newer host defines.
    Other(u32),
}

impl Role {
    /// The role a raw `RL_ROLE_*` value names.
    pub fn from_raw(raw: u32) -> Role {
        match raw {
            RL_ROLE_AGGREGATED => Role::Aggregated,
            RL_ROLE_PREFILL => Role::Prefill,
            RL_ROLE_DECODE => Role::Decode,
            other => Role::Other(other),
        }
    }
    /// Its raw `RL_ROLE_*` value.
    pub fn raw(self) -> u32 {
        match self {
            Role::Aggregated => RL_ROLE_AGGREGATED,
            Role::Prefill => RL_ROLE_PREFILL,
            Role::Decode => RL_ROLE_DECODE,
            Role::Other(raw) => raw,
        }
    }
}

/// One endpoint's status, borrowed for one call.
#[derive(Clone, Copy)]
pub struct EndpointStatus<'a> {
    /// Never dereferenced as a whole: the host may have written fewer bytes than today's
    /// struct (`struct_size`), so fields are read one at a time.
    raw: *const RlEndpointStatus,
    _borrow: PhantomData<&'a RlEndpointStatus>,
}

/// Reads one field of the status at `$raw`.
macro_rules! field {
    ($raw:expr, $field:ident) => {
        // SAFETY: the view's constructor guarantees at least the v1.0 status (72 bytes)
        // readable at `raw` for `'a`; every field read this way lies within them.
        unsafe { std::ptr::addr_of!((*$raw).$field).read_unaligned() }
    };
}

impl<'a> EndpointStatus<'a> {
    /// Stable index: what `match_request` returns and `update` receives.
    #[inline]
    pub fn id(&self) -> EndpointId {
        EndpointId(field!(self.raw, index))
    }
    /// Endpoint name, e.g. `localhost:8000` (lossy if the host sent invalid UTF-8).
    #[inline]
    pub fn name(&self) -> &'a str {
        let name = field!(self.raw, name);
        // SAFETY: the host guarantees `name` points at `len` readable bytes for this call.
        let bytes = unsafe { raw_bytes(name) };
        std::str::from_utf8(bytes).unwrap_or("<invalid utf-8>")
    }
    /// Running requests, as the engine last reported them.
    #[inline]
    pub fn running(&self) -> u64 {
        field!(self.raw, running)
    }
    /// Waiting requests, as the engine last reported them.
    #[inline]
    pub fn waiting(&self) -> u64 {
        field!(self.raw, waiting)
    }
    /// KV-cache blocks in use.
    #[inline]
    pub fn kv_blocks_used(&self) -> u64 {
        field!(self.raw, kv_blocks_used)
    }
    /// KV-cache blocks in total (0 = unbounded).
    #[inline]
    pub fn kv_blocks_total(&self) -> u64 {
        field!(self.raw, kv_blocks_total)
    }
    /// KV usage fraction (0 when unbounded).
    #[inline]
    pub fn kv_usage(&self) -> f64 {
        field!(self.raw, kv_usage)
    }
    /// Prompt tokens of unfinished requests routed here.
    #[inline]
    pub fn inflight_prompt_tokens(&self) -> u64 {
        field!(self.raw, inflight_prompt_tokens)
    }
    /// Requests routed here and not finished, counted by the router: always current.
    /// `None` from a host older than ABI 1.2.
    #[inline]
    pub fn inflight_requests(&self) -> Option<u64> {
        if field!(self.raw, struct_size) < ENDPOINT_STATUS_SIZE_WITH_INFLIGHT {
            return None;
        }
        // SAFETY: `struct_size` says the host wrote this field.
        Some(unsafe { std::ptr::addr_of!((*self.raw).inflight_requests).read_unaligned() })
    }
    /// Tokens per block of `kv_blocks_used`/`kv_blocks_total`: the engine's block size in a
    /// timed replay, `Some(0)` in a time-free one (blocks of the request's `block_size`, in
    /// its unit). `None` from a host that does not say (older than this field).
    #[inline]
    pub fn kv_block_tokens(&self) -> Option<u64> {
        if field!(self.raw, struct_size) < ENDPOINT_STATUS_SIZE_WITH_BLOCK_TOKENS {
            return None;
        }
        // SAFETY: `struct_size` says the host wrote this field.
        Some(unsafe { std::ptr::addr_of!((*self.raw).kv_block_tokens).read_unaligned() })
    }
    /// The endpoint's pool (ABI 1.3); [`Role::Aggregated`] from older hosts.
    #[inline]
    pub fn role(&self) -> Role {
        if field!(self.raw, struct_size) < ENDPOINT_STATUS_SIZE_V1_3 {
            return Role::Aggregated;
        }
        // SAFETY: `struct_size` says the host wrote this field.
        Role::from_raw(unsafe { std::ptr::addr_of!((*self.raw).role).read_unaligned() })
    }
    /// The endpoint's LoRA adapter slots (ABI 1.5); `None` from a host that models none, or
    /// an older one.
    #[inline]
    pub fn lora(&self) -> Option<LoraSlots> {
        if field!(self.raw, struct_size) < ENDPOINT_STATUS_SIZE_V1_5 {
            return None;
        }
        // SAFETY: `struct_size` says the host wrote these fields.
        let read = |f: *const u32| unsafe { f.read_unaligned() };
        let raw = self.raw;
        // SAFETY: `raw` points at a status whose `struct_size` covers these fields.
        let slots = unsafe {
            LoraSlots {
                used: read(std::ptr::addr_of!((*raw).lora_slots_used)),
                total: read(std::ptr::addr_of!((*raw).lora_slots_total)),
                active: read(std::ptr::addr_of!((*raw).lora_active)),
                waiting: read(std::ptr::addr_of!((*raw).lora_waiting)),
            }
        };
        (slots.total > 0).then_some(slots)
    }
}

/// An endpoint's LoRA adapter slots, as [`EndpointStatus::lora`] reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoraSlots {
    /// Slots holding an adapter.
    pub used: u32,
    /// Slots in all (vLLM's `--max-loras`).
    pub total: u32,
    /// Distinct adapters its running requests use.
    pub active: u32,
    /// Distinct adapters only its waiting requests use.
    pub waiting: u32,
}

/// `RlEndpointStatus::struct_size` of an ABI 1.5 host (adds the LoRA slots).
const ENDPOINT_STATUS_SIZE_V1_5: u32 = 112;

/// `RlEndpointStatus::struct_size` of an ABI 1.2 host.
const ENDPOINT_STATUS_SIZE_WITH_INFLIGHT: u32 = 80;
/// `RlEndpointStatus::struct_size` from which `kv_block_tokens` is there.
const ENDPOINT_STATUS_SIZE_WITH_BLOCK_TOKENS: u32 = 88;

/// The endpoint list of one call, with the host's unavailable flags when it sent them.
#[derive(Clone, Copy)]
pub struct Endpoints<'a> {
    list: RlEndpointList,
    unavailable: &'a [u8],
    _borrow: PhantomData<&'a RlEndpointStatus>,
}

impl<'a> Endpoints<'a> {
    /// A view of a raw list, for hosts and benchmarks that call a plugin directly.
    ///
    /// # Safety
    /// `list` must describe `len` valid statuses `stride >= RL_ENDPOINT_STATUS_SIZE_V1_0`
    /// bytes apart, each with at least its `struct_size` bytes readable, whose pointers
    /// stay valid for `'a`; `unavailable` is empty or has `len` flags.
    #[inline]
    pub unsafe fn from_raw(list: RlEndpointList, unavailable: &'a [u8]) -> Endpoints<'a> {
        Endpoints {
            list,
            unavailable,
            _borrow: PhantomData,
        }
    }

    /// Number of endpoints.
    #[inline]
    pub fn len(&self) -> usize {
        self.list.len as usize
    }
    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.len == 0
    }
    /// The endpoint at list position `pos` (not its stable index).
    ///
    /// # Panics
    /// When `pos >= len()`.
    #[inline]
    pub fn get(&self, pos: usize) -> EndpointStatus<'a> {
        assert!(pos < self.len(), "endpoint position {pos} out of range");
        // SAFETY: whoever built this view (`from_raw`'s caller, the SDK's shim after its
        // checks, or `testing`) guarantees `items` holds `len` elements `stride >= 72` bytes
        // apart, and `pos < len`; no reference is formed.
        let raw = unsafe {
            (self.list.items as *const u8)
                .add(pos * self.list.stride as usize)
                .cast::<RlEndpointStatus>()
        };
        EndpointStatus {
            raw,
            _borrow: PhantomData,
        }
    }
    /// Whether the host flagged list position `pos` unavailable.
    #[inline]
    pub fn is_available(&self, pos: usize) -> bool {
        self.unavailable.get(pos).is_none_or(|flag| *flag == 0)
    }
    /// Every endpoint, in list order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = EndpointStatus<'a>> + '_ {
        (0..self.len()).map(|pos| self.get(pos))
    }
    /// The endpoints that may be chosen, in list order.
    #[inline]
    pub fn available(&self) -> impl Iterator<Item = EndpointStatus<'a>> + '_ {
        (0..self.len())
            .filter(|pos| self.is_available(*pos))
            .map(|pos| self.get(pos))
    }
}

/// A request with every field zero (null pointers): what an older host's missing fields
/// read as.
pub(crate) const fn zeroed_request() -> RlRequest {
    RlRequest {
        struct_size: 0,
        unit: 0,
        id: 0,
        arrival_ns: 0,
        prompt: RlStr {
            ptr: std::ptr::null(),
            len: 0,
        },
        block_hashes: std::ptr::null(),
        block_count: 0,
        block_size: 0,
        flags: 0,
        prompt_len: 0,
        output_tokens: 0,
        session_id: 0,
        parent_id: 0,
        block_ids: std::ptr::null(),
        now_ns: 0,
        cached_prefix: None,
        cached_prefix_ctx: std::ptr::null(),
        phase: 0,
        _reserved_1_3: 0,
        cached_tiers: None,
        cached_tiers_ctx: std::ptr::null(),
        predict: None,
        predict_ctx: std::ptr::null(),
        adapter_id: 0,
        adapter: RlStr {
            ptr: std::ptr::null(),
            len: 0,
        },
        adapter_state: None,
        adapter_state_ctx: std::ptr::null(),
    }
}

/// Reads a borrowed byte string.
///
/// # Safety
/// `s.ptr` must point at `s.len` readable bytes that outlive `'a`, unless `s.len == 0`.
pub(crate) unsafe fn raw_bytes<'a>(s: RlStr) -> &'a [u8] {
    if s.len == 0 || s.ptr.is_null() {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(s.ptr, s.len as usize) }
}
