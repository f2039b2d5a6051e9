//! Durations a policy's config gives in seconds, as the logical clock's nanoseconds.

use routerlab_core::PluginConfig;

/// The longest duration a config may give: a week (the clock runs in nanoseconds, and no
/// lifetime or interval of the peers is longer).
pub const MAX_SECONDS: f64 = 7.0 * 86_400.0;

/// Config key `key`, in seconds (`default` when absent), as nanoseconds: finite, at most
/// [`MAX_SECONDS`], and above 0 unless `zero_allowed`. The error names the key.
pub fn seconds_ns(
    config: &mut PluginConfig,
    key: &'static str,
    default: f64,
    zero_allowed: bool,
) -> Result<u64, String> {
    let s = config.f64(key, default)?;
    let least_ok = if zero_allowed { s >= 0.0 } else { s > 0.0 };
    if !(s.is_finite() && least_ok && s <= MAX_SECONDS) {
        let least = if zero_allowed {
            "from 0"
        } else {
            "above 0 and"
        };
        return Err(format!(
            "config key `{key}`: must be {least} at most a week ({MAX_SECONDS} s), not {s}"
        ));
    }
    Ok((s * 1e9).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_become_nanoseconds_within_a_week() {
        let mut config = PluginConfig::parse("{ttl_s: 1.5, zero: 0, long: 1e9}").unwrap();
        assert_eq!(
            seconds_ns(&mut config, "ttl_s", 7.0, false),
            Ok(1_500_000_000)
        );
        assert_eq!(
            seconds_ns(&mut config, "absent", 2.0, false),
            Ok(2_000_000_000)
        );
        assert_eq!(seconds_ns(&mut config, "zero", 1.0, true), Ok(0));
        let err = seconds_ns(&mut config, "long", 1.0, true).unwrap_err();
        assert!(
            err.starts_with("config key `long`: must be from 0 at most a week"),
            "{err}"
        );
        let mut config = PluginConfig::parse("zero: 0").unwrap();
        let err = seconds_ns(&mut config, "zero", 1.0, false).unwrap_err();
        assert!(err.contains("above 0 and at most"), "{err}");
    }
}
