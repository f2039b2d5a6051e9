//! The arrival process: when each request of a workload is sent, in a replay and in
//! `drive` alike. [`Arrivals::schedule`] is the one place the times are worked out (the
//! trace's own, compressed; or a seeded Poisson draw), so a replay and a live run of the
//! same settings send the same request at the same moment.

use serde::{Deserialize, Serialize};

use crate::workload::WorkloadRequest;

/// The last instant the simulator's clock can hold: 2^62 ns, about 146 years. Every
/// quantity that reaches the clock is checked against it, so a sum of two never wraps.
pub const MAX_CLOCK_NS: u64 = 1 << 62;

/// The clock's range, for messages.
pub const CLOCK_RANGE: &str = "the simulator's range of 146 years (2^62 ns)";

/// Why a workload cannot be scheduled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ArrivalError {
    /// The trace's own times were asked for, and a request has none.
    #[error("line {line}: the trace has no arrival times")]
    NoArrivalTimes {
        /// The first line without one.
        line: usize,
    },
    /// A time past [`MAX_CLOCK_NS`].
    #[error("line {line}: {what} is beyond {CLOCK_RANGE}")]
    BeyondClock {
        /// The request's line.
        line: usize,
        /// Which time, in words.
        what: String,
    },
}

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

impl Arrivals {
    /// Requests in flight at once, for a closed loop.
    pub fn concurrency(&self) -> Option<usize> {
        match self {
            Arrivals::Closed { concurrency } => Some(*concurrency),
            _ => None,
        }
    }

    /// When each request is sent, in nanoseconds from the start, in workload order; a
    /// closed loop has no times (requests go as earlier ones finish) and gives `None`.
    /// `seed` drives the Poisson draw.
    pub fn schedule(
        &self,
        requests: &[WorkloadRequest],
        seed: u64,
    ) -> Result<Option<Vec<u64>>, ArrivalError> {
        let Some(mut clock) = self.clock(seed) else {
            return Ok(None);
        };
        (requests.iter())
            .map(|request| clock.next(request.line, request.arrival_ns))
            .collect::<Result<Vec<u64>, ArrivalError>>()
            .map(Some)
    }

    /// The same times one request at a time, for a replay that reads the trace as it goes:
    /// `None` for a closed loop.
    pub fn clock(&self, seed: u64) -> Option<ArrivalClock> {
        match *self {
            Arrivals::Closed { .. } => None,
            Arrivals::Trace { speedup } => Some(ArrivalClock::Trace { speedup }),
            Arrivals::Poisson { rate } => Some(ArrivalClock::Poisson {
                rate,
                rng: routerlab_core::SeededRng::new(seed),
                clock: 0.0,
            }),
        }
    }
}

/// [`Arrivals::schedule`] one request at a time, in workload order.
#[derive(Debug, Clone)]
pub enum ArrivalClock {
    /// The trace's own times, divided by `speedup`.
    Trace {
        /// Time compression.
        speedup: f64,
    },
    /// A seeded Poisson draw.
    Poisson {
        /// Requests per second.
        rate: f64,
        /// The draw.
        rng: routerlab_core::SeededRng,
        /// The last arrival, seconds.
        clock: f64,
    },
}

impl ArrivalClock {
    /// When the next request of the workload (at `line`, with the trace's `arrival_ns`)
    /// is sent, ns from the start.
    pub fn next(&mut self, line: usize, arrival_ns: Option<u64>) -> Result<u64, ArrivalError> {
        match self {
            ArrivalClock::Trace { speedup } => {
                let Some(ns) = arrival_ns else {
                    return Err(ArrivalError::NoArrivalTimes { line });
                };
                let at = (ns as f64 / *speedup).round();
                if at.is_nan() || at > MAX_CLOCK_NS as f64 {
                    let after = if *speedup == 1.0 {
                        ""
                    } else {
                        " after the speedup"
                    };
                    return Err(ArrivalError::BeyondClock {
                        line,
                        what: format!("arrival {} ms{after}", ns as f64 / 1e6),
                    });
                }
                Ok(at as u64)
            }
            ArrivalClock::Poisson { rate, rng, clock } => {
                *clock += -(1.0 - rng.unit_f64()).ln() / *rate;
                let at = (*clock * 1e9).round();
                if at.is_nan() || at > MAX_CLOCK_NS as f64 {
                    return Err(ArrivalError::BeyondClock {
                        line,
                        what: format!("at {rate} requests/s, its arrival ({clock:.3e} s)"),
                    });
                }
                Ok(at as u64)
            }
        }
    }
}
