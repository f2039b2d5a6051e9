//! `llmd-sticky`: llm-d's "sticky until saturated" configuration (peers.md §4, "Pickers and
//! filters" and "Defaults"; §7, policy 10): the prefix-cache affinity filter, then the
//! token-load scorer, then the max-score picker.
//!
//! 1. *Affinity filter*: keep the available endpoints whose prefix score (matched blocks /
//!    request blocks, from the same approximate index as `gie-default`) is at least
//!    `affinity_threshold`; all of them when none passes; with probability
//!    `exploration_probability` skip the filter.
//! 2. *Token-load scorer*: `1 − min(1, inflight_prompt_tokens / queue_threshold_tokens)`.
//! 3. *Max-score picker*: the highest score, ties at random (seeded).
//!
//! Not modelled: the filter's TTFT penalty gate (`maxTTFTPenaltyMs`, 5000), which needs a
//! latency predictor the lab does not have; llm-d makes it optional.
//!
//! Config keys: `seed` (0), `affinity_threshold` (0.80), `exploration_probability` (0.01),
//! `queue_threshold_tokens` (4,194,304), `lru_capacity` (31,250 blocks),
//! `max_prefix_blocks` (256).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, PodPrefixIndex, Score, pick_min};

/// The sticky-until-saturated matcher.
pub struct LlmdSticky {
    rng: SeededRng,
    affinity: f64,
    explore: f64,
    queue_tokens: f64,
    index: PodPrefixIndex,
    ids: DenseIds,
    counts: Vec<u64>,
}

impl Matcher for LlmdSticky {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let affinity = config.f64("affinity_threshold", 0.80)?;
        let explore = config.f64("exploration_probability", 0.01)?;
        let queue_tokens = config.f64("queue_threshold_tokens", 4_194_304.0)?;
        let capacity = config.u64("lru_capacity", 31_250)?;
        let max_blocks = config.u64("max_prefix_blocks", 256)?;
        if !(0.0..=1.0).contains(&affinity) || !(0.0..=1.0).contains(&explore) {
            return Err(
                "config: affinity_threshold and exploration_probability within 0..=1".into(),
            );
        }
        if queue_tokens <= 0.0 || capacity == 0 || max_blocks == 0 {
            return Err(
                "config: queue_threshold_tokens, lru_capacity, max_prefix_blocks > 0".into(),
            );
        }
        Ok(LlmdSticky {
            rng,
            affinity,
            explore,
            queue_tokens,
            index: PodPrefixIndex::new(
                usize::try_from(capacity).unwrap_or(usize::MAX),
                usize::try_from(max_blocks).unwrap_or(usize::MAX),
            ),
            ids: DenseIds::default(),
            counts: Vec::new(),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let ids = self.ids.of(request)?;
        let used = self.index.head(&ids).len();
        self.counts.clear();
        self.index.count_matches(&ids, &mut self.counts);
        self.ids.recycle(ids);
        let total = used.max(1) as f64;
        let prefix = |id: EndpointId, counts: &[u64]| {
            counts.get(id.get() as usize).copied().unwrap_or(0) as f64 / total
        };
        let explore = self.rng.unit_f64() < self.explore;
        let sticky = !explore
            && endpoints
                .available()
                .any(|e| prefix(e.id(), &self.counts) >= self.affinity);
        let candidates: Vec<(EndpointId, Score)> = endpoints
            .available()
            .filter(|e| !sticky || prefix(e.id(), &self.counts) >= self.affinity)
            .map(|e| {
                let load = (e.inflight_prompt_tokens() as f64 / self.queue_tokens).min(1.0);
                (e.id(), Score(-(1.0 - load)))
            })
            .collect();
        Ok(pick_min(&mut self.rng, candidates))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let index = &mut self.index;
        self.ids.with(request, |ids| index.insert(ids, endpoint))?;
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher LlmdSticky {
        name: "llmd-sticky",
        description: "llm-d sticky until saturated: prefix affinity filter, then the fewest tokens in flight",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn request(id: u64, ids: &[u32]) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 5).collect();
        RequestBuilder::new(id)
            .block_size(16)
            .blocks(&hashes)
            .block_ids(ids)
    }

    #[test]
    fn sticks_to_the_affine_endpoint_and_otherwise_takes_the_lightest() {
        let mut sticky: LlmdSticky =
            create_matcher("{exploration_probability: 0, queue_threshold_tokens: 1000}").unwrap();
        sticky
            .update(&request(1, &[1, 2, 3, 4, 5]).view(), EndpointId(0))
            .unwrap();
        // 4 of 5 blocks = 0.8 ≥ 0.8: only endpoint 0 passes the filter, however loaded.
        let loaded = EndpointsBuilder::new(2).inflight_prompt_tokens(0, 900);
        let again = request(2, &[1, 2, 3, 4, 9]);
        assert_eq!(
            sticky.match_request(&again.view(), &loaded.view()).unwrap(),
            Some(EndpointId(0))
        );
        // 3 of 5 = 0.6: no affinity, the lighter endpoint wins.
        let weak = request(3, &[1, 2, 3, 8, 9]);
        assert_eq!(
            sticky.match_request(&weak.view(), &loaded.view()).unwrap(),
            Some(EndpointId(1))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::LlmdSticky>(
            "llmd-sticky",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
