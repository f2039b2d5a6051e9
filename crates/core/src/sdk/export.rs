//! Exporting: the vtables, the entry function macro, and the `extern "C"` shims that turn
//! each ABI call into a trait call under `catch_unwind`, with the poison rule.

use std::any::Any;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::PluginConfig;
use crate::abi::*;
use crate::sdk::{Detector, EndpointId, Endpoints, Matcher, Request, raw_bytes};

/// Builds the vtable of a matcher type; used by [`export_plugins!`](crate::export_plugins).
pub struct MatcherExport<M>(PhantomData<M>);

impl<M: Matcher> MatcherExport<M> {
    /// The matcher's vtable.
    pub const VTABLE: RlMatcherVtable = RlMatcherVtable {
        struct_size: size_of::<RlMatcherVtable>() as u32,
        _reserved: 0,
        create: Some(create_shim::<M, MatcherKind>),
        destroy: Some(destroy_shim::<M>),
        add_endpoints: Some(add_endpoints_shim::<M>),
        remove_endpoints: Some(remove_endpoints_shim::<M>),
        match_request: Some(match_shim::<M>),
        update: Some(update_shim::<M>),
        on_complete: Some(on_complete_shim::<M>),
        on_first_token: Some(on_first_token_shim::<M>),
        match_update: Some(match_update_shim::<M>),
        create_with: Some(create_with_shim::<M, MatcherKind>),
    };
}

/// Builds the vtable of a detector type; used by [`export_plugins!`](crate::export_plugins).
pub struct DetectorExport<D>(PhantomData<D>);

impl<D: Detector> DetectorExport<D> {
    /// The detector's vtable.
    pub const VTABLE: RlDetectorVtable = RlDetectorVtable {
        struct_size: size_of::<RlDetectorVtable>() as u32,
        _reserved: 0,
        create: Some(create_shim::<D, DetectorKind>),
        destroy: Some(destroy_shim::<D>),
        detect: Some(detect_shim::<D>),
        create_with: Some(create_with_shim::<D, DetectorKind>),
    };
}

/// Exports the library's entry function and descriptors.
///
/// ```
/// use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
///
/// /// Always the first available endpoint.
/// pub struct First;
///
/// impl Matcher for First {
///     fn create(_name: &str, _config: &mut PluginConfig) -> Result<Self, String> {
///         Ok(First)
///     }
///     fn match_request(
///         &mut self,
///         _request: &Request<'_>,
///         endpoints: &Endpoints<'_>,
///     ) -> Result<Option<EndpointId>, String> {
///         Ok(endpoints.available().next().map(|e| e.id()))
///     }
/// }
///
/// routerlab_core::export_plugins! {
///     matcher First { name: "first", description: "the first available endpoint" },
/// }
/// ```
#[macro_export]
macro_rules! export_plugins {
    ($($kind:ident $ty:ty { name: $name:literal, description: $desc:literal $(,)? }),+ $(,)?) => {
        const _: () = {
            static PLUGINS: &[$crate::abi::RlDescriptorRef] = &[$(
                $crate::abi::RlDescriptorRef({
                    static DESCRIPTOR: $crate::abi::RlPluginDescriptor = $crate::abi::RlPluginDescriptor {
                        struct_size: ::core::mem::size_of::<$crate::abi::RlPluginDescriptor>() as u32,
                        kind: $crate::export_plugins!(@kind $kind),
                        name: concat!($name, "\0").as_ptr().cast(),
                        version: concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast(),
                        description: concat!($desc, "\0").as_ptr().cast(),
                        vtable: $crate::export_plugins!(@vtable $kind $ty),
                    };
                    &DESCRIPTOR
                })
            ),+];
            static MODULE: $crate::abi::RlModule = $crate::abi::RlModule {
                struct_size: ::core::mem::size_of::<$crate::abi::RlModule>() as u32,
                magic: $crate::abi::RL_MAGIC,
                abi_major: $crate::abi::RL_ABI_MAJOR,
                abi_minor: $crate::abi::RL_ABI_MINOR,
                plugin_count: PLUGINS.len() as u32,
                _reserved: 0,
                plugins: PLUGINS.as_ptr().cast(),
            };
            /// The library's entry point: returns its static module descriptor.
            #[unsafe(no_mangle)]
            pub extern "C" fn routerlab_plugin_entry_v1() -> *const $crate::abi::RlModule {
                &MODULE
            }
        };
    };
    (@kind matcher) => { $crate::abi::RL_KIND_MATCHER };
    (@kind detector) => { $crate::abi::RL_KIND_DETECTOR };
    (@vtable matcher $ty:ty) => {
        (&$crate::sdk::MatcherExport::<$ty>::VTABLE as *const $crate::abi::RlMatcherVtable).cast()
    };
    (@vtable detector $ty:ty) => {
        (&$crate::sdk::DetectorExport::<$ty>::VTABLE as *const $crate::abi::RlDetectorVtable).cast()
    };
}

