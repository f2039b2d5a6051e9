//! `llmd-latency`: llm-d-router's predicted-latency profile (anchors-turn3.md §2:
//! `predicted-latency-producer` → `slo-headroom-tier-filter` → `latency-scorer` →
//! `weighted-random-picker`, with the online-trained TTFT and TPOT predictors of
//! `llm-d-latency-predictor`):
//!
//! 1. **Predict** each available endpoint's TTFT and TPOT for this request from the
//!    signals llm-d's predictor reads: KV usage, the prompt's length, waiting and running
//!    requests, the prefix the endpoint was already sent, and prompt tokens in flight.
//!    The predictors learn online from the requests routed: TTFT at each first token (its
//!    arrival to first token), TPOT at each completion (first to last token over the
//!    tokens after the first), each against the signals the request was routed with.
//! 2. **Headroom**: `SLO − predicted`, per target given (`ttft_slo_ms`, `tpot_slo_ms`; 0 =
//!    none: a TTFT target of none has headroom `−predicted`, a TPOT target of none is
//!    always met, as llm-d's shipped profile neutralises TPOT).
//! 3. **Tier filter**: the endpoints meeting every target, with probability 0.99 when any
//!    does (the other 1% explores the rest, as llm-d's filter).
//! 4. **Score**: among those meeting, the most headroom scores highest (`strategy: most`)
//!    or the least (`least`: packing up to the SLO); among those missing, idle endpoints
//!    first, then the least TTFT deficit.
//! 5. **Pick** at random, weighted by score (seeded).
//!
//! Until a predictor has `min_samples` samples, llm-d falls back to a composite of KV
//! utilisation, queue depth and prefix match; so does this: the max of
//! `(1 − kv) + queue + prefix`, ties at random.
//!
//! Where the lab differs: llm-d's predictors are XGBoost models trained in a sidecar; here
//! each is a linear model fitted by recursive least squares on the same signals (a
//! constant, the signals, prompt × waiting), which a replay can train without a second
//! process. The SLO comes from the config, not from each request's headers. The
//! `prefix-cache-affinity-filter` stages of llm-d's profile are left out (the prefix
//! enters the prediction instead).
//!
//! Config keys: `ttft_slo_ms` (0), `tpot_slo_ms` (0), `strategy` (`most`; `least`),
//! `exploration` (0.01), `min_samples` (32), `seed` (0).

use std::collections::HashMap;

use routerlab_core::{
    EndpointId, EndpointStatus, Endpoints, Matcher, PluginConfig, Request, SeededRng,
};
use routerlab_policy_kit::{DenseIds, PrefixTrie, inflight};

/// Signals a prediction reads.
const FEATURES: usize = 8;
/// Routed requests awaiting their completion tracked at most (a host that never reports
/// one, for a failed request, must not grow this without bound): past it, those routed
/// more than ten minutes ago are forgotten, unlearned.
const ROUTED_ENTRIES: usize = 1 << 20;

/// A linear model fitted by recursive least squares.
struct Predictor {
    weights: [f64; FEATURES],
    /// The inverse of the (regularised) signals' Gram matrix.
    p: [[f64; FEATURES]; FEATURES],
    samples: u64,
}

impl Predictor {
    fn new() -> Predictor {
        let mut p = [[0.0; FEATURES]; FEATURES];
        for (i, row) in p.iter_mut().enumerate() {
            row[i] = 1e4;
        }
        Predictor {
            weights: [0.0; FEATURES],
            p,
            samples: 0,
        }
    }

    fn predict(&self, x: &[f64; FEATURES]) -> f64 {
        self.weights.iter().zip(x).map(|(w, v)| w * v).sum()
    }

    fn learn(&mut self, x: &[f64; FEATURES], y: f64) {
        if !y.is_finite() {
            return;
        }
        let mut px = [0.0; FEATURES];
        for (i, row) in self.p.iter().enumerate() {
            px[i] = row.iter().zip(x).map(|(a, b)| a * b).sum();
        }
        let denominator = 1.0 + x.iter().zip(&px).map(|(a, b)| a * b).sum::<f64>();
        if !(denominator.is_finite() && denominator > 0.0) {
            return;
        }
        let error = y - self.predict(x);
        for (w, k) in self.weights.iter_mut().zip(&px) {
            *w += k / denominator * error;
        }
        for i in 0..FEATURES {
            for j in 0..FEATURES {
                self.p[i][j] -= px[i] * px[j] / denominator;
            }
        }
        self.samples += 1;
    }
}

