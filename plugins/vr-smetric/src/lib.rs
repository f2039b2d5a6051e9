//! `vr-smetric`: vllm-router's `smetric` policy (`src/policies/smetric.rs`; anchors-turn3.md
//! §2): session-centric, SLO-aware routing for agentic traffic. Per request, with `hit[i]`
//! the prompt tokens endpoint `i` was already sent and `q[i]` the prefill cost routed there
//! that has no first token yet:
//!
//! ```text
//! cost(i)  = n + n·(L − n/2) / crossover      n = L − hit[i] new of L prompt tokens
//!                                              (just n without attention_crossover_tokens)
//! load(i)  = q[i] + cost(i)
//! meets(i) = load(i) / rate(i) <= slack · (ttft_slo_s + ttft_slo_s_per_1k_tokens · L / 1000)
//! prev     = argmax hit (ties to the lower load)
//! if the request follows a turn and hit[prev] > hit_ratio · history
//!         and (meets(prev) or no endpoint meets):   prev            (the session stays)
//! else: argmin load(i) · in_flight(i), ties in turn                 (it moves)
//! ```
//!
//! `rate(i)` is learned, as the peer learns it: each request routed to `i` gives its cost
//! over its time from routing to first token; the 90th percentile of the last 64 samples,
//! once there are 8, is the rate (until then every endpoint meets the SLO).
//!
//! Where the lab differs: the peer reads turns from a chat body (a turn is an assistant
//! message; `history` the characters before the latest one) and counts characters over 4
//! for tokens. Here a request follows a turn when it has a parent (`parent_id`, as session
//! and agentic traces give), `history` is that parent's prompt, and lengths are the
//! trace's tokens; the prefix each endpoint was sent is the router's own record of the
//! blocks it routed there (the peer's approximate tree), bounded at `max_tree_blocks`.
//!
//! Config keys: `hit_ratio` (0.5), `slack` (1.0), `ttft_slo_s` (1.0),
//! `ttft_slo_s_per_1k_tokens` (0.0625), `attention_crossover_tokens` (0 = off),
//! `max_tree_blocks` (2^20); `seed` unused.

use std::collections::{HashMap, VecDeque};

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request};
use routerlab_policy_kit::{DenseIds, LruMap, PrefixTrie, inflight};

/// Recent per-request rates a rate is taken over, the samples it needs, and its quantile.
const RATE_WINDOW: usize = 64;
const RATE_MIN_SAMPLES: usize = 8;
const RATE_QUANTILE: f64 = 0.9;
/// Parents' prompt lengths remembered, most recent first.
const HISTORY_ENTRIES: usize = 1 << 20;
/// Routed requests awaiting their first token tracked at most (a host that never reports
/// one, for a failed request, must not grow this without bound): past it, those routed
/// more than a minute ago are dropped from their queues.
const DISPATCHED_ENTRIES: usize = 1 << 20;

/// One endpoint's prefill feedback.
#[derive(Default)]
struct Prefill {
    /// Cost routed here with no first token yet.
    queued_cost: f64,
    queued_requests: u64,
    samples: VecDeque<f64>,
    rate: Option<f64>,
}

impl Prefill {
    fn dequeue(&mut self, cost: f64) {
        self.queued_requests = self.queued_requests.saturating_sub(1);
        self.queued_cost = if self.queued_requests == 0 {
            0.0
        } else {
            (self.queued_cost - cost).max(0.0)
        };
    }

    fn record_rate(&mut self, rate: f64) {
        if self.samples.len() == RATE_WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back(rate);
        if self.samples.len() >= RATE_MIN_SAMPLES {
            let mut sorted: Vec<f64> = self.samples.iter().copied().collect();
            sorted.sort_by(f64::total_cmp);
            let rank = RATE_QUANTILE * (sorted.len() - 1) as f64;
            self.rate = Some(sorted[rank.round() as usize]);
        }
    }
}

/// A routed request waiting for its first token.
struct Dispatched {
    endpoint: EndpointId,
    cost: f64,
    at_ns: u64,
}

/// One endpoint's figures for the request being routed.
struct Candidate {
    id: EndpointId,
    hit: f64,
    load: f64,
    rate: Option<f64>,
    inflight: u64,
}

