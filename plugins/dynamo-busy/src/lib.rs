//! `dynamo-busy`: NVIDIA Dynamo's busy-worker detection (peers.md §3, "Overload
//! detection"; §7, D3): a worker is busy when its active decode blocks over its total exceed
//! `active_decode_blocks_threshold`, or its active prefill tokens exceed
//! `active_prefill_tokens_threshold`. Busy workers are skipped; when all are, Dynamo
//! rejects the request (run with `--when-unavailable reject` for the same).
//!
//! Both thresholds are disabled by default, as in Dynamo (the detector then flags nothing);
//! Dynamo's docs use 0.85 and 10,000 as examples. Signals here: the engine's KV blocks used
//! over total, and the prompt tokens of the router's unfinished requests. The second is
//! **not** Dynamo's signal: Dynamo counts prefill tokens not yet computed (they leave at
//! the first token), and the host gives detectors no such per-endpoint figure, so this one
//! counts a request's prompt until it finishes and trips far earlier. On the conversation
//! trace with 4 endpoints, 10,000 flags almost every decision (TTFT mean 477 s with `lcp`);
//! use the KV threshold, or a prefill threshold several times larger.
//!
//! Config keys: `active_decode_blocks_threshold` (unset), `active_prefill_tokens_threshold`
//! (unset).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::flag_where;

/// The Dynamo busy detector.
pub struct DynamoBusy {
    kv: Option<f64>,
    tokens: Option<u64>,
}

impl Detector for DynamoBusy {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let kv = config.optional_f64("active_decode_blocks_threshold")?;
        let tokens = config.optional_u64("active_prefill_tokens_threshold")?;
        if kv.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
            return Err("config key `active_decode_blocks_threshold`: within 0..=1".into());
        }
        Ok(DynamoBusy { kv, tokens })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| {
            let full = self.kv.is_some_and(|t| e.kv_usage() > t);
            let prefill = self.tokens.is_some_and(|t| e.inflight_prompt_tokens() > t);
            full || prefill
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector DynamoBusy {
        name: "dynamo-busy",
        description: "NVIDIA Dynamo busy: KV blocks or prefill tokens above a threshold (off by default)",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    #[test]
    fn off_by_default_and_each_threshold_on_its_own() {
        let fleet = EndpointsBuilder::new(2)
            .kv_blocks(0, 90, 100)
            .inflight_prompt_tokens(1, 20_000);
        let mut flags = [false; 2];
        let mut off: DynamoBusy = create_detector("").unwrap();
        off.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, false]);
        let mut kv: DynamoBusy = create_detector("active_decode_blocks_threshold: 0.85").unwrap();
        kv.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [true, false]);
        let mut tok: DynamoBusy =
            create_detector("active_prefill_tokens_threshold: 10000").unwrap();
        tok.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [false, true]);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::DynamoBusy>(
            "dynamo-busy",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
