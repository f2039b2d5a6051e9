//! Checking a plugin's defaults against the router it ports, as that router's source
//! gives them.
//!
//! Each plugin crate keeps an `upstream.yaml` beside its `Cargo.toml`: which router and
//! release it follows, the file its defaults come from, and for every config key either the
//! router's value (under `defaults`, with the router's own name for it) or why the key has
//! no counterpart (under `lab`). [`check_matcher_defaults`] and [`check_detector_defaults`]
//! build the plugin from an empty config, as a host does, and compare what it read with
//! the file: a default that differs, a key the file does not account for, or a key the file
//! names that the plugin never reads is an error. So a default cannot drift from its
//! citation, and a new key cannot land without one.
//!
//! ```yaml
//! plugin: dynamo-kv
//! router: NVIDIA Dynamo
//! version: ai-dynamo 1.6.1
//! source: dynamo/common/configuration/groups/kv_router_args.py
//! defaults:
//!   temperature: {value: 0.0, upstream: --router-temperature}
//! lab:
//!   block_size: the simulated engine's block size; the router takes the engine's
//! ```
//!
//! A `defaults` entry may name its own `source` (another file of the same release) and a
//! `note`. A plugin that ports no router says `router: none` and lists its keys under `lab`.

use serde_yaml::{Mapping, Value};

use crate::PluginConfig;
use crate::config::SEED_KEY;
use crate::sdk::{Detector, Matcher, Scaler};

/// Checks matcher `M`'s defaults against `upstream` (the text of its `upstream.yaml`).
pub fn check_matcher_defaults<M: Matcher>(plugin: &str, upstream: &str) -> Result<(), String> {
    check(plugin, upstream, |config| {
        M::create(plugin, config).map(drop)
    })
}

/// Checks detector `D`'s defaults against `upstream` (the text of its `upstream.yaml`).
pub fn check_detector_defaults<D: Detector>(plugin: &str, upstream: &str) -> Result<(), String> {
    check(plugin, upstream, |config| {
        D::create(plugin, config).map(drop)
    })
}

/// Checks scaler `S`'s defaults against `upstream` (the text of its `upstream.yaml`).
pub fn check_scaler_defaults<S: Scaler>(plugin: &str, upstream: &str) -> Result<(), String> {
    check(plugin, upstream, |config| {
        S::create(plugin, config).map(drop)
    })
}

