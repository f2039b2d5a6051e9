//! How one Weka session becomes a dependency graph: the rules of NVIDIA Dynamo 1.6.1's
//! importer (`replay/loadgen/weka.rs` in `aisimulate-core` 0.13.0), restated.
//!
//! A session's requests (its own, or one sub-agent's) are split into chains by their hash
//! ids: a request whose ids extend a chain's last ids (same model, that last request ended
//! by its start) continues the longest such chain; otherwise it starts a new chain forked
//! from the chain sharing the longest prefix with it. A fork that begins after its source
//! request ended, on the same model, and not both an hour later and sharing under half of
//! the source's blocks, is a seam (a context rewrite) and is spliced back into its parent.
//! A first request that shares nothing with the rest (output over 64 tokens: not even one
//! block anywhere) is a preamble and joins the main chain. The main chain (the earliest) is
//! the session's main stream; each other chain is a worker stream.
//!
//! Edges: each stream's requests in sequence (on completion, delay = the recorded gap); a
//! worker or sub-agent stream spawned by its fork source (on dispatch when it began before
//! the source ended, else on completion); a replay barrier on the latest request of each
//! other stream of the same scope that ended before it began (pruned to those not followed
//! by another); a blocking sub-agent joined by the first later parent request that began
//! after the sub-agent ended; a stream with no edge at all spawned by the play's first
//! request on dispatch.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::dependency::{Relation, Trigger};

/// Timestamps this close count as one (seconds).
pub(super) const EPSILON_S: f64 = 1e-6;
/// A fork this long after its source (seconds) sharing under half its blocks is not a seam.
pub(super) const SEAM_MAX_GAP_S: f64 = 3600.0;
pub(super) const SEAM_MIN_OVERLAP: f64 = 0.5;

/// One recorded request.
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    /// Start, seconds.
    pub t: f64,
    pub model: String,
    pub input: u64,
    pub output: u64,
    pub hash_ids: Vec<u64>,
    /// Recorded duration, seconds (absent counts as 0 for the edges).
    pub api_time: Option<f64>,
}

impl Recorded {
    pub(super) fn end(&self) -> f64 {
        self.t + self.api_time.unwrap_or(0.0).max(0.0)
    }
}

/// A request with its place in the source: `outer:I` or `outer:I:inner:J`.
#[derive(Debug, Clone)]
pub(super) struct Placed {
    pub source_id: String,
    pub order: usize,
    pub request: Recorded,
}

fn order(a: &Placed, b: &Placed) -> std::cmp::Ordering {
    a.request
        .t
        .total_cmp(&b.request.t)
        .then(a.order.cmp(&b.order))
        .then(a.source_id.cmp(&b.source_id))
}

pub(super) fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The hash of a run of ids one longer than the run `h` is the hash of.
fn extend_hash(h: u64, id: u64) -> u64 {
    (h ^ id).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ 0x2545_f491_4f6c_dd1d
}

/// The hashes of every prefix of `ids`, the first id's at 0.
fn prefix_hashes(ids: &[u64]) -> Vec<u64> {
    let mut h = 0;
    ids.iter()
        .map(|&id| {
            h = extend_hash(h, id);
            h
        })
        .collect()
}

/// Chains whose last ids begin with one prefix: the longer tail first, then the earlier
/// chain.
type ByTail = BTreeSet<(std::cmp::Reverse<usize>, usize)>;

/// The chains' last ids by every prefix, so that a request finds the chain it extends and
/// the chain nearest it without comparing itself with every chain (a session of forks
/// from one context has as many chains as requests). Keys are hashes of prefixes: a chain
/// found is checked against the ids themselves, and a hash collision falls back to the
/// scan, so the answers are the scan's.
#[derive(Default)]
struct TailIndex {
    /// (prefix length, its hash) -> the chains whose last ids begin so, the longer tail
    /// first, then the earlier chain.
    through: HashMap<(usize, u64), ByTail>,
    /// (length, hash) -> the chains whose last ids are exactly that run, earliest first.
    ending: HashMap<(usize, u64), BTreeSet<usize>>,
}

