//! Safe handles on plugin instances: every call returns a `Result`, and every answer is
//! checked before the host uses it.
//!
//! A handle owns its instance and destroys it on drop. It is `Send` but takes `&mut self`
//! for every call, which is exactly the ABI's threading rule: calls on one instance are
//! serialised, distinct instances may live on different threads. Once a call reports a
//! panic the handle stops calling into the instance (only `destroy` is still called).

use std::ffi::c_void;
use std::mem::size_of;

use routerlab_core::abi::*;

use crate::loader::{Library, PluginInfo, Vtable};
use crate::request::RequestData;
use crate::{CallFailure, PluginError};

mod scaler;
pub use scaler::{PoolObservation, ScalerInstance};

/// Load figures of one endpoint, as plugins see them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EndpointLoad {
    /// Running requests.
    pub running: u64,
    /// Waiting requests.
    pub waiting: u64,
    /// KV-cache blocks in use.
    pub kv_blocks_used: u64,
    /// KV-cache blocks in total (0 = unbounded).
    pub kv_blocks_total: u64,
    /// Prompt tokens of unfinished requests.
    pub inflight_prompt_tokens: u64,
    /// Unfinished requests routed here, counted by the router (ABI 1.2).
    pub inflight_requests: u64,
    /// Tokens per KV block (timed: the engine's block size; 0 time-free).
    pub kv_block_tokens: u64,
    /// Its LoRA adapter slots (ABI 1.5; `total` 0: none modelled).
    pub lora: routerlab_core::LoraSlots,
}

/// The fleet's endpoints in the exact layout plugins read, kept up to date in place so that
/// no call has to convert anything.
#[derive(Debug, Default)]
pub struct EndpointTable {
    /// Owns the name bytes the raw statuses point into (boxed, so they never move).
    names: Vec<Box<str>>,
    raw: Vec<RlEndpointStatus>,
    next_index: u32,
}

// SAFETY: the raw pointers in `raw` point only into `names`, which the table owns and never
// mutates; moving the table to another thread moves both together.
unsafe impl Send for EndpointTable {}

impl EndpointTable {
    /// A table of endpoints with indices `0..names.len()`.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> EndpointTable {
        let mut table = EndpointTable::default();
        for name in names {
            table.push(name.into());
        }
        table
    }

    /// Adds an endpoint and returns its stable index.
    pub fn push(&mut self, name: String) -> u32 {
        let name: Box<str> = name.into_boxed_str();
        let index = self.next_index;
        self.next_index += 1;
        self.raw
            .push(RlEndpointStatus::idle(index, RlStr::from_str(&name)));
        self.names.push(name);
        index
    }

    /// Removes the endpoint with stable index `index`; returns whether it existed.
    pub fn remove(&mut self, index: u32) -> bool {
        match self.position(index) {
            Some(pos) => {
                self.raw.remove(pos);
                self.names.remove(pos);
                true
            }
            None => false,
        }
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// List position of stable index `index`.
    #[inline]
    pub fn position(&self, index: u32) -> Option<usize> {
        match self.raw.get(index as usize) {
            Some(status) if status.index == index => Some(index as usize),
            _ => self.raw.iter().position(|s| s.index == index),
        }
    }

    /// Stable index at list position `pos`.
    pub fn index(&self, pos: usize) -> u32 {
        self.raw[pos].index
    }

    /// Name at list position `pos`.
    pub fn name(&self, pos: usize) -> &str {
        &self.names[pos]
    }

    /// Load at list position `pos`.
    pub fn load(&self, pos: usize) -> EndpointLoad {
        let s = &self.raw[pos];
        EndpointLoad {
            running: s.running,
            waiting: s.waiting,
            kv_blocks_used: s.kv_blocks_used,
            kv_blocks_total: s.kv_blocks_total,
            inflight_prompt_tokens: s.inflight_prompt_tokens,
            inflight_requests: s.inflight_requests,
            kv_block_tokens: s.kv_block_tokens,
            lora: routerlab_core::LoraSlots {
                used: s.lora_slots_used,
                total: s.lora_slots_total,
                active: s.lora_active,
                waiting: s.lora_waiting,
            },
        }
    }

    /// Sets the pool of list position `pos` (ABI 1.3 `role`).
    pub fn set_role(&mut self, pos: usize, role: routerlab_core::Role) {
        self.raw[pos].role = role.raw();
    }

    /// The pool of list position `pos`.
    pub fn role(&self, pos: usize) -> routerlab_core::Role {
        routerlab_core::Role::from_raw(self.raw[pos].role)
    }

    /// Sets the load at list position `pos` (KV usage is derived).
    pub fn set_load(&mut self, pos: usize, load: EndpointLoad) {
        let s = &mut self.raw[pos];
        s.running = load.running;
        s.waiting = load.waiting;
        s.kv_blocks_used = load.kv_blocks_used;
        s.kv_blocks_total = load.kv_blocks_total;
        s.kv_usage = if load.kv_blocks_total == 0 {
            0.0
        } else {
            load.kv_blocks_used as f64 / load.kv_blocks_total as f64
        };
        s.inflight_prompt_tokens = load.inflight_prompt_tokens;
        s.inflight_requests = load.inflight_requests;
        s.kv_block_tokens = load.kv_block_tokens;
        s.lora_slots_used = load.lora.used;
        s.lora_slots_total = load.lora.total;
        s.lora_active = load.lora.active;
        s.lora_waiting = load.lora.waiting;
    }

    #[inline]
    fn raw_list(&self) -> RlEndpointList {
        RlEndpointList {
            items: self.raw.as_ptr(),
            len: self.raw.len() as u64,
            stride: size_of::<RlEndpointStatus>() as u64,
        }
    }

    /// A list of the one endpoint at list position `pos`.
    fn raw_list_of(&self, pos: usize) -> RlEndpointList {
        RlEndpointList {
            items: &self.raw[pos],
            len: 1,
            stride: size_of::<RlEndpointStatus>() as u64,
        }
    }
}

