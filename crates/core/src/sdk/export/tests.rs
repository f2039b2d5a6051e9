//! The export shims under test: config checking, panics caught and poisoning, struct
//! sizes honoured both ways.

use std::alloc::{Layout, alloc_zeroed, dealloc};

use super::*;
use crate::{Phase, Role};

/// Remembers what the SDK handed it.
struct Probe {
    seed: u64,
    seen_ids: Option<Vec<u32>>,
    seen_now: Option<u64>,
    seen_inflight: Vec<Option<u64>>,
    learned: Vec<u32>,
    completed: Vec<u32>,
    first_tokens: Vec<u32>,
}

impl Matcher for Probe {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        config.u64("known", 0)?;
        Ok(Probe {
            seed: config.seed()?,
            seen_ids: None,
            seen_now: None,
            seen_inflight: Vec::new(),
            learned: Vec::new(),
            completed: Vec::new(),
            first_tokens: Vec::new(),
        })
    }
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.seen_ids = request.block_ids().map(<[u32]>::to_vec);
        self.seen_now = Some(request.now_ns());
        self.seen_inflight = endpoints.iter().map(|e| e.inflight_requests()).collect();
        assert_eq!(request.block_hashes(), &HASHES);
        Ok(endpoints.available().next().map(|e| e.id()))
    }
    fn update(&mut self, _: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        self.learned.push(endpoint.get());
        Ok(())
    }
    fn on_first_token(&mut self, _: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        self.first_tokens.push(endpoint.get());
        Ok(())
    }
    fn on_complete(&mut self, _: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        self.completed.push(endpoint.get());
        Ok(())
    }
}

static HASHES: [u64; 3] = [9, 8, 7];
static IDS: [u32; 3] = [0, 1, 2];

fn raw_request(struct_size: u32) -> RlRequest {
    RlRequest {
        struct_size,
        unit: RL_UNIT_TOKENS,
        id: 1,
        arrival_ns: 0,
        prompt: RlStr::from_str(""),
        block_hashes: HASHES.as_ptr(),
        block_count: HASHES.len() as u64,
        block_size: 16,
        flags: 0,
        prompt_len: 48,
        output_tokens: RL_UNKNOWN,
        session_id: 0,
        parent_id: 0,
        block_ids: IDS.as_ptr(),
        now_ns: 7,
        cached_prefix: None,
        cached_prefix_ctx: std::ptr::null(),
        phase: RL_PHASE_DECODE,
        _reserved_1_3: 0,
        cached_tiers: None,
        cached_tiers_ctx: std::ptr::null(),
        predict: None,
        predict_ctx: std::ptr::null(),
        adapter_id: 0,
        adapter: RlStr::from_str(""),
        adapter_state: None,
        adapter_state_ctx: std::ptr::null(),
    }
}

/// Creates a `Probe` through the exported vtable, as a host would.
fn create(config: &str) -> Result<*mut c_void, RlStatus> {
    let mut instance = std::ptr::null_mut();
    // SAFETY: strings are valid for the call; `instance` is writable; no sink.
    let status = unsafe {
        MatcherExport::<Probe>::VTABLE.create.unwrap()(
            RlStr::from_str("probe"),
            RlStr::from_str(config),
            &mut instance,
            std::ptr::null(),
        )
    };
    if status == RL_OK {
        Ok(instance)
    } else {
        Err(status)
    }
}

fn destroy(instance: *mut c_void) {
    // SAFETY: `instance` came from `create` above and is destroyed once.
    unsafe { MatcherExport::<Probe>::VTABLE.destroy.unwrap()(instance) };
}

fn probe<'a>(instance: *mut c_void) -> &'a mut Probe {
    // SAFETY: `instance` is a live `Shell<Probe>` made by `create_shim`, not poisoned,
    // and no call into it is in flight.
    unsafe { (*instance.cast::<Shell<Probe>>()).inner.as_mut().unwrap() }
}

