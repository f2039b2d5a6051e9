//! The Rust SDK: write a plugin as a plain Rust type, export it with [`export_plugins!`].
//!
//! The SDK owns every `unsafe` step of being a plugin so that plugin crates need none:
//! it turns the borrowed C views into safe [`Request`] and [`Endpoints`] views, copies error
//! messages through the host's sink, and runs every entry under `catch_unwind`. A panic
//! becomes `RL_ERR_PANIC` with the payload as the message and poisons the instance: its
//! state is dropped and every later call answers `RL_ERR_POISONED`, because state left
//! half-updated by a panic cannot be trusted. (A plugin built with `panic = "abort"`, or C
//! code that crashes, still takes the process down; only a separate process could prevent
//! that.)

use std::any::Any;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::*;

/// The unit a request's lengths and blocks are measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes of prompt text.
    Bytes,
    /// Tokens.
    Tokens,
}

/// A request, borrowed from the host for one call.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    raw: &'a RlRequest,
}

impl<'a> Request<'a> {
    /// A view of a raw request, for hosts and benchmarks that call a matcher directly.
    ///
    /// # Safety
    /// Every pointer in `raw` must be valid for reads of its stated length for `'a`.
    pub unsafe fn from_raw(raw: &'a RlRequest) -> Request<'a> {
        Request { raw }
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
        let covered = self.raw.struct_size as usize >= size_of::<RlRequest>();
        if !covered || self.raw.block_ids.is_null() {
            return None;
        }
        if self.raw.block_count == 0 {
            return Some(&[]);
        }
        // SAFETY: `struct_size` says the host wrote this field, and a non-null `block_ids`
        // points at `block_count` readable, aligned u32s for this call (ABI 1.1 contract).
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
        if self.raw.unit == RL_UNIT_TOKENS {
            Unit::Tokens
        } else {
            Unit::Bytes
        }
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
}

/// One endpoint's status, borrowed for one call.
#[derive(Clone, Copy)]
pub struct EndpointStatus<'a> {
    raw: &'a RlEndpointStatus,
}

impl<'a> EndpointStatus<'a> {
    /// Stable index: what `match` returns and `update` receives.
    #[inline]
    pub fn index(&self) -> u32 {
        self.raw.index
    }
    /// Endpoint name, e.g. `localhost:8000` (lossy if the host sent invalid UTF-8).
    #[inline]
    pub fn name(&self) -> &'a str {
        // SAFETY: the host guarantees `name` points at `len` readable bytes for this call.
        let bytes = unsafe { raw_bytes(self.raw.name) };
        std::str::from_utf8(bytes).unwrap_or("<invalid utf-8>")
    }
    /// Running requests.
    #[inline]
    pub fn running(&self) -> u64 {
        self.raw.running
    }
    /// Waiting requests.
    #[inline]
    pub fn waiting(&self) -> u64 {
        self.raw.waiting
    }
    /// KV-cache blocks in use.
    #[inline]
    pub fn kv_blocks_used(&self) -> u64 {
        self.raw.kv_blocks_used
    }
    /// KV-cache blocks in total (0 = unbounded).
    #[inline]
    pub fn kv_blocks_total(&self) -> u64 {
        self.raw.kv_blocks_total
    }
    /// KV usage fraction (0 when unbounded).
    #[inline]
    pub fn kv_usage(&self) -> f64 {
        self.raw.kv_usage
    }
    /// Prompt tokens of unfinished requests routed here.
    #[inline]
    pub fn inflight_prompt_tokens(&self) -> u64 {
        self.raw.inflight_prompt_tokens
    }
}

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
    /// `list` must describe `len` valid statuses `stride >= size_of::<RlEndpointStatus>()`
    /// bytes apart, whose pointers stay valid for `'a`; `unavailable` is empty or has `len`
    /// flags.
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
        // SAFETY: `from_raw` checked that `items` holds `len` elements `stride >= 72` bytes
        // apart, and `pos < len`.
        let raw = unsafe {
            &*(self.list.items as *const u8)
                .add(pos * self.list.stride as usize)
                .cast::<RlEndpointStatus>()
        };
        EndpointStatus { raw }
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

