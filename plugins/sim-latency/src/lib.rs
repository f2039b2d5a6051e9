//! `sim-latency`: the simulating router. For each available endpoint it asks the host for
//! the engine model's forecast of this request there, its time to first token and its time
//! per output token, given that engine's queue, batch and cache now (ABI 1.4 `predict`).
//! Without targets it sends the request where the forecast TTFT is lowest (ties to fewer
//! requests in flight). Given `ttft_slo_ms` and `tpot_slo_ms`, it keeps the endpoints
//! forecast to meet both and among them picks the fewest requests in flight, then the
//! lowest forecast TTFT: headroom spent on the least loaded keeps it for the requests that
//! follow. A request forecast to miss everywhere goes by the same order among all
//! endpoints, where it delays the fewest others. Then ties go to the first in order.
//!
//! Why load before TTFT under targets: the forecast is close (within a millisecond of the
//! replayed TTFT on most requests of the agentic trace) but it is of this request only;
//! sending each request where it is fastest piles work where the cache is, and the
//! requests after it pay (on the agentic trace, 4 endpoints, 100/8 ms: SLO attainment
//! 0.924 picking the fastest, 0.973 this way).
//!
//! No peer router does this: llm-d's latency scorer and vllm-router's `smetric` learn a
//! latency model from what they observe (`llmd-latency`, `vr-smetric` here); this one asks
//! the step-time model that `calibrate` fits and the timed replay runs, forecasting the
//! scheduler's steps (the engine crate's `predict` module says what the forecast covers
//! and what it does not). In a timed replay the host forecasts from the engines
//! themselves, in `serve` from its mirror of what it sent each endpoint. A host without an
//! engine model (a time-free replay, `serve --plugin-isolation process`) gives no
//! forecast: the policy then picks the fewest prompt tokens in flight.
//!
//! Config keys: `ttft_slo_ms` and `tpot_slo_ms` (0 = no target; give both or neither);
//! `seed` unused.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::inflight;

/// The simulating router.
pub struct SimLatency {
    /// (TTFT, TPOT) targets, nanoseconds.
    slo: Option<(f64, f64)>,
}

impl SimLatency {
    /// How an endpoint with forecast (`ttft_ns`, `tpot_ns`) and `inflight` requests ranks,
    /// lower first. Without targets: its TTFT, then its load. With them: whether it would
    /// miss, then its load, then its TTFT (a request that would miss everywhere goes where
    /// it delays the fewest others).
    fn rank(&self, ttft_ns: u64, tpot_ns: u64, inflight: u64) -> (bool, u64, u64) {
        match self.slo {
            None => (false, ttft_ns, inflight),
            Some((ttft_slo, tpot_slo)) => {
                let miss = ttft_ns as f64 > ttft_slo || tpot_ns as f64 > tpot_slo;
                (miss, inflight, ttft_ns)
            }
        }
    }
}

impl Matcher for SimLatency {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let ttft = config.f64("ttft_slo_ms", 0.0)?;
        let tpot = config.f64("tpot_slo_ms", 0.0)?;
        let valid = |v: f64| v.is_finite() && v >= 0.0;
        if !valid(ttft) || !valid(tpot) {
            return Err(
                "config: ttft_slo_ms and tpot_slo_ms must be finite and non-negative".into(),
            );
        }
        let slo = match (ttft > 0.0, tpot > 0.0) {
            (true, true) => Some((ttft * 1e6, tpot * 1e6)),
            (false, false) => None,
            _ => return Err("config: give both ttft_slo_ms and tpot_slo_ms, or neither".into()),
        };
        Ok(SimLatency { slo })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let mut best: Option<(EndpointId, (bool, u64, u64))> = None;
        for endpoint in endpoints.available() {
            let load = inflight(&endpoint);
            let key = match request.predict(endpoint.id()) {
                Some(f) => self.rank(f.ttft_ns, f.tpot_ns, load),
                None => (false, endpoint.inflight_prompt_tokens(), load),
            };
            if best.is_none_or(|(_, b)| key < b) {
                best = Some((endpoint.id(), key));
            }
        }
        Ok(best.map(|(id, _)| id))
    }
}