/// Calls `match` through the vtable with the request at `request` and no endpoints.
fn call_match(instance: *mut c_void, request: *const RlRequest) -> RlStatus {
    let list = RlEndpointList {
        items: std::ptr::null(),
        len: 0,
        stride: size_of::<RlEndpointStatus>() as u64,
    };
    let mut out = u32::MAX;
    // SAFETY: every pointer is valid for the call (an empty list needs no items).
    unsafe {
        MatcherExport::<Probe>::VTABLE.match_request.unwrap()(
            instance,
            request,
            &list,
            std::ptr::null(),
            &mut out,
            std::ptr::null(),
        )
    }
}

#[test]
fn a_one_zero_host_request_of_exactly_96_bytes_is_read_without_overrun() {
    let instance = create("").expect("create");
    // An allocation of exactly the 1.0 size: reading byte 96 or beyond is out of bounds,
    // which Miri reports (CI runs these tests under Miri).
    let layout = Layout::from_size_align(RL_REQUEST_SIZE_V1_0 as usize, 8).unwrap();
    let whole = raw_request(RL_REQUEST_SIZE_V1_0);
    // SAFETY: `layout` has a non-zero size; the copy writes its 96 bytes from the
    // leading part of `whole`; the block is freed once, after the call.
    let status = unsafe {
        let block = alloc_zeroed(layout);
        std::ptr::copy_nonoverlapping(
            (&raw const whole).cast::<u8>(),
            block,
            RL_REQUEST_SIZE_V1_0 as usize,
        );
        let status = call_match(instance, block.cast::<RlRequest>());
        dealloc(block, layout);
        status
    };
    assert_eq!(status, RL_NO_ENDPOINT, "an empty list has no endpoint");
    assert_eq!(
        probe(instance).seen_ids,
        None,
        "1.0 hosts send no block ids"
    );

    let current = raw_request(size_of::<RlRequest>() as u32);
    assert_eq!(call_match(instance, &current), RL_NO_ENDPOINT);
    assert_eq!(probe(instance).seen_ids.as_deref(), Some(&IDS[..]));
    destroy(instance);
}

#[test]
fn requests_below_the_one_zero_size_or_with_an_unknown_unit_are_refused() {
    let instance = create("").expect("create");
    let truncated = raw_request(RL_REQUEST_SIZE_V1_0 - 8);
    assert_eq!(call_match(instance, &truncated), RL_ERR_INTERNAL);
    let odd_unit = RlRequest {
        unit: 7,
        ..raw_request(size_of::<RlRequest>() as u32)
    };
    assert_eq!(call_match(instance, &odd_unit), RL_ERR_INTERNAL);
    // SAFETY: `odd_unit` borrows statics.
    let refused = unsafe { Request::from_raw(&odd_unit) }.err().unwrap();
    assert_eq!(
        refused,
        "request unit 7 is neither RL_UNIT_BYTES (0) nor RL_UNIT_TOKENS (1)"
    );
    destroy(instance);
}

#[test]
fn a_whole_request_that_claims_the_one_zero_size_shows_no_block_ids() {
    let old = raw_request(RL_REQUEST_SIZE_V1_0);
    // SAFETY: `old` borrows statics.
    let view = unsafe { Request::from_raw(&old) }.unwrap();
    assert_eq!(view.block_ids(), None);
    assert_eq!(view.block_hashes(), &HASHES);
    assert_eq!(view.now_ns(), 0, "no decision time before 1.2: the arrival");
}

