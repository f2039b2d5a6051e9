//! routerlab-core: the plugin ABI and the Rust SDK for writing plugins against it.
//!
//! This crate is the only dependency a plugin needs. It is deliberately small: [`abi`] is
//! the versioned C contract (from which `include/routerlab.h` is generated), [`sdk`] turns
//! that contract into safe Rust traits, and [`config`], [`rng`], [`hash`] and [`lru`] are the helpers
//! every policy ends up needing (strict config parsing, seeded randomness, a fixed hash, a bounded recency list), so
//! that two plugins never disagree on them.
//!
//! `unsafe` is allowed here, and only in `abi` and `sdk`: they are the boundary.

#![allow(unsafe_code)]

pub mod abi;
pub mod config;
pub mod hash;
pub mod lru;
pub mod rng;
pub mod sdk;

pub use config::PluginConfig;
pub use rng::SeededRng;
pub use sdk::{Detector, EndpointStatus, Endpoints, Matcher, Request, Unit};
