//! The arrival process: when each request of a workload is sent, in a replay and in
//! `drive` alike.

use serde::{Deserialize, Serialize};

/// Where arrival times come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "process")]
pub enum Arrivals {
    /// The trace's timestamps, divided by `speedup`.
    Trace {
        /// Time compression (2 = twice as fast).
        speedup: f64,
    },
    /// Poisson arrivals at `rate` requests per second, seeded, in file order.
    Poisson {
        /// Requests per second.
        rate: f64,
    },
    /// Closed loop: `concurrency` requests outstanding; each completion sends the next.
    Closed {
        /// Requests in flight.
        concurrency: usize,
    },
}