#[test]
fn a_whole_request_that_claims_the_one_one_size_shows_no_cached_prefix() {
    unsafe extern "C" fn always_seven(_: *const c_void, _: u32, out: *mut u64) -> RlStatus {
        // SAFETY: the SDK passes a valid out slot.
        unsafe { *out = 7 };
        RL_OK
    }
    let whole = RlRequest {
        cached_prefix: Some(always_seven),
        ..raw_request(size_of::<RlRequest>() as u32)
    };
    // SAFETY: `whole` borrows statics.
    let view = unsafe { Request::from_raw(&whole) }.unwrap();
    assert_eq!(view.cached_prefix(EndpointId(0)), Some(7));
    assert_eq!(view.now_ns(), 7);
    let older = RlRequest {
        struct_size: RL_REQUEST_SIZE_V1_1,
        ..whole
    };
    // SAFETY: as above.
    let view = unsafe { Request::from_raw(&older) }.unwrap();
    assert_eq!(view.cached_prefix(EndpointId(0)), None);
    assert_eq!(view.now_ns(), 0, "no decision time before 1.2: the arrival");
    assert_eq!(view.block_ids(), Some(&IDS[..]));
}

#[test]
fn the_phase_and_role_are_read_only_from_hosts_that_wrote_them() {
    let whole = raw_request(size_of::<RlRequest>() as u32);
    // SAFETY: `whole` borrows statics.
    let view = unsafe { Request::from_raw(&whole) }.unwrap();
    assert_eq!(view.phase(), Phase::Decode);
    let older = RlRequest {
        struct_size: RL_REQUEST_SIZE_V1_2,
        ..whole
    };
    // SAFETY: as above.
    let view = unsafe { Request::from_raw(&older) }.unwrap();
    assert_eq!(
        view.phase(),
        Phase::Whole,
        "a 1.2 host routes whole requests"
    );
    let future = RlRequest { phase: 9, ..whole };
    // SAFETY: as above.
    let view = unsafe { Request::from_raw(&future) }.unwrap();
    assert_eq!(view.phase(), Phase::Other(9));
    let name = RlStr::from_str("p");
    let mut status = RlEndpointStatus::idle(0, name);
    status.role = RL_ROLE_PREFILL;
    let list = |status: &RlEndpointStatus| RlEndpointList {
        items: status,
        len: 1,
        stride: size_of::<RlEndpointStatus>() as u64,
    };
    // SAFETY: one status, alive for the view.
    let endpoints = unsafe { Endpoints::from_raw(list(&status), &[]) };
    assert_eq!(endpoints.get(0).role(), Role::Prefill);
    let older = RlEndpointStatus {
        struct_size: RL_ENDPOINT_STATUS_SIZE_V1_2,
        ..status
    };
    // SAFETY: as above.
    let endpoints = unsafe { Endpoints::from_raw(list(&older), &[]) };
    assert_eq!(endpoints.get(0).role(), Role::Aggregated);
}

unsafe extern "C" fn predicts_by_index(
    _: *const c_void,
    endpoint_index: u32,
    out: *mut RlPrediction,
) -> RlStatus {
    if endpoint_index > 1 {
        return RL_ERR_INVALID_ARGUMENT;
    }
    let ttft_ns = 1_000 * u64::from(endpoint_index + 1);
    // SAFETY: the SDK passes a valid out slot.
    unsafe {
        *out = RlPrediction {
            ttft_ns,
            tpot_ns: 7,
        }
    };
    RL_OK
}

#[test]
fn forecasts_are_read_only_from_hosts_that_wrote_them() {
    let whole = RlRequest {
        predict: Some(predicts_by_index),
        ..raw_request(size_of::<RlRequest>() as u32)
    };
    // SAFETY: `whole` borrows statics.
    let view = unsafe { Request::from_raw(&whole) }.unwrap();
    let id = EndpointId;
    assert_eq!(
        view.predict(id(1)).map(|p| (p.ttft_ns, p.tpot_ns)),
        Some((2_000, 7))
    );
    assert_eq!(view.predict(id(2)), None, "an unknown endpoint");
    let older = RlRequest {
        struct_size: RL_REQUEST_SIZE_V1_3,
        ..whole
    };
    // SAFETY: as above.
    let view = unsafe { Request::from_raw(&older) }.unwrap();
    assert_eq!(view.predict(id(1)), None, "a 1.3 host does not forecast");
}

