//! Exporting: the vtables, the entry function macro, and the `extern "C"` shims that turn
//! each ABI call into a trait call under `catch_unwind`, with the poison rule.

use std::any::Any;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::PluginConfig;
use crate::abi::*;
use crate::sdk::{Detector, EndpointId, Endpoints, Matcher, Request, Scaler, Tick, raw_bytes};

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

/// Builds the vtable of a scaler type; used by [`export_plugins!`](crate::export_plugins).
pub struct ScalerExport<S>(PhantomData<S>);

impl<S: Scaler> ScalerExport<S> {
    /// The scaler's vtable.
    pub const VTABLE: RlScalerVtable = RlScalerVtable {
        struct_size: size_of::<RlScalerVtable>() as u32,
        _reserved: 0,
        create: Some(create_shim::<S, ScalerKind>),
        destroy: Some(destroy_shim::<S>),
        create_with: Some(create_with_shim::<S, ScalerKind>),
        scale: Some(scale_shim::<S>),
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
    (@kind scaler) => { $crate::abi::RL_KIND_SCALER };
    (@vtable matcher $ty:ty) => {
        (&$crate::sdk::MatcherExport::<$ty>::VTABLE as *const $crate::abi::RlMatcherVtable).cast()
    };
    (@vtable detector $ty:ty) => {
        (&$crate::sdk::DetectorExport::<$ty>::VTABLE as *const $crate::abi::RlDetectorVtable).cast()
    };
    (@vtable scaler $ty:ty) => {
        (&$crate::sdk::ScalerExport::<$ty>::VTABLE as *const $crate::abi::RlScalerVtable).cast()
    };
}

/// Selects which trait's `create` a `create_shim` calls.
struct MatcherKind;
struct DetectorKind;
struct ScalerKind;
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

impl<S: Scaler> CreateVia<S> for ScalerKind {
    fn create(name: &str, config: &mut PluginConfig) -> Result<S, String> {
        S::create(name, config)
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

unsafe extern "C" fn scale_shim<S: Scaler>(
    instance: *mut c_void,
    tick: *const RlScalerTick,
    out_desired: *mut u32,
    err: *const RlErrorSink,
) -> RlStatus {
    with_instance::<S>(instance, err, |s| {
        // SAFETY: the host passes a valid tick, its pools and their lists for the call.
        let tick = unsafe { Tick::read(tick) }?;
        if tick.pools.is_empty() {
            return s.scale(&tick, &mut []).map(|()| RL_OK);
        }
        if out_desired.is_null() {
            return Err("scale: out_desired is null".into());
        }
        // SAFETY: the host provides one writable, initialised u32 per pool for the call.
        let desired = unsafe { std::slice::from_raw_parts_mut(out_desired, tick.pools.len()) };
        s.scale(&tick, desired).map(|()| RL_OK)
    })
}

#[cfg(test)]
mod tests;