/// Selects which trait's `create` a `create_shim` calls.
struct MatcherKind;
struct DetectorKind;
trait CreateVia<T> {
    fn create(name: &str, config: &mut PluginConfig) -> Result<T, String>;
}
impl<M: Matcher> CreateVia<M> for MatcherKind {
    fn create(name: &str, config: &mut PluginConfig) -> Result<M, String> {
        M::create(name, config)
    }
}
impl<D: Detector> CreateVia<D> for DetectorKind {
    fn create(name: &str, config: &mut PluginConfig) -> Result<D, String> {
        D::create(name, config)
    }
}

/// The heap object behind an instance pointer.
struct Shell<T> {
    /// `None` once a panic poisoned the instance.
    inner: Option<T>,
    /// The payload of the panic that poisoned the instance.
    poison: Option<String>,
}

/// Copies `msg` through the host's sink, if it gave one.
fn report(err: *const RlErrorSink, msg: &str) {
    if err.is_null() {
        return;
    }
    // SAFETY: a non-null sink pointer is valid for the duration of the call (ABI rule 7).
    let sink = unsafe { &*err };
    if let Some(write) = sink.write {
        // SAFETY: `write` is the host's copying callback and `msg` is valid for this call.
        unsafe { write(sink.ctx, RlStr::from_str(msg)) };
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn str_arg<'a>(s: RlStr, what: &str) -> Result<&'a str, String> {
    // SAFETY: the host guarantees string arguments are readable for the call.
    let bytes = unsafe { raw_bytes(s) };
    std::str::from_utf8(bytes).map_err(|e| format!("{what} is not valid UTF-8: {e}"))
}

unsafe extern "C" fn create_shim<T: Send + 'static, K: CreateVia<T>>(
    name: RlStr,
    config: RlStr,
    out_instance: *mut *mut c_void,
    err: *const RlErrorSink,
) -> RlStatus {
    build::<T, K>(name, config, None, out_instance, err)
}

unsafe extern "C" fn create_with_shim<T: Send + 'static, K: CreateVia<T>>(
    info: *const RlCreateInfo,
    out_instance: *mut *mut c_void,
    err: *const RlErrorSink,
) -> RlStatus {
    if info.is_null() {
        report(err, "create_with: info is null");
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null; `struct_size` is the first field of every version.
    let size = unsafe { std::ptr::addr_of!((*info).struct_size).read_unaligned() };
    if (size as usize) < size_of::<RlCreateInfo>() {
        report(
            err,
            &format!("create_with: info struct_size {size} is below the v1.2 size"),
        );
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: the declared size covers the whole struct, valid for the call.
    let info = unsafe { info.read_unaligned() };
    build::<T, K>(info.name, info.config, Some(info.seed), out_instance, err)
}

/// Both `create` slots: parse the config (adding the seed given beside it), build the
/// instance, reject unread keys, and hand the instance to the host.
fn build<T: Send + 'static, K: CreateVia<T>>(
    name: RlStr,
    config: RlStr,
    seed: Option<u64>,
    out_instance: *mut *mut c_void,
    err: *const RlErrorSink,
) -> RlStatus {
    if out_instance.is_null() {
        report(err, "create: out_instance is null");
        return RL_ERR_INVALID_ARGUMENT;
    }
    let built = catch_unwind(|| -> Result<T, String> {
        let name = str_arg(name, "plugin name")?;
        let mut config = PluginConfig::parse(str_arg(config, "config")?)?;
        if let Some(seed) = seed {
            config.set_seed(seed)?;
        }
        let value = K::create(name, &mut config)?;
        // Rejecting unread keys here means no plugin can forget to.
        config.finish()?;
        Ok(value)
    });
    match built {
        Ok(Ok(value)) => {
            let shell = Box::new(Shell {
                inner: Some(value),
                poison: None,
            });
            // SAFETY: checked non-null above; the host provides a writable slot.
            unsafe { *out_instance = Box::into_raw(shell).cast() };
            RL_OK
        }
        Ok(Err(msg)) => {
            report(err, &msg);
            RL_ERR_CONFIG
        }
        Err(payload) => {
            report(err, &format!("panicked: {}", panic_text(&*payload)));
            RL_ERR_PANIC
        }
    }
}

unsafe extern "C" fn destroy_shim<T: 'static>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    // SAFETY: `instance` came from `Box::into_raw` in `create_shim::<T, _>` and the host
    // calls destroy exactly once.
    let shell = unsafe { Box::from_raw(instance.cast::<Shell<T>>()) };
    // A panicking Drop must not unwind into C.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(shell)));
}

