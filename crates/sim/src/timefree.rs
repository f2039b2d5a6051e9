//! The time-free replay: the original prototype's method, kept as the default.
//!
//! Requests are taken in file order and never finish. Before each decision the detector
//! (if any) sees the current endpoint statuses; then the matcher picks, then learns its
//! pick (`update`). Each endpoint has a prefix-cache model: a set of blocks, unbounded
//! by default (as the prototype) or a least-recently-used set of `cache_blocks` blocks. A
//! request's hit is the run of leading blocks of its chain already in its endpoint's cache.
//!
//! Without a clock this mode cannot see queues: it measures where requests go and how much
//! prefix they share, not how fast they are served.

use routerlab_host::{EndpointLoad, RequestData};
use routerlab_policy_kit::{BlockMasks, LruMap};
use routerlab_trace::adapters::Adapters;
use routerlab_trace::blocks::prompt_tokens;
use routerlab_trace::{TraceReader, TraceRequest, Workload};

use crate::error::{SimError, request_location};
use crate::observer::{Observer, PROGRESS_EVERY, RoutedRecord};
use routerlab_core::Phase;
use routerlab_report::Report;
use routerlab_report::stats::Tally;
use routerlab_route::{Decision, ListPos, Placement, Replicas, RequestSeq, Router};

/// One endpoint's prefix cache, keyed by dense block id: a bitset when unbounded (as the
/// prototype), a least-recently-used set when bounded.
enum PrefixCache {
    Unbounded { bits: Vec<u64>, len: u64 },
    Bounded { blocks: LruMap<()>, capacity: u64 },
}

impl PrefixCache {
    fn new(capacity: Option<u64>) -> PrefixCache {
        match capacity {
            None => PrefixCache::Unbounded {
                bits: Vec::new(),
                len: 0,
            },
            Some(capacity) => PrefixCache::Bounded {
                blocks: LruMap::default(),
                capacity,
            },
        }
    }

    fn len(&self) -> u64 {
        match self {
            PrefixCache::Unbounded { len, .. } => *len,
            PrefixCache::Bounded { blocks, .. } => blocks.len() as u64,
        }
    }

    /// Counts the leading blocks of `ids` cached, changing nothing.
    fn peek(&self, ids: &[u32]) -> u64 {
        match self {
            PrefixCache::Unbounded { bits, .. } => ids
                .iter()
                .take_while(|id| {
                    bits.get(**id as usize / 64)
                        .is_some_and(|word| word & (1 << (**id % 64)) != 0)
                })
                .count() as u64,
            PrefixCache::Bounded { blocks, .. } => ids
                .iter()
                .take_while(|id| blocks.contains(u64::from(**id)))
                .count() as u64,
        }
    }

    /// Counts the leading blocks of `ids` already cached, then caches them all.
    fn serve(&mut self, ids: &[u32]) -> u64 {
        match self {
            PrefixCache::Unbounded { bits, len } => {
                let has = |bits: &[u64], id: u32| {
                    bits.get(id as usize / 64)
                        .is_some_and(|word| word & (1 << (id % 64)) != 0)
                };
                let hits = ids.iter().take_while(|id| has(bits, **id)).count();
                for id in &ids[hits..] {
                    let word = *id as usize / 64;
                    if word >= bits.len() {
                        bits.resize(word + 1, 0);
                    }
                    let bit = 1 << (id % 64);
                    *len += u64::from(bits[word] & bit == 0);
                    bits[word] |= bit;
                }
                hits as u64
            }
            PrefixCache::Bounded { blocks, capacity } => {
                let hits = ids
                    .iter()
                    .take_while(|id| blocks.contains(u64::from(**id)))
                    .count() as u64;
                // Deepest first, root last: the root ends most recent, so eviction takes the
                // deepest blocks of a chain before the shallow ones it hangs from.
                for id in ids.iter().rev() {
                    blocks.touch_or_insert_with(u64::from(*id), || ());
                }
                while blocks.len() as u64 > *capacity {
                    blocks.pop_oldest();
                }
                hits
            }
        }
    }
}

