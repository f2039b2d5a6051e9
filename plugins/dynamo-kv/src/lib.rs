//! `dynamo-kv`: NVIDIA Dynamo's KV router (peers.md §3, "Cost and selection"; §7, policy 7).
//!
//! For each available worker `w`, with `B` the router's block size in tokens, `isl` the
//! request's prompt tokens and `overlap(w)` the blocks of its prefix `w` holds:
//!
//! ```text
//! prefill_blocks(w) = (active_prefill_tokens(w) + isl − overlap(w)·B) / B
//! decode_blocks(w)  = active_unique_blocks(w) + blocks of the request not active on w
//! cost(w)           = overlap_score_weight · prefill_blocks(w) + decode_blocks(w)
//! ```
//!
//! At `temperature` 0 the cheapest worker wins (ties at random, seeded; Dynamo takes the
//! first in map order, which is no fixed order either). Above 0 a worker is sampled with
//! probability ∝ `exp(−(cost − min) / ((max − min) · T))`, uniform when all costs are equal.
//!
//! Load is accounted predictively, as Dynamo's `ActiveSequences`: at `update` the request's
//! prefill tokens (`isl − overlap·B`) and its blocks join the chosen worker; its prefill
//! tokens leave at its first token (`on_first_token`, timed replays), its blocks at
//! completion (`on_complete`). Blocks are the request's own chain, counted in `B`-token
//! units and shared (reference-counted) between requests on a worker.
//!
//! `mode: precise` (the default, Dynamo's `use_kv_events: true`) takes `overlap(w)` from the
//! host (ABI 1.2 `cached_prefix`: what the engine's KV cache really holds, as KV events
//! would tell Dynamo). `mode: approximate` (`use_kv_events: false`) keeps its own prefix
//! index of routing decisions, entries expiring after `ttl_s` seconds of the decision clock,
//! at most `max_tree_size` blocks (least recently used pruned first; Dynamo prunes to 80% in
//! one go). A host that cannot say what is cached makes precise mode fall back to the index.
//! Stale requests are not force-expired after 300 s as in Dynamo: the lab loses none.
//!
//! In a disaggregated fleet (ABI 1.3 phases) it routes as Dynamo derives its two routers
//! from one config (`lib/mocker/src/replay/offline/disagg.rs`): for the prefill phase the
//! cost is the overlap-weighted prefill blocks alone (active blocks are not tracked); for
//! the decode phase it is the worker's active blocks plus the request's, each request's
//! blocks counted whole (overlap weight 0, no assumed reuse, no prefill tokens).
//!
//! With KV tiers (ABI 1.3 `cached_tiers`), each block the endpoint would load instead of
//! computing counts as a fraction of a GPU block: `host_overlap_weight` from its host tier
//! (0.75, Dynamo's `host_cache_hit_weight`), `shared_overlap_weight` from the fleet's shared
//! tier (0.25, Dynamo's `disk_cache_hit_weight`); `overlap_score_credit` (1.0) is what a GPU
//! block counts for. The overlap in the cost is `credit·gpu + host_weight·host +
//! shared_weight·shared`, in blocks.
//!
//! Config keys: `seed` (0), `overlap_score_weight` (1.0; Dynamo's `prefill_load_scale`, the
//! deprecated `kv_overlap_score_weight`), `overlap_score_credit` (1.0),
//! `host_overlap_weight` (0.75), `shared_overlap_weight` (0.25), `temperature` (0.0),
//! `mode` (`precise` or `approximate`; default precise), `block_size` (tokens, 64: the
//! `dynamo` engine preset's), `ttl_s` (120), `max_tree_size` (1,048,576). The defaults are
//! Dynamo 1.6.1's (`dynamo/common/configuration/groups/kv_router_args.py` in the
//! `ai-dynamo` 1.6.1 wheel: `--router-kv-overlap-score-credit` 1.0,
//! `--router-prefill-load-scale` 1.0, `--router-host-cache-hit-weight` 0.75,
//! `--router-disk-cache-hit-weight` 0.25, `--router-temperature` 0.0, `--router-kv-events`
//! on, `--router-ttl-secs` 120).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use routerlab_core::hash::{U64Hasher, U64Map};
use routerlab_core::{EndpointId, Endpoints, Matcher, Phase, PluginConfig, Request, SeededRng};
use routerlab_policy_kit::{DenseIds, PrefixTrie, Score, pick_min};

