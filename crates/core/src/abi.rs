//! The routerlab plugin ABI, version 1: the only contract between the host and a plugin.
//!
//! Everything here is `#[repr(C)]`, built from fixed-size integers, `f64` and pointers, with
//! explicit `_reserved` fields so no struct has hidden padding. `include/routerlab.h` is
//! generated from this file (`cargo xtask codegen`), so a C author and a Rust author see the
//! same layout. Why it looks like this:
//!
//! - **One entry function per major** (`routerlab_plugin_entry_v1`): a function can refuse
//!   to load by returning NULL, and a v2 host can still probe for the `_v1` symbol.
//! - **`struct_size` first** in every struct that may grow: a minor version only appends
//!   fields, and each side reads a field only when the other side's `struct_size` covers it.
//! - **Enumerations are `u32` constants**, never Rust enums: an unknown value from a newer
//!   plugin must be an error, not undefined behaviour.
//! - **Strings are borrowed `(pointer, length)` UTF-8**, valid for one call. No allocation
//!   ever changes owner; messages travel through a host-provided [`RlErrorSink`] that copies.
//! - Only 64-bit targets are supported by v1 (pointers and lengths are 8 bytes, which is what
//!   keeps the layouts free of padding).

use core::ffi::{c_char, c_void};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("routerlab ABI v1 supports 64-bit targets only");

/// Magic number at the start of the module descriptor: ASCII "RLAB".
pub const RL_MAGIC: u32 = 0x524C_4142;
/// Major version: a different major is a different entry symbol and is never loaded.
pub const RL_ABI_MAJOR: u32 = 1;
/// Minor version: minors only append fields and constants, or give a meaning to a field
/// reserved as zero (which older hosts then still write).
pub const RL_ABI_MINOR: u32 = 7;
/// The symbol every plugin library exports (NUL-terminated for `dlsym`).
pub const RL_ENTRY_SYMBOL: &[u8] = b"routerlab_plugin_entry_v1\0";

/// Status returned by every fallible call.
pub type RlStatus = i32;
/// Success.
pub const RL_OK: RlStatus = 0;
/// `match` only: no available endpoint could be chosen (not an error).
pub const RL_NO_ENDPOINT: RlStatus = 1;
/// An argument broke the contract (null pointer, unknown index).
pub const RL_ERR_INVALID_ARGUMENT: RlStatus = -1;
/// `create` only: the configuration was rejected; the message says why.
pub const RL_ERR_CONFIG: RlStatus = -2;
/// Any other failure inside the plugin.
pub const RL_ERR_INTERNAL: RlStatus = -3;
/// The plugin panicked; the message carries the payload and the instance is now poisoned.
pub const RL_ERR_PANIC: RlStatus = -4;
/// The instance panicked earlier and refuses further work.
pub const RL_ERR_POISONED: RlStatus = -5;

/// Plugin kind: picks an endpoint for each request.
pub const RL_KIND_MATCHER: u32 = 1;
/// Plugin kind: flags overloaded endpoints.
pub const RL_KIND_DETECTOR: u32 = 2;
/// Plugin kind (ABI 1.7): answers, on a tick, how many endpoints each pool should have.
pub const RL_KIND_SCALER: u32 = 3;

/// Unit of `RlRequest::block_size` and `prompt_len`: bytes of prompt text.
pub const RL_UNIT_BYTES: u32 = 0;
/// Unit of `RlRequest::block_size` and `prompt_len`: tokens.
pub const RL_UNIT_TOKENS: u32 = 1;

/// Value of `RlRequest::output_tokens` when the trace does not say.
pub const RL_UNKNOWN: u64 = u64::MAX;

/// `RlRequest::phase` (ABI 1.3): the request is routed to be served whole, prefill and
/// decode on one endpoint (an aggregated fleet, and what older hosts mean).
pub const RL_PHASE_WHOLE: u32 = 0;
/// `RlRequest::phase`: routed for its prefill, among the prefill pool; its KV then moves to
/// a decode endpoint.
pub const RL_PHASE_PREFILL: u32 = 1;
/// `RlRequest::phase`: routed for its decode, among the decode pool.
pub const RL_PHASE_DECODE: u32 = 2;
/// `RlEndpointStatus::role` (ABI 1.3): the endpoint serves whole requests (aggregated).
pub const RL_ROLE_AGGREGATED: u32 = 0;
/// `RlEndpointStatus::role`: the endpoint prefills and hands the KV on.
pub const RL_ROLE_PREFILL: u32 = 1;
/// `RlEndpointStatus::role`: the endpoint decodes (and prefills what is sent to it whole).
pub const RL_ROLE_DECODE: u32 = 2;