/// Runs `call` on the instance under `catch_unwind`, applying the poison rule.
fn with_instance<T: 'static>(
    instance: *mut c_void,
    err: *const RlErrorSink,
    call: impl FnOnce(&mut T) -> Result<RlStatus, String>,
) -> RlStatus {
    if instance.is_null() {
        report(err, "instance is null");
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: a non-null instance came from `create_shim::<T, _>`; the host serialises calls
    // on one instance, so this is the only live reference.
    let shell = unsafe { &mut *instance.cast::<Shell<T>>() };
    let Some(inner) = shell.inner.as_mut() else {
        let why = shell.poison.as_deref().unwrap_or("unknown");
        report(
            err,
            &format!("instance is poisoned by an earlier panic: {why}"),
        );
        return RL_ERR_POISONED;
    };
    match catch_unwind(AssertUnwindSafe(|| call(inner))) {
        Ok(Ok(status)) => status,
        Ok(Err(msg)) => {
            report(err, &msg);
            RL_ERR_INTERNAL
        }
        Err(payload) => {
            let text = panic_text(&*payload);
            let state = shell.inner.take();
            let _ = catch_unwind(AssertUnwindSafe(move || drop(state)));
            report(err, &format!("panicked: {text}"));
            shell.poison = Some(text);
            RL_ERR_PANIC
        }
    }
}

/// Builds the endpoint view of a call.
///
/// # Safety
/// `list` must be null or point at a valid list whose items are readable for `'a`, and
/// `flags`, when non-null, at `list.len` bytes.
#[inline(always)]
unsafe fn endpoints<'a>(
    list: *const RlEndpointList,
    flags: *const u8,
) -> Result<Endpoints<'a>, String> {
    if list.is_null() {
        return Err("endpoint list is null".into());
    }
    // SAFETY: checked non-null; valid per the caller's contract.
    let list = unsafe { *list };
    if list.len > 0 {
        if list.items.is_null() {
            return Err("endpoint list items are null".into());
        }
        if list.stride < u64::from(RL_ENDPOINT_STATUS_SIZE_V1_0) {
            return Err(stride_error(list.stride));
        }
    }
    let unavailable: &[u8] = if flags.is_null() || list.len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `len` readable flag bytes.
        unsafe { std::slice::from_raw_parts(flags, list.len as usize) }
    };
    // SAFETY: the list was checked non-null with a stride of at least the v1 size, and the
    // caller guarantees its items and flags stay valid for `'a`.
    Ok(unsafe { Endpoints::from_raw(list, unavailable) })
}

#[cold]
fn stride_error(stride: u64) -> String {
    format!("endpoint list stride {stride} is below the v1 size")
}