/// A matcher plugin. The host serialises calls on one instance.
pub trait Matcher: Send + Sized + 'static {
    /// Whether [`Matcher::on_complete`] does anything; when false the vtable slot is NULL.
    const HAS_ON_COMPLETE: bool = false;
    /// Builds an instance from its YAML/JSON config; the error is shown to the user.
    fn create(name: &str, config: &str) -> Result<Self, String>;
    /// New endpoints joined (their statuses carry index and name). By default nothing to
    /// do: every call also receives the current endpoints.
    fn add_endpoints(&mut self, _endpoints: &Endpoints<'_>) -> Result<(), String> {
        Ok(())
    }
    /// Endpoints left, by stable index; never choose them again. By default nothing to do:
    /// removed endpoints are no longer in the list a call receives.
    fn remove_endpoints(&mut self, _indices: &[u32]) -> Result<(), String> {
        Ok(())
    }
    /// Picks the stable index of an available endpoint, or `None` when there is none.
    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<u32>, String>;
    /// The request was routed to `endpoint`.
    fn update(&mut self, request: &Request<'_>, endpoint: u32) -> Result<(), String>;
    /// The request finished on `endpoint` (only called when `HAS_ON_COMPLETE`).
    fn on_complete(&mut self, _request: &Request<'_>, _endpoint: u32) -> Result<(), String> {
        Ok(())
    }
}

/// A detector plugin. The host serialises calls on one instance.
pub trait Detector: Send + Sized + 'static {
    /// Builds an instance from its YAML/JSON config; the error is shown to the user.
    fn create(name: &str, config: &str) -> Result<Self, String>;
    /// Sets `unavailable[pos] = true` for each overloaded endpoint (all start false).
    fn detect(&mut self, endpoints: &Endpoints<'_>, unavailable: &mut [bool])
    -> Result<(), String>;
}

/// Builds the vtable of a matcher type; used by [`export_plugins!`].
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
        on_complete: if M::HAS_ON_COMPLETE {
            Some(on_complete_shim::<M>)
        } else {
            None
        },
    };
}

/// Builds the vtable of a detector type; used by [`export_plugins!`].
pub struct DetectorExport<D>(PhantomData<D>);

impl<D: Detector> DetectorExport<D> {
    /// The detector's vtable.
    pub const VTABLE: RlDetectorVtable = RlDetectorVtable {
        struct_size: size_of::<RlDetectorVtable>() as u32,
        _reserved: 0,
        create: Some(create_shim::<D, DetectorKind>),
        destroy: Some(destroy_shim::<D>),
        detect: Some(detect_shim::<D>),
    };
}

