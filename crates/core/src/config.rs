//! Plugin configuration: the text a plugin receives in `create`, read as YAML (JSON is a
//! subset), with every key accounted for.
//!
//! Plugins read keys one at a time with a default and then call [`PluginConfig::finish`],
//! which rejects whatever key was not read, naming it and the keys that exist. A typo such
//! as `max_runing: 10` therefore fails loudly instead of silently running with the default.
//!
//! One key is reserved for every plugin: `seed`. The host adds it to each plugin's config
//! (from `--seed`) so one flag reseeds a whole experiment; plugins that use no randomness
//! simply never read it, and `finish` does not count it as unknown.

use std::collections::BTreeMap;

use serde_yaml::Value;

/// The config key the host sets on every plugin.
pub const SEED_KEY: &str = "seed";

/// A plugin's parsed configuration.
#[derive(Debug)]
pub struct PluginConfig {
    entries: BTreeMap<String, Value>,
    known: Vec<&'static str>,
    defaults: Vec<(&'static str, Value)>,
}

impl PluginConfig {
    /// Parses config text; empty text (or `null`) is an empty config.
    pub fn parse(text: &str) -> Result<Self, String> {
        check_nesting(text).map_err(|e| format!("config: {e}"))?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_yaml::from_str(text)
                .map_err(|e| format!("config is not valid YAML or JSON: {e}"))?
        };
        let entries = match value {
            Value::Null => BTreeMap::new(),
            Value::Mapping(map) => {
                let mut entries = BTreeMap::new();
                for (key, value) in map {
                    let Value::String(key) = key else {
                        return Err(format!(
                            "config keys must be strings, found {}",
                            describe(&key)
                        ));
                    };
                    entries.insert(key, value);
                }
                entries
            }
            other => {
                return Err(format!(
                    "config must be a mapping of keys, found {}",
                    describe(&other)
                ));
            }
        };
        Ok(PluginConfig {
            entries,
            known: Vec::new(),
            defaults: Vec::new(),
        })
    }

    /// A non-negative integer, or `default` when the key is absent.
    pub fn u64(&mut self, key: &'static str, default: u64) -> Result<u64, String> {
        let value = self.optional_u64(key)?;
        self.record(key, Value::Number(default.into()));
        Ok(value.unwrap_or(default))
    }

    /// A non-negative integer, or `None` when the key is absent (or `null`).
    pub fn optional_u64(&mut self, key: &'static str) -> Result<Option<u64>, String> {
        self.record(key, Value::Null);
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => Err(format!(
                "config key `{key}`: expected a non-negative integer, found {}",
                describe(&other)
            )),
        }
    }

    /// A finite number, or `default` when the key is absent.
    pub fn f64(&mut self, key: &'static str, default: f64) -> Result<f64, String> {
        let value = self.optional_f64(key)?;
        self.record(key, Value::Number(default.into()));
        Ok(value.unwrap_or(default))
    }

    /// A finite number, or `None` when the key is absent (or `null`).
    pub fn optional_f64(&mut self, key: &'static str) -> Result<Option<f64>, String> {
        self.record(key, Value::Null);
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_f64().is_some_and(f64::is_finite) => Ok(n.as_f64()),
            Some(other) => Err(format!(
                "config key `{key}`: expected a number, found {}",
                describe(&other)
            )),
        }
    }

    /// One of `options` (a string), or `default` when the key is absent.
    pub fn choice(
        &mut self,
        key: &'static str,
        options: &[&'static str],
        default: &'static str,
    ) -> Result<&'static str, String> {
        self.record(key, Value::String(default.to_owned()));
        match self.take(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::String(text)) => {
                options
                    .iter()
                    .find(|o| **o == text)
                    .copied()
                    .ok_or_else(|| {
                        format!(
                            "config key `{key}`: expected one of {}, found {text:?}",
                            options.join(", ")
                        )
                    })
            }
            Some(other) => Err(format!(
                "config key `{key}`: expected one of {}, found {}",
                options.join(", "),
                describe(&other)
            )),
        }
    }

    /// The reserved `seed` key (default 0): the only source of randomness a plugin may use.
    pub fn seed(&mut self) -> Result<u64, String> {
        self.u64(SEED_KEY, 0)
    }

    /// Sets the reserved `seed` key, as a host that passes the seed outside the config text
    /// (ABI 1.2 `create_with`) asks. Fails if the text already set it: such a host strips it.
    pub fn set_seed(&mut self, seed: u64) -> Result<(), String> {
        if self.entries.contains_key(SEED_KEY) {
            return Err("config key `seed`: the host passed the seed separately".into());
        }
        self.entries
            .insert(SEED_KEY.to_owned(), Value::Number(seed.into()));
        Ok(())
    }

    /// Fails when a key was given that the plugin never read (`seed` excepted).
    pub fn finish(self) -> Result<(), String> {
        let unknown: Vec<&str> = self
            .entries
            .keys()
            .map(String::as_str)
            .filter(|k| *k != SEED_KEY && !self.known.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let mut known = self.known.clone();
        known.sort_unstable();
        let known = if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        };
        Err(format!(
            "unknown config key `{}` (known keys: {known})",
            unknown.join("`, `")
        ))
    }

    /// The keys read so far, each with the value it takes when absent (`null`: unset), in
    /// the order first read. A key read twice keeps its last default.
    pub fn defaults(&self) -> &[(&'static str, Value)] {
        &self.defaults
    }

    fn record(&mut self, key: &'static str, default: Value) {
        match self.defaults.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = default,
            None => self.defaults.push((key, default)),
        }
    }

    fn take(&mut self, key: &'static str) -> Option<Value> {
        self.known.push(key);
        self.entries.get(key).cloned()
    }
}