fn check(
    plugin: &str,
    upstream: &str,
    create: impl FnOnce(&mut PluginConfig) -> Result<(), String>,
) -> Result<(), String> {
    let file: Value = serde_yaml::from_str(upstream).map_err(|e| format!("upstream.yaml: {e}"))?;
    let Value::Mapping(file) = file else {
        return Err("upstream.yaml: expected a mapping".into());
    };
    let text = |key: &str| -> Result<&str, String> {
        match file.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
            _ => Err(format!("upstream.yaml: `{key}` must be a non-empty string")),
        }
    };
    if text("plugin")? != plugin {
        return Err(format!(
            "upstream.yaml: `plugin` is {:?}, this is `{plugin}`",
            text("plugin")?
        ));
    }
    let router = text("router")?;
    let ports = router != "none";
    if ports {
        text("version")?;
        text("source")?;
    }
    let section = |key: &str| -> Result<Mapping, String> {
        match file.get(key) {
            None | Some(Value::Null) => Ok(Mapping::new()),
            Some(Value::Mapping(m)) => Ok(m.clone()),
            Some(_) => Err(format!("upstream.yaml: `{key}` must be a mapping")),
        }
    };
    let (cited, lab) = (section("defaults")?, section("lab")?);
    if !ports && !cited.is_empty() {
        return Err(
            "upstream.yaml: `router: none` cites no defaults; list keys under `lab`".into(),
        );
    }

    let mut config = PluginConfig::parse("")?;
    create(&mut config).map_err(|e| format!("{plugin} with an empty config: {e}"))?;
    let mut errors = Vec::new();
    for (key, default) in config.defaults() {
        if *key == SEED_KEY {
            continue;
        }
        let name = Value::String((*key).to_owned());
        match (cited.get(&name), lab.get(&name)) {
            (Some(_), Some(_)) => errors.push(format!("`{key}` is under both defaults and lab")),
            (None, None) => errors.push(format!(
                "`{key}` (default {}) is neither cited under defaults nor explained under lab",
                show(default)
            )),
            (None, Some(Value::String(why))) if !why.trim().is_empty() => {}
            (None, Some(_)) => errors.push(format!("lab `{key}`: say why, as a string")),
            (Some(entry), None) => {
                if let Err(e) = compare(key, default, entry) {
                    errors.push(e);
                }
            }
        }
    }
    let read: Vec<&str> = config.defaults().iter().map(|(k, _)| *k).collect();
    for key in cited.keys().chain(lab.keys()) {
        let key = key.as_str().unwrap_or("?");
        if !read.contains(&key) {
            errors.push(format!(
                "upstream.yaml names `{key}`, which {plugin} does not read"
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{plugin} against {router}: {}", errors.join("; ")))
    }
}

/// One cited default against the plugin's.
fn compare(key: &str, ours: &Value, entry: &Value) -> Result<(), String> {
    let Value::Mapping(entry) = entry else {
        return Err(format!("defaults `{key}`: expected {{value, upstream}}"));
    };
    let Some(Value::String(_)) = entry.get("upstream") else {
        return Err(format!(
            "defaults `{key}`: `upstream` (the router's name for it) is missing"
        ));
    };
    for field in entry.keys() {
        let known = ["value", "upstream", "source", "note"];
        if !field.as_str().is_some_and(|f| known.contains(&f)) {
            return Err(format!("defaults `{key}`: unknown field {field:?}"));
        }
    }
    let Some(theirs) = entry.get("value") else {
        return Err(format!("defaults `{key}`: `value` is missing"));
    };
    let same = match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "`{key}` defaults to {} here, {} upstream",
            show(ours),
            show(theirs)
        ))
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::Null => "unset".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `a` (default 1.5) and `mode` (default `fast`).
    struct Two;

    impl Matcher for Two {
        fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
            config.seed()?;
            config.f64("a", 1.5)?;
            config.choice("mode", &["fast", "slow"], "fast")?;
            Ok(Two)
        }

        fn match_request(
            &mut self,
            _request: &crate::Request<'_>,
            _endpoints: &crate::Endpoints<'_>,
        ) -> Result<Option<crate::EndpointId>, String> {
            Ok(None)
        }
    }

    const HEAD: &str = "plugin: two\nrouter: R\nversion: '1'\nsource: f.go\n";

    #[test]
    fn matching_defaults_pass_and_each_kind_of_drift_is_named() {
        let good =
            format!("{HEAD}defaults:\n  a: {{value: 1.5, upstream: --a}}\nlab:\n  mode: ours");
        assert_eq!(check_matcher_defaults::<Two>("two", &good), Ok(()));

        let drifted = good.replace("1.5", "2");
        let err = check_matcher_defaults::<Two>("two", &drifted).unwrap_err();
        assert!(
            err.contains("`a` defaults to 1.5 here, 2 upstream"),
            "{err}"
        );

        let missing = format!("{HEAD}defaults:\n  a: {{value: 1.5, upstream: --a}}\n");
        let err = check_matcher_defaults::<Two>("two", &missing).unwrap_err();
        assert!(
            err.contains("`mode` (default \"fast\") is neither cited"),
            "{err}"
        );

        let extra = format!("{good}\n  gone: old key");
        let err = check_matcher_defaults::<Two>("two", &extra).unwrap_err();
        assert!(
            err.contains("names `gone`, which two does not read"),
            "{err}"
        );

        let uncited = good.replace(", upstream: --a", "");
        let err = check_matcher_defaults::<Two>("two", &uncited).unwrap_err();
        assert!(
            err.contains("`upstream` (the router's name for it) is missing"),
            "{err}"
        );

        let other = good.replace("plugin: two", "plugin: three");
        let err = check_matcher_defaults::<Two>("two", &other).unwrap_err();
        assert!(err.contains("`plugin` is \"three\""), "{err}");
    }

    #[test]
    fn a_plugin_of_our_own_explains_every_key_and_cites_none() {
        let own = "plugin: two\nrouter: none\nlab:\n  a: ours\n  mode: ours\n";
        assert_eq!(check_matcher_defaults::<Two>("two", own), Ok(()));
        let cites = "plugin: two\nrouter: none\ndefaults:\n  a: {value: 1.5, upstream: a}\nlab:\n  mode: ours\n";
        let err = check_matcher_defaults::<Two>("two", cites).unwrap_err();
        assert!(err.contains("cites no defaults"), "{err}");
    }
}