/// A borrowed UTF-8 string: `len` bytes at `ptr`, not NUL-terminated; valid for one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlStr {
    /// First byte (may be null when `len` is 0).
    pub ptr: *const u8,
    /// Number of bytes.
    pub len: u64,
}

/// Where a plugin writes at most one error message per call; the host copies it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlErrorSink {
    /// Host context, passed back to `write`.
    pub ctx: *mut c_void,
    /// Copies `msg`; may be called at most once per call into the plugin.
    pub write: Option<unsafe extern "C" fn(ctx: *mut c_void, msg: RlStr)>,
}

/// One request, as the host presents it to matchers. Borrowed for the duration of one call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlRequest {
    /// `size_of::<RlRequest>()` of the host that built it.
    pub struct_size: u32,
    /// `RL_UNIT_BYTES` or `RL_UNIT_TOKENS`: the unit of `block_size` and `prompt_len`.
    pub unit: u32,
    /// Request id, unique within a replay: the request's position in the trace, counted
    /// from 1 in file order (skipped lines not counted), whatever ids the trace itself uses.
    pub id: u64,
    /// Arrival time in logical nanoseconds since the start of the trace.
    pub arrival_ns: u64,
    /// Prompt text; empty for hash-only traces.
    pub prompt: RlStr,
    /// Chain of prefix-block hashes: hash `i` identifies the whole prefix up to block `i`.
    /// For text and token-id traces the host computes them (xxh3 chains). For Mooncake
    /// traces they are the trace's own `hash_ids`, unchanged: small integers, and 0 is a
    /// valid and common value (never use 0 as "empty"). CSV traces (Azure, BurstGPT) have
    /// none: `block_count` is 0.
    pub block_hashes: *const u64,
    /// Number of entries in `block_hashes`.
    pub block_count: u64,
    /// Size of one block in `unit`s (the last block may be partial).
    pub block_size: u32,
    /// `RL_REQUEST_*` bits (ABI 1.6; reserved and zero before, so an older host sets none):
    /// `RL_REQUEST_ENDS_SESSION`, the request is its session's last.
    pub flags: u32,
    /// Prompt length in `unit`s.
    pub prompt_len: u64,
    /// Expected output tokens, or `RL_UNKNOWN`.
    pub output_tokens: u64,
    /// Session id, 0 = none. Sessions are renumbered from 1 in order of first appearance
    /// in the file, whatever the trace calls them.
    pub session_id: u64,
    /// `id` of the request whose prompt this one continues, 0 = none (renumbered like
    /// `id`).
    pub parent_id: u64,
    // ---- appended in ABI 1.1: read only when `struct_size` covers them ----
    /// Dense block ids, `block_count` of them, or null: `block_ids[i]` names `block_hashes[i]`.
    /// Equal hashes have equal ids for the whole replay, and ids count up from 0 in order of
    /// first appearance, so a plugin can keep per-block state in arrays indexed by id.
    pub block_ids: *const u32,
    // ---- appended in ABI 1.2: read only when `struct_size` covers them ----
    /// Time of this decision in logical nanoseconds: the arrival, or later when the request
    /// waited at the router. What idle-time eviction and load decay measure against.
    pub now_ns: u64,
    /// Asks the host how much of this request's prefix an endpoint holds now (the engine's
    /// KV cache in a timed replay, the prefix-cache model in a time-free one), or NULL when
    /// the host cannot say. Computed only when called, so a policy that never asks pays
    /// nothing. Valid for this call only.
    pub cached_prefix: RlCachedPrefixFn,
    /// Host context to pass back to `cached_prefix`.
    pub cached_prefix_ctx: *const c_void,
    // ---- appended in ABI 1.3: read only when `struct_size` covers them ----
    /// What the request is being routed for: `RL_PHASE_WHOLE`, `RL_PHASE_PREFILL` or
    /// `RL_PHASE_DECODE`. In a disaggregated fleet the host asks once per phase, each time
    /// with only that phase's pool available.
    pub phase: u32,
    /// Reserved, zero.
    pub _reserved_1_3: u32,
    /// Asks the host how long a prefix of this request an endpoint holds in each KV tier
    /// (its GPU cache, then right after that run its host-memory tier, then a shared tier),
    /// or NULL when the host cannot say. As `cached_prefix`: computed only when called,
    /// valid for this call only, `RL_ERR_INVALID_ARGUMENT` for an unknown endpoint.
    pub cached_tiers: RlCachedTiersFn,
    /// Host context to pass back to `cached_tiers`.
    pub cached_tiers_ctx: *const c_void,
    // ---- appended in ABI 1.4: read only when `struct_size` covers them ----
    /// Asks the host for its engine model's forecast of this request on an endpoint (see
    /// [`RlPrediction`]), given that endpoint's queue, batch and cache now; NULL when the
    /// host has no engine model. As `cached_prefix`: computed only when called (each call
    /// costs the host a short simulation), valid for this call only,
    /// `RL_ERR_INVALID_ARGUMENT` for an unknown endpoint.
    pub predict: RlPredictFn,
    /// Host context to pass back to `predict`.
    pub predict_ctx: *const c_void,
    // ---- appended in ABI 1.5: read only when `struct_size` covers them ----
    /// The LoRA adapter the request asks for, numbered by the host from 1 in order of
    /// first appearance (the same number for the same name all run); 0 = none, the base
    /// model.
    pub adapter_id: u64,
    /// Its name (an OpenAI request's `model`); empty for the base model.
    pub adapter: RlStr,
    /// Asks the host what an endpoint holds of LoRA adapters for this request (see
    /// [`RlAdapterState`]), or NULL when the host cannot say (no adapter slots modelled,
    /// or a request without an adapter). As `cached_prefix`: computed only when called,
    /// valid for this call only, `RL_ERR_INVALID_ARGUMENT` for an unknown endpoint.
    pub adapter_state: RlAdapterStateFn,
    /// Host context to pass back to `adapter_state`.
    pub adapter_state_ctx: *const c_void,
}