/// A request's signals on each candidate endpoint.
type Signals = Vec<(EndpointId, [f64; FEATURES])>;

/// What a routed request was routed with, until it teaches the predictors.
struct Routed {
    x: [f64; FEATURES],
    routed_ns: u64,
    first_token_ns: Option<u64>,
}

/// llm-d's predicted-latency profile.
pub struct LlmdLatency {
    rng: SeededRng,
    ttft_slo_ms: Option<f64>,
    tpot_slo_ms: Option<f64>,
    pack: bool,
    exploration: f64,
    min_samples: u64,
    ttft: Predictor,
    tpot: Predictor,
    routed: HashMap<u64, Routed>,
    /// The last request matched and its signals on each candidate, for `update`.
    last: Option<(u64, Signals)>,
    trie: PrefixTrie,
    ids: DenseIds,
}

impl LlmdLatency {
    /// The signals of `request` on `endpoint`, `held` prompt tokens already sent there.
    fn signals(request: &Request<'_>, endpoint: &EndpointStatus<'_>, held: f64) -> [f64; FEATURES] {
        let prompt = request.unit().tokens(request.prompt_len()) as f64;
        let waiting = endpoint.waiting() as f64;
        [
            1.0,
            endpoint.kv_usage(),
            prompt / 1000.0,
            waiting,
            inflight(endpoint) as f64,
            if prompt > 0.0 { held / prompt } else { 0.0 },
            endpoint.inflight_prompt_tokens() as f64 / 1000.0,
            prompt / 1000.0 * waiting,
        ]
    }

    fn held(&self, ids: &[u32], request: &Request<'_>, endpoint: EndpointId) -> f64 {
        let held = self.trie.held_len(ids, request, endpoint);
        request.unit().tokens(held) as f64
    }

    /// One of `candidates` at random, weighted by score (uniformly when no score is
    /// positive).
    fn pick(&mut self, candidates: &[(EndpointId, f64)]) -> EndpointId {
        let total: f64 = candidates.iter().map(|(_, s)| s.max(0.0)).sum();
        if total.is_nan() || total <= 0.0 {
            return candidates[self.rng.below(candidates.len() as u64) as usize].0;
        }
        let mut at = self.rng.unit_f64() * total;
        for (id, score) in candidates {
            at -= score.max(0.0);
            if at < 0.0 {
                return *id;
            }
        }
        candidates[candidates.len() - 1].0
    }
}

/// `values` scaled to [0, 1] (all 1 when equal), higher first unless `invert`.
fn normalised(values: &[f64], invert: bool) -> Vec<f64> {
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(*v), h.max(*v))
        });
    values
        .iter()
        .map(|v| {
            if hi > lo {
                let s = (v - lo) / (hi - lo);
                if invert { 1.0 - s } else { s }
            } else {
                1.0
            }
        })
        .collect()
}

