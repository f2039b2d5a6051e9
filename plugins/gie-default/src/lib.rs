//! `gie-default`: the Gateway API Inference Extension's endpoint picker as llm-d ships it
//! (peers.md §4; §7, policy 9): weighted scorers, each in [0, 1], and the max-score picker
//! (ties at random, seeded).
//!
//! | `variant` | score |
//! | --- | --- |
//! | `default` (EPP built-in) | 3·prefix + 2·queue + 2·(1 − kv_usage) |
//! | `estimate` (llm-d sample) | 1·prefix + 1·load_aware |
//! | `precise` (llm-d sample) | 2·precise_prefix + 1·(1 − kv_usage) + 1·queue |
//!
//! - *prefix*: matched blocks / the request's blocks (at most `max_prefix_blocks`), from
//!   an approximate index of routing decisions with an LRU of `lru_capacity` blocks per
//!   endpoint; the walk counts, for each endpoint, the blocks it holds until a block nobody
//!   holds (not strictly consecutive, as GIE).
//! - *precise prefix*: the host's cached prefix (ABI 1.2) over the prompt, as llm-d's
//!   KV-event-fed scorer sees it; the approximate index when the host cannot say. With KV
//!   tiers (ABI 1.3 `cached_tiers`) each tier's tokens count at its weight, as llm-d's
//!   indexer weighs a block by the medium its KV event names (`kvCacheBackendConfigs`,
//!   defaults `gpu` 1.0, `cpu` 0.8, and 1.0 for a tier it has no entry for, as a shared
//!   store): `(gpu + cpu_weight·host + shared_weight·shared) / prompt`.
//! - *queue*: `(max_q − q) / (max_q − min_q)` over the candidates, 1 when all are equal, `q`
//!   the engine's waiting requests.
//! - *load_aware*: 0.5 when nothing waits, else `0.5·(1 − min(q, 128)/128)`.
//!
//! Differences from GIE: blocks are the host's chain (GIE hashes 64-character blocks of the
//! prompt, 16 tokens at 4 characters a token), and the LRU capacity is fixed rather than
//! auto-tuned to each pod's `num_gpu_blocks`.
//!
//! Config keys: `seed` (0), `variant` (`default`), `lru_capacity` (31,250 blocks),
//! `max_prefix_blocks` (256), `cpu_weight` (0.8) and `shared_weight` (1.0), each 0 to 1;
//! and a weight per scorer, each replacing its variant's (0 turns the scorer off), as an
//! `EndpointPickerConfig`'s scheduling profile weighs them (`--router-config` imports
//! one): `prefix_weight`, `precise_prefix_weight`, `queue_weight`, `kv_cache_weight`,
//! `load_aware_weight`.
//!
//! The defaults are GIE's at `84436a9` (kubernetes-sigs/gateway-api-inference-extension,
//! its default plugins config: `queue-scorer` 2, `kv-cache-utilization-scorer` 2,
//! `prefix-cache-scorer` 3 since GIE #1827; the prefix scorer's `maxPrefixBlocksToMatch`
//! 256 and `lruCapacityPerServer` 31,250).

use routerlab_core::{EndpointId, Endpoints, Matcher, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, PodPrefixIndex, Score, pick_min, range_of};

/// Each scorer's weight in the sum (0: not run).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Weights {
    prefix: f64,
    precise_prefix: f64,
    queue: f64,
    kv_cache: f64,
    load_aware: f64,
}

/// The scorer keys, each a weight that replaces its variant's.
const WEIGHT_KEYS: [&str; 5] = [
    "prefix_weight",
    "precise_prefix_weight",
    "queue_weight",
    "kv_cache_weight",
    "load_aware_weight",
];

impl Weights {
    /// A variant's scorers and weights.
    fn of(variant: &str) -> Weights {
        let none = Weights {
            prefix: 0.0,
            precise_prefix: 0.0,
            queue: 0.0,
            kv_cache: 0.0,
            load_aware: 0.0,
        };
        match variant {
            "estimate" => Weights {
                prefix: 1.0,
                load_aware: 1.0,
                ..none
            },
            "precise" => Weights {
                precise_prefix: 2.0,
                kv_cache: 1.0,
                queue: 1.0,
                ..none
            },
            _ => Weights {
                prefix: 3.0,
                queue: 2.0,
                kv_cache: 2.0,
                ..none
            },
        }
    }