/// Builds the request view of a call.
///
/// # Safety
/// `request` must be null or point at a request of which `struct_size` bytes are readable,
/// with pointers valid for `'a`.
#[inline]
unsafe fn request<'a>(
    request: *const RlRequest,
    scratch: &'a mut MaybeUninit<RlRequest>,
) -> Result<Request<'a>, String> {
    if request.is_null() {
        return Err("request is null".into());
    }
    // SAFETY: checked non-null; `read` references the struct only when `struct_size` says
    // it is whole, and otherwise copies just the bytes the caller guarantees.
    unsafe { Request::read(request, scratch) }
}

unsafe extern "C" fn add_endpoints_shim<M: Matcher>(
    instance: *mut c_void,
    list: *const RlEndpointList,
    err: *const RlErrorSink,
) -> RlStatus {
    with_instance::<M>(instance, err, |m| {
        // SAFETY: the host passes a valid list for the duration of the call.
        let eps = unsafe { endpoints(list, std::ptr::null()) }?;
        m.add_endpoints(&eps).map(|()| RL_OK)
    })
}

unsafe extern "C" fn remove_endpoints_shim<M: Matcher>(
    instance: *mut c_void,
    indices: *const u32,
    count: u64,
    err: *const RlErrorSink,
) -> RlStatus {
    with_instance::<M>(instance, err, |m| {
        let indices: &[EndpointId] = if count == 0 || indices.is_null() {
            &[]
        } else {
            // SAFETY: the host passes `count` readable indices for the duration of the call,
            // and `EndpointId` is `repr(transparent)` over `u32`.
            unsafe { std::slice::from_raw_parts(indices.cast::<EndpointId>(), count as usize) }
        };
        m.remove_endpoints(indices).map(|()| RL_OK)
    })
}

unsafe extern "C" fn match_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    list: *const RlEndpointList,
    unavailable: *const u8,
    out_index: *mut u32,
    err: *const RlErrorSink,
) -> RlStatus {
    if out_index.is_null() {
        report(err, "match: out_index is null");
        return RL_ERR_INVALID_ARGUMENT;
    }
    with_instance::<M>(instance, err, |m| {
        let mut scratch = MaybeUninit::uninit();
        // SAFETY: the host passes valid request, list and flags for the duration of the call.
        let req = unsafe { request(req, &mut scratch) }?;
        // SAFETY: as above.
        let eps = unsafe { endpoints(list, unavailable) }?;
        match m.match_request(&req, &eps)? {
            Some(id) => {
                // SAFETY: checked non-null above; the host provides a writable u32.
                unsafe { *out_index = id.get() };
                Ok(RL_OK)
            }
            None => Ok(RL_NO_ENDPOINT),
        }
    })
}

/// The body of the three `(request, endpoint)` slots: `update`, `on_complete` and
/// `on_first_token` differ only in the trait method they reach.
///
/// # Safety
/// `req` must be null or point at a request valid for the call (as `request` requires).
#[inline]
unsafe fn request_endpoint_call<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    endpoint: u32,
    err: *const RlErrorSink,
    method: fn(&mut M, &Request<'_>, EndpointId) -> Result<(), String>,
) -> RlStatus {
    with_instance::<M>(instance, err, |m| {
        let mut scratch = MaybeUninit::uninit();
        // SAFETY: the caller passes a valid request for the duration of the call.
        let req = unsafe { request(req, &mut scratch) }?;
        method(m, &req, EndpointId(endpoint)).map(|()| RL_OK)
    })
}

unsafe extern "C" fn update_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    endpoint: u32,
    err: *const RlErrorSink,
) -> RlStatus {
    // SAFETY: the host's contract for this slot is `request_endpoint_call`'s.
    unsafe { request_endpoint_call::<M>(instance, req, endpoint, err, M::update) }
}

unsafe extern "C" fn on_complete_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    endpoint: u32,
    err: *const RlErrorSink,
) -> RlStatus {
    // SAFETY: the host's contract for this slot is `request_endpoint_call`'s.
    unsafe { request_endpoint_call::<M>(instance, req, endpoint, err, M::on_complete) }
}

