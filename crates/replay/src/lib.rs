//! routerlab-replay: routes traces through plugins and measures the outcome.
//!
//! The pieces are separate so each can be tested on its own: [`trace`] reads and checks
//! trace files, [`synth`] writes synthetic ones, [`replay`] runs the time-free replay, and
//! [`report`] holds the statistics and their formats. [`cli`] is the glue the `routerlab`
//! binary runs. This crate never touches the raw ABI: it talks to plugins only through
//! `routerlab-host`'s safe handles.

pub mod cli;
pub mod engine;
pub mod replay;
pub mod report;
pub mod synth;
pub mod timed;
pub mod trace;