/// One worker's active sequences.
#[derive(Default, Debug)]
struct Worker {
    /// Prefill tokens of its requests that have not produced a first token.
    active_tokens: u64,
    /// Trace block id -> (requests holding it, its size in router blocks).
    blocks: HashMap<u32, (u32, u64), BuildHasherDefault<U64Hasher>>,
    /// Σ router blocks over `blocks`.
    unique_blocks: u64,
    /// Σ router blocks of its active requests, each counted whole (shared ones too).
    all_blocks: u64,
}

/// What `update` and the events need of a routed request.
#[derive(Debug)]
struct Active {
    worker: usize,
    prefill_tokens: u64,
    blocks: Vec<(u32, u64)>,
}

/// The Dynamo KV-router matcher.
pub struct DynamoKv {
    rng: SeededRng,
    weight: f64,
    /// What a block held in the endpoint's host tier counts for, against one on its GPU.
    host_weight: f64,
    /// What a block in the fleet's shared tier counts for (Dynamo's disk tier).
    shared_weight: f64,
    /// What a block on the endpoint's GPU counts for.
    credit: f64,
    temperature: f64,
    precise: bool,
    block: u64,
    index: PrefixTrie,
    ids: DenseIds,
    workers: Vec<Worker>,
    active: U64Map<Active>,
    /// Overlap blocks per worker of the request last matched: (request id, by worker index).
    last_overlap: (u64, Vec<u64>),
}

/// Prompt tokens of a request (text: the SDK's bytes a token).
fn tokens(request: &Request<'_>, units: u64) -> u64 {
    request.unit().tokens(units)
}

impl DynamoKv {
    fn worker(&mut self, id: EndpointId) -> &mut Worker {
        let i = id.get() as usize;
        if self.workers.len() <= i {
            self.workers.resize_with(i + 1, Worker::default);
        }
        &mut self.workers[i]
    }

    /// The request's blocks as (trace block id, router blocks in it).
    fn blocks(&self, request: &Request<'_>, ids: &[u32]) -> Vec<(u32, u64)> {
        let trace_block = tokens(request, u64::from(request.block_size())).max(1);
        let isl = tokens(request, request.prompt_len());
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let start = i as u64 * trace_block;
                let len = trace_block.min(isl.saturating_sub(start));
                (*id, len.div_ceil(self.block))
            })
            .collect()
    }

    /// Overlap blocks of each available worker from the own index: the consecutive blocks
    /// of the chain, from the first, that the worker was sent.
    fn indexed_overlap(&self, request: &Request<'_>, ids: &[u32], worker: EndpointId) -> u64 {
        let held = self.index.held_prefix(ids, worker) as u64;
        let trace_block = tokens(request, u64::from(request.block_size()));
        (held * trace_block).min(tokens(request, request.prompt_len())) / self.block
    }
}