/// The fleet's prefix caches. Unbounded caches of at most 64 endpoints are kept as one
/// mask of holders per block, so judging a decision against every endpoint is one walk
/// down the request's chain rather than one walk per endpoint: with spread picks (router
/// replicas, load-aware policies) every endpoint holds long prefixes and those walks were
/// most of a replay's time. Otherwise each endpoint keeps its own [`PrefixCache`].
enum FleetCaches {
    Masks {
        /// Bit `p` of block `id`'s mask: list position `p` holds block `id`.
        holders: BlockMasks,
        /// Blocks held, per list position.
        lens: Vec<u64>,
    },
    PerEndpoint(Vec<PrefixCache>),
}

impl FleetCaches {
    fn new(endpoints: usize, capacity: Option<u64>) -> FleetCaches {
        if capacity.is_none() && endpoints <= 64 {
            FleetCaches::Masks {
                holders: BlockMasks::default(),
                lens: vec![0; endpoints],
            }
        } else {
            FleetCaches::PerEndpoint((0..endpoints).map(|_| PrefixCache::new(capacity)).collect())
        }
    }

    /// Blocks held by list position `pos`.
    fn len(&self, pos: usize) -> u64 {
        match self {
            FleetCaches::Masks { lens, .. } => lens[pos],
            FleetCaches::PerEndpoint(caches) => caches[pos].len(),
        }
    }

    /// Leading blocks of `ids` that `pos` holds, changing nothing.
    fn peek(&self, pos: usize, ids: &[u32]) -> u64 {
        match self {
            FleetCaches::Masks { holders, .. } => held_run(holders, ids, 1 << pos),
            FleetCaches::PerEndpoint(caches) => caches[pos].peek(ids),
        }
    }

    /// The longest run of leading blocks of `ids` any position in `allowed` holds, and the
    /// run `chosen` holds (0 unless it is allowed).
    fn judge(&self, ids: &[u32], allowed: impl Fn(usize) -> bool, chosen: usize) -> (u64, u64) {
        match self {
            FleetCaches::Masks { holders, lens } => {
                // Positions holding every block so far, among the allowed ones.
                let mut alive = (0..lens.len())
                    .filter(|p| allowed(*p))
                    .fold(0u64, |mask, p| mask | 1 << p);
                let (mut best, mut achieved) = (0, 0);
                holders.walk(ids, |_, mask| {
                    alive &= mask;
                    best += u64::from(alive != 0);
                    achieved += (alive >> chosen) & 1;
                    alive != 0
                });
                (best, achieved)
            }
            FleetCaches::PerEndpoint(caches) => {
                let (mut best, mut achieved) = (0, 0);
                for (p, cache) in caches.iter().enumerate() {
                    if allowed(p) {
                        let held = cache.peek(ids);
                        best = best.max(held);
                        if p == chosen {
                            achieved = held;
                        }
                    }
                }
                (best, achieved)
            }
        }
    }

    /// Counts the leading blocks of `ids` `pos` already holds, then caches them all there.
    fn serve(&mut self, pos: usize, ids: &[u32]) -> u64 {
        match self {
            FleetCaches::Masks { holders, lens } => {
                let hits = held_run(holders, ids, 1 << pos);
                lens[pos] += holders.insert_all(&ids[hits as usize..], pos as u32);
                hits
            }
            FleetCaches::PerEndpoint(caches) => caches[pos].serve(ids),
        }
    }
}

/// How many leading blocks of `ids` a position of `positions` holds throughout.
#[inline]
fn held_run(holders: &BlockMasks, ids: &[u32], positions: u64) -> u64 {
    let mut run = 0;
    holders.walk(ids, |_, mask| {
        let held = mask & positions != 0;
        run += u64::from(held);
        held
    });
    run
}

/// A pick: its list position and (best, achieved) leading blocks of the judgement.
type Picked = Option<(usize, (u64, u64))>;

