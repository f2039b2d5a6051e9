//! Building the views a plugin receives, without a host and without `unsafe`, so a plugin
//! crate can unit-test its own rule.
//!
//! A builder owns everything the raw ABI structs point into; [`RequestBuilder::view`] and
//! [`EndpointsBuilder::view`] lend views that borrow the builder, exactly as a host lends
//! them for one call. [`create_matcher`] and [`create_detector`] build an instance from
//! config text the way the SDK's `create` shim does, unknown-key check included.
//!
//! ```
//! use routerlab_core::testing::{EndpointsBuilder, RequestBuilder};
//!
//! let request = RequestBuilder::new(1).blocks(&[10, 11]).block_ids(&[0, 1]);
//! let endpoints = EndpointsBuilder::new(3).running(1, 40).unavailable(2);
//! let (request, endpoints) = (request.view(), endpoints.view());
//! assert_eq!(request.block_ids(), Some(&[0, 1][..]));
//! assert_eq!(endpoints.get(1).running(), 40);
//! assert_eq!(endpoints.available().count(), 2);
//! ```

mod upstream;

pub use upstream::{check_detector_defaults, check_matcher_defaults, check_scaler_defaults};

use crate::PluginConfig;
use crate::abi::*;
use crate::sdk::views::zeroed_request;
use crate::sdk::{Detector, Endpoints, Matcher, Phase, Request, Role, Unit};

/// Builds a matcher from config text as the SDK does: parse, `create`, reject unread keys.
pub fn create_matcher<M: Matcher>(config: &str) -> Result<M, String> {
    let mut config = PluginConfig::parse(config)?;
    let matcher = M::create("test", &mut config)?;
    config.finish()?;
    Ok(matcher)
}

/// Builds a detector from config text as the SDK does: parse, `create`, reject unread keys.
pub fn create_detector<D: Detector>(config: &str) -> Result<D, String> {
    let mut config = PluginConfig::parse(config)?;
    let detector = D::create("test", &mut config)?;
    config.finish()?;
    Ok(detector)
}

/// An aggregated pool of `endpoints`, all serving, kept between 1 and 16 endpoints of one
/// GPU, with no traffic observed: what a scaler's unit test starts from (`Pool { ready: 2,
/// arrivals: 30, ..pool(&endpoints) }`).
pub fn pool(endpoints: &EndpointsBuilder) -> crate::Pool<'_> {
    let view = endpoints.view();
    crate::Pool {
        role: Role::Aggregated,
        ready: view.len() as u32,
        starting: 0,
        draining: 0,
        min_endpoints: 1,
        max_endpoints: 16,
        gpus_per_endpoint: 1,
        waiting_at_router: 0,
        arrivals: 0,
        finished: 0,
        prompt_tokens_mean: 0.0,
        output_tokens_mean: 0.0,
        ttft_mean_ms: 0.0,
        tpot_mean_ms: 0.0,
        hit_ratio: 0.0,
        slo_attainment: None,
        endpoints: view,
    }
}

/// Builds scaler `S` from `config` as the SDK does, unknown keys rejected.
pub fn create_scaler<S: crate::Scaler>(config: &str) -> Result<S, String> {
    let mut config = PluginConfig::parse(config)?;
    let scaler = S::create("test", &mut config)?;
    config.finish()?;
    Ok(scaler)
}

/// An owned request from which [`Request`] views are lent.
///
/// It keeps the raw `RlRequest` a host would pass beside the fields it is built from, in
/// step after every setter, so a view is a plain borrow of it (as a host's is). Its pointers
/// go into the heap buffers of the builder's vectors, which stay put when the builder moves.
#[derive(Debug)]
pub struct RequestBuilder {
    spec: Spec,
    raw: RlRequest,
}