/// vllm-router's SMetric policy.
pub struct VrSmetric {
    hit_ratio: f64,
    slack: f64,
    ttft_slo_s: f64,
    ttft_slo_s_per_1k: f64,
    crossover: Option<f64>,
    trie: PrefixTrie,
    ids: DenseIds,
    prefill: HashMap<EndpointId, Prefill>,
    dispatched: HashMap<u64, Dispatched>,
    /// Prompt tokens of requests routed, by id: a follow-up's history.
    prompts: LruMap<u64>,
    tie_breaker: usize,
    candidates: Vec<Candidate>,
}

impl VrSmetric {
    /// The prefill cost of `len` prompt tokens with `hit` already there, in linear-token
    /// equivalents: each new token attends to about `len − new/2` others.
    fn cost(&self, len: f64, hit: f64) -> f64 {
        let new = (len - hit).max(0.0);
        match self.crossover {
            Some(crossover) => new + new * (len - new / 2.0) / crossover,
            None => new,
        }
    }

    fn budget_s(&self, len: f64) -> f64 {
        self.slack * (self.ttft_slo_s + self.ttft_slo_s_per_1k * len / 1000.0)
    }

    /// Prompt tokens `endpoint` was sent of `request`'s blocks, at most its length.
    fn hit(&self, ids: &[u32], request: &Request<'_>, endpoint: EndpointId) -> f64 {
        let held = self.trie.held_len(ids, request, endpoint);
        request.unit().tokens(held) as f64
    }
}