/// One request as the time-free loop needs it, from a trace reader or a loaded workload.
struct Step<'a> {
    seq: u64,
    line: usize,
    arrival_ns: Option<u64>,
    prompt: &'a [u8],
    blocks: &'a [u64],
    block_ids: &'a [u32],
    prompt_len: u64,
    output_tokens: Option<u64>,
    session: u64,
    parent_seq: Option<u64>,
    /// The LoRA adapter it names: (number, name).
    adapter: Option<(u64, &'a [u8])>,
    /// It is its session's last.
    session_end: bool,
}

/// The time-free replay's state between requests.
struct TimeFree {
    unit: routerlab_core::Unit,
    block_size: u32,
    caches: FleetCaches,
    /// Per replica, per endpoint: what that replica sees. The engine's figures (running,
    /// blocks held) are the same in every replica; the in-flight counts are its own.
    loads: Vec<Vec<EndpointLoad>>,
    /// Endpoint of each request (by seq), for the share-prefix statistic; u16::MAX =
    /// rejected. `Router::new` bounds the fleet below that.
    endpoint_of: Vec<u16>,
    /// First request of each request's parent chain (by seq), for the balancer; kept only
    /// with several replicas.
    conversation_of: Vec<u64>,
    stats: Tally,
    /// Stable index -> list position, for plugins asking what an endpoint holds.
    position_of: Vec<Option<usize>>,
}

impl TimeFree {
    fn new(
        replicas: &Replicas,
        unit: routerlab_core::Unit,
        block_size: u32,
        cache_blocks: Option<u64>,
    ) -> TimeFree {
        let table = replicas.router(0).table();
        let n = table.len();
        let mut position_of = vec![None; n];
        for pos in 0..n {
            if let Some(slot) = position_of.get_mut(table.index(pos) as usize) {
                *slot = Some(pos);
            }
        }
        TimeFree {
            unit,
            block_size,
            caches: FleetCaches::new(n, cache_blocks),
            loads: vec![
                vec![
                    EndpointLoad {
                        kv_blocks_total: cache_blocks.unwrap_or(0),
                        ..Default::default()
                    };
                    n
                ];
                replicas.len()
            ],
            endpoint_of: vec![u16::MAX],
            conversation_of: vec![0],
            stats: Tally::new(replicas.len(), n, unit),
            position_of,
        }
    }

