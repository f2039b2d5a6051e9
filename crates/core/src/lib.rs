//! routerlab-core: the plugin ABI and the Rust SDK for writing plugins against it.
//!
//! This crate is the API boundary and the only dependency a plugin needs. It is deliberately
//! small: [`abi`] is the versioned C contract (from which `include/routerlab.h` is
//! generated), [`sdk`] turns that contract into safe Rust traits, and [`config`], [`rng`]
//! and [`hash`] are what both sides of the boundary must agree on (strict config parsing,
//! seeded randomness, a fixed hash and dense block ids). [`testing`] lends plugin authors the
//! views a host would, so a policy can be unit-tested in its own crate. Building blocks for
//! policies that are not part of the contract live in `routerlab-policy-kit`.
//!
//! `unsafe` is allowed here, and only in `abi`, `sdk` and `testing`: they are the boundary.

#![allow(unsafe_code)]

pub mod abi;
pub mod config;
pub mod hash;
pub mod rng;
pub mod sdk;
pub mod testing;

pub use config::PluginConfig;
pub use rng::SeededRng;
pub use sdk::{
    BYTES_PER_TOKEN, Detector, EndpointId, EndpointStatus, Endpoints, LoraSlots, Matcher, Phase,
    Pool, Request, Role, Scaler, Tick, Unit,
};