/// What `adapter_state` writes: an endpoint's LoRA slots, and the request's adapter there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RlAdapterState {
    /// 1 when the request's adapter holds one of the endpoint's slots (loaded or
    /// loading), else 0.
    pub resident: u32,
    /// Requests of the request's adapter running on the endpoint.
    pub running: u32,
    /// Requests of the request's adapter waiting there.
    pub waiting: u32,
    /// Distinct adapters the endpoint's running requests use.
    pub active: u32,
    /// Slots holding an adapter.
    pub slots_used: u32,
    /// Slots in all (vLLM's `--max-loras`).
    pub slots_total: u32,
    /// Distinct adapters of the endpoint's waiting requests that no running request uses
    /// (vLLM's `waiting_lora_adapters`; `active` is its `running_lora_adapters`).
    pub waiting_adapters: u32,
    /// Reserved, zero.
    pub _reserved: u32,
}

/// `adapter_state(ctx, endpoint_index, out)`: see `RlRequest::adapter_state`.
pub type RlAdapterStateFn = Option<
    unsafe extern "C" fn(
        ctx: *const c_void,
        endpoint_index: u32,
        out: *mut RlAdapterState,
    ) -> RlStatus,
>;

/// What `predict` writes: the host's engine model's forecast for the request were it sent
/// to the endpoint now.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RlPrediction {
    /// Nanoseconds from `now_ns` to its first token.
    pub ttft_ns: u64,
    /// Nanoseconds per output token after the first.
    pub tpot_ns: u64,
}

/// `predict(ctx, endpoint_index, out)`: see `RlRequest::predict`.
pub type RlPredictFn = Option<
    unsafe extern "C" fn(
        ctx: *const c_void,
        endpoint_index: u32,
        out: *mut RlPrediction,
    ) -> RlStatus,
>;

/// What `cached_tiers` writes, in the request's `unit`: `gpu` is the leading run the
/// endpoint's GPU cache holds (what `cached_prefix` says); `host` the run right after it
/// that its host-memory tier holds (loaded instead of computed); `shared` the run after
/// those that a tier shared by the fleet holds. `gpu + host + shared` is what the request
/// would not compute there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RlCachedTiers {
    /// Held by the GPU cache.
    pub gpu: u64,
    /// Then held by the host tier.
    pub host: u64,
    /// Then held by a shared tier.
    pub shared: u64,
}

