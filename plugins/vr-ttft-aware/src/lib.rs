//! `vr-ttft-aware`: vllm-router's `ttft_aware` policy (`src/policies/ttft_aware.rs`;
//! anchors-turn3.md §2): each available endpoint's TTFT is estimated as
//!
//! ```text
//! queue_weight × pending × avg_task_duration_ms + (1 − queue_weight) × tokens × per_token_cost_ms
//! ```
//!
//! and the lowest wins, ties to the first endpoint in order (the peer keeps the first
//! strictly lower estimate). `pending` is the router's own count of requests in flight to
//! the endpoint (the peer's worker load; from a host older than ABI 1.2, the engine's
//! running plus waiting).
//!
//! Where the lab differs: the peer counts the request's tokens as its text's bytes over
//! `chars_per_token`; here they are the prompt's own tokens (the trace's length, which is
//! what a tokenizer would give). The compute term is the same on every endpoint (it does
//! not look at the endpoints' caches), so it moves the estimate, never the choice: the
//! policy picks the fewest in flight. What it does not model: the peer can also read loads
//! polled from the workers (`update_loads`); the router's count stands for them here.
//!
//! Config keys: `avg_task_duration_ms` (100), `per_token_cost_ms` (0.5), `queue_weight`
//! (0.6, from 0 to 1); `seed` unused.

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::inflight;

/// vllm-router's TTFT-aware policy.
pub struct VrTtftAware {
    avg_task_duration_ms: f64,
    per_token_cost_ms: f64,
    queue_weight: f64,
}

impl VrTtftAware {
    /// The estimated TTFT, ms, of a request of `tokens` on an endpoint with `pending`
    /// requests in flight.
    fn estimate(&self, pending: u64, tokens: u64) -> f64 {
        let queue = pending as f64 * self.avg_task_duration_ms;
        let compute = tokens as f64 * self.per_token_cost_ms;
        self.queue_weight * queue + (1.0 - self.queue_weight) * compute
    }
}

impl Matcher for VrTtftAware {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let matcher = VrTtftAware {
            avg_task_duration_ms: config.f64("avg_task_duration_ms", 100.0)?,
            per_token_cost_ms: config.f64("per_token_cost_ms", 0.5)?,
            queue_weight: config.f64("queue_weight", 0.6)?,
        };
        let finite = |v: f64| v.is_finite() && v >= 0.0;
        if !finite(matcher.avg_task_duration_ms) || !finite(matcher.per_token_cost_ms) {
            return Err(
                "config: avg_task_duration_ms and per_token_cost_ms must be finite and non-negative"
                    .into(),
            );
        }
        if !(0.0..=1.0).contains(&matcher.queue_weight) {
            return Err("config: queue_weight must be from 0 to 1".into());
        }
        Ok(matcher)
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let tokens = request.unit().tokens(request.prompt_len());
        let mut best: Option<(EndpointId, f64)> = None;
        for endpoint in endpoints.available() {
            let ttft = self.estimate(inflight(&endpoint), tokens);
            if best.is_none_or(|(_, b)| ttft < b) {
                best = Some((endpoint.id(), ttft));
            }
        }
        Ok(best.map(|(id, _)| id))
    }
}

routerlab_core::export_plugins! {
    matcher VrTtftAware {
        name: "vr-ttft-aware",
        description: "vllm-router ttft_aware: lowest of queue weight x in flight x task time + prompt cost",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_lowest_estimate_wins_and_ties_go_to_the_first() {
        let mut matcher: VrTtftAware = create_matcher("").unwrap();
        // 10 in flight: 0.6 × 10 × 100 + 0.4 × 1000 × 0.5 = 600 + 200 ms.
        assert_eq!(matcher.estimate(10, 1000), 800.0);
        let fleet = EndpointsBuilder::new(4)
            .inflight_requests(0, 5)
            .inflight_requests(1, 2)
            .inflight_requests(2, 2)
            .inflight_requests(3, 0)
            .unavailable(3);
        let request = RequestBuilder::new(1).prompt_len(1000);
        let chosen = matcher.match_request(&request.view(), &fleet.view());
        assert_eq!(chosen, Ok(Some(EndpointId(1))), "2 in flight, before 2");
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(
            matcher.match_request(&request.view(), &none.view()),
            Ok(None)
        );
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let err = create_matcher::<VrTtftAware>("queue_weight: 1.5")
            .err()
            .unwrap();
        assert!(err.contains("queue_weight must be from 0 to 1"), "{err}");
        let err = create_matcher::<VrTtftAware>("per_token_cost_ms: -1")
            .err()
            .unwrap();
        assert!(err.contains("per_token_cost_ms"), "{err}");
        assert!(create_matcher::<VrTtftAware>("chars_per_token: 4").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::VrTtftAware>(
            "vr-ttft-aware",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