    /// Routes one request; returns the replica that decided, the list position chosen
    /// (`None`: rejected; disaggregated, where it decodes) and, when it was prefilled
    /// elsewhere, where.
    fn step(
        &mut self,
        replicas: &mut Replicas,
        request: Step<'_>,
    ) -> Result<(usize, Option<usize>, Option<usize>), SimError> {
        let r = if replicas.len() == 1 {
            0
        } else {
            let conversation = match request.parent_seq {
                Some(parent) => self.conversation_of[parent as usize],
                None => request.seq,
            };
            self.conversation_of.push(conversation);
            replicas.place(Placement {
                session: request.session,
                conversation,
            })
        };
        let parent_endpoint = request.parent_seq.map(|p| self.endpoint_of[p as usize]);
        let reject = |this: &mut TimeFree, constrained: bool| {
            this.stats
                .each(r, |s| s.reject(constrained, parent_endpoint.is_some()));
            this.endpoint_of.push(u16::MAX);
            Ok((r, None, None))
        };
        // Where the prompt is computed (judged against what the matcher could have had),
        // and, disaggregated, where it decodes.
        let (computed_at, judged, decode, constrained) = match replicas.pools() {
            None => {
                let (decision, picked) =
                    self.pick(replicas.router_mut(r), &request, Phase::Whole)?;
                match picked {
                    Some((pos, judged)) => (pos, judged, None, decision.constrained),
                    None => return reject(self, decision.constrained),
                }
            }
            Some(pools) if !pools.decision.decode_first() => {
                let (prefill, at) = self.pick(replicas.router_mut(r), &request, Phase::Prefill)?;
                let Some((at, judged)) = at else {
                    return reject(self, prefill.constrained);
                };
                let (decode, to) =
                    self.pick(replicas.decode_router_mut(r), &request, Phase::Decode)?;
                let constrained = prefill.constrained || decode.constrained;
                let Some((to, _)) = to else {
                    return reject(self, constrained);
                };
                (at, judged, Some(to), constrained)
            }
            Some(pools) => {
                let (decode, to) =
                    self.pick(replicas.decode_router_mut(r), &request, Phase::Decode)?;
                let Some((to, local)) = to else {
                    return reject(self, decode.constrained);
                };
                let cached = (self.caches.peek(to, request.block_ids) * u64::from(self.block_size))
                    .min(request.prompt_len);
                let tokens = |units| prompt_tokens(self.unit, units);
                let remote = if pools
                    .decision
                    .disaggregate(tokens(request.prompt_len), tokens(cached))
                {
                    let (prefill, at) =
                        self.pick(replicas.router_mut(r), &request, Phase::Prefill)?;
                    at.map(|at| (at, prefill.constrained))
                } else {
                    None
                };
                match remote {
                    Some(((at, judged), constrained)) => {
                        (at, judged, Some(to), constrained || decode.constrained)
                    }
                    // Prefilled where it decodes: served whole there.
                    None => (to, local, None, decode.constrained),
                }
            }
        };
        let (best, achieved) = judged;
        self.stats.each(r, |s| s.judge(best, achieved));
        let hit_blocks = self.caches.serve(computed_at, request.block_ids);
        let hit_units = (hit_blocks * u64::from(self.block_size)).min(request.prompt_len);
        let pos = match decode {
            Some(to) => {
                // The decode endpoint holds the moved KV from now on.
                self.caches.serve(to, request.block_ids);
                to
            }
            None => computed_at,
        };
        self.stats.each(r, |s| {
            s.route(
                computed_at,
                request.prompt_len,
                hit_units,
                constrained,
                parent_endpoint.map(|p| p == pos as u16),
            )
        });
        self.endpoint_of.push(pos as u16);
        for at in [Some(computed_at), decode].into_iter().flatten() {
            let held = self.caches.len(at);
            for (q, loads) in self.loads.iter_mut().enumerate() {
                let load = &mut loads[at];
                load.running += 1;
                load.kv_blocks_used = held;
                if q == r {
                    load.inflight_requests += 1;
                    load.inflight_prompt_tokens += prompt_tokens(self.unit, request.prompt_len);
                }
                replicas.router_mut(q).table_mut().set_load(at, *load);
                if replicas.is_disaggregated() {
                    replicas
                        .decode_router_mut(q)
                        .table_mut()
                        .set_load(at, *load);
                }
            }
        }
        let prefill = decode.map(|_| computed_at);
        Ok((r, Some(pos), prefill))
    }