/// `cached_tiers(ctx, endpoint_index, out)`: see `RlRequest::cached_tiers`.
pub type RlCachedTiersFn = Option<
    unsafe extern "C" fn(
        ctx: *const c_void,
        endpoint_index: u32,
        out: *mut RlCachedTiers,
    ) -> RlStatus,
>;

/// `RlRequest::flags`: the request is the last of its session, whose client ends the
/// session once it completes (vllm-router's `/finish_session`): a matcher may forget the
/// session at `on_complete` instead of waiting for it to expire (ABI 1.6).
pub const RL_REQUEST_ENDS_SESSION: u32 = 1;

/// `RlRequest::struct_size` of an ABI 1.0 host, the smallest a plugin may receive.
pub const RL_REQUEST_SIZE_V1_0: u32 = 96;
/// `RlRequest::struct_size` of an ABI 1.1 host (adds `block_ids`).
pub const RL_REQUEST_SIZE_V1_1: u32 = 104;
/// `RlRequest::struct_size` of an ABI 1.2 host (adds `now_ns` and `cached_prefix`).
pub const RL_REQUEST_SIZE_V1_2: u32 = 128;
/// `RlRequest::struct_size` of an ABI 1.3 host (adds `phase` and `cached_tiers`).
pub const RL_REQUEST_SIZE_V1_3: u32 = 152;
/// `RlRequest::struct_size` of an ABI 1.4 host (adds `predict`).
pub const RL_REQUEST_SIZE_V1_4: u32 = 168;
/// `RlEndpointStatus::struct_size` of an ABI 1.3 or 1.4 host (adds `role`).
pub const RL_ENDPOINT_STATUS_SIZE_V1_3: u32 = 96;
/// `RlEndpointStatus::struct_size` of an ABI 1.2 host (adds `inflight_requests` and
/// `kv_block_tokens`).
pub const RL_ENDPOINT_STATUS_SIZE_V1_2: u32 = 88;
/// `RlEndpointStatus::struct_size` of an ABI 1.0 or 1.1 host, the smallest a plugin may
/// receive (and the smallest list stride).
pub const RL_ENDPOINT_STATUS_SIZE_V1_0: u32 = 72;
/// `RlMatcherVtable::struct_size` of an ABI 1.0 or 1.1 plugin, the smallest a host accepts.
pub const RL_MATCHER_VTABLE_SIZE_V1_0: u32 = 64;
/// `RlDetectorVtable::struct_size` of an ABI 1.0 or 1.1 plugin, the smallest a host accepts.
pub const RL_DETECTOR_VTABLE_SIZE_V1_0: u32 = 32;

/// `cached_prefix(ctx, endpoint_index, out_len)`: writes the length, in the request's
/// `unit`, of the request's longest leading run of blocks that the endpoint with stable
/// index `endpoint_index` holds, and returns `RL_OK`; `RL_ERR_INVALID_ARGUMENT` for an
/// unknown endpoint.
pub type RlCachedPrefixFn = Option<
    unsafe extern "C" fn(ctx: *const c_void, endpoint_index: u32, out_len: *mut u64) -> RlStatus,
>;

