//! Splicing a session's context rewrites back into their chains (see [`super::graph`]):
//! a fork that began after its source request ended on the same model, and not both an
//! hour later and sharing under half the source's ids, is a seam; the deepest seam of a
//! source continues its chain, and the source's other forks that began after the new tail
//! are re-anchored on it. [`splice_seams`] files each source's forks by depth and start so
//! that this costs what changes; [`splice_seams_by_scan`] is the plain restatement it is
//! tested against.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::graph::{Chain, EPSILON_S, Recorded, SEAM_MAX_GAP_S, SEAM_MIN_OVERLAP, common_prefix};

/// Whether `chain` is a seam of `tail`, its fork source (the scan [`Group::elect`] answers
/// as).
#[cfg(test)]
fn seam(chain: &Chain, tail: &Recorded) -> bool {
    let Some(fork) = &chain.fork else {
        return false;
    };
    let Some(first) = chain.requests.first() else {
        return false;
    };
    if fork.depth == 0 {
        return false;
    }
    let first = &first.request;
    let gap = first.t - tail.end();
    let overlap = fork.depth as f64 / tail.hash_ids.len().max(1) as f64;
    tail.end() <= first.t + EPSILON_S
        && first.model == tail.model
        && !(gap > SEAM_MAX_GAP_S && overlap < SEAM_MIN_OVERLAP)
}