impl Matcher for VrSmetric {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let _ = config.seed()?;
        let hit_ratio = config.f64("hit_ratio", 0.5)?;
        let slack = config.f64("slack", 1.0)?;
        let ttft_slo_s = config.f64("ttft_slo_s", 1.0)?;
        let ttft_slo_s_per_1k = config.f64("ttft_slo_s_per_1k_tokens", 0.0625)?;
        let crossover = config.f64("attention_crossover_tokens", 0.0)?;
        let max_tree_blocks = config.u64("max_tree_blocks", 1 << 20)?;
        for (key, value) in [
            ("hit_ratio", hit_ratio),
            ("slack", slack),
            ("ttft_slo_s", ttft_slo_s),
            ("ttft_slo_s_per_1k_tokens", ttft_slo_s_per_1k),
            ("attention_crossover_tokens", crossover),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!(
                    "config key `{key}`: must be a finite, non-negative number"
                ));
            }
        }
        if max_tree_blocks == 0 || max_tree_blocks > 1 << 28 {
            return Err("config key `max_tree_blocks`: must be from 1 to 2^28".into());
        }
        Ok(VrSmetric {
            hit_ratio,
            slack,
            ttft_slo_s,
            ttft_slo_s_per_1k,
            crossover: (crossover > 0.0).then_some(crossover),
            trie: PrefixTrie::bounded(max_tree_blocks as usize),
            ids: DenseIds::default(),
            prefill: HashMap::new(),
            dispatched: HashMap::new(),
            prompts: LruMap::default(),
            tie_breaker: 0,
            candidates: Vec::new(),
        })
    }

    fn remove_endpoints(&mut self, ids: &[EndpointId]) -> Result<(), String> {
        self.trie.remove_endpoints(ids);
        for id in ids {
            self.prefill.remove(id);
        }
        self.dispatched.retain(|_, d| !ids.contains(&d.endpoint));
        Ok(())
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let len = request.unit().tokens(request.prompt_len()) as f64;
        let ids = self.ids.of(request)?;
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        for endpoint in endpoints.available() {
            let id = endpoint.id();
            let hit = self.hit(&ids, request, id);
            let prefill = self.prefill.get(&id);
            candidates.push(Candidate {
                id,
                hit,
                load: prefill.map_or(0.0, |p| p.queued_cost) + self.cost(len, hit),
                rate: prefill.and_then(|p| p.rate),
                inflight: inflight(&endpoint),
            });
        }
        self.ids.recycle(ids);
        let budget = self.budget_s(len);
        let meets = |c: &Candidate| c.rate.is_none_or(|rate| c.load / rate <= budget);
        // The most tokens already sent, the lower load on a tie (the last such, as the
        // peer's `max_by`).
        let mut prev: Option<&Candidate> = None;
        for c in &candidates {
            if prev.is_none_or(|p| c.hit > p.hit || (c.hit == p.hit && c.load <= p.load)) {
                prev = Some(c);
            }
        }
        let Some(prev) = prev else {
            self.candidates = candidates;
            return Ok(None);
        };
        let history = request
            .parent_id()
            .and_then(|p| self.prompts.get(p).copied())
            .unwrap_or(0) as f64;
        let stick = request.parent_id().is_some()
            && prev.hit > self.hit_ratio * history
            && (meets(prev) || !candidates.iter().any(meets));
        let chosen = if stick {
            prev.id
        } else {
            let score = |c: &Candidate| c.load * c.inflight as f64;
            let best = candidates.iter().map(score).fold(f64::INFINITY, f64::min);
            let tied: Vec<EndpointId> = candidates
                .iter()
                .filter(|c| score(c) == best)
                .map(|c| c.id)
                .collect();
            let pick = tied[self.tie_breaker % tied.len()];
            self.tie_breaker = self.tie_breaker.wrapping_add(1);
            pick
        };
        self.candidates = candidates;
        Ok(Some(chosen))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let len = request.unit().tokens(request.prompt_len());
        let ids = self.ids.of(request)?;
        let cost = self.cost(len as f64, self.hit(&ids, request, endpoint));
        self.trie.insert(&ids, endpoint, request.now_ns());
        self.ids.recycle(ids);
        if self.dispatched.len() >= DISPATCHED_ENTRIES {
            let now = request.now_ns();
            let prefill = &mut self.prefill;
            self.dispatched.retain(|_, d| {
                let keep = now.saturating_sub(d.at_ns) < 60_000_000_000;
                if !keep && let Some(p) = prefill.get_mut(&d.endpoint) {
                    p.dequeue(d.cost);
                }
                keep
            });
        }
        let prefill = self.prefill.entry(endpoint).or_default();
        prefill.queued_cost += cost;
        prefill.queued_requests += 1;
        if let Some(old) = self.dispatched.insert(
            request.id(),
            Dispatched {
                endpoint,
                cost,
                at_ns: request.now_ns(),
            },
        ) {
            // The same id routed again before its first token: the first leaves the queue.
            if let Some(p) = self.prefill.get_mut(&old.endpoint) {
                p.dequeue(old.cost);
            }
        }
        *self.prompts.touch_or_insert_with(request.id(), || 0) = len;
        while self.prompts.len() > HISTORY_ENTRIES {
            self.prompts.pop_oldest();
        }
        Ok(())
    }

    fn on_first_token(
        &mut self,
        request: &Request<'_>,
        _endpoint: EndpointId,
    ) -> Result<(), String> {
        let Some(d) = self.dispatched.remove(&request.id()) else {
            return Ok(());
        };
        if let Some(prefill) = self.prefill.get_mut(&d.endpoint) {
            prefill.dequeue(d.cost);
            let ttft_s = request.now_ns().saturating_sub(d.at_ns) as f64 / 1e9;
            if d.cost > 0.0 && ttft_s > 0.0 {
                prefill.record_rate(d.cost / ttft_s);
            }
        }
        Ok(())
    }

    fn on_complete(&mut self, request: &Request<'_>, _endpoint: EndpointId) -> Result<(), String> {
        // Finished without a first token seen: it leaves the queue, with no rate sample.
        if let Some(d) = self.dispatched.remove(&request.id())
            && let Some(prefill) = self.prefill.get_mut(&d.endpoint)
        {
            prefill.dequeue(d.cost);
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher VrSmetric {
        name: "vr-smetric",
        description: "vllm-router smetric: a session stays while its holder meets the TTFT SLO; else least load x in flight",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    /// A request of `blocks` 100-token blocks (ids as given), sent at `now_ms`.
    fn request(id: u64, ids: &[u32], now_ms: u64) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 11).collect();
        RequestBuilder::new(id)
            .block_size(100)
            .blocks(&hashes)
            .block_ids(ids)
            .prompt_len(100 * ids.len() as u64)
            .now_ns(now_ms * 1_000_000)
    }

    fn route(m: &mut VrSmetric, fleet: &EndpointsBuilder, r: &RequestBuilder) -> EndpointId {
        let chosen = m.match_request(&r.view(), &fleet.view()).unwrap().unwrap();
        m.update(&r.view(), chosen).unwrap();
        chosen
    }

    #[test]
    fn a_follow_up_stays_with_its_prefix_until_the_holder_would_miss_the_slo() {
        // SLO 1 s flat; one follow-up of 400 tokens, 300 of them sent to endpoint 0 before.
        let mut m: VrSmetric = create_matcher("ttft_slo_s_per_1k_tokens: 0").unwrap();
        let fleet = EndpointsBuilder::new(2)
            .inflight_requests(0, 1)
            .inflight_requests(1, 1);
        let first = request(1, &[1, 2, 3], 0);
        m.match_request(&first.view(), &fleet.view()).unwrap();
        m.update(&first.view(), EndpointId(0)).unwrap();
        // Its cost: 300 tokens; endpoint 0 has it queued (300), endpoint 1 nothing.
        assert_eq!(m.prefill[&EndpointId(0)].queued_cost, 300.0);
        m.on_first_token(&request(1, &[1, 2, 3], 100).view(), EndpointId(0))
            .unwrap();
        assert_eq!(m.prefill[&EndpointId(0)].queued_cost, 0.0);
        // No rate learned yet (1 sample of 8): the follow-up (hit 300 > 0.5 × 300) stays.
        let follow = request(2, &[1, 2, 3, 4], 200).parent_id(1);
        assert_eq!(route(&mut m, &fleet, &follow), EndpointId(0));
        // Endpoint 0 now learns 1,000 tokens/s (8 requests of 100 tokens in 0.1 s each)...
        for k in 0..8 {
            let r = request(10 + k, &[50 + k as u32], 300);
            m.update(&r.view(), EndpointId(0)).unwrap();
            m.on_first_token(&request(10 + k, &[], 400).view(), EndpointId(0))
                .unwrap();
        }
        assert_eq!(m.prefill[&EndpointId(0)].rate, Some(1000.0));
        // ...and holds request 2's 100 tokens plus 1,000 more queued: a follow-up of 100
        // new tokens would wait (100 + 1000 + 100) / 1000 = 1.2 s > 1 s, while endpoint 1
        // meets it (no rate yet): the session moves to the lower load × in flight.
        let busy = request(30, &[90; 10], 500);
        m.update(&busy.view(), EndpointId(0)).unwrap();
        let again = request(3, &[1, 2, 3, 4, 5], 600).parent_id(2);
        assert_eq!(route(&mut m, &fleet, &again), EndpointId(1));
    }

    #[test]
    fn a_first_request_balances_by_load_times_in_flight_and_ties_take_turns() {
        let mut m: VrSmetric = create_matcher("").unwrap();
        let idle = EndpointsBuilder::new(3).inflight_requests(1, 2);
        // Endpoints 0 and 2 have nothing in flight (score 0): turns between them.
        let picks: Vec<EndpointId> = (0..4)
            .map(|i| {
                m.match_request(&request(i, &[100 + i as u32], 0).view(), &idle.view())
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            picks,
            [EndpointId(0), EndpointId(2), EndpointId(0), EndpointId(2)]
        );
        let none = EndpointsBuilder::new(1).unavailable(0);
        assert_eq!(
            m.match_request(&request(9, &[1], 0).view(), &none.view()),
            Ok(None)
        );
        let err = create_matcher::<VrSmetric>("slack: -1").err().unwrap();
        assert!(err.contains("`slack`"), "{err}");
        // The attention term: 200 new of 400 tokens at a crossover of 1,000 tokens costs
        // 200 + 200 × (400 − 100) / 1000 = 260.
        let m: VrSmetric = create_matcher("attention_crossover_tokens: 1000").unwrap();
        assert_eq!(m.cost(400.0, 200.0), 260.0);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::VrSmetric>(
            "vr-smetric",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