/// Exports the library's entry function and descriptors.
///
/// ```ignore
/// routerlab_core::export_plugins! {
///     matcher MyMatcher { name: "my-matcher", description: "what it does" },
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
    fn create(name: &str, config: &str) -> Result<T, String>;
}
impl<M: Matcher> CreateVia<M> for MatcherKind {
    fn create(name: &str, config: &str) -> Result<M, String> {
        M::create(name, config)
    }
}
impl<D: Detector> CreateVia<D> for DetectorKind {
    fn create(name: &str, config: &str) -> Result<D, String> {
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

/// Reads a borrowed byte string.
///
/// # Safety
/// `s.ptr` must point at `s.len` readable bytes that outlive `'a`, unless `s.len == 0`.
unsafe fn raw_bytes<'a>(s: RlStr) -> &'a [u8] {
    if s.len == 0 || s.ptr.is_null() {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(s.ptr, s.len as usize) }
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
    if out_instance.is_null() {
        report(err, "create: out_instance is null");
        return RL_ERR_INVALID_ARGUMENT;
    }
    let built = catch_unwind(|| {
        let name = str_arg(name, "plugin name")?;
        let config = str_arg(config, "config")?;
        K::create(name, config)
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
        if list.stride < size_of::<RlEndpointStatus>() as u64 {
            return Err(format!(
                "endpoint list stride {} is below the v1 size",
                list.stride
            ));
        }
    }
    let unavailable: &[u8] = if flags.is_null() || list.len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `len` readable flag bytes.
        unsafe { std::slice::from_raw_parts(flags, list.len as usize) }
    };
    Ok(Endpoints {
        list,
        unavailable,
        _borrow: PhantomData,
    })
}

/// Builds the request view of a call.
///
/// # Safety
/// `request` must be null or point at a valid request readable for `'a`.
unsafe fn request<'a>(request: *const RlRequest) -> Result<Request<'a>, String> {
    if request.is_null() {
        return Err("request is null".into());
    }
    // SAFETY: checked non-null; valid per the caller's contract.
    let raw = unsafe { &*request };
    if raw.struct_size < RL_REQUEST_SIZE_V1_0 {
        return Err(format!(
            "request struct_size {} is below the v1.0 size {RL_REQUEST_SIZE_V1_0}",
            raw.struct_size
        ));
    }
    Ok(Request { raw })
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
        let indices: &[u32] = if count == 0 || indices.is_null() {
            &[]
        } else {
            // SAFETY: the host passes `count` readable indices for the duration of the call.
            unsafe { std::slice::from_raw_parts(indices, count as usize) }
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
        // SAFETY: the host passes valid request, list and flags for the duration of the call.
        let (req, eps) = unsafe { (request(req)?, endpoints(list, unavailable)?) };
        match m.match_request(&req, &eps)? {
            Some(index) => {
                // SAFETY: checked non-null above; the host provides a writable u32.
                unsafe { *out_index = index };
                Ok(RL_OK)
            }
            None => Ok(RL_NO_ENDPOINT),
        }
    })
}

unsafe extern "C" fn update_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    endpoint: u32,
    err: *const RlErrorSink,
) -> RlStatus {
    with_instance::<M>(instance, err, |m| {
        // SAFETY: the host passes a valid request for the duration of the call.
        let req = unsafe { request(req) }?;
        m.update(&req, endpoint).map(|()| RL_OK)
    })
}

unsafe extern "C" fn on_complete_shim<M: Matcher>(
    instance: *mut c_void,
    req: *const RlRequest,
    endpoint: u32,
    err: *const RlErrorSink,
) -> RlStatus {
    with_instance::<M>(instance, err, |m| {
        // SAFETY: the host passes a valid request for the duration of the call.
        let req = unsafe { request(req) }?;
        m.on_complete(&req, endpoint).map(|()| RL_OK)
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
    use super::*;

    fn raw_request(struct_size: u32, hashes: &[u64], ids: &[u32]) -> RlRequest {
        RlRequest {
            struct_size,
            unit: RL_UNIT_TOKENS,
            id: 1,
            arrival_ns: 0,
            prompt: RlStr::from_str(""),
            block_hashes: hashes.as_ptr(),
            block_count: hashes.len() as u64,
            block_size: 16,
            _reserved: 0,
            prompt_len: 16 * hashes.len() as u64,
            output_tokens: RL_UNKNOWN,
            session_id: 0,
            parent_id: 0,
            block_ids: ids.as_ptr(),
        }
    }

    #[test]
    fn block_ids_are_read_only_when_the_host_wrote_them() {
        let (hashes, ids) = ([9u64, 8, 7], [0u32, 1, 2]);
        let current = raw_request(size_of::<RlRequest>() as u32, &hashes, &ids);
        // SAFETY: `current` borrows `hashes` and `ids`, both alive for the test.
        let view = unsafe { Request::from_raw(&current) };
        assert_eq!(view.block_ids(), Some(&ids[..]));

        // A 1.0 host's request ends before `block_ids`: whatever lies there is not read.
        let old = raw_request(RL_REQUEST_SIZE_V1_0, &hashes, &ids);
        // SAFETY: as above.
        let view = unsafe { request(&old) }.expect("1.0 requests are accepted");
        assert_eq!(view.block_ids(), None);
        assert_eq!(view.block_hashes(), &hashes);

        let null = RlRequest {
            block_ids: std::ptr::null(),
            ..current
        };
        // SAFETY: as above.
        assert_eq!(unsafe { Request::from_raw(&null) }.block_ids(), None);

        let truncated = raw_request(RL_REQUEST_SIZE_V1_0 - 8, &hashes, &ids);
        // SAFETY: as above.
        let refused = unsafe { request(&truncated) }.err().expect("too small");
        assert!(refused.contains("below the v1.0 size"), "{refused}");
    }
}