impl TailIndex {
    fn insert(&mut self, chain: usize, tail: &[u64]) {
        let len = tail.len();
        for (k, h) in prefix_hashes(tail).into_iter().enumerate() {
            let entry = (std::cmp::Reverse(len), chain);
            self.through.entry((k + 1, h)).or_default().insert(entry);
            if k + 1 == len {
                self.ending.entry((len, h)).or_default().insert(chain);
            }
        }
    }

    fn remove(&mut self, chain: usize, tail: &[u64]) {
        let len = tail.len();
        for (k, h) in prefix_hashes(tail).into_iter().enumerate() {
            if let Some(set) = self.through.get_mut(&(k + 1, h)) {
                set.remove(&(std::cmp::Reverse(len), chain));
                if set.is_empty() {
                    self.through.remove(&(k + 1, h));
                }
            }
            if k + 1 == len
                && let Some(set) = self.ending.get_mut(&(len, h))
            {
                set.remove(&chain);
                if set.is_empty() {
                    self.ending.remove(&(len, h));
                }
            }
        }
    }

    /// Whether no chain has last ids.
    fn is_empty(&self) -> bool {
        self.ending.is_empty()
    }

    /// [`extended`], by the index.
    fn extended(&self, chains: &[Chain], request: &Recorded) -> Option<usize> {
        let hashes = prefix_hashes(&request.hash_ids);
        for (k, h) in hashes.iter().enumerate().rev() {
            let len = k + 1;
            let Some(set) = self.ending.get(&(len, *h)) else {
                continue;
            };
            let found = set.iter().copied().find(|&i| {
                let chain = &chains[i];
                chain.tail_hashes.len() == len
                    && chain.tail_model == request.model
                    && chain.tail_end <= request.t + EPSILON_S
                    && chain.tail_hashes == request.hash_ids[..len]
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// [`nearest`], by the index.
    fn nearest(&self, chains: &[Chain], hashes: &[u64]) -> (Option<usize>, usize) {
        let prefixes = prefix_hashes(hashes);
        for (k, h) in prefixes.iter().enumerate().rev() {
            let Some(set) = self.through.get(&(k + 1, *h)) else {
                continue;
            };
            let Some(&(_, chain)) = set.first() else {
                continue;
            };
            // The deepest shared prefix, and its first chain: checked on the ids.
            if common_prefix(&chains[chain].tail_hashes, hashes) == k + 1 {
                return (Some(chain), k + 1);
            }
            return nearest(chains, hashes);
        }
        (None, 0)
    }
}

/// Seconds as milliseconds, rounded to the nanosecond, never below 0.
pub(super) fn ms(seconds: f64) -> f64 {
    (seconds.max(0.0) * 1e9).round() / 1e6
}

#[derive(Clone)]
pub(super) struct Fork {
    pub(super) source: Option<String>,
    pub(super) depth: usize,
}

#[derive(Default)]
pub(super) struct Chain {
    pub(super) requests: Vec<Placed>,
    pub(super) fork: Option<Fork>,
    pub(super) spliced: bool,
    pub(super) tail_source: Option<String>,
    pub(super) tail_hashes: Vec<u64>,
    pub(super) tail_end: f64,
    pub(super) tail_model: String,
}

impl Chain {
    fn push(&mut self, placed: Placed) {
        if !placed.request.hash_ids.is_empty() {
            self.tail_source = Some(placed.source_id.clone());
            self.tail_hashes.clone_from(&placed.request.hash_ids);
            self.tail_end = placed.request.end();
            self.tail_model.clone_from(&placed.request.model);
        }
        self.requests.push(placed);
    }
}

/// One stream of a session: a session of the lowered trace.
pub(super) struct Stream {
    pub session: String,
    pub requests: Vec<Placed>,
    pub fork_source: Option<String>,
    pub scope: String,
}

/// The first request when it is a preamble (see the module docs), and the rest.
fn split_preamble(mut requests: Vec<Placed>) -> (Vec<Placed>, Vec<Placed>) {
    requests.sort_by(order);
    if requests.len() < 2 || requests[0].request.hash_ids.is_empty() {
        return (Vec::new(), requests);
    }
    let first = &requests[0].request;
    let rest = &requests[1..];
    if rest
        .iter()
        .any(|r| common_prefix(&first.hash_ids, &r.request.hash_ids) > 0)
    {
        return (Vec::new(), requests);
    }
    if first.output > 64 {
        let others: HashSet<u64> = rest
            .iter()
            .flat_map(|r| r.request.hash_ids.iter().copied())
            .collect();
        if first.hash_ids.iter().any(|h| others.contains(h)) {
            return (Vec::new(), requests);
        }
    }
    let first = requests.remove(0);
    (vec![first], requests)
}

/// The chain `request` extends: the longest whose last ids prefix its own (the scan
/// [`TailIndex::extended`] answers as).
#[cfg(test)]
fn extended(chains: &[Chain], request: &Recorded) -> Option<usize> {
    let mut best = None;
    let mut best_len = 0;
    for (index, chain) in chains.iter().enumerate() {
        let len = chain.tail_hashes.len();
        if len > best_len
            && len <= request.hash_ids.len()
            && chain.tail_model == request.model
            && chain.tail_end <= request.t + EPSILON_S
            && chain.tail_hashes == request.hash_ids[..len]
        {
            best = Some(index);
            best_len = len;
        }
    }
    best
}

/// The chain sharing the longest prefix with `hashes` (the longer tail on a tie), and how
/// long that prefix is.
fn nearest(chains: &[Chain], hashes: &[u64]) -> (Option<usize>, usize) {
    let mut best = None;
    let mut best_key = (0, 0);
    for (index, chain) in chains.iter().enumerate() {
        let key = (
            common_prefix(&chain.tail_hashes, hashes),
            chain.tail_hashes.len(),
        );
        if key.0 > 0 && key > best_key {
            best = Some(index);
            best_key = key;
        }
    }
    (best, best_key.0)
}

/// The streams of one session's requests; `prefix` names them (`root`, or a sub-agent's).
pub(super) fn streams(namespace: &str, prefix: &str, requests: Vec<Placed>) -> Vec<Stream> {
    streams_with(namespace, prefix, requests, super::seams::splice_seams)
}

pub(super) type Splice = fn(
    &mut [Chain],
    &mut HashMap<String, Vec<usize>>,
    &mut HashMap<String, usize>,
    &HashMap<String, Recorded>,
);

fn streams_with(
    namespace: &str,
    prefix: &str,
    requests: Vec<Placed>,
    splice: Splice,
) -> Vec<Stream> {
    let (preamble, mut requests) = split_preamble(requests);
    requests.sort_by(order);
    let mut chains: Vec<Chain> = Vec::new();
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut forks: HashMap<String, Vec<usize>> = HashMap::new();
    let mut by_source: HashMap<String, Recorded> = HashMap::new();
    let mut tails = TailIndex::default();
    for placed in requests {
        by_source.insert(placed.source_id.clone(), placed.request.clone());
        let target = if chains.is_empty() {
            chains.push(Chain::default());
            Some(0)
        } else if placed.request.hash_ids.is_empty() {
            Some(0)
        } else if let Some(target) = tails.extended(&chains, &placed.request) {
            Some(target)
        } else if tails.is_empty() {
            Some(0)
        } else {
            None
        };
        let index = match target {
            Some(index) => index,
            None => {
                let (parent, depth) = tails.nearest(&chains, &placed.request.hash_ids);
                let source = parent.and_then(|p| chains[p].tail_source.clone());
                let index = chains.len();
                chains.push(Chain {
                    fork: Some(Fork {
                        source: source.clone(),
                        depth,
                    }),
                    ..Chain::default()
                });
                if let Some(source) = source.filter(|_| depth > 0) {
                    forks.entry(source).or_default().push(index);
                }
                index
            }
        };
        owner.insert(placed.source_id.clone(), index);
        if !placed.request.hash_ids.is_empty() {
            if !chains[index].tail_hashes.is_empty() {
                tails.remove(index, &chains[index].tail_hashes);
            }
            tails.insert(index, &placed.request.hash_ids);
        }
        chains[index].push(placed);
    }
    splice(&mut chains, &mut forks, &mut owner, &by_source);
    let mut live: Vec<usize> = (0..chains.len()).filter(|i| !chains[*i].spliced).collect();
    live.sort_by(|a, b| order(&chains[*a].requests[0], &chains[*b].requests[0]));
    let scope = format!("{namespace}:scope:{prefix}");
    let fork_source = |chain: &Chain| chain.fork.as_ref().and_then(|f| f.source.clone());
    let mut out = Vec::with_capacity(live.len().max(1));
    let (main, workers) = match live.split_first() {
        Some((main, workers)) => (Some(*main), workers),
        None => (None, &[][..]),
    };
    let mut main_requests = main.map_or_else(Vec::new, |m| chains[m].requests.clone());
    main_requests.extend(preamble);
    main_requests.sort_by(order);
    out.push(Stream {
        session: format!("{namespace}:session:{prefix}"),
        requests: main_requests,
        fork_source: main.and_then(|m| fork_source(&chains[m])),
        scope: scope.clone(),
    });
    for (w, &index) in workers.iter().enumerate() {
        out.push(Stream {
            session: format!("{namespace}:session:{prefix}:worker:{w}"),
            requests: chains[index].requests.clone(),
            fork_source: fork_source(&chains[index]),
            scope: scope.clone(),
        });
    }
    out
}

/// One dependency edge of the lowered graph, on a request named by its source id.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Edge {
    pub on: String,
    pub trigger: Trigger,
    pub delay_ms: f64,
    pub relation: Relation,
}

/// Adds `edge` unless one on the same request with the same trigger and relation is there.
pub(super) fn add(edges: &mut Vec<Edge>, edge: Edge) {
    if !edges
        .iter()
        .any(|e| e.on == edge.on && e.trigger == edge.trigger && e.relation == edge.relation)
    {
        edges.push(edge);
    }
}

/// Replay barriers: within a scope, each request waits for the latest request of every
/// other stream that ended before it began, unless another of those began after it ended.
pub(super) fn barriers(streams: &[Stream], edges: &mut HashMap<String, Vec<Edge>>) {
    let mut scopes: BTreeMap<&str, Vec<&Stream>> = BTreeMap::new();
    for stream in streams {
        scopes.entry(&stream.scope).or_default().push(stream);
    }
    let before = |a: &Recorded, b: &Recorded| a.t < b.t && a.end() <= b.t + EPSILON_S;
    for scoped in scopes.values() {
        for (ti, target_stream) in scoped.iter().enumerate() {
            for target in &target_stream.requests {
                let frontier: Vec<&Placed> = scoped
                    .iter()
                    .enumerate()
                    .filter(|(oi, _)| *oi != ti)
                    .filter_map(|(_, other)| {
                        other
                            .requests
                            .iter()
                            .filter(|c| before(&c.request, &target.request))
                            .max_by(|a, b| {
                                a.request
                                    .end()
                                    .total_cmp(&b.request.end())
                                    .then(a.request.t.total_cmp(&b.request.t))
                                    .then(a.source_id.cmp(&b.source_id))
                            })
                    })
                    .collect();
                // A candidate some other one followed is no barrier: `before(c, l)` bounds
                // `l.t` from below only, so the latest start in the frontier answers for all.
                let latest = frontier
                    .iter()
                    .map(|c| c.request.t)
                    .fold(f64::NEG_INFINITY, f64::max);
                let edges = edges.entry(target.source_id.clone()).or_default();
                // Each candidate is of another stream, so only the edges already there can
                // repeat one: looked up, not scanned (a request may wait on many streams).
                let mut there: HashSet<String> = edges
                    .iter()
                    .filter(|e| {
                        e.trigger == Trigger::Completion && e.relation == Relation::ReplayBarrier
                    })
                    .map(|e| e.on.clone())
                    .collect();
                for candidate in &frontier {
                    let c = &candidate.request;
                    if latest > c.t && c.end() <= latest + EPSILON_S {
                        continue;
                    }
                    if there.insert(candidate.source_id.clone()) {
                        edges.push(Edge {
                            on: candidate.source_id.clone(),
                            trigger: Trigger::Completion,
                            delay_ms: 0.0,
                            relation: Relation::ReplayBarrier,
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use routerlab_core::rng::SeededRng;

    /// Sessions drawn from a small alphabet of ids, a few models and starts that overlap,
    /// follow closely and lie hours apart (so forks nest, tie, re-anchor and fail each
    /// seam rule): the grouped splicing gives the scan's streams, fork sources included.
    #[test]
    fn the_grouped_splice_answers_as_the_scan() {
        let mut rng = SeededRng::new(11);
        let mut spliced = 0;
        for session in 0..6000 {
            let n = 2 + rng.below(40) as usize;
            let mut seen: Vec<Vec<u64>> = vec![(0..rng.below(4)).map(|_| rng.below(3)).collect()];
            let mut t = 0.0;
            let requests: Vec<Placed> = (0..n)
                .map(|i| {
                    t += match rng.below(6) {
                        0 => 0.0,
                        1 => 5000.0,
                        _ => rng.below(4) as f64,
                    };
                    // An earlier prompt, kept, cut short or not, and grown.
                    let mut hash_ids = seen[rng.below(seen.len() as u64) as usize].clone();
                    if rng.below(3) < 2 {
                        hash_ids.truncate(rng.below(hash_ids.len() as u64 + 1) as usize);
                    }
                    hash_ids.extend((0..rng.below(4)).map(|_| rng.below(3)));
                    seen.push(hash_ids.clone());
                    Placed {
                        source_id: format!("s:{i}"),
                        order: i,
                        request: Recorded {
                            t,
                            model: if rng.below(6) == 0 { "b" } else { "a" }.into(),
                            input: 1,
                            output: 1 + rng.below(100),
                            hash_ids,
                            api_time: Some(rng.below(4) as f64 * 0.5),
                        },
                    }
                })
                .collect();
            let view = |streams: Vec<Stream>| -> Vec<(String, Vec<String>, Option<String>)> {
                streams
                    .into_iter()
                    .map(|s| {
                        let ids = s.requests.iter().map(|r| r.source_id.clone()).collect();
                        (s.session, ids, s.fork_source)
                    })
                    .collect()
            };
            let grouped = view(streams_with(
                "n",
                "root",
                requests.clone(),
                super::super::seams::splice_seams,
            ));
            let scanned = view(streams_with(
                "n",
                "root",
                requests,
                super::super::seams::splice_seams_by_scan,
            ));
            spliced += usize::from(grouped.len() < n);
            assert_eq!(grouped, scanned, "session {session}");
        }
        // Most sessions splice something: the comparison is not of untouched chains.
        assert!(spliced > 3000, "{spliced} of 6000 sessions spliced a seam");
    }

    /// Chains and requests drawn from a small alphabet of ids (so tails share prefixes,
    /// are equal, and extend one another): the index answers as the scans do, after every
    /// change of a chain's last ids.
    #[test]
    fn the_tail_index_answers_as_the_scans() {
        let mut rng = SeededRng::new(7);
        let ids = |rng: &mut SeededRng| -> Vec<u64> {
            let len = 1 + rng.below(6) as usize;
            (0..len).map(|_| rng.below(3)).collect()
        };
        for _ in 0..50 {
            let mut chains: Vec<Chain> = Vec::new();
            let mut index = TailIndex::default();
            for step in 0..60 {
                let request = Recorded {
                    t: step as f64,
                    model: if rng.below(5) == 0 { "b" } else { "a" }.into(),
                    input: 1,
                    output: 1,
                    hash_ids: ids(&mut rng),
                    api_time: Some(rng.below(3) as f64),
                };
                assert_eq!(
                    index.extended(&chains, &request),
                    extended(&chains, &request),
                    "{:?}",
                    request.hash_ids
                );
                assert_eq!(
                    index.nearest(&chains, &request.hash_ids),
                    nearest(&chains, &request.hash_ids)
                );
                let target = match rng.below(3) {
                    0 => {
                        chains.push(Chain::default());
                        chains.len() - 1
                    }
                    _ if chains.is_empty() => {
                        chains.push(Chain::default());
                        0
                    }
                    _ => rng.below(chains.len() as u64) as usize,
                };
                if !chains[target].tail_hashes.is_empty() {
                    index.remove(target, &chains[target].tail_hashes);
                }
                index.insert(target, &request.hash_ids);
                chains[target].push(Placed {
                    source_id: format!("r{step}"),
                    order: step,
                    request,
                });
            }
        }
    }
}