/// The state of one endpoint. Lists of these carry a stride, so fields can be appended.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlEndpointStatus {
    /// `size_of::<RlEndpointStatus>()` of the host that built it.
    pub struct_size: u32,
    /// Stable endpoint index: never reused while the instance lives.
    pub index: u32,
    /// Endpoint name, e.g. `localhost:8000`.
    pub name: RlStr,
    /// Requests running on the endpoint.
    pub running: u64,
    /// Requests waiting in the endpoint's queue.
    pub waiting: u64,
    /// KV-cache blocks in use. In a time-free replay these are the prefix-cache model's
    /// blocks, of the trace's block size (`RlRequest::block_size`, in the request's unit);
    /// in a timed replay the engine's KV blocks, of `kv_block_tokens` tokens each.
    pub kv_blocks_used: u64,
    /// KV-cache blocks in total, in the same blocks as `kv_blocks_used`; 0 = unbounded.
    pub kv_blocks_total: u64,
    /// `kv_blocks_used / kv_blocks_total`, 0 when unbounded.
    pub kv_usage: f64,
    /// Prompt tokens of requests routed here that have not finished (in a time-free
    /// replay nothing finishes). Always tokens: for text requests (`RL_UNIT_BYTES`) the
    /// host counts `ceil(prompt bytes / 4)` tokens a request.
    pub inflight_prompt_tokens: u64,
    // ---- appended in ABI 1.2: read only when `struct_size` covers it ----
    /// Requests routed here that have not finished, counted by the router itself: always
    /// current, where `running`/`waiting` are the engine's report and may be stale.
    pub inflight_requests: u64,
    /// Tokens per block of `kv_blocks_used`/`kv_blocks_total`: the engine's block size in a
    /// timed replay (64 with the `dynamo` preset); 0 in a time-free replay, whose blocks are
    /// the request's `block_size` in the request's unit.
    pub kv_block_tokens: u64,
    // ---- appended in ABI 1.3: read only when `struct_size` covers it ----
    /// `RL_ROLE_AGGREGATED`, `RL_ROLE_PREFILL` or `RL_ROLE_DECODE`: the endpoint's pool.
    pub role: u32,
    /// Reserved, zero.
    pub _reserved_1_3: u32,
    // ---- appended in ABI 1.5: read only when `struct_size` covers it ----
    /// LoRA adapter slots holding an adapter (0 with `lora_slots_total` 0: the host models
    /// no slots).
    pub lora_slots_used: u32,
    /// LoRA adapter slots in all (vLLM's `--max-loras`); 0 when the host models none.
    pub lora_slots_total: u32,
    /// Distinct adapters the endpoint's running requests use (vLLM's
    /// `running_lora_adapters`).
    pub lora_active: u32,
    /// Distinct adapters only its waiting requests use (vLLM's `waiting_lora_adapters`).
    pub lora_waiting: u32,
}

/// A borrowed list of endpoint statuses; element `i` is at `items + i * stride` bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlEndpointList {
    /// First element.
    pub items: *const RlEndpointStatus,
    /// Number of elements.
    pub len: u64,
    /// Distance in bytes between elements. At least `RL_ENDPOINT_STATUS_SIZE_V1_0`; equal to
    /// the host's `sizeof(RlEndpointStatus)`, which may be larger or smaller than the
    /// plugin's: step through the list by `stride`, never by your own `sizeof`, and read
    /// a field only when the element's `struct_size` covers it.
    pub stride: u64,
}

/// `create(name, config, out_instance, err)`: config is the plugin's own YAML or JSON text.
pub type RlCreateFn = Option<
    unsafe extern "C" fn(
        name: RlStr,
        config: RlStr,
        out_instance: *mut *mut c_void,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;
/// What `create_with` receives. Borrowed for the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlCreateInfo {
    /// `size_of::<RlCreateInfo>()` of the host that built it.
    pub struct_size: u32,
    /// Reserved, zero.
    pub _reserved: u32,
    /// The plugin's name.
    pub name: RlStr,
    /// The plugin's own config, without the `seed` key, in the host's normal form: block
    /// YAML with one `key: value` a line, keys in the order the user gave them; the empty
    /// string when the user gave nothing but a seed.
    pub config: RlStr,
    /// The run's seed: the only source of randomness a plugin may use.
    pub seed: u64,
}

