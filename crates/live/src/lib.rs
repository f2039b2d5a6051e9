//! routerlab-live: the plugins in front of real (or simulated) engines, over HTTP.
//!
//! The point of a stable plugin ABI is that the library measured in a replay is the library
//! deployed. [`serve`] is that deployment: an OpenAI-compatible router that builds each
//! request exactly as a replay builds it and asks the same `Router` where it goes.
//! [`engine`] is the replay's engine model as an OpenAI-compatible server, so routers can
//! be tested at scale without GPUs, and [`drive`] sends a trace to any such URL and
//! reports what it measured in the replay's report schema.

pub mod drive;
pub mod engine;
mod error;
pub mod http;
pub mod kv_events;
pub mod openai;
pub mod plugin_host;
pub mod prom;
pub mod serve;
pub mod vllm_keys;

pub use error::LiveError;