impl Matcher for DynamoKv {
    fn create(_name: &str, config: &mut PluginConfig) -> Result<Self, String> {
        let seed = config.seed()?;
        let weight = config.f64("overlap_score_weight", 1.0)?;
        // Dynamo 1.6.1's `--router-host-cache-hit-weight` and `--router-disk-cache-hit-weight`
        // defaults, and `--router-kv-overlap-score-credit`'s.
        let host_weight = config.f64("host_overlap_weight", 0.75)?;
        let shared_weight = config.f64("shared_overlap_weight", 0.25)?;
        let credit = config.f64("overlap_score_credit", 1.0)?;
        for (key, value) in [
            ("host_overlap_weight", host_weight),
            ("shared_overlap_weight", shared_weight),
            ("overlap_score_credit", credit),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(format!("config: {key} must be from 0 to 1, not {value}"));
            }
        }
        let temperature = config.f64("temperature", 0.0)?;
        let precise = config.choice("mode", &["precise", "approximate"], "precise")? == "precise";
        let block = config.u64("block_size", 64)?;
        let ttl_s = config.f64("ttl_s", 120.0)?;
        let max_tree = config.u64("max_tree_size", 1 << 20)?;
        if weight < 0.0 || temperature < 0.0 || ttl_s <= 0.0 || block == 0 || max_tree == 0 {
            return Err(
                "config: overlap_score_weight and temperature must be >= 0; ttl_s, \
                        block_size and max_tree_size > 0"
                    .into(),
            );
        }
        let index = PrefixTrie::bounded(usize::try_from(max_tree).unwrap_or(usize::MAX))
            .with_idle_ttl((ttl_s * 1e9) as u64);
        Ok(DynamoKv {
            rng: SeededRng::new(seed),
            weight,
            host_weight,
            shared_weight,
            credit,
            temperature,
            precise,
            block,
            index,
            ids: DenseIds::default(),
            workers: Vec::new(),
            active: U64Map::default(),
            last_overlap: (0, Vec::new()),
        })
    }

    fn match_request(
        &mut self,
        request: &Request<'_>,
        endpoints: &Endpoints<'_>,
    ) -> Result<Option<EndpointId>, String> {
        self.index.expire(request.now_ns());
        let ids = self.ids.of(request)?;
        let blocks = self.blocks(request, &ids);
        let isl = tokens(request, request.prompt_len());
        let block = self.block;
        let mut costs = Vec::new();
        let mut overlaps = Vec::new();
        let phase = request.phase();
        let own_blocks: u64 = blocks.iter().map(|(_, n)| n).sum();
        for endpoint in endpoints.available() {
            let id = endpoint.id();
            let overlap = match self.precise.then(|| request.cached_prefix(id)).flatten() {
                Some(units) => {
                    // A block in the host tier saves its prefill too, at a load's price.
                    // Asked only when it counts: each answer costs the host a walk.
                    let tiers = (self.host_weight > 0.0 || self.shared_weight > 0.0)
                        .then(|| request.cached_tiers(id))
                        .flatten();
                    let loaded = match tiers {
                        Some(tiers) => {
                            tokens(request, tiers.host) as f64 * self.host_weight
                                + tokens(request, tiers.shared) as f64 * self.shared_weight
                        }
                        None => 0.0,
                    };
                    (tokens(request, units) as f64 * self.credit + loaded) as u64 / self.block
                }
                None => self.indexed_overlap(request, &ids, id),
            };
            let worker = self.worker(id);
            let prefill =
                (worker.active_tokens + isl).saturating_sub(overlap * block) as f64 / block as f64;
            let cost = match phase {
                // Dynamo's prefill router of a disaggregated fleet tracks no active blocks.
                Phase::Prefill => self.weight * prefill,
                // Its decode router: no overlap credit, no prefill tokens, no assumed reuse
                // (every request's blocks counted whole).
                Phase::Decode => (worker.all_blocks + own_blocks) as f64,
                _ => {
                    let new_blocks: u64 = blocks
                        .iter()
                        .filter(|(b, _)| !worker.blocks.contains_key(b))
                        .map(|(_, n)| n)
                        .sum();
                    let decode = (worker.unique_blocks + new_blocks) as f64;
                    self.weight * prefill + decode
                }
            };
            costs.push((id, cost));
            overlaps.push((id, overlap));
        }
        self.ids.recycle(ids);
        let mut by_worker = vec![0; self.workers.len()];
        for (id, overlap) in overlaps {
            by_worker[id.get() as usize] = overlap;
        }
        self.last_overlap = (request.id(), by_worker);
        if costs.is_empty() {
            return Ok(None);
        }
        if self.temperature == 0.0 {
            return Ok(pick_min(
                &mut self.rng,
                costs.iter().map(|(id, c)| (*id, Score(*c))),
            ));
        }
        let min = costs.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
        let max = costs.iter().map(|c| c.1).fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = costs
            .iter()
            .map(|(_, c)| {
                if max > min {
                    (-(c - min) / ((max - min) * self.temperature)).exp()
                } else {
                    1.0
                }
            })
            .collect();
        let total: f64 = weights.iter().sum();
        let mut draw = self.rng.unit_f64() * total;
        for ((id, _), w) in costs.iter().zip(&weights) {
            if draw < *w {
                return Ok(Some(*id));
            }
            draw -= w;
        }
        Ok(costs.last().map(|(id, _)| *id))
    }

    fn update(&mut self, request: &Request<'_>, endpoint: EndpointId) -> Result<(), String> {
        let ids = self.ids.of(request)?;
        let blocks = self.blocks(request, &ids);
        if !self.precise || request.cached_prefix(endpoint).is_none() {
            self.index.insert(&ids, endpoint, request.now_ns());
        }
        self.ids.recycle(ids);
        let overlap = match &self.last_overlap {
            (id, by_worker) if *id == request.id() => {
                by_worker.get(endpoint.get() as usize).copied().unwrap_or(0)
            }
            _ => 0,
        };
        let isl = tokens(request, request.prompt_len());
        let prefill_tokens = isl.saturating_sub(overlap * self.block);
        let worker = self.worker(endpoint);
        worker.active_tokens += prefill_tokens;
        worker.all_blocks += blocks.iter().map(|(_, n)| n).sum::<u64>();
        for (block, n) in &blocks {
            let entry = worker.blocks.entry(*block).or_insert((0, *n));
            if entry.0 == 0 {
                worker.unique_blocks += n;
            }
            entry.0 += 1;
        }
        let previous = self.active.insert(
            request.id(),
            Active {
                worker: endpoint.get() as usize,
                prefill_tokens,
                blocks,
            },
        );
        debug_assert!(previous.is_none(), "request routed twice");
        Ok(())
    }

    fn on_first_token(&mut self, request: &Request<'_>, _: EndpointId) -> Result<(), String> {
        if let Some(active) = self.active.get_mut(&request.id()) {
            let tokens = std::mem::take(&mut active.prefill_tokens);
            self.workers[active.worker].active_tokens -= tokens;
        }
        Ok(())
    }

    fn on_complete(&mut self, request: &Request<'_>, _: EndpointId) -> Result<(), String> {
        let Some(active) = self.active.remove(&request.id()) else {
            return Ok(());
        };
        let worker = &mut self.workers[active.worker];
        worker.active_tokens -= active.prefill_tokens;
        worker.all_blocks -= active.blocks.iter().map(|(_, n)| n).sum::<u64>();
        for (block, _) in active.blocks {
            if let Some(entry) = worker.blocks.get_mut(&block) {
                entry.0 -= 1;
                if entry.0 == 0 {
                    // What the first request holding it added: a trace block a prompt ends
                    // inside counts fewer engine blocks than the same block in full.
                    let added = entry.1;
                    worker.blocks.remove(&block);
                    worker.unique_blocks -= added;
                }
            }
        }
        Ok(())
    }
}