/// Collects the message a plugin writes through the error sink.
struct ErrorMessage {
    text: Option<String>,
}

unsafe extern "C" fn write_error(ctx: *mut c_void, msg: RlStr) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` is the `ErrorMessage` the host put in the sink for this call.
    let slot = unsafe { &mut *ctx.cast::<ErrorMessage>() };
    if slot.text.is_some() {
        return;
    }
    const CAP: u64 = 64 * 1024;
    let bytes = if msg.ptr.is_null() || msg.len == 0 {
        &[][..]
    } else {
        // SAFETY: the plugin passes `len` readable bytes, valid during this callback.
        unsafe { std::slice::from_raw_parts(msg.ptr, msg.len.min(CAP) as usize) }
    };
    let text = String::from_utf8_lossy(bytes);
    let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if msg.len > CAP {
        // Say it was cut, so nobody mistakes the cut for the message's end.
        text.push_str(&format!(" [... {} more bytes not shown]", msg.len - CAP));
    }
    slot.text = Some(text);
}

/// Calls into a plugin with a fresh error sink; returns the status and any message.
/// Nothing is allocated unless the plugin writes a message.
#[inline]
fn with_sink(call: impl FnOnce(*const RlErrorSink) -> RlStatus) -> (RlStatus, Option<String>) {
    let mut message = ErrorMessage { text: None };
    let sink = RlErrorSink {
        ctx: (&raw mut message).cast(),
        write: Some(write_error),
    };
    let status = call(&sink);
    (status, message.text)
}

fn failure_for(status: RlStatus, message: Option<String>) -> CallFailure {
    let message = message.unwrap_or_else(|| "(no message)".to_owned());
    match status {
        RL_ERR_CONFIG => CallFailure::Config(message),
        RL_ERR_PANIC => CallFailure::Panicked(message),
        RL_ERR_POISONED => CallFailure::Poisoned(message),
        RL_ERR_INVALID_ARGUMENT => CallFailure::InvalidArgument(message),
        RL_ERR_INTERNAL => CallFailure::Failed(message),
        other => CallFailure::UnknownStatus(other, message),
    }
}

/// `RlCreateFn` once checked non-NULL.
type CreateFn =
    unsafe extern "C" fn(RlStr, RlStr, *mut *mut c_void, *const RlErrorSink) -> RlStatus;
/// `RlCreateWithFn` once checked non-NULL.
type CreateWithFn =
    unsafe extern "C" fn(*const RlCreateInfo, *mut *mut c_void, *const RlErrorSink) -> RlStatus;

/// How a plugin is created: the 1.0 slot with `seed` in the config text, or the 1.2 slot
/// with the seed beside it.
#[derive(Clone, Copy)]
enum Create {
    InText(CreateFn),
    Beside(CreateWithFn),
}

impl Create {
    fn of(create: RlCreateFn, create_with: RlCreateWithFn) -> Create {
        match (create_with, create) {
            (Some(with), _) => Create::Beside(with),
            (None, Some(create)) => Create::InText(create),
            (None, None) => unreachable!("required slots checked by the loader"),
        }
    }
}
/// `RlDestroyFn` once checked non-NULL.
type DestroyFn = unsafe extern "C" fn(*mut c_void);

/// What the handles share: which plugin, its instance pointer, and the poison flag.
struct Handle {
    library: &'static Library,
    plugin: &'static PluginInfo,
    instance: *mut c_void,
    destroy: DestroyFn,
    poisoned: Option<String>,
}

// SAFETY: the instance pointer is used only through `&mut` methods, so calls on it are
// serialised as the ABI requires; instances may move between threads (ABI rule 10).
unsafe impl Send for Handle {}

impl Handle {
    fn create(
        library: &'static Library,
        plugin: &'static PluginInfo,
        create: Create,
        destroy: DestroyFn,
        config: &str,
    ) -> Result<Handle, PluginError> {
        let mut instance: *mut c_void = std::ptr::null_mut();
        let (status, message) = match create {
            Create::InText(create) => with_sink(|err| {
                // SAFETY: name and config are valid for the call; `instance` is writable.
                unsafe {
                    create(
                        RlStr::from_str(&plugin.name),
                        RlStr::from_str(config),
                        &mut instance,
                        err,
                    )
                }
            }),
            Create::Beside(create_with) => {
                let (rest, seed) = routerlab_core::config::split_seed(config).map_err(|why| {
                    PluginError::Call {
                        plugin: plugin.name.clone(),
                        file: library.path.clone(),
                        call: "create",
                        failure: CallFailure::Config(why),
                    }
                })?;
                let info = RlCreateInfo {
                    struct_size: size_of::<RlCreateInfo>() as u32,
                    _reserved: 0,
                    name: RlStr::from_str(&plugin.name),
                    config: RlStr::from_str(&rest),
                    seed,
                };
                // SAFETY: `info` and its strings are valid for the call; `instance` is
                // writable.
                with_sink(|err| unsafe { create_with(&info, &mut instance, err) })
            }
        };
        let handle = Handle {
            library,
            plugin,
            instance,
            destroy,
            poisoned: None,
        };
        if status != RL_OK {
            // A failed create gets no destroy.
            std::mem::forget(handle);
            return Err(PluginError::Call {
                plugin: plugin.name.clone(),
                file: library.path.clone(),
                call: "create",
                failure: failure_for(status, message),
            });
        }
        if instance.is_null() {
            std::mem::forget(handle);
            return Err(PluginError::Call {
                plugin: plugin.name.clone(),
                file: library.path.clone(),
                call: "create",
                failure: CallFailure::Failed("returned OK without an instance".into()),
            });
        }
        Ok(handle)
    }

    fn error(&self, call: &'static str, failure: CallFailure) -> PluginError {
        PluginError::Call {
            plugin: self.plugin.name.clone(),
            file: self.library.path.clone(),
            call,
            failure,
        }
    }

    /// Runs one call unless poisoned; maps statuses other than `accept` to errors.
    #[inline]
    fn call(
        &mut self,
        name: &'static str,
        accept: &[RlStatus],
        call: impl FnOnce(*mut c_void, *const RlErrorSink) -> RlStatus,
    ) -> Result<RlStatus, PluginError> {
        if let Some(why) = &self.poisoned {
            return Err(self.error(name, CallFailure::Poisoned(why.clone())));
        }
        let instance = self.instance;
        let plugin: &'static PluginInfo = self.plugin;
        routerlab_os::crash::enter(&plugin.name, name);
        let (status, message) = with_sink(|err| call(instance, err));
        routerlab_os::crash::leave();
        if status == RL_OK || accept.contains(&status) {
            return Ok(status);
        }
        if matches!(status, RL_ERR_PANIC | RL_ERR_POISONED) {
            self.poisoned = Some(message.clone().unwrap_or_else(|| "(no message)".to_owned()));
        }
        Err(self.error(name, failure_for(status, message)))
    }

    fn name(&self) -> &str {
        &self.plugin.name
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: `instance` came from a successful `create` of this plugin and is destroyed
        // exactly once, here, with no call in flight (we hold `&mut self`).
        unsafe { (self.destroy)(self.instance) };
    }
}

/// A live matcher instance.
pub struct MatcherInstance {
    handle: Handle,
    vtable: RlMatcherVtable,
}

impl MatcherInstance {
    pub(crate) fn create(
        library: &'static Library,
        plugin: &'static PluginInfo,
        config: &str,
    ) -> Result<MatcherInstance, PluginError> {
        let Vtable::Matcher(vtable) = plugin.vtable else {
            unreachable!("kind checked by Library::plugin");
        };
        let Some(destroy) = vtable.destroy else {
            unreachable!("required slots checked by the loader");
        };
        let create = Create::of(vtable.create, vtable.create_with);
        let handle = Handle::create(library, plugin, create, destroy, config)?;
        Ok(MatcherInstance { handle, vtable })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Whether the plugin implements `on_complete`.
    pub fn has_on_complete(&self) -> bool {
        self.vtable.on_complete.is_some()
    }

    /// Announces every endpoint of `table` (typically once, at start).
    pub fn add_endpoints(&mut self, table: &EndpointTable) -> Result<(), PluginError> {
        let f = self.vtable.add_endpoints.expect("checked by the loader");
        let list = table.raw_list();
        // SAFETY: `list` borrows `table` for the call; the instance is live.
        self.handle.call("add_endpoints", &[], |inst, err| unsafe {
            f(inst, &list, err)
        })?;
        Ok(())
    }

    /// Announces the one endpoint at list position `pos` of `table` (one that joined later).
    pub fn add_endpoint_at(
        &mut self,
        table: &EndpointTable,
        pos: usize,
    ) -> Result<(), PluginError> {
        let f = self.vtable.add_endpoints.expect("checked by the loader");
        let list = table.raw_list_of(pos);
        // SAFETY: `list` borrows one element of `table` for the call; the instance is live.
        self.handle.call("add_endpoints", &[], |inst, err| unsafe {
            f(inst, &list, err)
        })?;
        Ok(())
    }

    /// Removes endpoints by stable index.
    pub fn remove_endpoints(&mut self, indices: &[u32]) -> Result<(), PluginError> {
        let f = self.vtable.remove_endpoints.expect("checked by the loader");
        let (ptr, count) = (indices.as_ptr(), indices.len() as u64);
        self.handle.call("remove_endpoints", &[], |inst, err| {
            // SAFETY: `indices` is valid for the call; the instance is live.
            unsafe { f(inst, ptr, count, err) }
        })?;
        Ok(())
    }

    /// Picks an endpoint: its list position in `table`, or `None` when the plugin says none
    /// is available. An index outside the table, or one flagged in `unavailable` (one flag
    /// per list position), is an error and never returned.
    pub fn match_request(
        &mut self,
        request: &RequestData<'_>,
        table: &EndpointTable,
        unavailable: &[bool],
    ) -> Result<Option<usize>, PluginError> {
        let f = self.vtable.match_request.expect("checked by the loader");
        self.pick("match", f, request, table, unavailable)
    }

    /// Whether the plugin decides and learns in one call (ABI 1.2 `match_update`).
    pub fn has_match_update(&self) -> bool {
        self.vtable.match_update.is_some()
    }

    /// [`MatcherInstance::match_request`], then [`MatcherInstance::update`] for the pick:
    /// in one crossing when the plugin provides `match_update`, else in two calls.
    #[inline]
    pub fn match_and_update(
        &mut self,
        request: &RequestData<'_>,
        table: &EndpointTable,
        unavailable: &[bool],
    ) -> Result<Option<usize>, PluginError> {
        if let Some(fused) = self.vtable.match_update {
            return self.pick("match_update", fused, request, table, unavailable);
        }
        let pos = self.match_request(request, table, unavailable)?;
        if let Some(pos) = pos {
            self.update(request, table, pos)?;
        }
        Ok(pos)
    }

    /// One `match`-shaped call, its answer checked against the table and the flags.
    #[inline]
    fn pick(
        &mut self,
        call: &'static str,
        f: unsafe extern "C" fn(
            *mut c_void,
            *const RlRequest,
            *const RlEndpointList,
            *const u8,
            *mut u32,
            *const RlErrorSink,
        ) -> RlStatus,
        request: &RequestData<'_>,
        table: &EndpointTable,
        unavailable: &[bool],
    ) -> Result<Option<usize>, PluginError> {
        assert!(
            unavailable.len() == table.len(),
            "one unavailable flag per endpoint"
        );
        let raw = request.raw_view();
        let list = table.raw_list();
        let mut index = u32::MAX;
        let flags = unavailable.as_ptr().cast::<u8>();
        // SAFETY: request, list, flags (one byte per endpoint: `bool` is one byte) and the
        // out slot are valid for the call; the instance is live.
        let status = self
            .handle
            .call(call, &[RL_NO_ENDPOINT], |inst, err| unsafe {
                f(inst, &raw, &list, flags, &mut index, err)
            })?;
        if status == RL_NO_ENDPOINT {
            return Ok(None);
        }
        let Some(pos) = table.position(index) else {
            return Err(self
                .handle
                .error(call, CallFailure::EndpointOutOfRange(index)));
        };
        if unavailable[pos] {
            return Err(self
                .handle
                .error(call, CallFailure::EndpointUnavailable(index)));
        }
        Ok(Some(pos))
    }

    /// Tells the matcher the request went to the endpoint at list position `pos`.
    pub fn update(
        &mut self,
        request: &RequestData<'_>,
        table: &EndpointTable,
        pos: usize,
    ) -> Result<(), PluginError> {
        let f = self.vtable.update.expect("checked by the loader");
        let raw = request.raw_view();
        let index = table.index(pos);
        // SAFETY: the request is valid for the call; the instance is live.
        self.handle.call("update", &[], |inst, err| unsafe {
            f(inst, &raw, index, err)
        })?;
        Ok(())
    }

    /// Tells the matcher the request produced its first token on the endpoint with stable
    /// index `index`. Does nothing when the plugin has no `on_first_token`.
    pub fn on_first_token(
        &mut self,
        request: &RequestData<'_>,
        index: u32,
    ) -> Result<(), PluginError> {
        let Some(f) = self.vtable.on_first_token else {
            return Ok(());
        };
        let raw = request.raw_view();
        self.handle.call("on_first_token", &[], |inst, err| {
            // SAFETY: the request is valid for the call; the instance is live.
            unsafe { f(inst, &raw, index, err) }
        })?;
        Ok(())
    }

    /// Tells the matcher the request finished on the endpoint with stable index `index`.
    /// Does nothing when the plugin has no `on_complete`.
    pub fn on_complete(
        &mut self,
        request: &RequestData<'_>,
        index: u32,
    ) -> Result<(), PluginError> {
        let Some(f) = self.vtable.on_complete else {
            return Ok(());
        };
        let raw = request.raw_view();
        // SAFETY: the request is valid for the call; the instance is live.
        self.handle.call("on_complete", &[], |inst, err| unsafe {
            f(inst, &raw, index, err)
        })?;
        Ok(())
    }
}

/// A live detector instance.
pub struct DetectorInstance {
    handle: Handle,
    vtable: RlDetectorVtable,
    scratch: Vec<u8>,
}

impl DetectorInstance {
    pub(crate) fn create(
        library: &'static Library,
        plugin: &'static PluginInfo,
        config: &str,
    ) -> Result<DetectorInstance, PluginError> {
        let Vtable::Detector(vtable) = plugin.vtable else {
            unreachable!("kind checked by Library::plugin");
        };
        let Some(destroy) = vtable.destroy else {
            unreachable!("required slots checked by the loader");
        };
        let create = Create::of(vtable.create, vtable.create_with);
        let handle = Handle::create(library, plugin, create, destroy, config)?;
        Ok(DetectorInstance {
            handle,
            vtable,
            scratch: Vec::new(),
        })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Fills `unavailable` with one flag per list position of `table`.
    pub fn detect(
        &mut self,
        table: &EndpointTable,
        unavailable: &mut Vec<bool>,
    ) -> Result<(), PluginError> {
        let f = self.vtable.detect.expect("checked by the loader");
        let list = table.raw_list();
        self.scratch.clear();
        self.scratch.resize(table.len(), 0);
        let out = self.scratch.as_mut_ptr();
        // SAFETY: `list` borrows `table` and `out` has one writable byte per endpoint, both
        // for the call; the instance is live.
        self.handle.call("detect", &[], |inst, err| unsafe {
            f(inst, &list, out, err)
        })?;
        unavailable.clear();
        unavailable.extend(self.scratch.iter().map(|flag| *flag != 0));
        Ok(())
    }
}