unsafe extern "C" fn two_slots(
    _: *const c_void,
    endpoint_index: u32,
    out: *mut RlAdapterState,
) -> RlStatus {
    if endpoint_index > 1 {
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: the SDK passes a valid out slot.
    unsafe {
        *out = RlAdapterState {
            resident: endpoint_index,
            running: 3,
            waiting: 1,
            active: 2,
            slots_used: 2,
            slots_total: 2,
            waiting_adapters: 1,
            _reserved: 0,
        }
    };
    RL_OK
}

#[test]
fn adapters_are_read_only_from_hosts_that_wrote_them() {
    let whole = RlRequest {
        adapter_id: 4,
        adapter: RlStr::from_str("sql-lora"),
        adapter_state: Some(two_slots),
        ..raw_request(size_of::<RlRequest>() as u32)
    };
    // SAFETY: `whole` borrows statics.
    let view = unsafe { Request::from_raw(&whole) }.unwrap();
    let id = EndpointId;
    assert_eq!(view.adapter(), Some((4, &b"sql-lora"[..])));
    let state = view.adapter_state(id(1)).unwrap();
    assert_eq!(
        (state.resident, state.running, state.slots_total),
        (1, 3, 2)
    );
    assert_eq!(view.adapter_state(id(2)), None, "an unknown endpoint");
    let base = RlRequest {
        adapter_id: 0,
        ..whole
    };
    // SAFETY: as above.
    assert_eq!(unsafe { Request::from_raw(&base) }.unwrap().adapter(), None);
    let older = RlRequest {
        struct_size: RL_REQUEST_SIZE_V1_4,
        ..whole
    };
    // SAFETY: as above.
    let view = unsafe { Request::from_raw(&older) }.unwrap();
    assert_eq!(view.adapter(), None, "a 1.4 host names no adapter");
    assert_eq!(view.adapter_state(id(1)), None);
}

#[test]
fn on_complete_is_always_installed_and_reaches_the_method() {
    let instance = create("").expect("create");
    let request = raw_request(size_of::<RlRequest>() as u32);
    // SAFETY: the request and instance are valid for the call; no sink.
    let status = unsafe {
        MatcherExport::<Probe>::VTABLE.on_complete.unwrap()(instance, &request, 3, std::ptr::null())
    };
    assert_eq!(status, RL_OK);
    assert_eq!(probe(instance).completed, [3]);
    destroy(instance);
}

/// Statuses `stride` bytes apart in an allocation of exactly `n * stride` bytes.
fn status_block(n: usize, stride: usize) -> (*mut u8, Layout) {
    let layout = Layout::from_size_align(n * stride, 8).unwrap();
    // SAFETY: non-zero size; each status is written within the block.
    let block = unsafe { alloc_zeroed(layout) };
    for i in 0..n {
        let status = RlEndpointStatus {
            struct_size: stride as u32,
            inflight_requests: 5,
            ..RlEndpointStatus::idle(i as u32, RlStr::from_str("e"))
        };
        // SAFETY: `i * stride + stride` is within the block; only `stride` bytes copied.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const status).cast::<u8>(),
                block.add(i * stride),
                stride.min(size_of::<RlEndpointStatus>()),
            );
        }
    }
    (block, layout)
}