    /// One decision of `router` for `phase`, judged against what the endpoints it could
    /// choose hold, before this request changes any cache.
    fn pick(
        &self,
        router: &mut Router,
        request: &Step<'_>,
        phase: Phase,
    ) -> Result<(Decision, Picked), SimError> {
        let block_size = self.block_size;
        let (caches, position_of) = (&self.caches, &self.position_of);
        let cached_prefix = |index: u32| {
            let pos = (*position_of.get(index as usize)?)?;
            let hit = caches.peek(pos, request.block_ids) * u64::from(block_size);
            Some(hit.min(request.prompt_len))
        };
        let data = RequestData {
            id: request.seq,
            arrival_ns: request.arrival_ns.unwrap_or(0),
            prompt: request.prompt,
            block_hashes: request.blocks,
            block_ids: Some(request.block_ids),
            block_size,
            unit: self.unit,
            prompt_len: request.prompt_len,
            output_tokens: request.output_tokens,
            session_id: request.session,
            parent_id: request.parent_seq.unwrap_or(0),
            ends_session: request.session_end,
            // No clock: every decision happens at its request's arrival.
            now_ns: request.arrival_ns.unwrap_or(0),
            cached_prefix: Some(&cached_prefix),
            phase,
            cached_tiers: None,
            predict: None,
            lora: request.adapter.map(|(id, name)| routerlab_host::Lora {
                id,
                name,
                state: None,
            }),
        };
        let plugin_error =
            |e| SimError::plugin(request_location(RequestSeq(request.seq), request.line), e);
        routerlab_os::crash::set_trace_line(request.line as u64);
        // Nothing can turn a pick down here, so the matcher learns it in the same call.
        let decision = router.decide(&data, true).map_err(plugin_error)?;
        let Some(ListPos(pos)) = decision.endpoint else {
            return Ok((decision, None));
        };
        let flags = router.unavailable();
        let judged = self.caches.judge(
            request.block_ids,
            |p| decision.allowed(flags, ListPos(p)),
            pos,
        );
        Ok((decision, Some((pos, judged))))
    }
}

/// Tells `observer` where request `id` (trace line `line`) went, when it wants to know.
fn tell_routed(
    observer: &mut dyn Observer,
    replicas: &Replicas,
    (id, line): (u64, usize),
    (replica, pos, prefill): (usize, Option<usize>, Option<usize>),
) -> Result<(), SimError> {
    if !observer.wants_routed() {
        return Ok(());
    }
    let name = |p: usize| replicas.router(replica).table().name(p).to_owned();
    observer.routed(&RoutedRecord {
        id,
        line,
        endpoint: pos.map(name),
        prefill_endpoint: prefill.map(name),
        replica: (replicas.len() > 1).then_some(replica as u32),
    })
}

/// Replays the whole trace through the router `replicas`, each endpoint with a prefix
/// cache of `cache_blocks` blocks (`None` = unbounded), reading it as it goes (on a
/// second thread when there is a second core: the same decisions either way).
pub fn replay(
    reader: &mut TraceReader,
    replicas: &mut Replicas,
    cache_blocks: Option<u64>,
    observer: &mut dyn Observer,
) -> Result<Report, SimError> {
    let ahead = crate::read_ahead::worth_it();
    replay_reading(reader, replicas, cache_blocks, observer, ahead)
}

/// [`replay`], reading the trace on a second thread when `ahead`.
fn replay_reading(
    reader: &mut TraceReader,
    replicas: &mut Replicas,
    cache_blocks: Option<u64>,
    observer: &mut dyn Observer,
    ahead: bool,
) -> Result<Report, SimError> {
    let mut state = TimeFree::new(replicas, reader.unit(), reader.block_size(), cache_blocks);
    let mut route = |request: &TraceRequest, adapters: &Adapters| -> Result<(), SimError> {
        let routed = state.step(
            replicas,
            Step {
                seq: request.seq,
                line: request.line,
                arrival_ns: request.arrival_ns,
                prompt: &request.prompt,
                blocks: &request.blocks,
                block_ids: &request.block_ids,
                prompt_len: request.prompt_len,
                output_tokens: request.output_tokens,
                session: request.session,
                parent_seq: request.parent_seq,
                adapter: adapters
                    .name(request.adapter)
                    .map(|name| (u64::from(request.adapter), name.as_bytes())),
                session_end: request.session_end,
            },
        )?;
        tell_routed(observer, replicas, (request.seq, request.line), routed)?;
        if request.seq.is_multiple_of(PROGRESS_EVERY) {
            observer.progress(request.seq);
        }
        Ok(())
    };
    if ahead {
        crate::read_ahead::for_each(reader, route)?;
    } else {
        let mut request = TraceRequest::default();
        while reader.next_into(&mut request)? {
            route(&request, reader.adapters())?;
        }
    }
    Ok(routerlab_report::checked(state.stats.finish()))
}

