//! The router's view of time: the routing path's latency in front of it
//! (`router_hop_ms`: milliseconds, or a preset measured on a stated stack), and how late
//! it sees the engines' KV events (`kv_event_lag_ms`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ExperimentError;
use crate::file::Experiment;

/// The presets `router_hop_ms` takes by name: each a measured median, with where it was
/// measured.
pub const HOP_PRESETS: &[(&str, f64, &str)] = &[(
    "serve",
    0.22,
    "routerlab serve with an in-process plugin, median added latency at 500 requests/s \
     (cargo bench -p routerlab-cli --bench serve_overhead)",
)];

/// The routing path's latency as given: milliseconds or a preset's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RouterHop {
    /// This many milliseconds.
    Ms(f64),
    /// A preset of [`HOP_PRESETS`], by name.
    Preset(String),
}

impl RouterHop {
    /// The hop in nanoseconds, checked: 0 to a minute, or a known preset.
    pub fn ns(&self) -> Result<u64, ExperimentError> {
        let ms = match self {
            RouterHop::Ms(ms) => *ms,
            RouterHop::Preset(name) => HOP_PRESETS
                .iter()
                .find(|(preset, ..)| preset == name)
                .map(|&(_, ms, _)| ms)
                .ok_or_else(|| {
                    let known: Vec<_> = HOP_PRESETS.iter().map(|(n, ..)| *n).collect();
                    ExperimentError::invalid(format!(
                        "--router-hop-ms: no preset `{name}` (a number of milliseconds or one of: {})",
                        known.join(", ")
                    ))
                })?,
        };
        if !(ms.is_finite() && (0.0..=60_000.0).contains(&ms)) {
            return Err(ExperimentError::invalid(
                "--router-hop-ms must be from 0 to 60000 (a minute)",
            ));
        }
        Ok((ms * 1e6).round() as u64)
    }
}

/// The router's view of time in nanoseconds, each checked: `kv_event_lag_ms` (to an hour),
/// `router_hop_ms` and `router_decision_ms` (to a minute); 0 when not given.
pub(crate) fn router_time(opts: &Experiment) -> Result<(u64, u64, u64), ExperimentError> {
    Ok((
        ns(
            opts.kv_event_lag_ms,
            "kv-event-lag-ms",
            3_600_000.0,
            "an hour",
        )?,
        opts.router_hop_ms.as_ref().map_or(Ok(0), RouterHop::ns)?,
        ns(
            opts.router_decision_ms,
            "router-decision-ms",
            60_000.0,
            "a minute",
        )?,
    ))
}

/// `ms` (the flag `--FLAG`) in nanoseconds, from 0 to `max` ms (`span` in words).
fn ns(ms: Option<f64>, flag: &str, max: f64, span: &str) -> Result<u64, ExperimentError> {
    match ms {
        None => Ok(0),
        Some(ms) if ms.is_finite() && (0.0..=max).contains(&ms) => Ok((ms * 1e6).round() as u64),
        Some(_) => Err(ExperimentError::invalid(format!(
            "--{flag} must be from 0 to {max} ({span})"
        ))),
    }
}

impl FromStr for RouterHop {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text.parse::<f64>() {
            Ok(ms) => RouterHop::Ms(ms),
            Err(_) => RouterHop::Preset(text.to_owned()),
        })
    }
}

impl fmt::Display for RouterHop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterHop::Ms(ms) => write!(f, "{ms}"),
            RouterHop::Preset(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_is_milliseconds_or_a_known_preset() {
        assert_eq!("12".parse::<RouterHop>().unwrap().ns().unwrap(), 12_000_000);
        assert_eq!("serve".parse::<RouterHop>().unwrap().ns().unwrap(), 220_000);
        let unknown = "gateway".parse::<RouterHop>().unwrap().ns().unwrap_err();
        assert!(
            unknown.to_string().contains("no preset `gateway`"),
            "{unknown}"
        );
        let negative = RouterHop::Ms(-1.0).ns().unwrap_err();
        assert!(
            negative.to_string().contains("from 0 to 60000"),
            "{negative}"
        );
        assert!(RouterHop::Ms(f64::NAN).ns().is_err());
    }
}
