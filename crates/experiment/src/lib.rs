//! routerlab-experiment: how a run is described.
//!
//! `Scenario` (routerlab-sim) is a run assembled; this crate owns how one is *described*:
//! the experiment file's schema ([`Experiment`], versioned, unknown keys refused), layers
//! of settings laid one over the next and read once ([`Layers`]: the file, then the
//! command line's flags, then a sweep's grid values), the resolution of a description
//! into a run with every default ([`resolve`]), the `--policy` grammar ([`policy`]), a
//! sweep's grid, shards and their gathering ([`sweep`]), a search's space and objective
//! ([`recommend`]), and `serve`'s settings from the
//! same keys ([`Experiment::serving`]), and batches of described runs driven on threads
//! ([`batch`]). The command line keeps its flags, printing and
//! exit codes; whatever varies a run programmatically varies an [`Experiment`].

pub mod batch;
mod error;
mod file;
mod fleet;
mod hop;
pub mod import;
mod measured;
pub mod policy;
pub mod recommend;
mod replica_sync;
mod resolve;
mod scaling;
mod serve;
pub mod sweep;

pub use error::{ExperimentError, one_line};
pub use file::{
    Assign, Experiment, Layers, OutputFormat, Sync, SyncWhat, Timing, Unavailable, VERSION,
    parse_mapping,
};
pub use hop::{HOP_PRESETS, RouterHop};
pub use policy::config_text;
pub use resolve::{Run, TIMED_ONLY, arrivals, resolve, slo};
pub use scaling::ScalerSpec;
pub use serve::{DEFAULT_SCRAPE_INTERVAL_MS, SERVE_KEYS, Serving};

/// The deadline on one plugin call unless one is given, in every command that calls
/// plugins (a replay ends with an error naming the call; `serve` answers the request as
/// `--on-plugin-error` says).
pub const DEFAULT_PLUGIN_TIMEOUT_MS: u64 = 1_000;