#[test]
fn fields_a_one_one_host_did_not_write_are_never_read() {
    let instance = create("").expect("create");
    // A 1.1 host: 104-byte request, 72-byte statuses, in exact allocations (Miri checks
    // that nothing past them is read).
    let layout = Layout::from_size_align(RL_REQUEST_SIZE_V1_1 as usize, 8).unwrap();
    let whole = raw_request(RL_REQUEST_SIZE_V1_1);
    let (statuses, statuses_layout) = status_block(2, RL_ENDPOINT_STATUS_SIZE_V1_0 as usize);
    let list = RlEndpointList {
        items: statuses.cast(),
        len: 2,
        stride: u64::from(RL_ENDPOINT_STATUS_SIZE_V1_0),
    };
    let mut out = u32::MAX;
    // SAFETY: the copies stay within their allocations; both are freed once after the
    // call; every pointer is valid for the call.
    let status = unsafe {
        let block = alloc_zeroed(layout);
        std::ptr::copy_nonoverlapping(
            (&raw const whole).cast::<u8>(),
            block,
            RL_REQUEST_SIZE_V1_1 as usize,
        );
        let status = MatcherExport::<Probe>::VTABLE.match_request.unwrap()(
            instance,
            block.cast(),
            &list,
            std::ptr::null(),
            &mut out,
            std::ptr::null(),
        );
        dealloc(block, layout);
        dealloc(statuses, statuses_layout);
        status
    };
    assert_eq!(status, RL_OK);
    let probe = probe(instance);
    assert_eq!(probe.seen_ids.as_deref(), Some(&IDS[..]));
    assert_eq!(
        probe.seen_now,
        Some(0),
        "a 1.1 host's decision time is the arrival"
    );
    assert_eq!(probe.seen_inflight, [None, None]);
    destroy(instance);
}

#[test]
fn one_two_additions_reach_the_plugin() {
    // `create_with`: the seed beside the config text.
    let info = RlCreateInfo {
        struct_size: size_of::<RlCreateInfo>() as u32,
        _reserved: 0,
        name: RlStr::from_str("probe"),
        config: RlStr::from_str("known: 1"),
        seed: 42,
    };
    let mut instance = std::ptr::null_mut();
    // SAFETY: `info` and `instance` are valid for the call; no sink.
    let status = unsafe {
        MatcherExport::<Probe>::VTABLE.create_with.unwrap()(&info, &mut instance, std::ptr::null())
    };
    assert_eq!(status, RL_OK);
    assert_eq!(probe(instance).seed, 42);

    // `match_update`: one call picks and learns; statuses of 80 bytes carry in-flight.
    let (statuses, layout) = status_block(2, size_of::<RlEndpointStatus>());
    let list = RlEndpointList {
        items: statuses.cast(),
        len: 2,
        stride: size_of::<RlEndpointStatus>() as u64,
    };
    let request = raw_request(size_of::<RlRequest>() as u32);
    let mut out = u32::MAX;
    // SAFETY: every pointer is valid for the calls; the block is freed once after them.
    let (status, first_token) = unsafe {
        let vtable = MatcherExport::<Probe>::VTABLE;
        let status = vtable.match_update.unwrap()(
            instance,
            &request,
            &list,
            std::ptr::null(),
            &mut out,
            std::ptr::null(),
        );
        let first = vtable.on_first_token.unwrap()(instance, &request, 1, std::ptr::null());
        dealloc(statuses, layout);
        (status, first)
    };
    assert_eq!((status, out, first_token), (RL_OK, 0, RL_OK));
    let probe = probe(instance);
    assert_eq!(probe.learned, [0]);
    assert_eq!(probe.seen_now, Some(7));
    assert_eq!(probe.seen_inflight, [Some(5), Some(5)]);
    assert_eq!(probe.first_tokens, [1]);
    destroy(instance);
    // A config text that still holds `seed` contradicts `create_with`.
    let info = RlCreateInfo {
        config: RlStr::from_str("seed: 1"),
        ..info
    };
    let mut instance = std::ptr::null_mut();
    // SAFETY: as above.
    let status = unsafe {
        MatcherExport::<Probe>::VTABLE.create_with.unwrap()(&info, &mut instance, std::ptr::null())
    };
    assert_eq!(status, RL_ERR_CONFIG);
}

#[test]
fn keys_create_did_not_read_are_rejected_after_it_returns() {
    let accepted = create("known: 3\nseed: 1").expect("known keys and seed");
    destroy(accepted);
    assert_eq!(create("knwon: 3"), Err(RL_ERR_CONFIG));
}
