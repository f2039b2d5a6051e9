//! The policy grammar of `compare --policy` and the experiment file's `policies:` list: a
//! matcher with its config, optionally `+` a detector with its config, in one string.
//!
//! ```text
//! policy := plugin [ "+" plugin ]          the first plugin is the matcher
//! plugin := NAME [ CONFIG ]
//! NAME   := characters up to a space, "{" or "+"  (a name, or PATH[#NAME])
//! CONFIG := "{" YAML flow mapping "}"      braces inside quotes do not count
//! ```
//!
//! `lcp`, `lcp {seed: 3}`, `lcp + num-requests {max_running: 32}`,
//! `./libmine.so#mine + bounded-load`. A path holding a space or a `+` goes in the
//! experiment file's mapping form instead. Errors name the character where the text stops
//! making sense, counted from 1.

use serde::Deserialize;
use serde_yaml::Value;

use crate::ExperimentError;
use crate::error::one_line;

/// A plugin config as a policy gives it: the grammar's text, or the mapping form's value.
#[derive(Debug, Clone, PartialEq)]
pub enum TextOrValue {
    /// As typed in the grammar.
    Text(String),
    /// As written in the mapping form.
    Value(Value),
}

impl TextOrValue {
    /// The config as a value; text is read as YAML, errors naming `--WHICH-config`.
    pub(crate) fn value(self, which: &str) -> Result<Value, ExperimentError> {
        match self {
            TextOrValue::Text(text) => config_text(&text, which),
            TextOrValue::Value(value) => Ok(value),
        }
    }
}

/// One policy of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// What the comparison calls it: the text as written, spaces tidied.
    pub label: String,
    /// Matcher name or `PATH[#NAME]`.
    pub matcher: String,
    /// Its config, if given.
    pub matcher_config: Option<TextOrValue>,
    /// Detector, if any.
    pub detector: Option<String>,
    /// Its config, if given.
    pub detector_config: Option<TextOrValue>,
}

/// A `policies:` entry of the experiment file: the grammar's text, or its parts.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyEntry {
    /// `lcp + num-requests {max_running: 32}`.
    Text(String),
    /// `{matcher: lcp, matcher_config: {...}, detector: ..., detector_config: ..., label: ...}`.
    Parts(PolicyParts),
}

/// The mapping form of a policy.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyParts {
    /// Matcher name or `PATH[#NAME]`.
    pub matcher: String,
    /// Matcher config.
    pub matcher_config: Option<Value>,
    /// Detector name or `PATH[#NAME]`.
    pub detector: Option<String>,
    /// Detector config.
    pub detector_config: Option<Value>,
    /// Column name [default: built from the rest].
    pub label: Option<String>,
}

impl<'de> Deserialize<'de> for PolicyEntry {
    /// Text, or a mapping with `matcher`; anything else is refused saying which form it
    /// took, the commonest slip first: a policy's text with a `{config}`, unquoted, which
    /// YAML reads as a mapping (`key: value` inside it).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(PolicyEntry::Text(text)),
            Value::Mapping(map) if map.contains_key("matcher") => {
                serde_yaml::from_value(Value::Mapping(map))
                    .map(PolicyEntry::Parts)
                    .map_err(D::Error::custom)
            }
            Value::Mapping(map)
                if map
                    .keys()
                    .any(|k| k.as_str().is_some_and(|k| k.contains(['{', '+']))) =>
            {
                Err(D::Error::custom(
                    "a policy written as text with a `{config}` must be quoted: YAML reads the `key: value` in it as a mapping (write - \"lcp + max-kv-cache {threshold: 0.9}\")",
                ))
            }
            Value::Mapping(_) => Err(D::Error::custom(
                "a policy mapping needs `matcher` (and may have `matcher_config`, `detector`, `detector_config`, `label`)",
            )),
            _ => Err(D::Error::custom(
                "a policy is text (`lcp + num-requests {max_running: 32}`) or a mapping with `matcher`",
            )),
        }
    }
}

impl PolicyEntry {
    /// The policy this entry describes.
    pub fn resolve(self) -> Result<Policy, String> {
        match self {
            PolicyEntry::Text(text) => parse(&text),
            PolicyEntry::Parts(parts) => {
                let config_text = |v: &Option<Value>| {
                    v.as_ref().map(|v| {
                        let text = serde_json::to_string(v).unwrap_or_default();
                        format!(" {text}")
                    })
                };
                let label = parts.label.clone().unwrap_or_else(|| {
                    let mut label = parts.matcher.clone();
                    label.push_str(&config_text(&parts.matcher_config).unwrap_or_default());
                    if let Some(detector) = &parts.detector {
                        label.push_str(" + ");
                        label.push_str(detector);
                        label.push_str(&config_text(&parts.detector_config).unwrap_or_default());
                    }
                    label
                });
                Ok(Policy {
                    label,
                    matcher: parts.matcher,
                    matcher_config: parts.matcher_config.map(TextOrValue::Value),
                    detector: parts.detector,
                    detector_config: parts.detector_config.map(TextOrValue::Value),
                })
            }
        }
    }
}

