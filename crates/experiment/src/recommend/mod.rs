//! `recommend`'s file: experiment settings as `replay` reads them (the base every candidate
//! shares), a `search` of settings given as ranges or choices ([`space`]), the `objective`,
//! a `budget` and GPU `prices`; and a candidate's picks turned into a described run, as a
//! sweep's grid values are ([`crate::sweep`]).
//!
//! ```yaml
//! trace: traces/mooncake-conversation.jsonl
//! timing: trace
//! slo_ttft_ms: 2000
//! search:
//!   endpoints: {int: [1, 8]}
//!   policy: {choice: [round-robin, {matcher: dynamo-kv, matcher_config: {overlap_score_weight: {float: [0, 2]}}}]}
//! objective: {goal: least-cost, attainment: 0.9}
//! budget: {gpus: 8}
//! ```

pub mod rank;
pub mod search;
pub mod space;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use crate::ExperimentError;
use crate::error::one_line;
use crate::file::{Experiment, Layers};
use crate::policy::{Policy, PolicyEntry};
use crate::sweep::{PLUGIN_KEYS, compact, settings_with};
use search::{Goal, Metric};
use space::{Pick, Space};

/// A recommend file, read.
#[derive(Debug, Clone)]
pub struct Recommend {
    /// The file.
    pub path: PathBuf,
    base: Mapping,
    base_policy: Option<Value>,
    /// The settings searched.
    pub space: Space,
    /// What is optimised.
    pub goal: Goal,
    /// At most this many GPUs a candidate.
    pub max_gpus: Option<u64>,
    /// At most this cost an hour a candidate (with prices).
    pub max_cost: Option<f64>,
    /// Price of a GPU-hour by GPU name (`gpu` key; `default` for a run that names none).
    pub prices: BTreeMap<String, f64>,
}

/// A candidate made into a run's description.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// `key=value, ...` of what the search chose.
    pub label: String,
    /// What the search chose, as settings.
    pub settings: Mapping,
    /// Its description.
    pub experiment: Experiment,
    /// Its policy.
    pub policy: Policy,
    /// The GPUs it takes: endpoints (both pools of a disaggregated fleet) × tensor
    /// parallel size.
    pub gpus: u64,
    /// Its price an hour (the GPUs when no prices were given).
    pub cost: f64,
}

impl Recommend {
    /// Reads the recommend file at `path` holding `bytes`.
    pub fn read(path: &Path, bytes: &[u8]) -> Result<Recommend, ExperimentError> {
        let at = |what: String| ExperimentError::invalid(format!("{}: {what}", path.display()));
        let mut base = settings_with(bytes, "search").map_err(at)?;
        let search = match base.remove("search") {
            Some(Value::Mapping(m)) => m,
            Some(_) => return Err(at("`search` must map settings to ranges or choices".into())),
            None => {
                return Err(at(
                    "no `search`: give the settings to search, e.g. `search: {endpoints: {int: [1, 8]}}`"
                        .into(),
                ));
            }
        };
        for key in PLUGIN_KEYS.into_iter().chain(["grid"]) {
            if base.contains_key(key) || search.contains_key(key) {
                return Err(at(format!(
                    "`{key}` has no place in a recommend file: a candidate's plugins come from `policy` (searched, or one beside `search`)"
                )));
            }
        }
        let base_policy = base.remove("policy");
        if base_policy.is_none() && !search.contains_key("policy") {
            return Err(at(
                "no policy: search `policy` or give one beside `search`".into()
            ));
        }
        let goal = goal(base.remove("objective")).map_err(|e| at(format!("objective: {e}")))?;
        let (max_gpus, max_cost) =
            budget(base.remove("budget")).map_err(|e| at(format!("budget: {e}")))?;
        let prices = prices(base.remove("prices")).map_err(|e| at(format!("prices: {e}")))?;
        if max_cost.is_some() && prices.is_empty() {
            return Err(at(
                "budget `cost` needs `prices` (per GPU-hour, by GPU name)".into(),
            ));
        }
        let slo_given = ["slo_ttft_ms", "slo_tpot_ms"]
            .iter()
            .any(|k| base.contains_key(*k) || search.contains_key(*k));
        let space = Space::new(search).map_err(at)?;
        if matches!(
            goal,
            Goal::LeastCost(_)
                | Goal::GoodputPerGpu
                | Goal::Lowest(Metric::Attainment)
                | Goal::Pareto(Metric::Attainment)
        ) && !slo_given
        {
            return Err(at(
                "this objective judges requests by an SLO: set `slo_ttft_ms` and/or `slo_tpot_ms`"
                    .into(),
            ));
        }
        Ok(Recommend {
            path: path.to_owned(),
            base,
            base_policy,
            space,
            goal,
            max_gpus,
            max_cost,
            prices,
        })
    }

