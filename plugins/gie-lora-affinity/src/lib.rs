//! `gie-lora-affinity`: the LoRA affinity scorer of the Gateway API Inference Extension,
//! which llm-d's scheduler runs (`pkg/epp/scheduling/framework/plugins/scorer/
//! lora_affinity.go` there). Each endpoint scores by what it holds of the request's
//! adapter (the host's ABI 1.5 `adapter_state`, what vLLM's `vllm:lora_requests_info`
//! reports): 1.0 when the adapter is active there (its requests run), 0.8 when the endpoint
//! has room for one more adapter (its running and waiting adapters fewer than its slots),
//! 0.6 when the adapter's requests only wait there, else 0. The request goes to the highest
//! score; ties to the fewest requests in flight, then to the first in order.
//!
//! What the lab does not model: the scorer's weight against the others of llm-d's profile
//! (queue, KV usage, prefix cache), for which the tie-break on requests in flight stands;
//! the metrics' scrape interval (the host's state is current unless `--metrics-interval-ms`
//! is set, which it does not apply to adapters). A request for the base model, or a host
//! that models no adapter slots, scores every endpoint alike: the fewest in flight wins.
//!
//! Config keys: none (`seed` unused).

use routerlab_core::abi::RlAdapterState;
use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::inflight;

/// The scorer.
pub struct GieLoraAffinity;

/// The score of an endpoint in `state`, in tenths (1.0 is 10).
fn score(state: &RlAdapterState) -> u32 {
    let adapters = u64::from(state.active) + u64::from(state.waiting_adapters);
    if state.running > 0 {
        10
    } else if adapters < u64::from(state.slots_total) {
        8
    } else if state.waiting > 0 {
        6
    } else {
        0
    }
}

impl Matcher for GieLoraAffinity {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        Ok(GieLoraAffinity)
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let adapter = request.adapter().is_some();
        let mut best: Option<(EndpointId, (u32, u64))> = None;
        for endpoint in endpoints.available() {
            let points = match request.adapter_state(endpoint.id()) {
                Some(state) if adapter => score(&state),
                _ => 0,
            };
            // Highest score first, then fewest in flight.
            let key = (u32::MAX - points, inflight(&endpoint));
            if best.is_none_or(|(_, b)| key < b) {
                best = Some((endpoint.id(), key));
            }
        }
        Ok(best.map(|(id, _)| id))
    }
}

routerlab_core::export_plugins! {
    matcher GieLoraAffinity {
        name: "gie-lora-affinity",
        description: "Gateway API Inference Extension / llm-d LoRA affinity: the adapter active, else room to load it, else it waiting",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn state(running: u32, waiting: u32, active: u32, waiting_adapters: u32) -> RlAdapterState {
        RlAdapterState {
            resident: u32::from(running + waiting > 0),
            running,
            waiting,
            active,
            slots_used: active,
            slots_total: 2,
            waiting_adapters,
            _reserved: 0,
        }
    }

    #[test]
    fn active_beats_room_beats_waiting_beats_full() {
        let mut matcher: GieLoraAffinity = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(4)
            .inflight_requests(0, 9)
            .inflight_requests(1, 1)
            .inflight_requests(2, 0)
            .inflight_requests(3, 0);
        let full = state(0, 0, 2, 0);
        let waiting = state(0, 3, 2, 1);
        let room = state(0, 0, 1, 0);
        let active = state(2, 0, 2, 0);
        let ask = |states: [RlAdapterState; 4]| {
            let mut request = RequestBuilder::new(1).adapter(3, "sql");
            for (i, s) in states.into_iter().enumerate() {
                request = request.adapter_state(i as u32, s);
            }
            request
        };
        let chosen = |request: &RequestBuilder, matcher: &mut GieLoraAffinity| {
            matcher.match_request(&request.view(), &fleet.view())
        };
        let id = |n| Ok(Some(EndpointId(n)));
        assert_eq!(
            chosen(&ask([active, room, waiting, full]), &mut matcher),
            id(0)
        );
        assert_eq!(
            chosen(&ask([full, room, waiting, full]), &mut matcher),
            id(1)
        );
        assert_eq!(
            chosen(&ask([full, full, waiting, full]), &mut matcher),
            id(2)
        );
        assert_eq!(
            chosen(&ask([full, full, full, full]), &mut matcher),
            id(2),
            "all full: the fewest in flight, then the first"
        );
    }

    #[test]
    fn the_base_model_and_a_host_without_slots_go_to_the_fewest_in_flight() {
        let mut matcher: GieLoraAffinity = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(3)
            .inflight_requests(0, 4)
            .inflight_requests(1, 2)
            .inflight_requests(2, 3);
        let base = RequestBuilder::new(1).adapter_state(0, state(5, 0, 1, 0));
        assert_eq!(
            matcher.match_request(&base.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
        let unknown = RequestBuilder::new(2).adapter(1, "sql");
        assert_eq!(
            matcher.match_request(&unknown.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
        assert!(create_matcher::<GieLoraAffinity>("weight: 2").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::GieLoraAffinity>(
            "gie-lora-affinity",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
