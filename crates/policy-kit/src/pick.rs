//! Seeded choices among equals. Every policy has ties (several endpoints hold the same
//! prefix, several are equally idle); settling them with the plugin's seeded generator, in
//! a fixed member order, is what keeps a replay reproducible.

use routerlab_core::{EndpointId, SeededRng};

use crate::EndpointSet;

/// A uniformly chosen member of a non-empty `set`, in [`EndpointSet::nth`] order.
///
/// # Panics
/// When `set` is empty.
#[inline]
pub fn pick_uniform(rng: &mut SeededRng, set: &EndpointSet) -> EndpointId {
    assert!(!set.is_empty(), "pick from an empty set");
    set.nth(rng.below(set.len()) as usize)
}

/// Among `candidates`, one whose `key` is smallest, ties chosen uniformly by `rng`; `None`
/// when there are no candidates. Draws from `rng` only when there is a tie.
pub fn pick_min<K: Ord>(
    rng: &mut SeededRng,
    candidates: impl IntoIterator<Item = (EndpointId, K)>,
) -> Option<EndpointId> {
    let mut best: Option<K> = None;
    let mut tied: Vec<EndpointId> = Vec::new();
    for (id, key) in candidates {
        match &best {
            Some(b) if key > *b => {}
            Some(b) if key == *b => tied.push(id),
            _ => {
                best = Some(key);
                tied.clear();
                tied.push(id);
            }
        }
    }
    match tied.len() {
        0 => None,
        1 => Some(tied[0]),
        n => Some(tied[rng.below(n as u64) as usize]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimum_wins_and_ties_follow_the_seed() {
        let mut rng = SeededRng::new(1);
        let loads = [(EndpointId(0), 5), (EndpointId(1), 2), (EndpointId(2), 9)];
        assert_eq!(pick_min(&mut rng, loads), Some(EndpointId(1)));
        assert_eq!(pick_min(&mut rng, Vec::<(EndpointId, u8)>::new()), None);
        let tied = [(EndpointId(3), 1), (EndpointId(4), 1), (EndpointId(5), 1)];
        let picks = |seed| {
            let mut rng = SeededRng::new(seed);
            (0..32)
                .map(|_| pick_min(&mut rng, tied).unwrap().get())
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(7), picks(7));
        assert!(
            [3, 4, 5].iter().all(|id| picks(7).contains(id)),
            "each tie is reachable"
        );
    }
}