/// Splits the reserved `seed` key out of config text, for a host that passes the seed
/// beside the config (ABI 1.2 `create_with`): the text without it (empty when nothing else
/// is set) and its value (0 when absent). Text that is not a mapping of keys is returned
/// unchanged, for the plugin to reject in its own words.
pub fn split_seed(text: &str) -> Result<(String, u64), String> {
    check_nesting(text).map_err(|e| format!("config: {e}"))?;
    let Ok(Value::Mapping(mut map)) = serde_yaml::from_str::<Value>(text) else {
        return Ok((text.to_owned(), 0));
    };
    let seed = match map.remove(SEED_KEY) {
        None => 0,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
        Some(other) => {
            return Err(format!(
                "config key `seed`: expected a non-negative integer, found {}",
                describe(&other)
            ));
        }
    };
    if map.is_empty() {
        return Ok((String::new(), seed));
    }
    let rest = serde_yaml::to_string(&map).map_err(|e| format!("config: {e}"))?;
    Ok((rest, seed))
}

/// How deep `[` and `{` may nest in settings text. A YAML parser takes time quadratic in
/// the depth of such nesting (100,000 brackets took a minute), and no setting needs more.
pub const MAX_NESTING: usize = 64;

/// Refuses settings text whose brackets nest deeper than [`MAX_NESTING`], before any YAML
/// parser sees it. Brackets inside quotes do not count.
pub fn check_nesting(text: &str) -> Result<(), String> {
    let (mut depth, mut quote, mut escaped) = (0usize, None::<char>, false);
    for (line, content) in text.lines().enumerate() {
        for c in content.chars() {
            match (quote, c) {
                (Some('"'), '\\') if !escaped => {
                    escaped = true;
                    continue;
                }
                (Some(q), c) if c == q && !escaped => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(format!(
                            "line {}: brackets nest more than {MAX_NESTING} deep",
                            line + 1
                        ));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                (None, _) => {}
            }
            escaped = false;
        }
    }
    Ok(())
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn deep_brackets_are_refused_before_parsing_and_quoted_ones_do_not_count() {
        let deep = format!("a: {}", "[".repeat(100_000));
        let err = PluginConfig::parse(&deep).err().unwrap();
        assert_eq!(err, "config: line 1: brackets nest more than 64 deep");
        let quoted = format!("a: '{}'\nb: \"{}\\\"\"", "[".repeat(200), "{".repeat(200));
        assert_eq!(check_nesting(&quoted), Ok(()));
        assert_eq!(
            check_nesting(&format!("a: {}{}", "[".repeat(64), "]".repeat(64))),
            Ok(())
        );
    }

    use super::*;

    #[test]
    fn reads_yaml_and_json_with_defaults() {
        let mut yaml = PluginConfig::parse("seed: 7\nmax_usage: 0.5").unwrap();
        assert_eq!(yaml.u64("seed", 0), Ok(7));
        assert_eq!(yaml.f64("max_usage", 0.9), Ok(0.5));
        assert_eq!(yaml.u64("absent", 3), Ok(3));
        assert_eq!(yaml.finish(), Ok(()));
        let mut json = PluginConfig::parse(r#"{"seed": 9}"#).unwrap();
        assert_eq!(json.u64("seed", 0), Ok(9));
        assert_eq!(PluginConfig::parse("").unwrap().finish(), Ok(()));
        // `seed` is reserved: never unknown, even when not read.
        assert_eq!(PluginConfig::parse("seed: 4").unwrap().finish(), Ok(()));
    }

    #[test]
    fn the_seed_splits_out_of_the_text() {
        assert_eq!(split_seed("seed: 3"), Ok((String::new(), 3)));
        assert_eq!(split_seed("{seed: 4, a: 1}"), Ok(("a: 1\n".to_owned(), 4)));
        assert_eq!(split_seed(""), Ok((String::new(), 0)));
        assert_eq!(split_seed("[1]"), Ok(("[1]".to_owned(), 0)));
        assert!(
            split_seed("seed: x")
                .unwrap_err()
                .contains("non-negative integer")
        );
    }

    #[test]
    fn choices_name_the_options() {
        let mut cfg = PluginConfig::parse("mode: fast").unwrap();
        assert_eq!(
            cfg.choice("mode", &["precise", "approximate"], "precise"),
            Err("config key `mode`: expected one of precise, approximate, found \"fast\"".into())
        );
        let mut cfg = PluginConfig::parse("").unwrap();
        assert_eq!(cfg.choice("mode", &["a", "b"], "b"), Ok("b"));
    }

    #[test]
    fn names_the_bad_key() {
        let mut cfg = PluginConfig::parse("max_runing: 3").unwrap();
        cfg.u64("max_running", 400).unwrap();
        assert_eq!(
            cfg.finish(),
            Err("unknown config key `max_runing` (known keys: max_running)".to_owned())
        );
        let mut cfg = PluginConfig::parse("seed: -1").unwrap();
        assert_eq!(
            cfg.u64("seed", 0),
            Err("config key `seed`: expected a non-negative integer, found number -1".to_owned())
        );
        assert!(
            PluginConfig::parse("[1, 2]")
                .unwrap_err()
                .contains("mapping")
        );
        assert!(
            PluginConfig::parse("a: [")
                .unwrap_err()
                .contains("not valid YAML")
        );
    }
}
