//! routerlab-sim: routes a workload through plugins and measures the outcome.
//!
//! Two drivers route every request through `routerlab-route`'s [`Router`]: [`timefree`]
//! replays a trace in file order with a prefix-cache model per endpoint, as the prototype
//! did; [`timed`] runs a discrete-event simulation of arrivals, router queue and engines
//! (`routerlab-engine`) on a logical clock. Statistics accumulate into the
//! `routerlab-report` schema; per-request records go to an [`Observer`](observer::Observer).
//! [`snapshot`] is the plugin authors' test helper (fitting the engine model to a measured
//! run is `routerlab-calibrate`'s). This crate never touches raw ABI types: it talks to plugins only
//! through `routerlab-host`'s safe handles.

pub mod error;
pub mod logged;
pub mod observer;
mod read_ahead;
pub mod scenario;
pub mod snapshot;
#[cfg(test)]
mod test_plugins;
pub mod timed;
pub mod timefree;

pub use error::SimError;
pub use routerlab_report::Report;
pub use routerlab_route::{MAX_ENDPOINTS, ReplicaAssign, Replicas, Router, WhenUnavailable};