/// What a [`RequestBuilder`] was told.
#[derive(Debug, Clone)]
struct Spec {
    id: u64,
    arrival_ns: u64,
    prompt: Vec<u8>,
    hashes: Vec<u64>,
    ids: Option<Vec<u32>>,
    block_size: u32,
    unit: Unit,
    prompt_len: Option<u64>,
    output_tokens: Option<u64>,
    session_id: u64,
    parent_id: u64,
    now_ns: Option<u64>,
    phase: Phase,
    /// What the host would report as cached prefixes: a count, then that many
    /// (endpoint id, length) pairs, flat, so the callback's context is one heap pointer.
    cached: Vec<u64>,
    /// Likewise per tier: a count, then (endpoint id, gpu, host, shared) quadruples.
    tiers: Vec<u64>,
    /// Likewise forecasts: a count, then (endpoint id, TTFT ns, TPOT ns) triples.
    predicted: Vec<u64>,
    /// The adapter asked for: (number, name); number 0 = none.
    adapter: (u64, Vec<u8>),
    /// Likewise adapter states: a count, then (endpoint id, resident, running, waiting,
    /// active, slots used, slots total, waiting adapters) rows.
    adapters: Vec<u64>,
    /// `RL_REQUEST_*` bits.
    flags: u32,
}

/// The rows of a builder's table at `ctx`: a count, then that many rows of `N` values.
///
/// # Safety
/// `ctx` must be the heap buffer of one of the builder's tables, borrowed by the view.
unsafe fn rows<'a, const N: usize>(ctx: *const std::ffi::c_void) -> &'a [[u64; N]] {
    let table = ctx.cast::<u64>();
    // SAFETY: as the caller guarantees: a count, then that many rows.
    let flat = unsafe {
        let count = *table as usize;
        std::slice::from_raw_parts(table.add(1), N * count)
    };
    flat.as_chunks::<N>().0
}

/// The `predict` callback of a built request.
unsafe extern "C" fn predicted_of(
    ctx: *const std::ffi::c_void,
    endpoint_index: u32,
    out: *mut RlPrediction,
) -> RlStatus {
    // SAFETY: `ctx` is the builder's `predicted` table, borrowed by the view.
    let rows = unsafe { rows::<3>(ctx) };
    match rows.iter().find(|r| r[0] == u64::from(endpoint_index)) {
        Some([_, ttft_ns, tpot_ns]) => {
            // SAFETY: the SDK passes a valid out slot.
            unsafe {
                *out = RlPrediction {
                    ttft_ns: *ttft_ns,
                    tpot_ns: *tpot_ns,
                }
            };
            RL_OK
        }
        None => RL_ERR_INVALID_ARGUMENT,
    }
}

/// The `adapter_state` callback of a built request.
unsafe extern "C" fn adapter_state_of(
    ctx: *const std::ffi::c_void,
    endpoint_index: u32,
    out: *mut RlAdapterState,
) -> RlStatus {
    // SAFETY: `ctx` is the builder's `adapters` table, borrowed by the view.
    let rows = unsafe { rows::<8>(ctx) };
    match rows.iter().find(|r| r[0] == u64::from(endpoint_index)) {
        Some(row) => {
            let field = |i: usize| u32::try_from(row[i]).unwrap_or(u32::MAX);
            // SAFETY: the SDK passes a valid out slot.
            unsafe {
                *out = RlAdapterState {
                    resident: field(1),
                    running: field(2),
                    waiting: field(3),
                    active: field(4),
                    slots_used: field(5),
                    slots_total: field(6),
                    waiting_adapters: field(7),
                    _reserved: 0,
                }
            };
            RL_OK
        }
        None => RL_ERR_INVALID_ARGUMENT,
    }
}

/// The `cached_prefix` callback of a built request: looks the endpoint up in its pairs.
unsafe extern "C" fn cached_prefix_of(
    ctx: *const std::ffi::c_void,
    endpoint_index: u32,
    out_len: *mut u64,
) -> RlStatus {
    let table = ctx.cast::<u64>();
    // SAFETY: `ctx` is the heap buffer of the builder's `cached` vector (a count, then that
    // many pairs), borrowed by the view that carries this callback.
    let cached = unsafe {
        let count = *table as usize;
        std::slice::from_raw_parts(table.add(1), 2 * count)
    };
    let (pairs, _) = cached.as_chunks::<2>();
    match pairs
        .iter()
        .find(|[index, _]| *index == u64::from(endpoint_index))
    {
        Some([_, len]) => {
            // SAFETY: the SDK passes a valid out slot.
            unsafe { *out_len = *len };
            RL_OK
        }
        None => RL_ERR_INVALID_ARGUMENT,
    }
}