/// [`replay`] over a loaded workload: the same decisions and the same report as reading
/// its file, for runs that share one load (the policies of a comparison).
pub fn replay_workload(
    workload: &Workload,
    replicas: &mut Replicas,
    cache_blocks: Option<u64>,
    observer: &mut dyn Observer,
) -> Result<Report, SimError> {
    let mut state = TimeFree::new(replicas, workload.unit, workload.block_size, cache_blocks);
    for (index, request) in workload.requests.iter().enumerate() {
        let seq = RequestSeq::of_index(index).0;
        let routed = state.step(
            replicas,
            Step {
                seq,
                line: request.line,
                arrival_ns: request.arrival_ns,
                prompt: &request.prompt,
                blocks: &request.blocks,
                block_ids: &request.block_ids,
                prompt_len: request.prompt_len,
                output_tokens: request.output_tokens,
                session: request.session,
                parent_seq: request.parent.map(|p| RequestSeq::of_index(p).0),
                adapter: workload
                    .adapters
                    .name(request.adapter)
                    .map(|name| (u64::from(request.adapter), name.as_bytes())),
                session_end: request.session_end,
            },
        )?;
        tell_routed(observer, replicas, (seq, request.line), routed)?;
        if seq.is_multiple_of(PROGRESS_EVERY) {
            observer.progress(seq);
        }
    }
    Ok(routerlab_report::checked(state.stats.finish()))
}

#[cfg(test)]
mod tests {
    use routerlab_core::SeededRng;

    use super::*;

    /// Chains that share prefixes: each extends a random earlier one or starts anew.
    fn chains(rng: &mut SeededRng, count: usize) -> Vec<Vec<u32>> {
        let mut next = 0;
        let mut chains: Vec<Vec<u32>> = Vec::new();
        for _ in 0..count {
            let mut chain = match chains.len() {
                0 => Vec::new(),
                n => chains[rng.below(n as u64) as usize].clone(),
            };
            chain.truncate(rng.below(chain.len() as u64 + 1) as usize);
            for _ in 0..1 + rng.below(4) {
                chain.push(next);
                next += 1;
            }
            chains.push(chain);
        }
        chains
    }

    #[test]
    fn holder_masks_answer_as_one_cache_per_endpoint_would() {
        let endpoints = 12;
        let mut masks = FleetCaches::new(endpoints, None);
        let mut separate =
            FleetCaches::PerEndpoint((0..endpoints).map(|_| PrefixCache::new(None)).collect());
        assert!(matches!(masks, FleetCaches::Masks { .. }));
        let mut rng = SeededRng::new(7);
        let all = chains(&mut rng, 400);
        // Requests are often re-sent, so caches hold long runs somewhere.
        for step in 0..2000 {
            let ids = &all[rng.below(all.len() as u64) as usize];
            let chosen = rng.below(endpoints as u64) as usize;
            let blocked = rng.below(endpoints as u64) as usize;
            let allowed = |p: usize| p != blocked || step % 3 == 0;
            assert_eq!(
                masks.judge(ids, allowed, chosen),
                separate.judge(ids, allowed, chosen),
                "judge, step {step}"
            );
            for p in 0..endpoints {
                assert_eq!(masks.peek(p, ids), separate.peek(p, ids), "peek {p}");
            }
            assert_eq!(masks.serve(chosen, ids), separate.serve(chosen, ids));
            assert_eq!(masks.len(chosen), separate.len(chosen));
        }
        let (best, _) = masks.judge(&all[0], |_| true, 0);
        assert!(best > 0, "the walk saw held blocks");
    }

    #[test]
    fn more_than_64_endpoints_or_a_bound_keep_a_cache_each() {
        assert!(matches!(
            FleetCaches::new(65, None),
            FleetCaches::PerEndpoint(_)
        ));
        assert!(matches!(
            FleetCaches::new(8, Some(100)),
            FleetCaches::PerEndpoint(_)
        ));
    }