/// `create_with(info, out_instance, err)`: as `create`, with the seed outside the config.
pub type RlCreateWithFn = Option<
    unsafe extern "C" fn(
        info: *const RlCreateInfo,
        out_instance: *mut *mut c_void,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;

/// Frees an instance; called exactly once per successful `create`.
pub type RlDestroyFn = Option<unsafe extern "C" fn(instance: *mut c_void)>;
/// Announces endpoints (their index and name) to a matcher.
pub type RlAddEndpointsFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        endpoints: *const RlEndpointList,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;
/// Removes endpoints by stable index.
pub type RlRemoveEndpointsFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        indices: *const u32,
        count: u64,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;
/// Picks an endpoint: writes its stable index to `out_index` and returns `RL_OK`, or
/// returns `RL_NO_ENDPOINT`. `unavailable` has one byte per list element (non-zero = do not
/// choose).
pub type RlMatchFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        request: *const RlRequest,
        endpoints: *const RlEndpointList,
        unavailable: *const u8,
        out_index: *mut u32,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;
/// Tells the matcher where a request went (`update`) or that it finished (`on_complete`).
pub type RlRequestEndpointFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        request: *const RlRequest,
        endpoint_index: u32,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;
/// Writes one byte per list element into `out_unavailable` (non-zero = unavailable).
pub type RlDetectFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        endpoints: *const RlEndpointList,
        out_unavailable: *mut u8,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;

/// Entry points of a matcher. Every field but `on_complete` is required (non-NULL).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlMatcherVtable {
    /// `size_of::<RlMatcherVtable>()` of the plugin's ABI version.
    pub struct_size: u32,
    /// Reserved, zero.
    pub _reserved: u32,
    /// Creates an instance.
    pub create: RlCreateFn,
    /// Frees an instance.
    pub destroy: RlDestroyFn,
    /// Adds endpoints.
    pub add_endpoints: RlAddEndpointsFn,
    /// Removes endpoints.
    pub remove_endpoints: RlRemoveEndpointsFn,
    /// Picks an endpoint for a request.
    pub match_request: RlMatchFn,
    /// Records that a request was routed to an endpoint.
    pub update: RlRequestEndpointFn,
    /// Optional (NULL allowed): a routed request finished on its endpoint. Called only by
    /// the timed replay (and a live router): in a time-free replay requests never finish.
    pub on_complete: RlRequestEndpointFn,
    // ---- appended in ABI 1.2: optional (NULL allowed), read only when `struct_size` covers them ----
    /// A routed request produced its first token on its endpoint (timed replays).
    pub on_first_token: RlRequestEndpointFn,
    /// `match` and, when it picks an endpoint, `update` for that endpoint, in one call: what
    /// the host uses when the plugin provides it. Same arguments and statuses as `match`.
    pub match_update: RlMatchFn,
    /// Creates an instance with the seed outside the config text; used instead of `create`
    /// when present. The config text then holds no `seed` key.
    pub create_with: RlCreateWithFn,
}

/// Entry points of a detector.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlDetectorVtable {
    /// `size_of::<RlDetectorVtable>()` of the plugin's ABI version.
    pub struct_size: u32,
    /// Reserved, zero.
    pub _reserved: u32,
    /// Creates an instance.
    pub create: RlCreateFn,
    /// Frees an instance.
    pub destroy: RlDestroyFn,
    /// Flags unavailable endpoints.
    pub detect: RlDetectFn,
    // ---- appended in ABI 1.2: optional (NULL allowed) ----
    /// As `RlMatcherVtable::create_with`.
    pub create_with: RlCreateWithFn,
}

/// One pool of the fleet as a scaler sees it on a tick (ABI 1.7). Pools are listed with a
/// stride, so fields can be appended.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlPoolState {
    /// `size_of::<RlPoolState>()` of the host that built it.
    pub struct_size: u32,
    /// `RL_ROLE_AGGREGATED`, `RL_ROLE_PREFILL` or `RL_ROLE_DECODE`.
    pub role: u32,
    /// Endpoints serving now (in `endpoints`).
    pub ready: u32,
    /// Endpoints started and not serving yet (their start-up delay runs).
    pub starting: u32,
    /// Endpoints taking no new requests, finishing what they run before they go.
    pub draining: u32,
    /// The fewest endpoints the host keeps.
    pub min_endpoints: u32,
    /// The most endpoints the host may run: its GPU ceiling over `gpus_per_endpoint`.
    pub max_endpoints: u32,
    /// GPUs one endpoint takes.
    pub gpus_per_endpoint: u32,
    /// Requests waiting at the router for this pool now.
    pub waiting_at_router: u64,
    /// Requests that arrived during the last interval.
    pub arrivals: u64,
    /// Requests that finished during the last interval.
    pub finished: u64,
    /// Mean prompt tokens of the last interval's arrivals (0 with none).
    pub prompt_tokens_mean: f64,
    /// Mean output tokens of the last interval's arrivals (0 with none).
    pub output_tokens_mean: f64,
    /// Mean TTFT in ms of the last interval's finished requests (0 with none).
    pub ttft_mean_ms: f64,
    /// Mean time per output token in ms of the last interval's finished requests (0 with
    /// none).
    pub tpot_mean_ms: f64,
    /// Prompt tokens the last interval's finished requests found cached, over their prompt
    /// tokens (0 with none).
    pub hit_ratio: f64,
    /// Share of all finished requests so far that met the run's SLO; -1 without an SLO or
    /// before anything finished.
    pub slo_attainment: f64,
    /// The serving endpoints, with their loads as the engines report them now.
    pub endpoints: RlEndpointList,
}

