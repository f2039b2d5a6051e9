//! Percentiles of one latency: the figure the timed report, the agentic report and the SLO
//! report all use (a leaf).

use serde::{Deserialize, Serialize};

/// Percentiles of one latency, in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}