/// The `cached_tiers` callback of a built request: looks the endpoint up in its entries.
unsafe extern "C" fn cached_tiers_of(
    ctx: *const std::ffi::c_void,
    endpoint_index: u32,
    out: *mut RlCachedTiers,
) -> RlStatus {
    let table = ctx.cast::<u64>();
    // SAFETY: `ctx` is the heap buffer of the builder's `tiers` vector (a count, then that
    // many quadruples), borrowed by the view that carries this callback.
    let entries = unsafe {
        let count = *table as usize;
        std::slice::from_raw_parts(table.add(1), 4 * count)
    };
    let (quads, _) = entries.as_chunks::<4>();
    match quads
        .iter()
        .find(|[index, ..]| *index == u64::from(endpoint_index))
    {
        Some([_, gpu, host, shared]) => {
            // SAFETY: the SDK passes a valid out slot.
            unsafe {
                *out = RlCachedTiers {
                    gpu: *gpu,
                    host: *host,
                    shared: *shared,
                }
            };
            RL_OK
        }
        None => RL_ERR_INVALID_ARGUMENT,
    }
}

impl Clone for RequestBuilder {
    /// A clone points into its own buffers, never the original's.
    fn clone(&self) -> Self {
        RequestBuilder {
            spec: self.spec.clone(),
            raw: zeroed_request(),
        }
        .synced()
    }
}