/// What a scaler is given on each tick (ABI 1.7). Borrowed for the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlScalerTick {
    /// `size_of::<RlScalerTick>()` of the host that built it.
    pub struct_size: u32,
    /// Reserved, zero.
    pub _reserved: u32,
    /// Time of the tick in logical nanoseconds since the start of the trace.
    pub now_ns: u64,
    /// Nanoseconds since the previous tick: the "last interval" of each pool's figures.
    pub interval_ns: u64,
    /// First pool: one for an aggregated fleet, prefill then decode for a disaggregated one.
    pub pools: *const RlPoolState,
    /// Number of pools.
    pub pool_count: u64,
    /// Distance in bytes between pools; step by it, never by your own `sizeof`.
    pub pool_stride: u64,
}

/// `scale(instance, tick, out_desired, err)`: writes one desired endpoint count per pool of
/// `tick` into `out_desired` (which holds each pool's current count, `ready + starting`,
/// on entry). The host keeps each within the pool's `min_endpoints..=max_endpoints`.
pub type RlScaleFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        tick: *const RlScalerTick,
        out_desired: *mut u32,
        err: *const RlErrorSink,
    ) -> RlStatus,
>;

/// Entry points of a scaler (ABI 1.7). Every field is required but one of the two creates.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlScalerVtable {
    /// `size_of::<RlScalerVtable>()` of the plugin's ABI version.
    pub struct_size: u32,
    /// Reserved, zero.
    pub _reserved: u32,
    /// Creates an instance (or NULL when `create_with` is given).
    pub create: RlCreateFn,
    /// Frees an instance.
    pub destroy: RlDestroyFn,
    /// As `RlMatcherVtable::create_with`.
    pub create_with: RlCreateWithFn,
    /// Answers the desired endpoint count of each pool.
    pub scale: RlScaleFn,
}

/// `RlPoolState::struct_size` of an ABI 1.7 host, the smallest a plugin may receive.
pub const RL_POOL_STATE_SIZE_V1_7: u32 = 128;
/// `RlScalerTick::struct_size` of an ABI 1.7 host, the smallest a plugin may receive.
pub const RL_SCALER_TICK_SIZE_V1_7: u32 = 48;
/// `RlScalerVtable::struct_size` of an ABI 1.7 plugin, the smallest a host accepts.
pub const RL_SCALER_VTABLE_SIZE_V1_7: u32 = 40;

/// Describes one plugin of a library. All strings are static and NUL-terminated.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlPluginDescriptor {
    /// `size_of::<RlPluginDescriptor>()` of the plugin's ABI version.
    pub struct_size: u32,
    /// `RL_KIND_MATCHER`, `RL_KIND_DETECTOR` or (ABI 1.7) `RL_KIND_SCALER`.
    pub kind: u32,
    /// Name the plugin is loaded by: `[a-z0-9-]{1,64}`.
    pub name: *const c_char,
    /// The plugin's own version, e.g. `0.1.0`.
    pub version: *const c_char,
    /// One line saying what the plugin does.
    pub description: *const c_char,
    /// `*const RlMatcherVtable`, `*const RlDetectorVtable` or `*const RlScalerVtable`,
    /// according to `kind`.
    pub vtable: *const c_void,
}

/// What the entry function returns: a static description of the library.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlModule {
    /// `size_of::<RlModule>()` of the plugin's ABI version.
    pub struct_size: u32,
    /// `RL_MAGIC`.
    pub magic: u32,
    /// `RL_ABI_MAJOR` the library was built against.
    pub abi_major: u32,
    /// `RL_ABI_MINOR` the library was built against.
    pub abi_minor: u32,
    /// Number of entries in `plugins`.
    pub plugin_count: u32,
    /// Reserved, zero.
    pub _reserved: u32,
    /// Array of `plugin_count` descriptor pointers.
    pub plugins: *const *const RlPluginDescriptor,
}

/// The entry function's type: called once, cheap, returns a static module or NULL to refuse.
pub type RlEntryFn = unsafe extern "C" fn() -> *const RlModule;

