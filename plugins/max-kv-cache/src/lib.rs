//! `max-kv-cache`: flag an endpoint unavailable when its KV cache is nearly full, and
//! optionally when its queue is long.
//!
//! An endpoint is unavailable when its KV usage is strictly greater than `max_usage`, or,
//! when `max_waiting` is set, when its waiting requests are strictly greater than that.
//! Endpoints with an unbounded cache report usage 0 and are never flagged by usage.
//!
//! Config keys: `max_usage` (fraction, default 0.9), `max_waiting` (default unset).

use routerlab_core::{Detector, Endpoints, PluginConfig};

/// The KV-usage detector.
pub struct MaxKvCache {
    max_usage: f64,
    max_waiting: Option<u64>,
}

impl Detector for MaxKvCache {
    fn create(_name: &str, config: &str) -> Result<Self, String> {
        let mut config = PluginConfig::parse(config)?;
        let max_usage = config.f64("max_usage", 0.9)?;
        let max_waiting = config.optional_u64("max_waiting")?;
        config.finish()?;
        if !(0.0..=1.0).contains(&max_usage) {
            return Err(format!(
                "config key `max_usage`: must be within 0..=1, found {max_usage}"
            ));
        }
        Ok(MaxKvCache {
            max_usage,
            max_waiting,
        })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        for (flag, endpoint) in unavailable.iter_mut().zip(endpoints.iter()) {
            let full = endpoint.kv_usage() > self.max_usage;
            let queued = self.max_waiting.is_some_and(|max| endpoint.waiting() > max);
            *flag = full || queued;
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector MaxKvCache {
        name: "max-kv-cache",
        description: "unavailable when KV usage > max_usage (default 0.9) or waiting > max_waiting",
    },
}