routerlab_core::export_plugins! {
    matcher SimLatency {
        name: "sim-latency",
        description: "simulating router: the TTFT and TPOT the host's engine model forecasts on each endpoint, against an SLO",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn without_targets_the_lowest_forecast_ttft_wins_then_the_fewest_in_flight() {
        let mut matcher: SimLatency = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(4)
            .inflight_requests(0, 1)
            .inflight_requests(1, 3)
            .inflight_requests(2, 2)
            .unavailable(3);
        let request = RequestBuilder::new(1)
            .prompt_len(1000)
            .predicted(0, 90 * MS, 5 * MS)
            .predicted(1, 40 * MS, 50 * MS)
            .predicted(2, 40 * MS, 50 * MS)
            .predicted(3, 1, 1);
        let chosen = matcher.match_request(&request.view(), &fleet.view());
        assert_eq!(chosen, Ok(Some(EndpointId(2))), "40 ms, 2 in flight");
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(
            matcher.match_request(&request.view(), &none.view()),
            Ok(None)
        );
    }

    #[test]
    fn with_targets_the_least_loaded_that_meets_both_wins_and_lost_causes_go_to_the_least_loaded() {
        let mut matcher: SimLatency = create_matcher("ttft_slo_ms: 100\ntpot_slo_ms: 10").unwrap();
        let fleet = EndpointsBuilder::new(3);
        let request = RequestBuilder::new(1)
            .predicted(0, 20 * MS, 12 * MS)
            .predicted(1, 80 * MS, 9 * MS)
            .predicted(2, 60 * MS, 10 * MS);
        let chosen = matcher.match_request(&request.view(), &fleet.view());
        assert_eq!(
            chosen,
            Ok(Some(EndpointId(2))),
            "0 is fastest but misses TPOT"
        );
        let busy = EndpointsBuilder::new(3)
            .inflight_requests(0, 4)
            .inflight_requests(1, 2)
            .inflight_requests(2, 1);
        let met_by_two = RequestBuilder::new(2)
            .predicted(0, 20 * MS, 5 * MS)
            .predicted(1, 30 * MS, 5 * MS)
            .predicted(2, 99 * MS, 11 * MS);
        let chosen = matcher.match_request(&met_by_two.view(), &busy.view());
        assert_eq!(
            chosen,
            Ok(Some(EndpointId(1))),
            "of 0 and 1, the less loaded"
        );
        let all_miss = RequestBuilder::new(3)
            .predicted(0, 300 * MS, 5 * MS)
            .predicted(1, 150 * MS, 14 * MS)
            .predicted(2, 190 * MS, 20 * MS);
        let chosen = matcher.match_request(&all_miss.view(), &busy.view());
        assert_eq!(
            chosen,
            Ok(Some(EndpointId(2))),
            "a lost cause goes to the least loaded"
        );
    }

    #[test]
    fn without_forecasts_the_fewest_prompt_tokens_in_flight_win() {
        let mut matcher: SimLatency = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(3)
            .inflight_prompt_tokens(0, 900)
            .inflight_prompt_tokens(1, 300)
            .inflight_prompt_tokens(2, 600);
        let request = RequestBuilder::new(1).prompt_len(1000);
        let chosen = matcher.match_request(&request.view(), &fleet.view());
        assert_eq!(chosen, Ok(Some(EndpointId(1))));
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let err = create_matcher::<SimLatency>("ttft_slo_ms: 100")
            .err()
            .unwrap();
        assert!(err.contains("give both"), "{err}");
        let err = create_matcher::<SimLatency>("ttft_slo_ms: -1\ntpot_slo_ms: 5")
            .err()
            .unwrap();
        assert!(err.contains("non-negative"), "{err}");
        assert!(create_matcher::<SimLatency>("horizon_ms: 5").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::SimLatency>(
            "sim-latency",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