routerlab_core::export_plugins! {
    matcher DynamoKv {
        name: "dynamo-kv",
        description: "NVIDIA Dynamo's KV router: overlap-weighted prefill blocks + decode blocks",
    },
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::{EndpointsBuilder, RequestBuilder, create_matcher};

    use super::*;

    /// A request of `blocks` 64-token blocks (block size 64, so router and trace blocks
    /// coincide), ids counting from `first`.
    fn request(id: u64, first: u32, blocks: u32) -> RequestBuilder {
        let ids: Vec<u32> = (first..first + blocks).collect();
        let hashes: Vec<u64> = ids.iter().map(|i| u64::from(*i) + 1000).collect();
        RequestBuilder::new(id)
            .block_size(64)
            .blocks(&hashes)
            .block_ids(&ids)
    }

    #[test]
    fn each_tier_counts_at_its_weight_dynamos_by_default() {
        // Worker 0 holds 4 blocks on its GPU; worker 1 holds 2 on its GPU and 6 more in
        // its host tier; worker 2 has 14 in the shared tier. By default (Dynamo 1.6.1's
        // weights: host 0.75, disk 0.25): 4, 2 + 4.5 = 6.5, 3.5: worker 1. The GPU alone
        // (host and shared 0) decides for 0; the shared store at full weight for 2.
        let request = request(1, 0, 16)
            .cached(0, 4 * 64)
            .cached(1, 2 * 64)
            .cached(2, 0)
            .cached_tiers(0, 4 * 64, 0, 0)
            .cached_tiers(1, 2 * 64, 6 * 64, 0)
            .cached_tiers(2, 0, 0, 14 * 64);
        let fleet = EndpointsBuilder::new(3);
        let pick = |config: &str| {
            let mut kv: DynamoKv = create_matcher(config).unwrap();
            kv.match_request(&request.view(), &fleet.view())
                .unwrap()
                .unwrap()
                .get()
        };
        assert_eq!(pick(""), 1);
        assert_eq!(
            pick("{host_overlap_weight: 0, shared_overlap_weight: 0}"),
            0
        );
        assert_eq!(pick("host_overlap_weight: 0.25"), 0);
        assert_eq!(pick("shared_overlap_weight: 1"), 2);
        // A GPU block worth nothing: the host tier's 4.5 still wins over the shared 3.5.
        assert_eq!(pick("overlap_score_credit: 0"), 1);
        for bad in [
            "host_overlap_weight: 2",
            "shared_overlap_weight: -1",
            "overlap_score_credit: 3",
        ] {
            assert!(create_matcher::<DynamoKv>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn with_idle_workers_the_longest_cached_prefix_is_cheapest() {
        // Idle workers: cost = (10 − overlap) prefill blocks + 10 new decode blocks, so
        // 2, 5 and 8 cached blocks cost 18, 15 and 12: the host's cache view decides.
        let mut kv: DynamoKv = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(3);
        let r = request(1, 0, 10)
            .cached(0, 2 * 64)
            .cached(1, 5 * 64)
            .cached(2, 8 * 64);
        let chosen = kv.match_request(&r.view(), &fleet.view()).unwrap().unwrap();
        assert_eq!(chosen, EndpointId(2));
        assert_eq!(kv.last_overlap.1, [2, 5, 8]);
        // Weight 0 is pure load balancing: every idle worker costs the same 10.
        let mut flat: DynamoKv = create_matcher("overlap_score_weight: 0").unwrap();
        let picks: std::collections::BTreeSet<u32> = (0..30)
            .map(|i| {
                let r = request(i, 0, 10)
                    .cached(0, 128)
                    .cached(1, 320)
                    .cached(2, 512);
                flat.match_request(&r.view(), &fleet.view())
                    .unwrap()
                    .unwrap()
                    .get()
            })
            .collect();
        assert_eq!(picks.len(), 3, "ties are drawn: {picks:?}");
    }

    #[test]
    fn predictive_load_moves_the_next_request_and_events_release_it() {
        let mut kv: DynamoKv = create_matcher("").unwrap();
        let fleet = EndpointsBuilder::new(2);
        let first = request(1, 0, 10);
        let pick = kv
            .match_request(&first.view(), &fleet.view())
            .unwrap()
            .unwrap();
        kv.update(&first.view(), pick).unwrap();
        let other = EndpointId(1 - pick.get());
        // Nothing cached anywhere: the loaded worker costs 10 prefill + 10 decode more.
        let second = request(2, 100, 10);
        assert_eq!(
            kv.match_request(&second.view(), &fleet.view()).unwrap(),
            Some(other)
        );
        // After its first token and completion the first worker is idle again: both cost the
        // same, and either may be drawn.
        kv.on_first_token(&first.view(), pick).unwrap();
        assert_eq!(kv.workers[pick.get() as usize].active_tokens, 0);
        kv.on_complete(&first.view(), pick).unwrap();
        assert_eq!(kv.workers[pick.get() as usize].unique_blocks, 0);
    }

    #[test]
    fn a_trace_block_a_prompt_ends_inside_is_released_as_it_was_counted() {
        // Engine blocks of 16 tokens, one 64-token trace block shared by two requests: the
        // first's prompt ends inside it (40 tokens: 3 engine blocks), the second's fills it
        // (4). The first counted it; whichever finishes last releases those 3.
        let mut kv: DynamoKv = create_matcher("block_size: 16").unwrap();
        let short = request(1, 0, 1).prompt_len(40);
        let full = request(2, 0, 1).prompt_len(64);
        for r in [&short, &full] {
            kv.update(&r.view(), EndpointId(0)).unwrap();
        }
        assert_eq!(kv.workers[0].unique_blocks, 3);
        assert_eq!(kv.workers[0].all_blocks, 7);
        kv.on_complete(&short.view(), EndpointId(0)).unwrap();
        kv.on_complete(&full.view(), EndpointId(0)).unwrap();
        assert_eq!(
            (kv.workers[0].unique_blocks, kv.workers[0].all_blocks),
            (0, 0)
        );
    }

    #[test]
    fn approximate_mode_learns_from_its_own_decisions_and_forgets_after_the_ttl() {
        let mut kv: DynamoKv = create_matcher("{mode: approximate, ttl_s: 10}").unwrap();
        let fleet = EndpointsBuilder::new(2);
        let first = request(1, 0, 4);
        let pick = kv
            .match_request(&first.view(), &fleet.view())
            .unwrap()
            .unwrap();
        kv.update(&first.view(), pick).unwrap();
        kv.on_first_token(&first.view(), pick).unwrap();
        kv.on_complete(&first.view(), pick).unwrap();
        // The same prefix again: the index says `pick` holds 4 blocks.
        let again = request(2, 0, 4).now_ns(5_000_000_000);
        assert_eq!(
            kv.match_request(&again.view(), &fleet.view()).unwrap(),
            Some(pick)
        );
        assert_eq!(kv.last_overlap.1[pick.get() as usize], 4);
        // 20 s later the entries have expired.
        let late = request(3, 0, 4).now_ns(20_000_000_000);
        kv.match_request(&late.view(), &fleet.view()).unwrap();
        assert_eq!(kv.last_overlap.1[pick.get() as usize], 0);
    }
}

#[cfg(test)]
mod upstream {
    #[test]
    fn defaults_are_the_routers() {
        let upstream = include_str!("../upstream.yaml");
        let checked = routerlab_core::testing::check_matcher_defaults::<super::DynamoKv>(
            "dynamo-kv",
            upstream,
        );
        assert_eq!(checked, Ok(()));
    }
}
