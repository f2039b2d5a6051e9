//! `aibrix-lora-affinity`: AIBrix's `lora-affinity` router
//! (`pkg/plugins/gateway/algorithms/lora_affinity.go`). It splits the endpoints in two by
//! the host's adapter state (ABI 1.5, what vLLM's `vllm:lora_requests_info` reports):
//! those with affinity (the request's adapter runs or waits there) and, of the rest, those
//! with room for one more adapter (running and waiting adapters fewer than the slots).
//! When both groups have endpoints it takes the affinity group with probability
//! `affinity_threshold` (0.999) and the other otherwise, so a popular adapter spreads
//! slowly; with one group, that group. In the group, the fewest requests in flight win
//! (ties to the first); with neither group (every endpoint full of other adapters), a
//! random endpoint. A request for the base model, or a host that models no adapter
//! slots, has neither: a random endpoint, as AIBrix routes a pod without LoRA metrics.
//!
//! What the lab does not model: AIBrix at that commit reads an endpoint's slot count from
//! the waiting-adapters metric, so its room test never passes and the second group is
//! always empty; the lab applies the rule as its comments state it. AIBrix seeds its draw
//! from the clock; here it is the replay's seed.
//!
//! Config keys: `affinity_threshold` (0.999, in 0..=1), `seed`.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::inflight;

/// The router.
pub struct AibrixLoraAffinity {
    threshold: f64,
    rng: SeededRng,
}

impl Matcher for AibrixLoraAffinity {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let threshold = config.f64("affinity_threshold", 0.999)?;
        if !(0.0..=1.0).contains(&threshold) {
            return Err(format!(
                "config: affinity_threshold must be within 0..=1, not {threshold}"
            ));
        }
        Ok(AibrixLoraAffinity { threshold, rng })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let adapter = request.adapter().is_some();
        let (mut affinity, mut room) = (Vec::new(), Vec::new());
        let mut all = Vec::new();
        for endpoint in endpoints.available() {
            all.push(endpoint.id());
            let Some(state) = request.adapter_state(endpoint.id()).filter(|_| adapter) else {
                continue;
            };
            let adapters = u64::from(state.active) + u64::from(state.waiting_adapters);
            if state.running > 0 || state.waiting > 0 {
                affinity.push((inflight(&endpoint), endpoint.id()));
            } else if adapters < u64::from(state.slots_total) {
                room.push((inflight(&endpoint), endpoint.id()));
            }
        }
        let group = match (affinity.is_empty(), room.is_empty()) {
            (false, false) if self.rng.unit_f64() < self.threshold => affinity,
            (false, false) => room,
            (false, true) => affinity,
            (true, false) => room,
            (true, true) => {
                if all.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(all[self.rng.below(all.len() as u64) as usize]));
            }
        };
        Ok(group
            .into_iter()
            .min_by_key(|(load, id)| (*load, id.0))
            .map(|(_, id)| id))
    }
}

routerlab_core::export_plugins! {
    matcher AibrixLoraAffinity {
        name: "aibrix-lora-affinity",
        description: "AIBrix lora-affinity: the least loaded of the endpoints holding the adapter (99.9%), else of those with room for it",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::abi::RlAdapterState;
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn state(running: u32, waiting: u32, active: u32) -> RlAdapterState {
        RlAdapterState {
            running,
            waiting,
            active,
            slots_total: 2,
            ..RlAdapterState::default()
        }
    }

    fn request(states: &[RlAdapterState]) -> RequestBuilder {
        let mut request = RequestBuilder::new(1).adapter(2, "sql");
        for (i, s) in states.iter().enumerate() {
            request = request.adapter_state(i as u32, *s);
        }
        request
    }

    #[test]
    fn the_least_loaded_endpoint_holding_the_adapter_wins_almost_always() {
        let mut matcher: AibrixLoraAffinity = create_matcher("affinity_threshold: 1").unwrap();
        let fleet = EndpointsBuilder::new(4)
            .inflight_requests(0, 5)
            .inflight_requests(1, 3)
            .inflight_requests(2, 0)
            .inflight_requests(3, 1);
        // 0 runs it, 1 has it waiting, 2 has room, 3 is full.
        let r = request(&[
            state(1, 0, 2),
            state(0, 2, 1),
            state(0, 0, 1),
            state(0, 0, 2),
        ]);
        assert_eq!(
            matcher.match_request(&r.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
        let mut never: AibrixLoraAffinity = create_matcher("affinity_threshold: 0").unwrap();
        assert_eq!(
            never.match_request(&r.view(), &fleet.view()),
            Ok(Some(EndpointId(2))),
            "the other group: room for it"
        );
        // No affinity anywhere: the least loaded with room.
        let r = request(&[
            state(0, 0, 1),
            state(0, 0, 2),
            state(0, 0, 1),
            state(0, 0, 2),
        ]);
        assert_eq!(
            matcher.match_request(&r.view(), &fleet.view()),
            Ok(Some(EndpointId(2)))
        );
    }

    #[test]
    fn with_no_group_it_picks_at_random_by_the_seed() {
        let fleet = EndpointsBuilder::new(4);
        let full = [state(0, 0, 2); 4];
        let picks = |seed: u64| {
            let mut m: AibrixLoraAffinity = create_matcher(&format!("seed: {seed}")).unwrap();
            (0..32)
                .map(|_| {
                    m.match_request(&request(&full).view(), &fleet.view())
                        .unwrap()
                })
                .collect::<Vec<_>>()
        };
        let a = picks(1);
        assert_eq!(a, picks(1), "the same seed, the same picks");
        let distinct: std::collections::BTreeSet<_> = a.iter().flatten().map(|id| id.0).collect();
        assert!(distinct.len() > 1, "{distinct:?}");
        assert!(create_matcher::<AibrixLoraAffinity>("affinity_threshold: 1.5").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::AibrixLoraAffinity>(
            "aibrix-lora-affinity",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