impl Matcher for LlmdLatency {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let ttft_slo_ms = config.f64("ttft_slo_ms", 0.0)?;
        let tpot_slo_ms = config.f64("tpot_slo_ms", 0.0)?;
        let pack = config.choice("strategy", &["most", "least"], "most")? == "least";
        let exploration = config.f64("exploration", 0.01)?;
        let min_samples = config.u64("min_samples", 32)?;
        for (key, value) in [("ttft_slo_ms", ttft_slo_ms), ("tpot_slo_ms", tpot_slo_ms)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!(
                    "config key `{key}`: must be a finite, non-negative number of ms"
                ));
            }
        }
        if !(0.0..=1.0).contains(&exploration) {
            return Err("config key `exploration`: must be from 0 to 1".into());
        }
        Ok(LlmdLatency {
            rng,
            ttft_slo_ms: (ttft_slo_ms > 0.0).then_some(ttft_slo_ms),
            tpot_slo_ms: (tpot_slo_ms > 0.0).then_some(tpot_slo_ms),
            pack,
            exploration,
            min_samples: min_samples.max(1),
            ttft: Predictor::new(),
            tpot: Predictor::new(),
            routed: HashMap::new(),
            last: None,
            trie: PrefixTrie::bounded(1 << 20),
            ids: DenseIds::default(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        self.trie.remove_endpoints(ids);
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let ids = self.ids.of(request)?;
        let rows: Vec<(EndpointId, [f64; FEATURES], u64)> = endpoints
            .available()
            .map(|e| {
                let held = self.held(&ids, request, e.id());
                (e.id(), Self::signals(request, &e, held), inflight(&e))
            })
            .collect();
        self.ids.recycle(ids);
        self.last = Some((
            request.id(),
            rows.iter().map(|(id, x, _)| (*id, *x)).collect(),
        ));
        if rows.is_empty() {
            return Ok(None);
        }
        let trained = self.ttft.samples >= self.min_samples
            && (self.tpot_slo_ms.is_none() || self.tpot.samples >= self.min_samples);
        if !trained {
            // The composite fallback: (1 − kv) + queue + prefix, the max at random.
            let max_q = rows.iter().map(|(_, x, _)| x[3]).fold(0.0, f64::max);
            let scores: Vec<f64> = rows
                .iter()
                .map(|(_, x, _)| {
                    let queue = if max_q > 0.0 { 1.0 - x[3] / max_q } else { 1.0 };
                    (1.0 - x[1]) + queue + x[5]
                })
                .collect();
            let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let tied: Vec<(EndpointId, f64)> = rows
                .iter()
                .zip(&scores)
                .filter(|(_, s)| **s == best)
                .map(|((id, _, _), _)| (*id, 1.0))
                .collect();
            return Ok(Some(self.pick(&tied)));
        }
        // Headroom per target: SLO − predicted (no TTFT target: −predicted; no TPOT
        // target: always met).
        let heads: Vec<(f64, f64)> = rows
            .iter()
            .map(|(_, x, _)| {
                let ttft = self.ttft.predict(x).max(0.0);
                let ttft_head = self.ttft_slo_ms.unwrap_or(0.0) - ttft;
                let tpot_head = self
                    .tpot_slo_ms
                    .map_or(0.0, |slo| slo - self.tpot.predict(x).max(0.0));
                (ttft_head, tpot_head)
            })
            .collect();
        let meets = |h: &(f64, f64)| h.0 >= 0.0 && h.1 >= 0.0;
        let any_meet = heads.iter().any(meets);
        let positive = any_meet && self.rng.unit_f64() >= self.exploration;
        let tier: Vec<usize> = (0..rows.len())
            .filter(|i| meets(&heads[*i]) == positive)
            .collect();
        let tier = if tier.is_empty() {
            (0..rows.len()).collect()
        } else {
            tier
        };
        let scored: Vec<(EndpointId, f64)> = if positive {
            let headroom: Vec<f64> = tier.iter().map(|i| heads[*i].0 + heads[*i].1).collect();
            let scores = normalised(&headroom, self.pack);
            tier.iter()
                .zip(scores)
                .map(|(i, s)| (rows[*i].0, s))
                .collect()
        } else {
            // Idle endpoints absorb traffic first; then the smallest TTFT deficit.
            let idle: Vec<usize> = tier.iter().copied().filter(|i| rows[*i].2 == 0).collect();
            let pool = if idle.is_empty() { tier } else { idle };
            let deficit: Vec<f64> = pool.iter().map(|i| -heads[*i].0).collect();
            let scores = normalised(&deficit, true);
            pool.iter()
                .zip(scores)
                .map(|(i, s)| (rows[*i].0, s))
                .collect()
        };
        Ok(Some(self.pick(&scored)))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let ids = self.ids.of(request)?;
        let held = self.held(&ids, request, endpoint);
        self.trie.insert(&ids, endpoint, request.now_ns());
        self.ids.recycle(ids);
        // The signals it was routed with, as its match read them; for a request routed
        // without a match here (another policy chose), its prompt and prefix alone.
        let matched = match &self.last {
            Some((id, rows)) if *id == request.id() => {
                rows.iter().find(|(e, _)| *e == endpoint).map(|(_, x)| *x)
            }
            _ => None,
        };
        let x = matched.unwrap_or_else(|| {
            let prompt = request.unit().tokens(request.prompt_len()) as f64;
            let mut x = [0.0; FEATURES];
            x[0] = 1.0;
            x[2] = prompt / 1000.0;
            x[5] = if prompt > 0.0 { held / prompt } else { 0.0 };
            x
        });
        let now = request.now_ns();
        if self.routed.len() >= ROUTED_ENTRIES {
            self.routed
                .retain(|_, r| now.saturating_sub(r.routed_ns) < 600_000_000_000);
        }
        self.routed.insert(
            request.id(),
            Routed {
                x,
                routed_ns: now,
                first_token_ns: None,
            },
        );
        Ok(())
    }

    fn on_first_token(
        &mut self,
        request: &Request<'_>,
        _endpoint: EndpointId,
    ) -> Result<(), String> {
        if let Some(r) = self.routed.get_mut(&request.id()) {
            let ttft_ms = request.now_ns().saturating_sub(request.arrival_ns()) as f64 / 1e6;
            self.ttft.learn(&r.x, ttft_ms);
            r.first_token_ns = Some(request.now_ns());
        }
        Ok(())
    }

    fn on_complete(&mut self, request: &Request<'_>, _endpoint: EndpointId) -> Result<(), String> {
        let Some(r) = self.routed.remove(&request.id()) else {
            return Ok(());
        };
        if let (Some(first), Some(tokens)) = (r.first_token_ns, request.output_tokens())
            && tokens > 1
        {
            let tpot_ms = request.now_ns().saturating_sub(first) as f64 / 1e6 / (tokens - 1) as f64;
            self.tpot.learn(&r.x, tpot_ms);
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher LlmdLatency {
        name: "llmd-latency",
        description: "llm-d predicted latency: SLO headroom from online TTFT/TPOT predictors, weighted random",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn the_predictor_learns_a_linear_latency_exactly() {
        let mut p = Predictor::new();
        // TTFT = 20 + 30·waiting + 50·prompt(k): recovered from 40 samples.
        for i in 0..40 {
            let waiting = f64::from(i % 5);
            let prompt = f64::from(i % 7) / 2.0;
            let mut x = [0.0; FEATURES];
            (x[0], x[2], x[3]) = (1.0, prompt, waiting);
            p.learn(&x, 20.0 + 30.0 * waiting + 50.0 * prompt);
        }
        let mut x = [0.0; FEATURES];
        (x[0], x[2], x[3]) = (1.0, 2.0, 3.0);
        assert!((p.predict(&x) - 210.0).abs() < 0.5, "{}", p.predict(&x));
    }

    /// Trains the TTFT predictor on `samples` requests whose TTFT is 100 ms per waiting
    /// request, then routes one with a 250 ms SLO over endpoints waiting 1, 2 and 4.
    fn routed(strategy: &str, samples: u64) -> Vec<u32> {
        let mut m: LlmdLatency = create_matcher(&format!(
            "{{ttft_slo_ms: 250, strategy: {strategy}, exploration: 0, min_samples: 8}}"
        ))
        .unwrap();
        for i in 0..samples {
            let waiting = i % 5;
            let fleet = EndpointsBuilder::new(1).waiting(0, waiting);
            let r = RequestBuilder::new(i).prompt_len(100);
            m.match_request(&r.view(), &fleet.view()).unwrap();
            m.update(&r.view(), EndpointId(0)).unwrap();
            let first = RequestBuilder::new(i)
                .prompt_len(100)
                .now_ns(waiting * 100_000_000);
            m.on_first_token(&first.view(), EndpointId(0)).unwrap();
        }
        let fleet = EndpointsBuilder::new(3)
            .waiting(0, 1)
            .waiting(1, 2)
            .waiting(2, 4)
            .inflight_requests(0, 1)
            .inflight_requests(1, 1)
            .inflight_requests(2, 1);
        (0..20)
            .map(|i| {
                let r = RequestBuilder::new(1000 + i).prompt_len(100);
                m.match_request(&r.view(), &fleet.view())
                    .unwrap()
                    .unwrap()
                    .0
            })
            .collect()
    }

    #[test]
    fn headroom_decides_once_trained_and_the_composite_before() {
        // Predicted 100, 200 and 400 ms against 250: endpoint 2 misses. `most` favours
        // endpoint 0 (150 ms of headroom, score 1; endpoint 1 scores 0), `least` endpoint 1.
        let most = routed("most", 40);
        assert!(most.iter().all(|e| *e == 0), "{most:?}");
        let least = routed("least", 40);
        assert!(least.iter().all(|e| *e == 1), "{least:?}");
        // Untrained, the composite: the shortest queue (endpoint 0), every time.
        let untrained = routed("most", 3);
        assert!(untrained.iter().all(|e| *e == 0), "{untrained:?}");
        let none = EndpointsBuilder::new(1).unavailable(0);
        let mut m: LlmdLatency = create_matcher("").unwrap();
        let r = RequestBuilder::new(1);
        assert_eq!(m.match_request(&r.view(), &none.view()), Ok(None));
        let err = create_matcher::<LlmdLatency>("exploration: 2")
            .err()
            .unwrap();
        assert!(err.contains("`exploration`"), "{err}");
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::LlmdLatency>(
            "llmd-latency",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