impl RequestBuilder {
    /// Request `id` in tokens, blocks of 16, no prompt, no blocks.
    pub fn new(id: u64) -> RequestBuilder {
        RequestBuilder {
            spec: Spec {
                id,
                arrival_ns: 0,
                prompt: Vec::new(),
                hashes: Vec::new(),
                ids: None,
                block_size: 16,
                unit: Unit::Tokens,
                prompt_len: None,
                output_tokens: None,
                session_id: 0,
                parent_id: 0,
                now_ns: None,
                phase: Phase::Whole,
                cached: vec![0],
                tiers: vec![0],
                predicted: vec![0],
                adapter: (0, Vec::new()),
                flags: 0,
                adapters: vec![0],
            },
            raw: zeroed_request(),
        }
        .synced()
    }
    /// Decision time, nanoseconds (by default the arrival).
    pub fn now_ns(mut self, ns: u64) -> Self {
        self.spec.now_ns = Some(ns);
        self.synced()
    }
    /// The host reports `len` units of this request's prefix cached on endpoint `id`
    /// (without any such call, the host says nothing about cached prefixes).
    pub fn cached(mut self, id: u32, len: u64) -> Self {
        self.spec.cached.extend([u64::from(id), len]);
        self.spec.cached[0] += 1;
        self.synced()
    }
    /// The host reports endpoint `id` holding `gpu`, then `host`, then `shared` units of
    /// this request's prefix per tier (ABI 1.3; without any such call it says nothing).
    pub fn cached_tiers(mut self, id: u32, gpu: u64, host: u64, shared: u64) -> Self {
        self.spec.tiers.extend([u64::from(id), gpu, host, shared]);
        self.spec.tiers[0] += 1;
        self.synced()
    }
    /// Prompt text; the unit becomes bytes.
    pub fn prompt(mut self, text: &str) -> Self {
        self.spec.prompt = text.as_bytes().to_vec();
        self.spec.unit = Unit::Bytes;
        self.synced()
    }
    /// The block-hash chain.
    pub fn blocks(mut self, hashes: &[u64]) -> Self {
        self.spec.hashes = hashes.to_vec();
        self.synced()
    }
    /// Dense block ids (as an ABI 1.1 host sends); without them the view has none.
    pub fn block_ids(mut self, ids: &[u32]) -> Self {
        self.spec.ids = Some(ids.to_vec());
        self.synced()
    }
    /// Block size in the request's unit.
    pub fn block_size(mut self, size: u32) -> Self {
        self.spec.block_size = size;
        self.synced()
    }
    /// Prompt length; by default the prompt's bytes, or blocks × block size.
    pub fn prompt_len(mut self, len: u64) -> Self {
        self.spec.prompt_len = Some(len);
        self.synced()
    }
    /// Arrival time, nanoseconds.
    pub fn arrival_ns(mut self, ns: u64) -> Self {
        self.spec.arrival_ns = ns;
        self.synced()
    }
    /// Expected output tokens.
    pub fn output_tokens(mut self, tokens: u64) -> Self {
        self.spec.output_tokens = Some(tokens);
        self.synced()
    }
    /// Session id (non-zero).
    pub fn session_id(mut self, session: u64) -> Self {
        self.spec.session_id = session;
        self.synced()
    }
    /// Parent request id (non-zero).
    pub fn parent_id(mut self, parent: u64) -> Self {
        self.spec.parent_id = parent;
        self.synced()
    }
    /// The host's engine model forecasts a TTFT of `ttft_ns` and a TPOT of `tpot_ns`
    /// nanoseconds on endpoint `id` (ABI 1.4; without any such call the host has no
    /// engine model).
    pub fn predicted(mut self, id: u32, ttft_ns: u64, tpot_ns: u64) -> Self {
        self.spec
            .predicted
            .extend([u64::from(id), ttft_ns, tpot_ns]);
        self.spec.predicted[0] += 1;
        self.synced()
    }
    /// The request asks for LoRA adapter number `id` (non-zero), named `name` (ABI 1.5).
    pub fn adapter(mut self, id: u64, name: &str) -> Self {
        self.spec.adapter = (id, name.as_bytes().to_vec());
        self.synced()
    }
    /// The request is its session's last (ABI 1.6 `RL_REQUEST_ENDS_SESSION`).
    pub fn ends_session(mut self) -> Self {
        self.spec.flags |= crate::abi::RL_REQUEST_ENDS_SESSION;
        self.synced()
    }
    /// The host reports endpoint `id`'s LoRA slots for this request (ABI 1.5; without any
    /// such call it says nothing).
    pub fn adapter_state(mut self, id: u32, state: RlAdapterState) -> Self {
        let RlAdapterState {
            resident,
            running,
            waiting,
            active,
            slots_used,
            slots_total,
            waiting_adapters,
            _reserved,
        } = state;
        self.spec.adapters.push(u64::from(id));
        let row = [
            resident,
            running,
            waiting,
            active,
            slots_used,
            slots_total,
            waiting_adapters,
        ];
        self.spec.adapters.extend(row.map(u64::from));
        self.spec.adapters[0] += 1;
        self.synced()
    }
    /// The phase it is routed for (ABI 1.3; by default [`Phase::Whole`]).
    pub fn phase(mut self, phase: Phase) -> Self {
        self.spec.phase = phase;
        self.synced()
    }