    /// The run `picks` describe.
    pub fn candidate(&self, picks: &[Option<Pick>]) -> Result<Candidate, ExperimentError> {
        let at =
            |what: String| ExperimentError::invalid(format!("{}: {what}", self.path.display()));
        let settings = flatten(self.space.settings(picks))
            .map_err(|e| at(format!("search `{VARIANT}`: {e}")))?;
        let mut values = settings.clone();
        let policy = values.remove("policy").or_else(|| self.base_policy.clone());
        let raw = settings
            .iter()
            .map(|(k, v)| format!("{}={}", k.as_str().unwrap_or("?"), compact(v)))
            .collect::<Vec<_>>()
            .join(", ");
        let in_raw = |what: String| at(format!("candidate ({raw}): {what}"));
        let policy: PolicyEntry = serde_yaml::from_value(policy.expect("checked in read"))
            .map_err(|e| in_raw(format!("policy: {}", one_line(&e.to_string()))))?;
        let policy = policy.resolve().map_err(in_raw)?;
        // The policy by its own name (`dynamo-kv {overlap_score_weight: 0.5}`), first.
        let mut parts = vec![policy.label.clone()];
        parts.extend(
            values
                .iter()
                .map(|(k, v)| format!("{}={}", k.as_str().unwrap_or("?"), compact(v))),
        );
        let label = parts.join(", ");
        let in_run = |what: String| at(format!("candidate ({label}): {what}"));
        let dir = self.path.parent().map(Path::to_owned).unwrap_or_default();
        let experiment = Layers::new()
            .over(self.base.clone())
            .over(values)
            .paths_from(&dir)
            .experiment()
            .map_err(|e| in_run(e.to_string()))?;
        let run =
            crate::resolve(&experiment.with_policy(&policy)?).map_err(|e| in_run(e.to_string()))?;
        let endpoints = run.scenario.endpoints.len() as u64;
        let gpus =
            endpoints.saturating_mul(u64::from(experiment.tensor_parallel_size.unwrap_or(1)));
        let cost = if self.prices.is_empty() {
            gpus as f64
        } else {
            let name = experiment.gpu.as_deref().unwrap_or("default");
            let price = self.prices.get(name).ok_or_else(|| {
                in_run(format!(
                    "no price for GPU `{name}` (prices: {})",
                    self.price_names()
                ))
            })?;
            gpus as f64 * price
        };
        Ok(Candidate {
            label,
            settings,
            experiment,
            policy,
            gpus,
            cost,
        })
    }

    /// Whether a candidate of `gpus` GPUs costing `cost` is within the budget.
    pub fn affordable(&self, gpus: u64, cost: f64) -> bool {
        self.max_gpus.is_none_or(|max| gpus <= max) && self.max_cost.is_none_or(|max| cost <= max)
    }

