//! A real router's configuration as the run's matcher (`router_config`): the port of that
//! router with the settings the file gives, so a policy is tried as it is deployed.
//!
//! Read, told apart by their content:
//! - llm-d's (GIE's) `EndpointPickerConfig` YAML (`kind: EndpointPickerConfig`): one
//!   scheduling profile's scorers and weights into `gie-default`;
//! - a Dynamo router block, YAML with a `router:` mapping (AISimulate's and the
//!   `--router-policy-config` settings): `dynamo-kv`, `round-robin` or `random`;
//! - a router's command line, a text file of flags (`python -m dynamo.frontend
//!   --router-mode kv --router-temperature 0.5`, `python -m sglang_router.launch_router
//!   --policy cache_aware --cache-threshold 0.5`, `vllm-router --policy ttft_aware`):
//!   Dynamo's frontend, or SGLang's router and vllm-router (which grew from it), by its
//!   flags.
//!
//! A key or flag the port does not model is refused by name, never ignored.

use std::io::Read as _;
use std::path::Path;

use serde_yaml::{Mapping, Value};

use crate::ExperimentError;
use crate::file::Experiment;
use crate::resolve::plugin_config;

/// The largest router configuration read, bytes.
const MAX_BYTES: u64 = 1 << 20;

/// The run's matcher and its config: imported from `router_config`, or as given.
pub(crate) fn matcher_of(opts: &Experiment) -> Result<(String, Mapping), ExperimentError> {
    let Some(path) = &opts.router_config else {
        let matcher = opts.matcher.clone().ok_or_else(|| {
            ExperimentError::invalid(
                "no matcher: pass --matcher NAME (see `routerlab plugins` for what is installed)",
            )
        })?;
        return Ok((
            matcher,
            plugin_config(opts.matcher_config.clone(), "matcher")?,
        ));
    };
    if opts.matcher.is_some() || opts.matcher_config.is_some() {
        return Err(ExperimentError::invalid(
            "--router-config sets the matcher and its config: give it or --matcher, not both",
        ));
    }
    import(path)
}

/// The matcher and config `path` describes.
pub fn import(path: &Path) -> Result<(String, Mapping), ExperimentError> {
    let name = path.display();
    let fail = |why: String| ExperimentError::invalid(format!("{name}: {why}"));
    // A router's configuration is a page or two: more is not one (and is not read whole).
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(fail(format!(
            "larger than {MAX_BYTES} bytes: not a router's configuration"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8: {e}")))?;
    if text.trim_start().starts_with("--") || first_word_is_a_program(&text) {
        return flags(&text).map_err(fail);
    }
    let doc: Value = serde_yaml::from_str(&text)
        .map_err(|e| fail(format!("neither a router's flags nor YAML: {e}")))?;
    if doc.get("kind").and_then(Value::as_str) == Some("EndpointPickerConfig") {
        return endpoint_picker(&doc).map_err(fail);
    }
    if let Some(router) = doc.get("router") {
        return dynamo_yaml(router).map_err(fail);
    }
    Err(fail(
        "not a router configuration: an llm-d EndpointPickerConfig (`kind: EndpointPickerConfig`), a Dynamo `router:` block, or a router's command line (`--router-mode kv ...`, `--policy cache_aware ...`)".into(),
    ))
}

fn first_word_is_a_program(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or("");
    [
        "python",
        "python3",
        "dynamo-frontend",
        "sglang-router",
        "sglang_router",
        "vllm-router",
    ]
    .iter()
    .any(|p| first.ends_with(p))
}

fn number(value: &Value, key: &str) -> Result<f64, String> {
    value
        .as_f64()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("`{key}`: not a number"))
}

/// llm-d's / GIE's endpoint picker: its plugins, and the one scheduling profile's weights.
fn endpoint_picker(doc: &Value) -> Result<(String, Mapping), String> {
    let mut types = std::collections::HashMap::new();
    let mut config = Mapping::new();
    for (i, plugin) in seq(doc.get("plugins"), "plugins")?.iter().enumerate() {
        let kind = plugin
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`plugins[{i}].type`: missing"))?;
        let name = plugin.get("name").and_then(Value::as_str).unwrap_or(kind);
        types.insert(name.to_owned(), kind.to_owned());
        let params = plugin.get("parameters").and_then(Value::as_mapping);
        for (key, value) in params.into_iter().flatten() {
            let key = key.as_str().unwrap_or("");
            let at = format!("plugins[{i}].parameters.{key}");
            match (kind, key) {
                ("prefix-cache-scorer" | "prefix-cache", "maxPrefixBlocksToMatch") => {
                    config.insert("max_prefix_blocks".into(), count(value, &at)?.into());
                }
                ("prefix-cache-scorer" | "prefix-cache", "lruCapacityPerServer") => {
                    config.insert("lru_capacity".into(), count(value, &at)?.into());
                }
                // The chain's blocks are the trace's; the scorer's block size sets GIE's
                // hashing granularity, which the trace's chain stands for.
                ("prefix-cache-scorer" | "prefix-cache", "hashBlockSize" | "blockSize") => {}
                ("max-score-picker" | "max-score", "maxNumOfEndpoints")
                    if value.as_u64() == Some(1) => {}
                _ => return Err(format!("`{at}`: not modelled by gie-default")),
            }
        }
    }
    let profiles = seq(doc.get("schedulingProfiles"), "schedulingProfiles")?;
    let [profile] = profiles.as_slice() else {
        return Err(format!(
            "`schedulingProfiles`: {} profiles; gie-default runs one (a P/D profile pair is not imported)",
            profiles.len()
        ));
    };
    let mut weights = [
        ("prefix_weight", 0.0),
        ("precise_prefix_weight", 0.0),
        ("queue_weight", 0.0),
        ("kv_cache_weight", 0.0),
        ("load_aware_weight", 0.0),
    ];
    for (i, entry) in seq(profile.get("plugins"), "schedulingProfiles[0].plugins")?
        .iter()
        .enumerate()
    {
        let at = format!("schedulingProfiles[0].plugins[{i}]");
        let reference = entry
            .get("pluginRef")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`{at}.pluginRef`: missing"))?;
        let kind = types
            .get(reference)
            .ok_or_else(|| format!("`{at}.pluginRef`: no plugin `{reference}` in `plugins`"))?;
        // GIE: a scorer without a weight weighs 1.
        let weight = match entry.get("weight") {
            Some(w) => number(w, &format!("{at}.weight"))?,
            None => 1.0,
        };
        let slot = match kind.as_str() {
            "prefix-cache-scorer" | "prefix-cache" => Some("prefix_weight"),
            "precise-prefix-cache-scorer" => Some("precise_prefix_weight"),
            "queue-scorer" => Some("queue_weight"),
            "kv-cache-utilization-scorer" | "kv-cache-scorer" => Some("kv_cache_weight"),
            "load-aware-scorer" => Some("load_aware_weight"),
            // Every endpoint decodes in an aggregated fleet; one profile, one pick.
            "decode-filter"
            | "max-score-picker"
            | "max-score"
            | "single-profile-handler"
            | "single-profile" => None,
            other => {
                return Err(format!(
                    "`{at}`: plugin type `{other}` is not modelled by gie-default"
                ));
            }
        };
        if let Some(slot) = slot {
            let w = weights
                .iter_mut()
                .find(|(k, _)| *k == slot)
                .expect("a slot");
            w.1 += weight;
        }
    }
    for (key, weight) in weights {
        config.insert(key.into(), weight.into());
    }
    Ok(("gie-default".into(), config))
}

fn seq<'a>(value: Option<&'a Value>, at: &str) -> Result<&'a Vec<Value>, String> {
    value
        .and_then(Value::as_sequence)
        .ok_or_else(|| format!("`{at}`: missing or not a list"))
}