    /// The view a matcher receives.
    pub fn view(&self) -> Request<'_> {
        // SAFETY: `raw` is in step with `spec` (every setter ends in `synced`), and every
        // pointer in it goes into a buffer `self` owns, which the view borrows. The size and
        // unit are valid by construction, so this cannot fail.
        unsafe { Request::from_raw(&self.raw) }.expect("a well-formed request")
    }

    /// Rebuilds the raw request from the spec.
    fn synced(mut self) -> Self {
        let spec = &self.spec;
        let prompt_len = spec.prompt_len.unwrap_or(if spec.prompt.is_empty() {
            spec.hashes.len() as u64 * u64::from(spec.block_size)
        } else {
            spec.prompt.len() as u64
        });
        let ids = spec
            .ids
            .as_ref()
            .filter(|ids| ids.len() == spec.hashes.len());
        self.raw = RlRequest {
            struct_size: size_of::<RlRequest>() as u32,
            unit: spec.unit.to_raw(),
            id: spec.id,
            arrival_ns: spec.arrival_ns,
            prompt: RlStr {
                ptr: spec.prompt.as_ptr(),
                len: spec.prompt.len() as u64,
            },
            block_hashes: spec.hashes.as_ptr(),
            block_count: spec.hashes.len() as u64,
            block_size: spec.block_size,
            flags: spec.flags,
            prompt_len,
            output_tokens: spec.output_tokens.unwrap_or(RL_UNKNOWN),
            session_id: spec.session_id,
            parent_id: spec.parent_id,
            block_ids: ids.map_or(std::ptr::null(), |ids| ids.as_ptr()),
            now_ns: spec.now_ns.unwrap_or(spec.arrival_ns),
            cached_prefix: if spec.cached[0] == 0 {
                None
            } else {
                Some(cached_prefix_of)
            },
            cached_prefix_ctx: spec.cached.as_ptr().cast(),
            phase: spec.phase.raw(),
            _reserved_1_3: 0,
            cached_tiers: if spec.tiers[0] == 0 {
                None
            } else {
                Some(cached_tiers_of)
            },
            cached_tiers_ctx: spec.tiers.as_ptr().cast(),
            predict: if spec.predicted[0] == 0 {
                None
            } else {
                Some(predicted_of)
            },
            predict_ctx: spec.predicted.as_ptr().cast(),
            adapter_id: spec.adapter.0,
            adapter: RlStr {
                ptr: spec.adapter.1.as_ptr(),
                len: spec.adapter.1.len() as u64,
            },
            adapter_state: if spec.adapters[0] == 0 {
                None
            } else {
                Some(adapter_state_of)
            },
            adapter_state_ctx: spec.adapters.as_ptr().cast(),
        };
        self
    }
}

/// An owned endpoint list from which [`Endpoints`] views are lent.
#[derive(Debug)]
pub struct EndpointsBuilder {
    /// Owns the name bytes the statuses point into (boxed, so they never move).
    _names: Vec<Box<str>>,
    raw: Vec<RlEndpointStatus>,
    unavailable: Vec<u8>,
}

impl EndpointsBuilder {
    /// `n` idle endpoints with ids `0..n`, named `localhost:8000`, `localhost:8001`, ...
    pub fn new(n: usize) -> EndpointsBuilder {
        EndpointsBuilder::named((0..n).map(|i| format!("localhost:{}", 8000 + i)))
    }

    /// Idle endpoints with these names and ids `0..`.
    pub fn named<S: Into<String>>(names: impl IntoIterator<Item = S>) -> EndpointsBuilder {
        let names: Vec<Box<str>> = names.into_iter().map(|n| n.into().into()).collect();
        let raw = names
            .iter()
            .enumerate()
            .map(|(pos, name)| RlEndpointStatus::idle(pos as u32, RlStr::from_str(name)))
            .collect();
        let unavailable = vec![0; names.len()];
        EndpointsBuilder {
            _names: names,
            raw,
            unavailable,
        }
    }