// SAFETY: descriptors and modules are immutable static data whose pointers refer to other
// static data; sharing them between threads cannot race.
#[allow(unsafe_code)]
unsafe impl Sync for RlPluginDescriptor {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for RlModule {}

/// A pointer to a static descriptor that may live in a `static` array.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct RlDescriptorRef(pub *const RlPluginDescriptor);
// SAFETY: points at an immutable static descriptor.
#[allow(unsafe_code)]
unsafe impl Sync for RlDescriptorRef {}

// Layout checks: these sizes are the v1.0 contract and must never shrink or move.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<RlStr>() == 16);
    assert!(size_of::<RlErrorSink>() == 16);
    assert!(size_of::<RlRequest>() == 208);
    assert!(offset_of!(RlRequest, adapter_id) == RL_REQUEST_SIZE_V1_4 as usize);
    assert!(size_of::<RlAdapterState>() == 32);
    assert!(offset_of!(RlRequest, predict) == RL_REQUEST_SIZE_V1_3 as usize);
    assert!(size_of::<RlPrediction>() == 16);
    assert!(offset_of!(RlRequest, cached_tiers) == 136);
    assert!(size_of::<RlCachedTiers>() == 24);
    assert!(offset_of!(RlRequest, phase) == RL_REQUEST_SIZE_V1_2 as usize);
    assert!(offset_of!(RlRequest, block_ids) == RL_REQUEST_SIZE_V1_0 as usize);
    assert!(offset_of!(RlRequest, now_ns) == RL_REQUEST_SIZE_V1_1 as usize);
    assert!(offset_of!(RlRequest, prompt_len) == 64);
    assert!(size_of::<RlEndpointStatus>() == 112);
    assert!(offset_of!(RlEndpointStatus, lora_slots_used) == RL_ENDPOINT_STATUS_SIZE_V1_3 as usize);
    assert!(offset_of!(RlEndpointStatus, role) == RL_ENDPOINT_STATUS_SIZE_V1_2 as usize);
    assert!(
        offset_of!(RlEndpointStatus, inflight_requests) == RL_ENDPOINT_STATUS_SIZE_V1_0 as usize
    );
    assert!(offset_of!(RlEndpointStatus, kv_block_tokens) == 80);
    assert!(offset_of!(RlEndpointStatus, inflight_prompt_tokens) == 64);
    assert!(size_of::<RlEndpointList>() == 24);
    assert!(size_of::<RlMatcherVtable>() == 88);
    assert!(offset_of!(RlMatcherVtable, on_first_token) == RL_MATCHER_VTABLE_SIZE_V1_0 as usize);
    assert!(size_of::<RlDetectorVtable>() == 40);
    assert!(offset_of!(RlDetectorVtable, create_with) == RL_DETECTOR_VTABLE_SIZE_V1_0 as usize);
    assert!(size_of::<RlCreateInfo>() == 48);
    assert!(size_of::<RlPoolState>() == RL_POOL_STATE_SIZE_V1_7 as usize);
    assert!(size_of::<RlScalerTick>() == RL_SCALER_TICK_SIZE_V1_7 as usize);
    assert!(size_of::<RlScalerVtable>() == RL_SCALER_VTABLE_SIZE_V1_7 as usize);
    assert!(size_of::<RlPluginDescriptor>() == 40);
    assert!(size_of::<RlModule>() == 32);
};

impl RlStr {
    /// Borrows a Rust string.
    pub const fn from_str(s: &str) -> Self {
        RlStr {
            ptr: s.as_ptr(),
            len: s.len() as u64,
        }
    }
}

impl RlEndpointStatus {
    /// An idle endpoint of this ABI version: stable index `index`, the borrowed `name`,
    /// every load figure zero (cache unbounded).
    pub const fn idle(index: u32, name: RlStr) -> Self {
        RlEndpointStatus {
            struct_size: core::mem::size_of::<RlEndpointStatus>() as u32,
            index,
            name,
            running: 0,
            waiting: 0,
            kv_blocks_used: 0,
            kv_blocks_total: 0,
            kv_usage: 0.0,
            inflight_prompt_tokens: 0,
            inflight_requests: 0,
            kv_block_tokens: 0,
            role: RL_ROLE_AGGREGATED,
            _reserved_1_3: 0,
            lora_slots_used: 0,
            lora_slots_total: 0,
            lora_active: 0,
            lora_waiting: 0,
        }
    }
}
