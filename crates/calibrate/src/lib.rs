//! routerlab-calibrate: measured runs in, a fitted engine model out.
//!
//! A timed replay is worth what its step-time model is worth. This crate reads what a
//! benchmark tool measured of a real engine ([`formats`]: LLMServingSim's layout,
//! DistServe, `vllm bench serve`, AIPerf, GuideLLM, inference-perf, LMBench, fmperf; [`load`]
//! turns a path and the settings a run does not record into [`MeasuredRun`]s), replays the
//! very workload the engine was fed on a [`ServingFleet`] of engine models, and [`fit`]s
//! the `batched` step-time model's terms until the simulated TTFT and time-per-output-token
//! distributions match the measured ones; [`validate`] holds a fitted config against other
//! runs. The search is seeded and deterministic: the same run and seed give the same fit.
//! Nothing here prints or knows a flag's spelling beyond naming it in an error; the
//! command line keeps the flags.

pub mod as_trace;
mod error;
mod fit;
mod fleet;
pub mod formats;
pub mod from_log;
pub mod load;
mod measured;
pub mod validate;

pub use error::CalibrateError;
pub use fit::{Fit, KvSearch, fit};
pub use fleet::ServingFleet;
pub use measured::{
    Figures, MeasuredRequest, MeasuredRun, MeasuredRunError, Sample, Samples, Session, quantile,
};
