//! The host's side of the request callbacks (`cached_prefix`, `cached_tiers`, `predict`,
//! `adapter_state`):
//! C functions that call back into the closure a [`crate::RequestData`] carries, never
//! unwinding into the plugin's frames.

use std::ffi::c_void;

use routerlab_core::abi::*;

/// Asks the host closure at `ctx` about the endpoint with stable index `endpoint_index`
/// and writes its answer, converted by `into`, to `out`: `RL_OK`, or
/// `RL_ERR_INVALID_ARGUMENT` for a null pointer or an unknown endpoint, or
/// `RL_ERR_INTERNAL` when the closure panicked (caught: it must not unwind into the
/// plugin's C frames).
///
/// # Safety
/// `ctx` is null or points at the `&dyn Fn(u32) -> Option<T>` of the `RequestData` the host
/// is calling with, alive for the whole call (`raw_view` borrows it); `out` is null or a
/// writable slot.
unsafe fn answer<T, R>(
    ctx: *const c_void,
    endpoint_index: u32,
    out: *mut R,
    into: impl FnOnce(T) -> R,
) -> RlStatus {
    if ctx.is_null() || out.is_null() {
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: as the caller guarantees.
    let ask = unsafe { &*ctx.cast::<&dyn Fn(u32) -> Option<T>>() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ask(endpoint_index))) {
        Ok(Some(value)) => {
            // SAFETY: checked non-null; the plugin passes a writable slot.
            unsafe { *out = into(value) };
            RL_OK
        }
        Ok(None) => RL_ERR_INVALID_ARGUMENT,
        Err(_) => RL_ERR_INTERNAL,
    }
}

/// The `cached_prefix` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn cached_prefix_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out_len: *mut u64,
) -> RlStatus {
    // SAFETY: the host passes its `CachedPrefix` as `ctx` (`raw_view`).
    unsafe { answer::<u64, u64>(ctx, endpoint_index, out_len, |len| len) }
}

/// The `cached_tiers` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn cached_tiers_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out: *mut RlCachedTiers,
) -> RlStatus {
    // SAFETY: the host passes its `CachedTiers` as `ctx` (`raw_view`).
    unsafe {
        answer(ctx, endpoint_index, out, |[gpu, host, shared]: [u64; 3]| {
            RlCachedTiers { gpu, host, shared }
        })
    }
}

/// The `predict` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn predict_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out: *mut RlPrediction,
) -> RlStatus {
    // SAFETY: the host passes its `Predict` as `ctx` (`raw_view`).
    unsafe { answer::<RlPrediction, RlPrediction>(ctx, endpoint_index, out, |f| f) }
}

/// The `adapter_state` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn adapter_state_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out: *mut RlAdapterState,
) -> RlStatus {
    // SAFETY: the host passes its `AdapterState` as `ctx` (`raw_view`).
    unsafe { answer::<RlAdapterState, RlAdapterState>(ctx, endpoint_index, out, |s| s) }
}