/// A start time as a key that orders as [`f64::total_cmp`] does.
fn start_key(t: f64) -> i64 {
    let bits = t.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

/// Where a registered fork stands against its source's ids: how many it shares, the id it
/// has where they part (none when its ids end there), its model and its start.
#[derive(Clone, Copy, Default)]
struct Member {
    depth: usize,
    next: Option<u64>,
    model: u32,
    start: i64,
}

/// The forks of one source sharing one depth with it.
#[derive(Default)]
struct Level {
    /// By model, then start, then chain: the first of a model from a time is the election's.
    by_start: BTreeSet<(u32, i64, usize)>,
    /// By the id where each parts from the source: a new source continuing with that id is
    /// shared deeper by exactly these.
    by_next: HashMap<Option<u64>, BTreeSet<usize>>,
}

/// The forks registered on one source, by start and by depth: electing a seam, dropping
/// the forks that began before the new tail and re-anchoring the rest cost work in how
/// much changes, not in how many forks the source has (a session forking from one
/// context has as many as requests).
#[derive(Default)]
struct Group {
    by_start: BTreeSet<(i64, usize)>,
    levels: BTreeMap<usize, Level>,
}

impl Group {
    fn len(&self) -> usize {
        self.by_start.len()
    }

    fn insert(&mut self, members: &mut [Member], chain: usize, member: Member) {
        members[chain] = member;
        self.by_start.insert((member.start, chain));
        let level = self.levels.entry(member.depth).or_default();
        level.by_start.insert((member.model, member.start, chain));
        level.by_next.entry(member.next).or_default().insert(chain);
    }

    fn remove(&mut self, members: &[Member], chain: usize) {
        let member = members[chain];
        self.by_start.remove(&(member.start, chain));
        if let Some(level) = self.levels.get_mut(&member.depth) {
            level.by_start.remove(&(member.model, member.start, chain));
            if let Some(set) = level.by_next.get_mut(&member.next) {
                set.remove(&chain);
                if set.is_empty() {
                    level.by_next.remove(&member.next);
                }
            }
            if level.by_start.is_empty() {
                self.levels.remove(&member.depth);
            }
        }
    }

    /// The seam of `tail` (see [`seam`]): the deepest, then the earliest, then the first
    /// made of the forks that began after it ended on its model, not both an hour later
    /// and sharing under half its ids.
    fn elect(&self, chains: &[Chain], tail: &Recorded, model: u32) -> Option<usize> {
        let end = tail.end();
        // Every start below this fails `end <= t + EPSILON_S`; those above are checked.
        let from = start_key(end - 2.0 * EPSILON_S - end.abs() * 1e-12);
        for (&depth, level) in self.levels.iter().rev() {
            let overlap = depth as f64 / tail.hash_ids.len().max(1) as f64;
            let eligible = level
                .by_start
                .range((model, from, 0)..=(model, i64::MAX, usize::MAX))
                .map(|&(_, _, chain)| chain)
                .find(|&chain| end <= chains[chain].requests[0].request.t + EPSILON_S);
            if let Some(chain) = eligible {
                let gap = chains[chain].requests[0].request.t - end;
                // The gap grows with the start: when the first fails, so do the rest.
                if !(gap > SEAM_MAX_GAP_S && overlap < SEAM_MIN_OVERLAP) {
                    return Some(chain);
                }
            }
        }
        None
    }

    /// Takes off the forks that began before `new_t`: they stay forks of the old source.
    fn drop_before(&mut self, members: &[Member], chains: &[Chain], new_t: f64) -> Vec<usize> {
        let mut dropped = Vec::new();
        while let Some(&(_, chain)) = self.by_start.first() {
            if new_t > chains[chain].requests[0].request.t + EPSILON_S {
                self.remove(members, chain);
                dropped.push(chain);
            } else {
                break;
            }
        }
        dropped
    }

    /// Re-anchors every fork from the source with ids `old` on the one with ids `new`,
    /// which share `shared > 0`: a fork deeper than that shares exactly `shared` with the
    /// new source; one that parts from the old source there shares more with the new one
    /// when its next id is the new one's; the rest keep their depth.
    fn reanchor(&mut self, members: &mut [Member], chains: &[Chain], old: &[u64], new: &[u64]) {
        let shared = common_prefix(old, new);
        let deeper = self.levels.split_off(&(shared + 1));
        for level in deeper.values() {
            for &(_, _, chain) in &level.by_start {
                self.by_start.remove(&(members[chain].start, chain));
            }
        }
        if let Some(&id) = new.get(shared) {
            let continuing = self
                .levels
                .get(&shared)
                .and_then(|level| level.by_next.get(&Some(id)))
                .cloned()
                .unwrap_or_default();
            for chain in continuing {
                self.remove(members, chain);
                let ids = &chains[chain].requests[0].request.hash_ids;
                let depth = shared + common_prefix(&new[shared..], &ids[shared..]);
                let member = Member {
                    depth,
                    next: ids.get(depth).copied(),
                    ..members[chain]
                };
                self.insert(members, chain, member);
            }
        }
        for level in deeper.into_values() {
            for (_, _, chain) in level.by_start {
                let member = Member {
                    depth: shared,
                    next: old.get(shared).copied(),
                    ..members[chain]
                };
                self.insert(members, chain, member);
            }
        }
    }

    /// Every fork of both, in the larger one's place.
    fn merge(mut self, mut other: Group, members: &mut [Member]) -> Group {
        if other.len() > self.len() {
            std::mem::swap(&mut self, &mut other);
        }
        for (_, chain) in std::mem::take(&mut other.by_start) {
            self.insert(members, chain, members[chain]);
        }
        self
    }

    fn chains(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_start.iter().map(|&(_, chain)| chain)
    }
}

/// The chain whose last request is `source` (following the splices made), if any.
fn ending_at(
    chains: &[Chain],
    owner: &HashMap<String, usize>,
    alias: &HashMap<usize, usize>,
    source: &str,
) -> Option<usize> {
    let mut chain = owner[source];
    while let Some(next) = alias.get(&chain) {
        chain = *next;
    }
    (chains[chain].tail_source.as_deref() == Some(source)).then_some(chain)
}

/// Chain `elected` continues `chain`: its requests follow, its last request ends it.
fn splice(
    chains: &mut [Chain],
    owner: &mut HashMap<String, usize>,
    alias: &mut HashMap<usize, usize>,
    chain: usize,
    elected: usize,
) {
    let moved = std::mem::take(&mut chains[elected].requests);
    for request in &moved {
        owner.insert(request.source_id.clone(), chain);
    }
    chains[chain].requests.extend(moved);
    chains[chain].tail_source = chains[elected].tail_source.clone();
    chains[chain].tail_hashes = chains[elected].tail_hashes.clone();
    chains[chain].tail_end = chains[elected].tail_end;
    chains[chain].tail_model = chains[elected].tail_model.clone();
    chains[elected].spliced = true;
    alias.insert(elected, chain);
}

/// Splices seams into their parents, repeatedly: the deepest eligible fork of a source
/// (the earliest on a tie, then the first made) continues its chain, and the source's other
/// forks that began after the new tail are re-anchored on it. Sources are taken in the
/// order of their ids; a source that gains forks is taken again. Answers as
/// [`splice_seams_by_scan`] does.
pub(super) fn splice_seams(
    chains: &mut [Chain],
    forks: &mut HashMap<String, Vec<usize>>,
    owner: &mut HashMap<String, usize>,
    by_source: &HashMap<String, Recorded>,
) {
    let mut models: HashMap<String, u32> = HashMap::new();
    let mut model_of = |model: &str| -> u32 {
        let next = models.len() as u32;
        *models.entry(model.to_string()).or_insert(next)
    };
    let mut members = vec![Member::default(); chains.len()];
    let mut groups: HashMap<String, Group> = HashMap::new();
    for (source, listed) in forks.drain() {
        let mut group = Group::default();
        for chain in listed {
            let fork = chains[chain].fork.as_ref().expect("a fork");
            let first = &chains[chain].requests[0].request;
            let member = Member {
                depth: fork.depth,
                next: first.hash_ids.get(fork.depth).copied(),
                model: model_of(&first.model),
                start: start_key(first.t),
            };
            group.insert(&mut members, chain, member);
        }
        groups.insert(source, group);
    }
    let settle = |chains: &mut [Chain], chain: usize, source: &str| {
        if let Some(fork) = chains[chain].fork.as_mut() {
            fork.source = Some(source.to_string());
        }
    };
    let mut keys: BTreeSet<String> = groups.keys().cloned().collect();
    let mut alias: HashMap<usize, usize> = HashMap::new();
    let mut done: HashSet<String> = HashSet::new();
    while let Some(source) = keys.pop_first() {
        if !done.insert(source.clone()) {
            continue;
        }
        let Some(chain) = ending_at(chains, owner, &alias, &source) else {
            continue;
        };
        let tail = &by_source[&source];
        let Some(group) = groups.get(&source) else {
            continue;
        };
        let Some(elected) = group.elect(chains, tail, model_of(&tail.model)) else {
            continue;
        };
        // The source is no chain's last request from here on, so it is never a source
        // again: its forks that are not moved on stay its forks.
        let mut group = groups.remove(&source).expect("the group elected from");
        group.remove(&members, elected);
        splice(chains, owner, &mut alias, chain, elected);
        let Some(new_tail) = chains[chain].tail_source.clone() else {
            for left in group.chains().collect::<Vec<_>>() {
                settle(chains, left, &source);
            }
            continue;
        };
        let new_hashes = &by_source[&new_tail].hash_ids;
        for left in group.drop_before(&members, chains, by_source[&new_tail].t) {
            settle(chains, left, &source);
        }
        if common_prefix(new_hashes, &tail.hash_ids) == 0 {
            // Nothing left shares an id with the new tail.
            for left in group.chains().collect::<Vec<_>>() {
                settle(chains, left, &source);
            }
            continue;
        }
        if group.len() == 0 {
            continue;
        }
        group.reanchor(&mut members, chains, &tail.hash_ids, new_hashes);
        let merged = match groups.remove(&new_tail) {
            Some(there) => there.merge(group, &mut members),
            None => group,
        };
        groups.insert(new_tail.clone(), merged);
        done.remove(&new_tail);
        keys.insert(new_tail);
    }
    for (source, group) in &groups {
        for chain in group.chains() {
            settle(chains, chain, source);
        }
    }
}

/// [`splice_seams`] by scanning every fork of a source at each election.
#[cfg(test)]
pub(super) fn splice_seams_by_scan(
    chains: &mut [Chain],
    forks: &mut HashMap<String, Vec<usize>>,
    owner: &mut HashMap<String, usize>,
    by_source: &HashMap<String, Recorded>,
) {
    let mut keys: BTreeSet<String> = forks.keys().cloned().collect();
    let mut alias: HashMap<usize, usize> = HashMap::new();
    let mut done: HashSet<String> = HashSet::new();
    while let Some(source) = keys.pop_first() {
        if !done.insert(source.clone()) {
            continue;
        }
        let Some(chain) = ending_at(chains, owner, &alias, &source) else {
            continue;
        };
        let tail = &by_source[&source];
        let Some(listed) = forks.get(&source) else {
            continue;
        };
        let registered: Vec<usize> = listed
            .iter()
            .copied()
            .filter(|i| !chains[*i].spliced)
            .collect();
        let source_hashes = &tail.hash_ids;
        let elected = registered
            .iter()
            .copied()
            .filter(|i| seam(&chains[*i], tail))
            .max_by(|a, b| {
                let (fa, fb) = (
                    chains[*a].fork.as_ref().expect("a fork"),
                    chains[*b].fork.as_ref().expect("a fork"),
                );
                let start = |i: usize| chains[i].requests[0].request.t;
                fa.depth
                    .cmp(&fb.depth)
                    .then_with(|| start(*b).total_cmp(&start(*a)))
                    .then_with(|| b.cmp(a))
            });
        let Some(elected) = elected else {
            continue;
        };
        // The source is no chain's last request from here on, so it is never a source
        // again: its list goes (the forks moved on are listed under their new source).
        forks.remove(&source);
        splice(chains, owner, &mut alias, chain, elected);
        let Some(new_tail) = chains[chain].tail_source.clone() else {
            continue;
        };
        let new_hashes = chains[chain].tail_hashes.clone();
        let new_t = by_source[&new_tail].t;
        // Each fork's depth on the new tail from its depth on the source: prefixes shared
        // with the source to different lengths share the shorter with each other, and
        // only where they agree are ids compared, from there on.
        let shared = common_prefix(&new_hashes, source_hashes);
        let mut moved = Vec::new();
        for candidate in registered {
            if candidate == elected || chains[candidate].spliced {
                continue;
            }
            let first = &chains[candidate].requests[0].request;
            if new_t > first.t + EPSILON_S {
                continue;
            }
            let old_depth = chains[candidate].fork.as_ref().expect("a fork").depth;
            let depth = if shared != old_depth {
                shared.min(old_depth)
            } else {
                shared + common_prefix(&new_hashes[shared..], &first.hash_ids[shared..])
            };
            debug_assert_eq!(depth, common_prefix(&new_hashes, &first.hash_ids));
            if depth == 0 {
                continue;
            }
            let fork = chains[candidate].fork.as_mut().expect("a fork");
            fork.source = Some(new_tail.clone());
            fork.depth = depth;
            moved.push(candidate);
        }
        if !moved.is_empty() {
            forks.entry(new_tail.clone()).or_default().extend(moved);
            done.remove(&new_tail);
            keys.insert(new_tail.clone());
        }
    }
}
