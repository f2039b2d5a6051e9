//! routerlab-sim: routes a workload through plugins and measures the outcome.
//!
//! One [`Router`] (matcher, detector, endpoint table, unavailable policy)
//! makes every decision, for both drivers: [`timefree`] replays a trace in file order with
//! a prefix-cache model per endpoint, as the prototype did; [`timed`] runs a discrete-event
//! simulation of arrivals, router queue and engines ([`engine`]) on a logical clock.
//! Statistics accumulate as named types ([`stats`]) into the [`report`] schema, whose `run`
//! block ([`run`]) says what produced it; per-request records go to an
//! [`Observer`](observer::Observer). This crate never touches raw ABI types: it talks to
//! plugins only through `routerlab-host`'s safe handles.

pub mod calibrate;
pub mod compare;
pub mod error;
pub mod observer;
pub mod replicas;
pub mod report;
pub mod router;
pub mod run;
pub mod snapshot;
pub mod stats;
pub mod timed;
pub mod timefree;

pub use error::SimError;
pub use replicas::{ReplicaAssign, Replicas};
pub use report::Report;
pub use router::{MAX_ENDPOINTS, Router, WhenUnavailable};
