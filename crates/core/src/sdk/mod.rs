//! The Rust SDK: write a plugin as a plain Rust type, export it with
//! [`export_plugins!`](crate::export_plugins).
//!
//! The SDK owns every `unsafe` step of being a plugin so that plugin crates need none: it
//! copies the borrowed C request into a safe [`Request`] view (reading only the bytes the
//! host's `struct_size` says it wrote), wraps endpoint lists in [`Endpoints`], copies error
//! messages through the host's sink, and runs every entry under `catch_unwind`. A panic
//! becomes `RL_ERR_PANIC` with the payload as the message and poisons the instance: its
//! state is dropped and every later call answers `RL_ERR_POISONED`, because state left
//! half-updated by a panic cannot be trusted. (A plugin built with `panic = "abort"`, or C
//! code that crashes, still takes the process down; only a separate process could prevent
//! that.)
//!
//! A matcher implements two methods, [`Matcher::create`] and [`Matcher::match_request`];
//! every other method has a default body that does nothing, and every slot of the vtable is
//! always installed, so a method you write is always called. `create` reads its keys from
//! a parsed [`PluginConfig`](crate::PluginConfig) and the SDK rejects any key left unread
//! once it returns. [`testing`](crate::testing) builds request and endpoint views without
//! `unsafe`, so a plugin crate can unit-test its rule.

mod export;
mod scaler;
mod traits;
pub(crate) mod views;

pub use export::{DetectorExport, MatcherExport, ScalerExport};
pub use scaler::{Pool, Scaler, Tick};
pub use traits::{Detector, Matcher};
pub use views::{
    BYTES_PER_TOKEN, EndpointId, EndpointStatus, Endpoints, LoraSlots, Phase, Request, Role, Unit,
};

pub(crate) use views::raw_bytes;