unsafe extern "C" fn on_first_token_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    endpoint: u32,
    err: *const RlErrorSink,
) -> RlStatus {
    // SAFETY: the host's contract for this slot is `request_endpoint_call`'s.
    unsafe { request_endpoint_call::<M>(instance, req, endpoint, err, M::on_first_token) }
}

/// `match` then `update` in one crossing. Kept apart from `match_shim` on purpose: one
/// shared body with a flag measured 20 instructions a decision more (callgrind, the ABI
/// bench), a tenth of the whole boundary.
unsafe extern "C" fn match_update_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    list: *const RlEndpointList,
    unavailable: *const u8,
    out_index: *mut u32,
    err: *const RlErrorSink,
) -> RlStatus {
    if out_index.is_null() {
        report(err, "match_update: out_index is null");
        return RL_ERR_INVALID_ARGUMENT;
    }
    with_instance::<M>(instance, err, |m| {
        let mut scratch = MaybeUninit::uninit();
        // SAFETY: the host passes valid request, list and flags for the duration of the call.
        let req = unsafe { request(req, &mut scratch) }?;
        // SAFETY: as above.
        let eps = unsafe { endpoints(list, unavailable) }?;
        match m.match_request(&req, &eps)? {
            Some(id) => {
                m.update(&req, id)?;
                // SAFETY: checked non-null above; the host provides a writable u32.
                unsafe { *out_index = id.get() };
                Ok(RL_OK)
            }
            None => Ok(RL_NO_ENDPOINT),
        }
    })
}

unsafe extern "C" fn detect_shim<D: Detector>(
    instance: *mut c_void,
    list: *const RlEndpointList,
    out_unavailable: *mut u8,
    err: *const RlErrorSink,
) -> RlStatus {
    with_instance::<D>(instance, err, |d| {
        // SAFETY: the host passes a valid list for the duration of the call.
        let eps = unsafe { endpoints(list, std::ptr::null()) }?;
        if eps.is_empty() {
            return d.detect(&eps, &mut []).map(|()| RL_OK);
        }
        if out_unavailable.is_null() {
            return Err("detect: out_unavailable is null".into());
        }
        // SAFETY: the host provides `len` writable bytes. They are zeroed first, so every
        // byte is a valid `bool` (false) before the slice is handed out, and safe code can
        // only store valid `bool`s into it.
        let flags = unsafe {
            std::ptr::write_bytes(out_unavailable, 0, eps.len());
            std::slice::from_raw_parts_mut(out_unavailable.cast::<bool>(), eps.len())
        };
        d.detect(&eps, flags).map(|()| RL_OK)
    })
}

#[cfg(test)]
mod tests {
    use std::alloc::{Layout, alloc_zeroed, dealloc};

    use super::*;

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
            _reserved: 0,
            prompt_len: 48,
            output_tokens: RL_UNKNOWN,
            session_id: 0,
            parent_id: 0,
            block_ids: IDS.as_ptr(),
            now_ns: 7,
            cached_prefix: None,
            cached_prefix_ctx: std::ptr::null(),
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
    fn on_complete_is_always_installed_and_reaches_the_method() {
        let instance = create("").expect("create");
        let request = raw_request(size_of::<RlRequest>() as u32);
        // SAFETY: the request and instance are valid for the call; no sink.
        let status = unsafe {
            MatcherExport::<Probe>::VTABLE.on_complete.unwrap()(
                instance,
                &request,
                3,
                std::ptr::null(),
            )
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
            MatcherExport::<Probe>::VTABLE.create_with.unwrap()(
                &info,
                &mut instance,
                std::ptr::null(),
            )
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
            MatcherExport::<Probe>::VTABLE.create_with.unwrap()(
                &info,
                &mut instance,
                std::ptr::null(),
            )
        };
        assert_eq!(status, RL_ERR_CONFIG);
    }

    #[test]
    fn keys_create_did_not_read_are_rejected_after_it_returns() {
        let accepted = create("known: 3\nseed: 1").expect("known keys and seed");
        destroy(accepted);
        assert_eq!(create("knwon: 3"), Err(RL_ERR_CONFIG));
    }
}
