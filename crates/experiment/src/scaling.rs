//! A scaled fleet's description: the scaler and its settings (`scaler`, `scaler_config`,
//! `scale_interval_s`, `startup_s`, `min_endpoints`, `max_gpus`), resolved into the
//! scenario of a timed replay, or into `serve`'s settings. In a replay the fleet then has
//! one engine slot per endpoint the GPU ceiling allows, named as `endpoints` names them, of
//! which `endpoints` serve at the start.

use routerlab_sim::scenario::Scenario;
use routerlab_sim::timed::{MAX_CLOCK_NS, ScalingSettings};
use serde::{Deserialize, Serialize};
use serde_yaml::Mapping;

use crate::{Experiment, ExperimentError};

/// The scaler a description names, and how it is run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalerSpec {
    /// The scaler plugin.
    pub name: String,
    /// Its config (without the seed).
    pub config: Mapping,
    /// The tick, the start-up delay, the fleet's first size and floor, GPUs per endpoint.
    #[serde(with = "SettingsDef")]
    pub settings: ScalingSettings,
    /// The most endpoints the GPU ceiling allows.
    pub max_endpoints: u32,
}

/// [`ScalingSettings`]' fields, for serde (the sim crate has no serde).
#[derive(Serialize, Deserialize)]
#[serde(remote = "ScalingSettings")]
struct SettingsDef {
    interval_ns: u64,
    startup_ns: u64,
    initial: u32,
    min_endpoints: u32,
    gpus_per_endpoint: u32,
    prefill: Option<(u32, u32)>,
    max_endpoints: u32,
}

/// The scaling keys of `opts`, checked, for a fleet of `initial` endpoints; `None` without
/// a scaler (a scaling key without one is refused).
pub(crate) fn spec(
    opts: &Experiment,
    initial: usize,
) -> Result<Option<ScalerSpec>, ExperimentError> {
    let given = [
        ("scaler_config", opts.scaler_config.is_some()),
        ("scale_interval_s", opts.scale_interval_s.is_some()),
        ("startup_s", opts.startup_s.is_some()),
        ("min_endpoints", opts.min_endpoints.is_some()),
        ("max_gpus", opts.max_gpus.is_some()),
    ];
    let Some(scaler) = &opts.scaler else {
        if let Some((key, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ExperimentError::invalid(format!(
                "--{} sets the scaler: add --scaler NAME",
                key.replace('_', "-")
            )));
        }
        return Ok(None);
    };
    let Some(max_gpus) = opts.max_gpus else {
        return Err(ExperimentError::invalid(
            "--scaler needs --max-gpus N, the GPU ceiling the fleet may grow to",
        ));
    };
    let tp = u64::from(opts.tensor_parallel_size.unwrap_or(1).max(1));
    let initial = initial as u64;
    let slots = max_gpus / tp;
    if slots < initial || slots > routerlab_sim::MAX_ENDPOINTS as u64 {
        return Err(ExperimentError::invalid(format!(
            "--max-gpus {max_gpus} allows {slots} endpoints of {tp} GPUs: it must allow the {initial} of --endpoints, and at most {}",
            routerlab_sim::MAX_ENDPOINTS
        )));
    }
    let seconds = |key: &str, value: Option<f64>, default: f64, zero: bool| {
        let s = value.unwrap_or(default);
        let least = if zero { s >= 0.0 } else { s > 0.0 };
        if s.is_finite() && least && s * 1e9 <= MAX_CLOCK_NS as f64 {
            Ok((s * 1e9).round() as u64)
        } else {
            Err(ExperimentError::invalid(format!(
                "--{} must be {} seconds within the clock's range, not {s}",
                key.replace('_', "-"),
                if zero { "0 or more" } else { "above 0" }
            )))
        }
    };
    let interval_ns = seconds("scale_interval_s", opts.scale_interval_s, 15.0, false)?;
    let startup_ns = seconds("startup_s", opts.startup_s, 0.0, true)?;
    let min_endpoints = opts.min_endpoints.unwrap_or(1);
    if min_endpoints == 0 || min_endpoints > initial {
        return Err(ExperimentError::invalid(format!(
            "--min-endpoints must be from 1 to the {initial} endpoints the fleet starts with, not {min_endpoints}"
        )));
    }
    Ok(Some(ScalerSpec {
        name: scaler.clone(),
        config: crate::resolve::plugin_config(opts.scaler_config.clone(), "scaler")?,
        settings: ScalingSettings {
            interval_ns,
            startup_ns,
            initial: initial as u32,
            min_endpoints: min_endpoints as u32,
            gpus_per_endpoint: tp as u32,
            prefill: None,
            max_endpoints: slots as u32,
        },
        max_endpoints: slots as u32,
    }))
}

/// Resolves the scaling keys of `opts` into `scenario` (already resolved without them).
pub(crate) fn apply(opts: &Experiment, scenario: &mut Scenario) -> Result<(), ExperimentError> {
    let Some(mut spec) = spec(opts, scenario.endpoints.len())? else {
        return Ok(());
    };
    let Some(timed) = scenario.timed.as_mut() else {
        return Err(ExperimentError::invalid(
            "--scaler sizes the fleet of a timed replay: add --timing trace",
        ));
    };
    let ceiling = spec.max_endpoints as usize;
    let min = spec.settings.min_endpoints as usize;
    let given = std::mem::take(&mut scenario.endpoints);
    // Slot names beyond the given endpoints, as a count names them, never a given one.
    let named = |names: Vec<String>, from: usize| -> Result<Vec<String>, ExperimentError> {
        let mut out = Vec::new();
        for name in names.into_iter().skip(from) {
            if given.contains(&name) {
                return Err(ExperimentError::invalid(format!(
                    "--scaler: the endpoint `{name}` is both given and a slot the scaler may start"
                )));
            }
            out.push(name);
        }
        Ok(out)
    };
    match scenario.pools.as_mut() {
        None => {
            let extra = named(
                routerlab_sim::scenario::default_endpoints(ceiling),
                given.len(),
            )?;
            scenario.endpoints = given;
            scenario.endpoints.extend(extra);
            let engine = timed
                .engines
                .last()
                .cloned()
                .expect("one engine per endpoint");
            timed.engines.resize(scenario.endpoints.len(), engine);
        }
        Some(pools) => {
            // Each pool may grow until the other is at its floor.
            let (p, d) = (pools.prefill, given.len() - pools.prefill);
            if p < min || d < min {
                return Err(ExperimentError::invalid(format!(
                    "--min-endpoints {min} is kept in each pool: the fleet starts with {p} prefill and {d} decode endpoints"
                )));
            }
            let (p_slots, d_slots) = ((ceiling - min).max(p), (ceiling - min).max(d));
            let slot_names = |role: &str, n: usize| (0..n).map(|i| format!("{role}-{i}")).collect();
            let prefill_extra = named(slot_names("prefill", p_slots), p)?;
            let decode_extra = named(slot_names("decode", d_slots), d)?;
            let (prefill_engine, decode_engine) =
                (timed.engines[0].clone(), timed.engines[p].clone());
            scenario.endpoints = (given[..p].iter().cloned())
                .chain(prefill_extra)
                .chain(given[p..].iter().cloned())
                .chain(decode_extra)
                .collect();
            timed.engines = std::iter::repeat_n(prefill_engine, p_slots)
                .chain(std::iter::repeat_n(decode_engine, d_slots))
                .collect();
            pools.prefill = p_slots;
            spec.settings.prefill = Some((p_slots as u32, p as u32));
        }
    }
    timed.scaling = Some(spec.settings);
    scenario.scaler = Some((spec.name, spec.config));
    Ok(())
}
