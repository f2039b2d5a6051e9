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

/// A path as a snapshot shows it: as given when relative, only its file name when absolute
/// (the rest differs between machines).
pub fn shown(path: &Path) -> String {
    if path.is_absolute() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("[absolute]/{name}")
    } else {
        path.display().to_string()
    }
}

/// The report as a snapshot stores it: the tool version replaced by `[version]`, an
/// absolute trace path by its file name, and every timed figure rounded to `digits`
/// significant digits.
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
    fn rounding_keeps_significant_digits() {
        assert_eq!(significant(123.456, 3), 123.0);
        assert_eq!(significant(0.0012345, 2), 0.0012);
        assert_eq!(significant(98765.0, 1), 100000.0);
        assert_eq!(significant(0.0, 3), 0.0);
    }
}