    /// The committed chat trace, from the crate's directory.
    fn chat() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/chat.jsonl")
    }

    #[test]
    fn a_sticky_matcher_sends_everything_to_one_endpoint_and_keeps_its_prefixes() {
        use crate::test_plugins::{First, Turns, routers};
        let scenario = crate::scenario::Scenario::new("in-process", chat()).endpoints(4);
        let sticky = scenario
            .replay(
                &mut routers::<First>(&scenario, "first"),
                &mut crate::observer::NoObserver,
            )
            .unwrap();
        let spread = scenario
            .replay(
                &mut routers::<Turns>(&scenario, "turns"),
                &mut crate::observer::NoObserver,
            )
            .unwrap();
        assert_eq!(sticky.nreq.counts[0], sticky.requests);
        assert!(sticky.nreq.counts[1..].iter().all(|c| *c == 0));
        assert!(spread.nreq.counts.iter().all(|c| *c > 0));
        // One cache holds every shared prefix; four caches each miss the first of many.
        assert!(
            sticky.hit_ratio > spread.hit_ratio,
            "{} vs {}",
            sticky.hit_ratio,
            spread.hit_ratio
        );
    }

    #[test]
    fn a_loaded_workload_gives_the_streamed_replays_report() {
        use crate::test_plugins::{Turns, routers};
        // `compare` replays a workload loaded once; `replay` streams the file. Same numbers.
        let scenario = crate::scenario::Scenario::new("in-process", chat()).endpoints(3);
        let mut streamed = scenario
            .replay(
                &mut routers::<Turns>(&scenario, "turns"),
                &mut crate::observer::NoObserver,
            )
            .unwrap();
        streamed.run = None;
        let workload = scenario.workload(scenario.reader().unwrap()).unwrap();
        let loaded = replay_workload(
            &workload,
            &mut routers::<Turns>(&scenario, "turns"),
            None,
            &mut crate::observer::NoObserver,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&streamed).unwrap(),
            serde_json::to_string(&loaded).unwrap()
        );
    }

    /// A time-free replay of `trace` through `Turns`, reading ahead or not: the report
    /// (JSON) or the error's text.
    fn read_both_ways(trace: &std::path::Path, ahead: bool) -> Result<String, String> {
        use crate::test_plugins::{Turns, routers};
        let scenario = crate::scenario::Scenario::new("in-process", trace.to_owned()).endpoints(3);
        let mut reader = scenario.reader().map_err(|e| e.to_string())?;
        replay_reading(
            &mut reader,
            &mut routers::<Turns>(&scenario, "turns"),
            None,
            &mut crate::observer::NoObserver,
            ahead,
        )
        .map(|report| serde_json::to_string(&report).unwrap())
        .map_err(|e| e.to_string())
    }

    #[test]
    fn reading_ahead_on_a_second_thread_changes_nothing() {
        let ahead = read_both_ways(&chat(), true).unwrap();
        assert_eq!(ahead, read_both_ways(&chat(), false).unwrap());
        // Past several batches, with adapters first named late, and a bad line after them:
        // the same error, after the same requests.
        let dir = std::env::temp_dir().join(format!("routerlab-ahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        for i in 0..3000 {
            let adapter = if i > 2000 {
                format!(r#", "adapter": "a{}""#, i % 7)
            } else {
                String::new()
            };
            text.push_str(&format!(r#"{{"prompt": "p{} {}"{adapter}}}"#, i % 50, i));
            text.push('\n');
        }
        let good = dir.join("good.jsonl");
        std::fs::write(&good, &text).unwrap();
        assert_eq!(
            read_both_ways(&good, true).unwrap(),
            read_both_ways(&good, false).unwrap()
        );
        text.push_str("{\"prompt\": 7}\n");
        let bad = dir.join("bad.jsonl");
        std::fs::write(&bad, &text).unwrap();
        let err = read_both_ways(&bad, true).unwrap_err();
        assert!(err.contains(":3001:"), "{err}");
        assert_eq!(err, read_both_ways(&bad, false).unwrap_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