/// Parses one policy string.
pub fn parse(text: &str) -> Result<Policy, String> {
    let fail = |at: usize, what: &str| {
        Err(format!(
            "policy `{text}`: {what} at character {}",
            text[..at.min(text.len())].chars().count() + 1
        ))
    };
    let mut cursor = Cursor { text, at: 0 };
    cursor.skip_spaces();
    let (matcher, matcher_config) = match cursor.plugin() {
        Ok(Some(plugin)) => plugin,
        Ok(None) => return fail(cursor.at, "expected a matcher name"),
        Err((at, what)) => return fail(at, what),
    };
    cursor.skip_spaces();
    let mut detector = None;
    if cursor.eat('+') {
        cursor.skip_spaces();
        match cursor.plugin() {
            Ok(Some(plugin)) => detector = Some(plugin),
            Ok(None) => return fail(cursor.at, "expected a detector name after `+`"),
            Err((at, what)) => return fail(at, what),
        }
        cursor.skip_spaces();
    }
    if cursor.at < text.len() {
        let what = if text[cursor.at..].starts_with('+') {
            "a policy has one detector at most; unexpected `+`"
        } else {
            "unexpected text after the policy"
        };
        return fail(cursor.at, what);
    }
    let mut label = matcher.clone();
    if let Some(config) = &matcher_config {
        label = format!("{label} {config}");
    }
    if let Some((name, config)) = &detector {
        label = format!("{label} + {name}");
        if let Some(config) = config {
            label = format!("{label} {config}");
        }
    }
    let (detector, detector_config) = match detector {
        Some((name, config)) => (Some(name), config),
        None => (None, None),
    };
    Ok(Policy {
        label,
        matcher,
        matcher_config: matcher_config.map(TextOrValue::Text),
        detector,
        detector_config: detector_config.map(TextOrValue::Text),
    })
}

struct Cursor<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// A name and its optional config; `None` when no name starts here.
    #[allow(clippy::type_complexity)]
    fn plugin(&mut self) -> Result<Option<(String, Option<String>)>, (usize, &'static str)> {
        let start = self.at;
        while let Some(c) = self.peek() {
            if c.is_whitespace() || c == '{' || c == '+' || c == '}' {
                break;
            }
            self.at += c.len_utf8();
        }
        if self.at == start {
            if self.peek() == Some('{') {
                return Err((start, "a config needs a plugin name before it"));
            }
            return Ok(None);
        }
        let name = self.text[start..self.at].to_owned();
        self.skip_spaces();
        if self.peek() != Some('{') {
            return Ok(Some((name, None)));
        }
        let open = self.at;
        let mut depth = 0usize;
        let mut quote: Option<char> = None;
        while let Some(c) = self.peek() {
            self.at += c.len_utf8();
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '{') => depth += 1,
                (None, '}') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(Some((name, Some(self.text[open..self.at].to_owned()))));
                    }
                }
                (None, _) => {}
            }
        }
        Err((open, "this `{` is never closed"))
    }
}

/// A plugin config typed as text (a flag's, or a policy's), read as YAML or JSON; errors
/// name the flag.
pub fn config_text(text: &str, which: &str) -> Result<Value, ExperimentError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    routerlab_core::config::check_nesting(text)
        .map_err(|e| ExperimentError::invalid(format!("--{which}-config: {e}")))?;
    serde_yaml::from_str(text).map_err(|e| {
        ExperimentError::invalid(format!(
            "--{which}-config is not valid YAML or JSON: {}",
            one_line(&e.to_string())
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &Option<TextOrValue>) -> Option<&str> {
        match v {
            Some(TextOrValue::Text(t)) => Some(t),
            _ => None,
        }
    }

    #[test]
    fn a_matcher_alone_a_config_and_a_detector_parse() {
        let p = parse("lcp").unwrap();
        assert_eq!((p.label.as_str(), p.matcher.as_str()), ("lcp", "lcp"));
        assert_eq!(p.detector, None);

        let p = parse("  lcp{seed: 3}+num-requests   {max_running: 32, note: '}'} ").unwrap();
        assert_eq!(p.matcher, "lcp");
        assert_eq!(text(&p.matcher_config), Some("{seed: 3}"));
        assert_eq!(p.detector.as_deref(), Some("num-requests"));
        assert_eq!(
            text(&p.detector_config),
            Some("{max_running: 32, note: '}'}")
        );
        assert_eq!(
            p.label,
            "lcp {seed: 3} + num-requests {max_running: 32, note: '}'}"
        );

        let p = parse("./target/release/libmine.so#mine + bounded-load").unwrap();
        assert_eq!(p.matcher, "./target/release/libmine.so#mine");
        assert_eq!(p.detector.as_deref(), Some("bounded-load"));
    }

    #[test]
    fn errors_point_at_the_character_where_the_text_goes_wrong() {
        let err = |t: &str| parse(t).unwrap_err();
        assert_eq!(
            err("lcp + "),
            "policy `lcp + `: expected a detector name after `+` at character 7"
        );
        assert_eq!(err(""), "policy ``: expected a matcher name at character 1");
        assert_eq!(
            err("lcp {seed: 3"),
            "policy `lcp {seed: 3`: this `{` is never closed at character 5"
        );
        assert_eq!(
            err("lcp + a + b"),
            "policy `lcp + a + b`: a policy has one detector at most; unexpected `+` at character 9"
        );
        assert_eq!(
            err("lcp {a: 1} junk"),
            "policy `lcp {a: 1} junk`: unexpected text after the policy at character 12"
        );
        assert_eq!(
            err("{seed: 1}"),
            "policy `{seed: 1}`: a config needs a plugin name before it at character 1"
        );
    }

    #[test]
    fn the_mapping_form_builds_the_same_policy_with_a_label() {
        let entry: PolicyEntry = serde_yaml::from_str(
            "{matcher: lcp, detector: num-requests, detector_config: {max_running: 32}}",
        )
        .unwrap();
        let p = entry.resolve().unwrap();
        assert_eq!(p.label, "lcp + num-requests {\"max_running\":32}");
        assert_eq!(p.detector.as_deref(), Some("num-requests"));
        let entry: PolicyEntry = serde_yaml::from_str("lcp + num-requests").unwrap();
        assert_eq!(entry.resolve().unwrap().label, "lcp + num-requests");
    }
}
