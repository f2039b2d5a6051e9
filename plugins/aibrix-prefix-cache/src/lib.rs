//! `aibrix-prefix-cache`: AIBrix's `prefix-cache` routing (peers.md §5, AIBrix; §7,
//! policy 11).
//!
//! ```text
//! counts = in-flight requests per available pod
//! cand = available pods; if max(counts) − min(counts) > imbalance_abs_count: the pods at min
//! walk the request's blocks over cand: pods lacking a block drop out; a survivor of block i
//!     matches (i + 1) · 100 / blocks percent (integer)
//! sort matched pods by percent desc, count asc (equals in random order); take the first whose
//!     count ≤ mean(counts) + std_dev_factor · σ(counts)   (mean and σ over all available pods)
//! nothing taken: the least count (random among equals)
//! the chosen pod is recorded for every block of the request
//! ```
//!
//! The index is global (all pods), bounded to `block_number` blocks least recently used
//! first, and forgets blocks idle for `eviction_duration_mins` of the decision clock. AIBrix
//! hashes 4-byte (code default) or 128-byte (README) blocks of the prompt; here the host's
//! chain gives the blocks.
//!
//! Config keys: `seed` (0), `imbalance_abs_count` (8), `std_dev_factor` (1),
//! `block_number` (200,000), `eviction_duration_mins` (20).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, EndpointSet, PrefixTrie, inflight, pick_min, range_of};

/// The AIBrix prefix-cache matcher.
pub struct AibrixPrefixCache {
    rng: SeededRng,
    imbalance: u64,
    k: f64,
    index: PrefixTrie,
    ids: DenseIds,
}

impl Matcher for AibrixPrefixCache {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let imbalance = config.u64("imbalance_abs_count", 8)?;
        let k = config.f64("std_dev_factor", 1.0)?;
        let blocks = config.u64("block_number", 200_000)?;
        let ttl_mins = config.f64("eviction_duration_mins", 20.0)?;
        if k < 0.0 || blocks == 0 || ttl_mins <= 0.0 {
            return Err("config: std_dev_factor >= 0, block_number >= 1, \
                        eviction_duration_mins > 0"
                .into());
        }
        let index = PrefixTrie::bounded(usize::try_from(blocks).unwrap_or(usize::MAX))
            .with_idle_ttl((ttl_mins * 60e9) as u64);
        Ok(AibrixPrefixCache {
            rng,
            imbalance,
            k,
            index,
            ids: DenseIds::default(),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.index.expire(request.now_ns());
        let counts: Vec<(EndpointId, u64)> = endpoints
            .available()
            .map(|e| (e.id(), inflight(&e)))
            .collect();
        if counts.is_empty() {
            return Ok(None);
        }
        let (lo, hi) = range_of(counts.iter().map(|(_, c)| *c)).unwrap_or((0, 0));
        let mut cand = EndpointSet::default();
        for (id, count) in &counts {
            if hi - lo <= self.imbalance || *count == lo {
                cand.insert(*id);
            }
        }
        // The walk: survivors of each block, with their integer percent.
        let ids = self.ids.of(request)?;
        let mut percent: Vec<(EndpointId, u64)> = Vec::new();
        let mut alive = cand.clone();
        let mut next = EndpointSet::default();
        for (i, id) in ids.iter().enumerate() {
            let Some(holders) = self.index.holders(*id) else {
                break;
            };
            next.assign_intersection(holders, &alive);
            if next.is_empty() {
                break;
            }
            std::mem::swap(&mut alive, &mut next);
            let pct = (i as u64 + 1) * 100 / ids.len() as u64;
            percent = alive.iter().map(|p| (p, pct)).collect();
        }
        self.ids.recycle(ids);
        let n = counts.len() as f64;
        let mean = counts.iter().map(|(_, c)| *c as f64).sum::<f64>() / n;
        let sigma = (counts
            .iter()
            .map(|(_, c)| (*c as f64 - mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        let count_of =
            |id: EndpointId| counts.iter().find(|(p, _)| *p == id).map_or(0, |(_, c)| *c);
        // Random order among equals, then the stable sort: percent desc, count asc.
        for i in (1..percent.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            percent.swap(i, j);
        }
        percent.sort_by(|a, b| b.1.cmp(&a.1).then(count_of(a.0).cmp(&count_of(b.0))));
        if let Some((id, _)) = percent
            .iter()
            .find(|(id, _)| count_of(*id) as f64 <= mean + self.k * sigma)
        {
            return Ok(Some(*id));
        }
        let least = counts.iter().filter(|(id, _)| cand.contains(*id)).copied();
        Ok(pick_min(&mut self.rng, least))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let index = &mut self.index;
        self.ids
            .with(request, |ids| index.insert(ids, endpoint, request.now_ns()))?;
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher AibrixPrefixCache {
        name: "aibrix-prefix-cache",
        description: "AIBrix prefix-cache: best match under mean + 1 sigma load, imbalance override",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    fn request(id: u64, ids: &[u32]) -> RequestBuilder {
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 1).collect();
        RequestBuilder::new(id)
            .block_size(16)
            .blocks(&hashes)
            .block_ids(ids)
    }

    #[test]
    fn the_best_match_within_mean_plus_sigma_and_the_imbalance_override() {
        let mut aibrix: AibrixPrefixCache = create_matcher("").unwrap();
        aibrix
            .update(&request(1, &[1, 2, 3, 4]).view(), EndpointId(0))
            .unwrap();
        let again = request(2, &[1, 2, 3, 4]);
        // Counts 2, 1, 1, 0: mean 1, σ ≈ 0.71; pod 0 (2) is above mean + σ = 1.71, so the
        // least loaded pod (3) is taken instead.
        let busy = EndpointsBuilder::new(4)
            .inflight_requests(0, 2)
            .inflight_requests(1, 1)
            .inflight_requests(2, 1);
        assert_eq!(
            aibrix.match_request(&again.view(), &busy.view()).unwrap(),
            Some(EndpointId(3))
        );
        // Counts 1, 1, 1, 0: mean 0.75, σ ≈ 0.43; pod 0 (1) is within 1.18: the match wins.
        let even = EndpointsBuilder::new(4)
            .inflight_requests(0, 1)
            .inflight_requests(1, 1)
            .inflight_requests(2, 1);
        assert_eq!(
            aibrix.match_request(&again.view(), &even.view()).unwrap(),
            Some(EndpointId(0))
        );
        // max − min = 9 > 8: only the pods at the minimum are candidates.
        let skewed = EndpointsBuilder::new(3)
            .inflight_requests(0, 9)
            .inflight_requests(1, 9);
        assert_eq!(
            aibrix.match_request(&again.view(), &skewed.view()).unwrap(),
            Some(EndpointId(2))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::AibrixPrefixCache>(
            "aibrix-prefix-cache",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