    fn slot(&mut self, key: &str) -> &mut f64 {
        match key {
            "prefix_weight" => &mut self.prefix,
            "precise_prefix_weight" => &mut self.precise_prefix,
            "queue_weight" => &mut self.queue,
            "kv_cache_weight" => &mut self.kv_cache,
            _ => &mut self.load_aware,
        }
    }
}

/// The GIE / llm-d endpoint picker.
pub struct GieDefault {
    rng: SeededRng,
    weights: Weights,
    index: PodPrefixIndex,
    ids: DenseIds,
    counts: Vec<u64>,
    /// Weights of a host-tier and a shared-tier token against a GPU one (precise variant).
    tier_weights: (f64, f64),
}

impl Matcher for GieDefault {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let rng = SeededRng::new(config.seed()?);
        let variant = config.choice("variant", &["default", "estimate", "precise"], "default")?;
        let mut weights = Weights::of(variant);
        for key in WEIGHT_KEYS {
            if let Some(weight) = config.optional_f64(key)? {
                if !(weight.is_finite() && (0.0..=1e6).contains(&weight)) {
                    return Err(format!(
                        "config: {key} must be from 0 to 1000000, not {weight}"
                    ));
                }
                *weights.slot(key) = weight;
            }
        }
        let capacity = config.u64("lru_capacity", 31_250)?;
        let max_blocks = config.u64("max_prefix_blocks", 256)?;
        if capacity == 0 || max_blocks == 0 {
            return Err("config: lru_capacity and max_prefix_blocks must be at least 1".into());
        }
        let cpu_weight = config.f64("cpu_weight", 0.8)?;
        let shared_weight = config.f64("shared_weight", 1.0)?;
        for (key, weight) in [("cpu_weight", cpu_weight), ("shared_weight", shared_weight)] {
            if !(0.0..=1.0).contains(&weight) {
                return Err(format!("config: {key} must be from 0 to 1, not {weight}"));
            }
        }
        Ok(GieDefault {
            rng,
            weights,
            index: PodPrefixIndex::new(
                usize::try_from(capacity).unwrap_or(usize::MAX),
                usize::try_from(max_blocks).unwrap_or(usize::MAX),
            ),
            ids: DenseIds::default(),
            counts: Vec::new(),
            tier_weights: (cpu_weight, shared_weight),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        let ids = self.ids.of(request)?;
        self.counts.clear();
        self.index.count_matches(&ids, &mut self.counts);
        let total = self.index.head(&ids).len().max(1) as f64;
        let (min_q, max_q) = range_of(endpoints.available().map(|e| e.waiting())).unwrap_or((0, 0));
        let prompt = request.prompt_len().max(1) as f64;
        let scored: Vec<(EndpointId, Score)> = endpoints
            .available()
            .map(|e| {
                let id = e.id();
                let approximate =
                    self.counts.get(id.get() as usize).copied().unwrap_or(0) as f64 / total;
                let q = e.waiting();
                let queue = if max_q == min_q {
                    1.0
                } else {
                    (max_q - q) as f64 / (max_q - min_q) as f64
                };
                let kv = 1.0 - e.kv_usage();
                let w = self.weights;
                let load = if q == 0 {
                    0.5
                } else {
                    0.5 * (1.0 - q.min(128) as f64 / 128.0)
                };
                // Asked of the host only when it counts: each answer costs a walk.
                let precise = if w.precise_prefix > 0.0 {
                    let (cpu, shared) = self.tier_weights;
                    match (request.cached_tiers(id), request.cached_prefix(id)) {
                        (Some(t), _) => {
                            (t.gpu as f64 + cpu * t.host as f64 + shared * t.shared as f64) / prompt
                        }
                        (None, Some(c)) => c as f64 / prompt,
                        (None, None) => approximate,
                    }
                } else {
                    0.0
                };
                let score = w.prefix * approximate
                    + w.precise_prefix * precise
                    + w.queue * queue
                    + w.kv_cache * kv
                    + w.load_aware * load;
                // The max-score picker: the smallest negated score.
                (id, Score(-score))
            })
            .collect();
        self.ids.recycle(ids);
        Ok(pick_min(&mut self.rng, scored))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let index = &mut self.index;
        self.ids.with(request, |ids| index.insert(ids, endpoint))?;
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher GieDefault {
        name: "gie-default",
        description: "Gateway API Inference Extension / llm-d: 3 prefix + 2 queue + 2 kv, max score",
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
    fn weights_trade_prefix_against_queue_and_kv() {
        let mut gie: GieDefault = create_matcher("").unwrap();
        let idle = EndpointsBuilder::new(2);
        let first = request(1, &[1, 2, 3, 4]);
        gie.update(&first.view(), EndpointId(0)).unwrap();
        // Endpoint 0 holds all 4 blocks but has the longer queue and 60% of its cache used.
        let busy = EndpointsBuilder::new(2).waiting(0, 3).kv_blocks(0, 60, 100);
        let again = request(2, &[1, 2, 3, 4]);
        let chosen = gie.match_request(&again.view(), &busy.view()).unwrap();
        // 0: 3·1 + 2·0 + 2·0.4 = 3.8; 1: 0 + 2·1 + 2·1 = 4.0.
        assert_eq!(chosen, Some(EndpointId(1)));
        // Without the load, the prefix wins.
        assert_eq!(
            gie.match_request(&again.view(), &idle.view()).unwrap(),
            Some(EndpointId(0))
        );
    }

    #[test]
    fn a_profiles_weights_replace_the_variants() {
        // llm-d's sample profile: prefix 2, load-aware 1. Endpoint 0 holds the prefix
        // with 64 requests waiting: 2·1 + 0.25 = 2.25 against 1's 0 + 0.5.
        let mut gie: GieDefault = create_matcher(
            "{prefix_weight: 2, queue_weight: 0, kv_cache_weight: 0, load_aware_weight: 1}",
        )
        .unwrap();
        gie.update(&request(1, &[1, 2]).view(), EndpointId(0))
            .unwrap();
        let fleet = EndpointsBuilder::new(2).waiting(0, 64);
        let again = request(2, &[1, 2]);
        assert_eq!(
            gie.match_request(&again.view(), &fleet.view()).unwrap(),
            Some(EndpointId(0))
        );
        // Load alone (prefix 0) sends it to the idle endpoint.
        let mut load_only: GieDefault = create_matcher(
            "{prefix_weight: 0, queue_weight: 0, kv_cache_weight: 0, load_aware_weight: 1}",
        )
        .unwrap();
        load_only
            .update(&request(1, &[1, 2]).view(), EndpointId(0))
            .unwrap();
        assert_eq!(
            load_only
                .match_request(&again.view(), &fleet.view())
                .unwrap(),
            Some(EndpointId(1))
        );
        assert!(create_matcher::<GieDefault>("queue_weight: -1").is_err());
    }

    #[test]
    fn the_precise_variant_reads_the_hosts_cache() {
        let mut gie: GieDefault = create_matcher("variant: precise").unwrap();
        let fleet = EndpointsBuilder::new(3);
        let r = request(1, &[1, 2])
            .prompt_len(32)
            .cached(0, 0)
            .cached(1, 32)
            .cached(2, 16);
        assert_eq!(
            gie.match_request(&r.view(), &fleet.view()).unwrap(),
            Some(EndpointId(1))
        );
    }

    #[test]
    fn the_precise_variant_weighs_each_tier_as_llm_d_does() {
        // 64 prompt tokens. 0: 32 on the GPU; 1: 8 on the GPU and 32 in host memory
        // (8 + 0.8·32 = 33.6); 2: 30 in the shared store (1.0·30).
        let r = request(1, &[1, 2, 3, 4])
            .prompt_len(64)
            .cached(0, 32)
            .cached(1, 8)
            .cached(2, 0)
            .cached_tiers(0, 32, 0, 0)
            .cached_tiers(1, 8, 32, 0)
            .cached_tiers(2, 0, 0, 30);
        let fleet = EndpointsBuilder::new(3);
        let pick = |config: &str| {
            let mut gie: GieDefault = create_matcher(config).unwrap();
            gie.match_request(&r.view(), &fleet.view()).unwrap()
        };
        assert_eq!(pick("variant: precise"), Some(EndpointId(1)));
        // Host memory at half a GPU token: 8 + 16 = 24 loses to 32.
        assert_eq!(
            pick("{variant: precise, cpu_weight: 0.5}"),
            Some(EndpointId(0))
        );
        // The shared store at full weight beats the GPU's 32 once host memory counts little.
        let shared_only = request(1, &[1, 2, 3, 4])
            .prompt_len(64)
            .cached_tiers(0, 32, 0, 0)
            .cached_tiers(1, 0, 0, 40);
        let mut gie: GieDefault = create_matcher("variant: precise").unwrap();
        assert_eq!(
            gie.match_request(&shared_only.view(), &EndpointsBuilder::new(2).view())
                .unwrap(),
            Some(EndpointId(1))
        );
        assert!(create_matcher::<GieDefault>("cpu_weight: 1.5").is_err());
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::GieDefault>(
            "gie-default",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
