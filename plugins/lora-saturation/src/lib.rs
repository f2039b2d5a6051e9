//! `lora-saturation`: flag an endpoint unavailable while its LoRA adapter slots are
//! saturated: every slot holds an adapter that running requests use, and at least
//! `min_waiting_adapters` other adapters have requests waiting there for a slot (what
//! vLLM's `vllm:lora_requests_info` shows as `running_lora_adapters` at `max_lora` with a
//! non-empty `waiting_lora_adapters`). A request sent there for yet another adapter would
//! wait behind them; vLLM V1 lets requests of the running adapters go first, so the flag
//! also turns those away, the price of a detector that does not see the request (a LoRA
//! affinity matcher sees it: `gie-lora-affinity`, `aibrix-lora-affinity`). llm-d's
//! saturation detector watches queue and KV thresholds, not adapters; this one applies
//! the same idea to the slots. An endpoint whose host models no slots is never flagged.
//!
//! Config keys: `min_waiting_adapters` (default 1, at least 1).

use routerlab_core::{Detector, Endpoints, PluginConfig};
use routerlab_policy_kit::flag_where;

/// The LoRA-slot detector.
pub struct LoraSaturation {
    min_waiting: u32,
}

impl Detector for LoraSaturation {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let min_waiting = config.u64("min_waiting_adapters", 1)?;
        let min_waiting = u32::try_from(min_waiting)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                format!(
                    "config key `min_waiting_adapters`: must be from 1 to {}, found {min_waiting}",
                    u32::MAX
                )
            })?;
        Ok(LoraSaturation { min_waiting })
    }

    fn detect(
        &mut self,
        endpoints: &Endpoints<'_>,
        unavailable: &mut [bool],
    ) -> Result<(), String> {
        flag_where(endpoints, unavailable, |e| {
            e.lora()
                .is_some_and(|s| s.active >= s.total && s.waiting >= self.min_waiting)
        });
        Ok(())
    }
}

routerlab_core::export_plugins! {
    detector LoraSaturation {
        name: "lora-saturation",
        description: "unavailable while every LoRA slot runs an adapter and min_waiting_adapters (1) others wait",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::LoraSlots;
    use routerlab_core::testing::{EndpointsBuilder, create_detector};

    use super::*;

    fn slots(active: u32, waiting: u32) -> LoraSlots {
        LoraSlots {
            used: active,
            total: 2,
            active,
            waiting,
        }
    }

    #[test]
    fn full_slots_with_adapters_waiting_are_unavailable() {
        let mut detector: LoraSaturation = create_detector("").unwrap();
        let fleet = EndpointsBuilder::new(4)
            .lora(0, slots(2, 1))
            .lora(1, slots(2, 0))
            .lora(2, slots(1, 3));
        let mut flags = [false; 4];
        detector.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(
            flags,
            [true, false, false, false],
            "full with one waiting; full, none waiting; room; no slots at all"
        );
        let mut two: LoraSaturation = create_detector("min_waiting_adapters: 2").unwrap();
        let mut flags = [false; 4];
        two.detect(&fleet.view(), &mut flags).unwrap();
        assert_eq!(flags, [false; 4]);
    }

    #[test]
    fn a_threshold_of_zero_is_refused() {
        let refused = create_detector::<LoraSaturation>("min_waiting_adapters: 0")
            .err()
            .unwrap();
        assert!(refused.contains("min_waiting_adapters"), "{refused}");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_detector_defaults::<super::LoraSaturation>(
            "lora-saturation",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
