//! A report as a snapshot stores it: the tool version and absolute trace paths replaced,
//! the timed figures rounded to a stated number of significant digits. `routerlab snapshot`
//! and the plugin authors' snapshot helper both use this, so their snapshots read the same.

use std::path::Path;

use serde_yaml::Value;

use crate::Report;

/// Rounds `x` to `digits` significant digits.
pub fn significant(x: f64, digits: u32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits as i32 - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

fn round_all(value: &mut Value, digits: u32) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(0.0);
            *value = Value::from(significant(x, digits));
        }
        Value::Mapping(map) => map.values_mut().for_each(|v| round_all(v, digits)),
        Value::Sequence(items) => items.iter_mut().for_each(|v| round_all(v, digits)),
        _ => {}
    }
}

/// A trace path as a snapshot shows it: its file name only, however it was spelled
/// (relative, absolute, through `..`); the report's `content_hash` says which file it was.
/// (Until 0.3 a relative path was kept as given and an absolute one was `[absolute]/NAME`.)
pub fn shown(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A plugin as a snapshot shows it: its name, however it was given. `PATH#NAME` is `NAME`;
/// a library path alone is the plugin name its file name gives (`librouterlab_lcp.so`:
/// `lcp`, as the search path names it; another file: its stem); a name stays a name.
pub fn plugin_shown(given: &str) -> String {
    if let Some((_, name)) = given.rsplit_once('#') {
        return name.to_owned();
    }
    let path = Path::new(given);
    let is_path = given.contains(std::path::MAIN_SEPARATOR) || given.contains('/');
    if !is_path {
        return given.to_owned();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = stem
        .strip_prefix(std::env::consts::DLL_PREFIX)
        .unwrap_or(&stem);
    match stem.strip_prefix("routerlab_") {
        Some(name) => name.replace('_', "-"),
        None => stem.to_owned(),
    }
}

/// The report as a snapshot stores it: the tool version replaced by `[version]`, the trace
/// path by its file name ([`shown`]), plugins by their names ([`plugin_shown`]), and every
/// timed figure rounded to `digits` significant digits. So the same inputs spelled
/// differently (`lcp` or its library's path, a relative or absolute trace) snapshot alike.
pub fn redacted(report: &Report, digits: u32) -> Value {
    redacted_keeping_version(report, digits, false)
}

/// [`redacted`], keeping the tool version when `keep_version`.
pub fn redacted_keeping_version(report: &Report, digits: u32, keep_version: bool) -> Value {
    let mut value = serde_yaml::to_value(report).expect("a report serialises");
    if let Some(run) = value.get_mut("run") {
        if !keep_version && let Some(version) = run.get_mut("tool_version") {
            *version = Value::from("[version]");
        }
        if let Some(path) = run.get_mut("trace").and_then(|t| t.get_mut("path"))
            && let Some(text) = path.as_str()
        {
            *path = Value::from(shown(Path::new(text)));
        }
        for plugin in ["matcher", "detector"] {
            if let Some(name) = run.get_mut(plugin).and_then(|p| p.get_mut("name"))
                && let Some(text) = name.as_str()
            {
                *name = Value::from(plugin_shown(text));
            }
        }
    }
    if let Some(timed) = value.get_mut("timed") {
        round_all(timed, digits);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_shown_by_what_identifies_them_not_by_their_spelling() {
        for trace in [
            "traces/chat.jsonl",
            "./traces/chat.jsonl",
            "/srv/x/../chat.jsonl",
        ] {
            assert_eq!(shown(Path::new(trace)), "chat.jsonl", "{trace}");
        }
        for plugin in [
            "lcp",
            "./target/release/librouterlab_lcp.so",
            "/opt/lib/routerlab/librouterlab_lcp.so",
            "/opt/lib/librouterlab_builtins.so#lcp",
        ] {
            assert_eq!(plugin_shown(plugin), "lcp", "{plugin}");
        }
        assert_eq!(
            plugin_shown("build/librouterlab_least_tokens.so"),
            "least-tokens"
        );
        assert_eq!(plugin_shown("./build/libmy_policy.so"), "my_policy");
    }

    #[test]
    fn rounding_keeps_significant_digits() {
        assert_eq!(significant(123.456, 3), 123.0);
        assert_eq!(significant(0.0012345, 2), 0.0012);
        assert_eq!(significant(98765.0, 1), 100000.0);
        assert_eq!(significant(0.0, 3), 0.0);
    }
}
