//! `llmd-session`: llm-d-router's `session-affinity-scorer` (its Go package
//! `sessionaffinity`, under `pkg/epp/framework/plugins`; anchors-turn3.md §2) in
//! the scheduling profile llm-d's guides pair it with: weighted scorers and the max-score
//! picker (ties at random, seeded),
//!
//! ```text
//! score = session_weight·affinity + prefix_weight·prefix + queue_weight·queue
//! ```
//!
//! - *affinity*: 1 on the endpoint the session's last request went to, 0 elsewhere. llm-d
//!   keeps it in a cookie naming that endpoint, set on every response, with a `maxAge`
//!   (0: a browser-session cookie, no expiry); here the router remembers it per session id,
//!   for `max_age_s` after the session's last request (0: no lifetime), and for the 2^20
//!   most recently routed sessions at most.
//! - *prefix*: matched blocks / the request's blocks (at most 256) from an approximate
//!   index of routing decisions, 31,250 blocks per endpoint, as `gie-default`.
//! - *queue*: `(max_q − q) / (max_q − min_q)` over the candidates (1 when all are equal),
//!   `q` the engine's waiting requests.
//!
//! The weights are those of llm-d's session example (`session-affinity-scorer` 5,
//! `prefix-cache-scorer` 3, `queue-scorer` 1): a session stays unless its endpoint is
//! unavailable, or another holds more of the prompt and queues less by more than the
//! affinity's weight.
//!
//! Config keys: `session_weight` (5), `prefix_weight` (3), `queue_weight` (1), `max_age_s`
//! (0), `seed` (0).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{
    DenseIds, LruMap, PodPrefixIndex, Score, pick_min, range_of, seconds_ns,
};

/// Sessions remembered at most, the least recently routed forgotten first.
const SESSIONS: usize = 1 << 20;

/// llm-d's session-affinity scheduling profile.
pub struct LlmdSession {
    rng: SeededRng,
    weights: (f64, f64, f64),
    max_age_ns: u64,
    /// Session id → the endpoint its last request went to (its id), and when.
    sessions: LruMap<(u32, u64)>,
    index: PodPrefixIndex,
    ids: DenseIds,
    counts: Vec<u64>,
}

impl Matcher for LlmdSession {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let session = config.f64("session_weight", 5.0)?;
        let prefix = config.f64("prefix_weight", 3.0)?;
        let queue = config.f64("queue_weight", 1.0)?;
        let max_age_ns = seconds_ns(config, "max_age_s", 0.0, true)?;
        for (key, value) in [
            ("session_weight", session),
            ("prefix_weight", prefix),
            ("queue_weight", queue),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!(
                    "config key `{key}`: must be a finite, non-negative number"
                ));
            }
        }
        Ok(LlmdSession {
            rng,
            weights: (session, prefix, queue),
            max_age_ns,
            sessions: LruMap::default(),
            index: PodPrefixIndex::new(31_250, 256),
            ids: DenseIds::default(),
            counts: Vec::new(),
        })
    }

    fn remove_endpoints(&mut self, _ids: &[EndpointId]) -> Result<(), String> {
        // A session whose endpoint left scores no affinity anywhere: it is not a candidate.
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let now = request.now_ns();
        let held = request
            .session_id()
            .and_then(|s| self.sessions.get(s))
            .filter(|(_, at)| self.max_age_ns == 0 || now.saturating_sub(*at) < self.max_age_ns)
            .map(|(e, _)| EndpointId(*e));
        let ids = self.ids.of(request)?;
        self.counts.clear();
        self.index.count_matches(&ids, &mut self.counts);
        let total = self.index.head(&ids).len().max(1) as f64;
        self.ids.recycle(ids);
        let (min_q, max_q) = range_of(endpoints.available().map(|e| e.waiting())).unwrap_or((0, 0));
        let (w_session, w_prefix, w_queue) = self.weights;
        let scored: Vec<(EndpointId, Score)> = endpoints
            .available()
            .map(|e| {
                let id = e.id();
                let prefix =
                    self.counts.get(id.get() as usize).copied().unwrap_or(0) as f64 / total;
                let queue = if max_q == min_q {
                    1.0
                } else {
                    (max_q - e.waiting()) as f64 / (max_q - min_q) as f64
                };
                let affinity = if held == Some(id) { 1.0 } else { 0.0 };
                let score = w_session * affinity + w_prefix * prefix + w_queue * queue;
                (id, Score(-score))
            })
            .collect();
        Ok(pick_min(&mut self.rng, scored))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let index = &mut self.index;
        self.ids.with(request, |ids| index.insert(ids, endpoint))?;
        if let Some(session) = request.session_id() {
            // The cookie names the endpoint this response came from.
            *self
                .sessions
                .touch_or_insert_with(session, Default::default) = (endpoint.0, request.now_ns());
            while self.sessions.len() > SESSIONS {
                self.sessions.pop_oldest();
            }
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher LlmdSession {
        name: "llmd-session",
        description: "llm-d session-affinity profile: 5 session + 3 prefix + 1 queue, max score",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn request(id: u64, session: u64, ids: &[u32], now_s: u64) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 5).collect();
        RequestBuilder::new(id)
            .session_id(session)
            .block_size(16)
            .blocks(&hashes)
            .block_ids(ids)
            .now_ns(now_s * 1_000_000_000)
    }

    #[test]
    fn a_session_stays_unless_prefix_and_queue_outweigh_it_and_it_can_expire() {
        let mut m: LlmdSession = create_matcher("max_age_s: 60").unwrap();
        // Endpoint 1 queues 4, endpoint 0 none: the queue scorer gives 1 and 0.
        let fleet = EndpointsBuilder::new(2).waiting(1, 4);
        let first = request(1, 9, &[1, 2], 0);
        m.update(&first.view(), EndpointId(1)).unwrap();
        // Session 9 on 1 (5 + 3·1 + 0 = 8) against 0 (0 + 0 + 1).
        let next = request(2, 9, &[1, 2, 3], 10);
        assert_eq!(
            m.match_request(&next.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
        // With the prefix weight at 0 and the session's cookie expired, the queue decides.
        let late = request(3, 9, &[1, 2, 3], 100);
        assert_eq!(
            m.match_request(&late.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
        let mut m: LlmdSession = create_matcher("{max_age_s: 60, prefix_weight: 0}").unwrap();
        m.update(&first.view(), EndpointId(1)).unwrap();
        assert_eq!(
            m.match_request(&next.view(), &fleet.view()),
            Ok(Some(EndpointId(1)))
        );
        assert_eq!(
            m.match_request(&late.view(), &fleet.view()),
            Ok(Some(EndpointId(0)))
        );
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(m.match_request(&late.view(), &none.view()), Ok(None));
        let err = create_matcher::<LlmdSession>("queue_weight: -2")
            .err()
            .unwrap();
        assert!(err.contains("`queue_weight`"), "{err}");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::LlmdSession>(
            "llmd-session",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