    /// Gives list position `pos` the stable id `id` (ids need not follow positions).
    pub fn id(mut self, pos: usize, id: u32) -> Self {
        self.raw[pos].index = id;
        self
    }
    /// Running requests at list position `pos`.
    pub fn running(mut self, pos: usize, running: u64) -> Self {
        self.raw[pos].running = running;
        self
    }
    /// Router-local in-flight requests (ABI 1.2) at list position `pos`.
    pub fn inflight_requests(mut self, pos: usize, requests: u64) -> Self {
        self.raw[pos].inflight_requests = requests;
        self
    }
    /// Waiting requests at list position `pos`.
    pub fn waiting(mut self, pos: usize, waiting: u64) -> Self {
        self.raw[pos].waiting = waiting;
        self
    }
    /// KV blocks used of `total` at list position `pos` (usage is derived).
    pub fn kv_blocks(mut self, pos: usize, used: u64, total: u64) -> Self {
        let status = &mut self.raw[pos];
        status.kv_blocks_used = used;
        status.kv_blocks_total = total;
        status.kv_usage = if total == 0 {
            0.0
        } else {
            used as f64 / total as f64
        };
        self
    }
    /// In-flight prompt tokens at list position `pos`.
    pub fn inflight_prompt_tokens(mut self, pos: usize, tokens: u64) -> Self {
        self.raw[pos].inflight_prompt_tokens = tokens;
        self
    }
    /// The pool of list position `pos` (ABI 1.3; by default [`Role::Aggregated`]).
    pub fn role(mut self, pos: usize, role: Role) -> Self {
        self.raw[pos].role = role.raw();
        self
    }
    /// The LoRA slots of list position `pos` (ABI 1.5; `total` 0: none).
    pub fn lora(mut self, pos: usize, slots: crate::LoraSlots) -> Self {
        let s = &mut self.raw[pos];
        s.lora_slots_used = slots.used;
        s.lora_slots_total = slots.total;
        s.lora_active = slots.active;
        s.lora_waiting = slots.waiting;
        self
    }
    /// Flags list position `pos` unavailable.
    pub fn unavailable(mut self, pos: usize) -> Self {
        self.unavailable[pos] = 1;
        self
    }

    /// The view a plugin receives.
    pub fn view(&self) -> Endpoints<'_> {
        let list = RlEndpointList {
            items: self.raw.as_ptr(),
            len: self.raw.len() as u64,
            stride: size_of::<RlEndpointStatus>() as u64,
        };
        // SAFETY: `list` describes `self.raw` with its own stride; names point into
        // `self.names`; both are borrowed by the view, and `unavailable` has one flag each.
        unsafe { Endpoints::from_raw(list, &self.unavailable) }
    }
}

/// The simplest matcher there is: the first endpoint it may pick. For hosts' own tests
/// (`routerlab_host::in_process` drives it through the real shims), where the policy is not
/// what is under test.
pub struct FirstAvailable;

impl Matcher for FirstAvailable {
    fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
        Ok(FirstAvailable)
    }

    fn match_request(
        &mut self,
        _request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<crate::EndpointId>, String> {
        Ok(endpoints.available().next().map(|e| e.id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EndpointId;

    #[test]
    fn views_of_a_moved_changed_or_cloned_builder_see_their_own_fields() {
        let first = RequestBuilder::new(1).blocks(&[10, 11]).block_ids(&[0, 1]);
        assert_eq!(first.view().block_hashes(), &[10, 11]);
        // A move, a setter, and a clone: each view must point into its own buffers.
        let moved = first;
        let changed = moved.cached(3, 16).cached(4, 32).now_ns(9);
        let copy = changed.clone();
        drop(changed);
        let view = copy.view();
        assert_eq!(view.block_ids(), Some(&[0, 1][..]));
        assert_eq!(view.cached_prefix(EndpointId(4)), Some(32));
        assert_eq!(view.cached_prefix(EndpointId(3)), Some(16));
        assert_eq!(view.cached_prefix(EndpointId(5)), None);
        assert_eq!(view.now_ns(), 9);
        assert_eq!(view.prompt_len(), 32, "two blocks of 16");
    }

    #[test]
    fn one_estimate_of_tokens_in_text_both_ways() {
        use crate::{BYTES_PER_TOKEN, Unit};
        assert_eq!(BYTES_PER_TOKEN, 4);
        assert_eq!(Unit::Bytes.tokens(0), 0);
        assert_eq!(Unit::Bytes.tokens(1), 1, "a partial token counts");
        assert_eq!(Unit::Bytes.tokens(8), 2);
        assert_eq!(Unit::Bytes.tokens(9), 3);
        assert_eq!(Unit::Tokens.tokens(9), 9);
        assert_eq!(Unit::Bytes.of_tokens(3), 12);
        assert_eq!(Unit::Bytes.of_tokens(u64::MAX), u64::MAX, "saturates");
        assert_eq!(Unit::Tokens.of_tokens(3), 3);
    }
}
