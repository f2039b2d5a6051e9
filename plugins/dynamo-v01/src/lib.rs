//! `dynamo-v01`: NVIDIA Dynamo's first KV router, a logit over scraped metrics (peers.md §3,
//! "Evolution"; §7, policy 8): a good "metrics-only" baseline.
//!
//! ```text
//! logit(w) = 2 · overlap_blocks(w) · block / isl − kv_blocks_used(w) / kv_blocks_total(w)
//!            − waiting(w) / max_waiting
//! ```
//!
//! the highest logit wins, ties at random (seeded). `overlap` is the host's cached prefix
//! (ABI 1.2; Dynamo fed its indexer with KV events), or the plugin's own index of its
//! decisions when the host cannot say; `max_waiting` is the largest waiting count among the
//! available workers (the term is 0 when nobody waits). Dynamo v0.1 also bumped a worker's
//! waiting and active blocks predictively between metric polls; this plugin reads the
//! metrics as the host reports them (live, or stale with `--metrics-interval-ms`).
//!
//! Config keys: `seed` (0).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, PrefixTrie, Score, pick_min};

/// The Dynamo v0.1 logit matcher.
pub struct DynamoV01 {
    rng: SeededRng,
    index: PrefixTrie,
    ids: DenseIds,
}

impl Matcher for DynamoV01 {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        Ok(DynamoV01 {
            rng: SeededRng::new(config.seed()?),
            index: PrefixTrie::unbounded(),
            ids: DenseIds::default(),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let max_waiting = endpoints
            .available()
            .map(|e| e.waiting())
            .max()
            .unwrap_or(0);
        let ids = self.ids.of(request)?;
        let prompt = request.prompt_len().max(1) as f64;
        let scored: Vec<(EndpointId, Score)> = endpoints
            .available()
            .map(|e| {
                let overlap = request
                    .cached_prefix(e.id())
                    .unwrap_or_else(|| self.index.held_len(&ids, request, e.id()));
                let kv = if e.kv_blocks_total() == 0 {
                    0.0
                } else {
                    e.kv_blocks_used() as f64 / e.kv_blocks_total() as f64
                };
                let waiting = if max_waiting == 0 {
                    0.0
                } else {
                    e.waiting() as f64 / max_waiting as f64
                };
                (
                    e.id(),
                    Score(-(2.0 * overlap as f64 / prompt - kv - waiting)),
                )
            })
            .collect();
        self.ids.recycle(ids);
        Ok(pick_min(&mut self.rng, scored))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let index = &mut self.index;
        self.ids
            .with(request, |ids| index.insert(ids, endpoint, request.now_ns()))?;
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher DynamoV01 {
        name: "dynamo-v01",
        description: "NVIDIA Dynamo v0.1: 2 overlap - kv usage - waiting/max_waiting, argmax",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    #[test]
    fn overlap_counts_twice_against_kv_usage_and_queue() {
        let mut v01: DynamoV01 = create_matcher("").unwrap();
        // Half the prompt cached on 0 (2 · 0.5 = +1.0), but its cache is 90% full (−0.9) and
        // it has the longest queue (−1.0): −0.9. Endpoint 1: 0 − 0.1 − 0 = −0.1 wins.
        let fleet = EndpointsBuilder::new(2)
            .kv_blocks(0, 90, 100)
            .waiting(0, 4)
            .kv_blocks(1, 10, 100);
        let r = RequestBuilder::new(1)
            .block_size(16)
            .blocks(&[1, 2])
            .cached(0, 16)
            .cached(1, 0);
        assert_eq!(
            v01.match_request(&r.view(), &fleet.view()).unwrap(),
            Some(EndpointId(1))
        );
        // Without the queue on 0: 1.0 − 0.9 = 0.1 beats −0.1.
        let calm = EndpointsBuilder::new(2)
            .kv_blocks(0, 90, 100)
            .kv_blocks(1, 10, 100);
        assert_eq!(
            v01.match_request(&r.view(), &calm.view()).unwrap(),
            Some(EndpointId(0))
        );
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::DynamoV01>(
            "dynamo-v01",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