    fn price_names(&self) -> String {
        self.prices.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// The winner as an experiment file `replay`, `compare` and `serve` take: the base, the
    /// chosen settings and the policy's plugins, every path absolute.
    pub fn winner_file(&self, candidate: &Candidate) -> Result<String, ExperimentError> {
        let dir = self.path.parent().map(Path::to_owned).unwrap_or_default();
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let dir = dir
            .canonicalize()
            .map_err(|e| ExperimentError::invalid(format!("{}: {e}", self.path.display())))?;
        let mut values = candidate.settings.clone();
        values.remove("policy");
        let layers = Layers::new()
            .over(self.base.clone())
            .over(values)
            .paths_from(&dir);
        let mut out = layers.mapping().clone();
        let policy = &candidate.policy;
        out.insert("matcher".into(), Value::String(policy.matcher.clone()));
        if let Some(config) = policy.matcher_config.clone() {
            out.insert("matcher_config".into(), config.value("matcher")?);
        }
        if let Some(detector) = &policy.detector {
            out.insert("detector".into(), Value::String(detector.clone()));
        }
        if let Some(config) = policy.detector_config.clone() {
            out.insert("detector_config".into(), config.value("detector")?);
        }
        let text =
            serde_yaml::to_string(&out).map_err(|e| ExperimentError::invalid(e.to_string()))?;
        Ok(format!(
            "# The winner of `routerlab recommend {}` ({}).\n{text}",
            self.path.display(),
            candidate.label
        ))
    }
}

fn goal(value: Option<Value>) -> Result<Goal, String> {
    let Some(Value::Mapping(map)) = value else {
        return Err("give one, e.g. `objective: {goal: least-cost, attainment: 0.9}` (goals: least-cost, goodput-per-gpu, lowest, pareto)".into());
    };
    let known = ["goal", "attainment", "against", "metric"];
    if let Some(k) = map
        .keys()
        .find(|k| !k.as_str().is_some_and(|k| known.contains(&k)))
    {
        return Err(format!(
            "unknown key {} (keys: goal, attainment, against, metric)",
            compact(k)
        ));
    }
    match map.get("goal").and_then(Value::as_str) {
        Some("least-cost") => match map.get("attainment").and_then(Value::as_f64) {
            Some(a) if (0.0..=1.0).contains(&a) && a > 0.0 => Ok(Goal::LeastCost(a)),
            _ => Err("least-cost needs `attainment`, a fraction above 0 and at most 1".into()),
        },
        Some("goodput-per-gpu") => Ok(Goal::GoodputPerGpu),
        Some(goal @ ("pareto" | "lowest")) => {
            let key = if goal == "pareto" {
                "against"
            } else {
                "metric"
            };
            let name = map.get(key).and_then(Value::as_str).unwrap_or("attainment");
            let metric = Metric::parse(name).ok_or_else(|| {
                format!("{key} `{name}`: expected attainment, ttft_mean_ms, ttft_p50_ms, ttft_p90_ms, ttft_p99_ms or e2e_p90_ms")
            })?;
            Ok(if goal == "pareto" {
                Goal::Pareto(metric)
            } else {
                Goal::Lowest(metric)
            })
        }
        _ => Err("`goal` is least-cost, goodput-per-gpu, lowest or pareto".into()),
    }
}

fn budget(value: Option<Value>) -> Result<(Option<u64>, Option<f64>), String> {
    let Some(value) = value else {
        return Ok((None, None));
    };
    let Value::Mapping(map) = value else {
        return Err("expected `{gpus: N}` and/or `{cost: C}`".into());
    };
    let mut out = (None, None);
    for (k, v) in &map {
        match k.as_str() {
            Some("gpus") => {
                out.0 = Some(
                    v.as_u64()
                        .filter(|n| *n > 0)
                        .ok_or("`gpus` is a count above 0")?,
                )
            }
            Some("cost") => {
                out.1 = Some(
                    v.as_f64()
                        .filter(|c| *c > 0.0 && c.is_finite())
                        .ok_or("`cost` is a positive number")?,
                )
            }
            _ => return Err(format!("unknown key {} (keys: gpus, cost)", compact(k))),
        }
    }
    Ok(out)
}

fn prices(value: Option<Value>) -> Result<BTreeMap<String, f64>, String> {
    let Some(value) = value else {
        return Ok(BTreeMap::new());
    };
    let Value::Mapping(map) = value else {
        return Err("expected GPU names with prices per GPU-hour".into());
    };
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let name = k.as_str().ok_or("keys are GPU names")?.to_owned();
        let price = v
            .as_f64()
            .filter(|p| *p >= 0.0 && p.is_finite())
            .ok_or_else(|| format!("`{name}`: a price is a number, 0 or more"))?;
        out.insert(name, price);
    }
    Ok(out)
}

/// The search key whose choices are groups of settings taken together (an aggregated
/// fleet, or a disaggregated one with its split): the chosen group's keys join the rest.
pub const VARIANT: &str = "variant";

/// The chosen [`VARIANT`]'s settings laid beside the others.
fn flatten(mut settings: Mapping) -> Result<Mapping, String> {
    let Some(variant) = settings.remove(VARIANT) else {
        return Ok(settings);
    };
    let Value::Mapping(group) = variant else {
        return Err("each alternative is a mapping of settings".into());
    };
    for (key, value) in group {
        if settings.contains_key(&key) {
            return Err(format!("{} is searched beside it too", compact(&key)));
        }
        settings.insert(key, value);
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variant_lays_its_group_beside_the_other_settings_or_names_a_clash() {
        let settings = |text: &str| serde_yaml::from_str::<Mapping>(text).unwrap();
        let flat = flatten(settings(
            "variant: {prefill_endpoints: 1, decode_endpoints: 3}\npolicy: lcp",
        ))
        .unwrap();
        assert_eq!(
            serde_yaml::to_string(&flat).unwrap(),
            "policy: lcp\nprefill_endpoints: 1\ndecode_endpoints: 3\n"
        );
        let clash = flatten(settings("variant: {endpoints: 2}\nendpoints: 4")).unwrap_err();
        assert_eq!(clash, "endpoints is searched beside it too");
        assert!(flatten(settings("variant: 3")).is_err());
    }
}