fn count(value: &Value, at: &str) -> Result<u64, String> {
    value
        .as_u64()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{at}`: not a whole number at least 1"))
}

/// A Dynamo `router:` block: its policy and the settings `dynamo-kv` models.
fn dynamo_yaml(router: &Value) -> Result<(String, Mapping), String> {
    let router = router.as_mapping().ok_or("`router`: not a mapping")?;
    let settings = router
        .iter()
        .map(|(key, value)| {
            let key = key.as_str().unwrap_or("").to_owned();
            (format!("router.{key}"), key, yaml_text(value))
        })
        .collect();
    dynamo(settings)
}

fn yaml_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Mapping(m) => match m.get("type").and_then(Value::as_str) {
            Some(t) => format!("type:{t}"),
            None => "{...}".into(),
        },
        _ => String::new(),
    }
}

/// Dynamo's router settings, each (where it was given, its YAML key or its flag without
/// `--` and `router-` with `_` for `-`, its value).
fn dynamo(settings: Vec<(String, String, String)>) -> Result<(String, Mapping), String> {
    let mut config = Mapping::new();
    let mut policy = "kv".to_owned();
    for (at, key, value) in &settings {
        let (key, value) = (key.as_str(), value.as_str());
        let unit = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("`{at}`: `{v}` is not a number"))
        };
        let to = match key {
            "policy" | "mode" => {
                policy = match value {
                    "kv" | "kv_router" => "kv",
                    "round-robin" | "round_robin" => "round-robin",
                    "random" => "random",
                    other => return Err(format!("`{at}`: `{other}` is not a router mode routerlab ports (kv, round-robin, random)")),
                }
                .to_owned();
                continue;
            }
            "overlap_score_credit" | "kv_overlap_score_credit" => "overlap_score_credit",
            "prefill_load_scale" | "kv_overlap_score_weight" | "overlap_score_weight" => {
                "overlap_score_weight"
            }
            "host_cache_hit_weight" => "host_overlap_weight",
            "disk_cache_hit_weight" => "shared_overlap_weight",
            "temperature" | "router_temperature" => "temperature",
            "router_ttl_secs" | "ttl_secs" => "ttl_s",
            "kv_cache_block_size" => "block_size",
            "use_kv_events" | "kv_events" => {
                let precise = match value {
                    "true" => "precise",
                    "false" => "approximate",
                    other => return Err(format!("`{at}`: `{other}` is not true or false")),
                };
                config.insert("mode".into(), precise.into());
                continue;
            }
            // Dynamo's prefill-load model off is the port's accounting; only that one.
            "prefill_load_model" if value == "type:none" || value == "none" => continue,
            // Settings whose default is the port's behaviour, accepted at that value only.
            "overlap_score_credit_decay"
            | "kv_overlap_score_credit_decay"
            | "decode_active_request_weight"
                if unit(value)? == 0.0 =>
            {
                continue;
            }
            _ => return Err(format!("`{at}` is not modelled by dynamo-kv")),
        };
        let value: Value = if to == "block_size" {
            Value::from(unit(value)? as u64)
        } else {
            Value::from(unit(value)?)
        };
        config.insert(to.into(), value);
    }
    if policy != "kv" {
        if !config.is_empty() {
            return Err(format!(
                "router mode `{policy}` takes no KV router settings"
            ));
        }
        return Ok((policy, Mapping::new()));
    }
    Ok(("dynamo-kv".into(), config))
}

/// A router's command line: Dynamo's frontend or SGLang's router, by its flags.
fn flags(text: &str) -> Result<(String, Mapping), String> {
    let words: Vec<&str> = text
        .split_whitespace()
        .filter(|w| *w != "\\")
        .skip_while(|w| !w.starts_with("--"))
        .collect();
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        let Some(flag) = word.strip_prefix("--") else {
            return Err(format!("`{word}`: a value without its flag"));
        };
        // A flag's value: what follows `=`, else the words up to the next flag (a list
        // for a flag such as `--worker-urls`), else a switch.
        let values: Vec<&str> = words[i + 1..]
            .iter()
            .take_while(|w| !w.starts_with("--"))
            .copied()
            .collect();
        let (flag, value) = match flag.split_once('=') {
            Some((f, v)) => (f.to_owned(), v.to_owned()),
            None if !values.is_empty() => {
                i += values.len();
                (flag.to_owned(), values.join(" "))
            }
            None => match flag.strip_prefix("no-") {
                Some(off) => (off.to_owned(), "false".into()),
                None => (flag.to_owned(), "true".into()),
            },
        };
        pairs.push((flag, value));
        i += 1;
    }
    let dynamo_flags = pairs
        .iter()
        .any(|(f, _)| f.starts_with("router-") || f == "kv-cache-block-size");
    if dynamo_flags {
        // Flags the frontend takes that are not routing.
        const OTHER: [&str; 3] = ["http-port", "namespace", "http-host"];
        let settings = pairs
            .into_iter()
            .filter(|(f, _)| !OTHER.contains(&f.as_str()))
            .map(|(f, v)| {
                let key = f.strip_prefix("router-").unwrap_or(&f).replace('-', "_");
                (format!("--{f}"), key, v)
            })
            .collect();
        return dynamo(settings);
    }
    sglang(&pairs)
}

/// SGLang's router: `--policy` and the cache-aware thresholds.
fn sglang(pairs: &[(String, String)]) -> Result<(String, Mapping), String> {
    let mut policy = "cache_aware";
    let mut config = Mapping::new();
    for (flag, value) in pairs {
        let number = || -> Result<f64, String> {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("`--{flag}`: `{value}` is not a non-negative number"))
        };
        match flag.as_str() {
            "policy" => policy = value,
            "cache-threshold" => {
                config.insert("cache_threshold".into(), number()?.into());
            }
            "balance-abs-threshold" => {
                config.insert("balance_abs_threshold".into(), (number()? as u64).into());
            }
            "balance-rel-threshold" => {
                config.insert("balance_rel_threshold".into(), number()?.into());
            }
            "max-tree-size" => {
                config.insert("max_tree_size".into(), (number()? as u64).into());
            }
            "host" | "port" | "worker-urls" => {}
            other => {
                return Err(format!(
                    "`--{other}` is not modelled by the SGLang and vllm-router ports"
                ));
            }
        }
    }
    // vllm-router (vllm-project/router) grew from SGLang's router: the same flags, and
    // policies of its own whose ports take their settings as plugin keys.
    let matcher = match policy {
        "cache_aware" => "sglang-cache-aware",
        "round_robin" => "round-robin",
        "random" => "random",
        "power_of_two" => "power-of-two",
        "ttft_aware" => "vr-ttft-aware",
        "precise_cache_aware" => "vllm-precise",
        "smetric" => "vr-smetric",
        "least_conn_sticky" => "vr-least-conn-sticky",
        "sticky_least_loaded" => "vr-sticky-least-loaded",
        other => {
            return Err(format!(
                "`--policy {other}`: not a policy routerlab ports (cache_aware, round_robin, random, power_of_two; vllm-router's ttft_aware, precise_cache_aware, smetric, least_conn_sticky, sticky_least_loaded)"
            ));
        }
    };
    if matcher != "sglang-cache-aware" && !config.is_empty() {
        return Err(format!(
            "`--policy {policy}` takes no cache-aware thresholds"
        ));
    }
    Ok((matcher.into(), config))
}
