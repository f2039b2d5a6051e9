//! The host's side of the request callbacks (`cached_prefix`, `cached_tiers`, `predict`):
//! C functions that call back into the closure a [`crate::RequestData`] carries, never
//! unwinding into the plugin's frames.

use std::ffi::c_void;

use routerlab_core::abi::*;

use crate::instance::{CachedPrefix, CachedTiers, Predict};

/// The `cached_prefix` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn cached_prefix_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out_len: *mut u64,
) -> RlStatus {
    if ctx.is_null() || out_len.is_null() {
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: `ctx` is the `CachedPrefix` of the `RequestData` the host is calling with,
    // alive for the whole call (`raw_view` borrows it).
    let ask = unsafe { &*ctx.cast::<CachedPrefix<'_>>() };
    // A panic must not unwind into the plugin's C frames.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ask(endpoint_index))) {
        Ok(Some(len)) => {
            // SAFETY: checked non-null; the plugin passes a writable slot.
            unsafe { *out_len = len };
            RL_OK
        }
        Ok(None) => RL_ERR_INVALID_ARGUMENT,
        Err(_) => RL_ERR_INTERNAL,
    }
}

/// The `cached_tiers` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn cached_tiers_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out: *mut RlCachedTiers,
) -> RlStatus {
    if ctx.is_null() || out.is_null() {
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: `ctx` is the `CachedTiers` of the `RequestData` the host is calling with,
    // alive for the whole call (`raw_view` borrows it).
    let ask = unsafe { &*ctx.cast::<CachedTiers<'_>>() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ask(endpoint_index))) {
        Ok(Some([gpu, host, shared])) => {
            // SAFETY: checked non-null; the plugin passes a writable slot.
            unsafe { *out = RlCachedTiers { gpu, host, shared } };
            RL_OK
        }
        Ok(None) => RL_ERR_INVALID_ARGUMENT,
        Err(_) => RL_ERR_INTERNAL,
    }
}

/// The `predict` callback: asks the host closure at `ctx`.
pub(crate) unsafe extern "C" fn predict_trampoline(
    ctx: *const c_void,
    endpoint_index: u32,
    out: *mut RlPrediction,
) -> RlStatus {
    if ctx.is_null() || out.is_null() {
        return RL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: `ctx` is the `Predict` of the `RequestData` the host is calling with,
    // alive for the whole call (`raw_view` borrows it).
    let ask = unsafe { &*ctx.cast::<Predict<'_>>() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ask(endpoint_index))) {
        Ok(Some(forecast)) => {
            // SAFETY: checked non-null; the plugin passes a writable slot.
            unsafe { *out = forecast };
            RL_OK
        }
        Ok(None) => RL_ERR_INVALID_ARGUMENT,
        Err(_) => RL_ERR_INTERNAL,
    }
}
