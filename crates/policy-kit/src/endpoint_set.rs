//! A set of endpoints by stable id, built for the hot path: a bitmask for ids below 64 (the
//! common fleet) and a short list above, so testing a trie node's holders against the
//! available endpoints is one `and` in the common case.

use routerlab_core::{EndpointId, Endpoints};

/// A set of endpoint ids: a bitmask below 64, a list (in insertion order) above.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct EndpointSet {
    low: u64,
    high: Vec<u32>,
}

/// A set, borrowed: what a [`crate::PrefixTrie`] node lends without copying.
#[derive(Clone, Copy, Debug)]
pub struct EndpointSetRef<'a> {
    pub(crate) low: u64,
    pub(crate) high: &'a [u32],
}

impl EndpointSetRef<'_> {
    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.low == 0 && self.high.is_empty()
    }
    /// Whether `id` is a member.
    pub fn contains(&self, id: EndpointId) -> bool {
        let id = id.get();
        if id < 64 {
            self.low & (1 << id) != 0
        } else {
            self.high.contains(&id)
        }
    }
}

impl EndpointSet {
    /// The available endpoints of a call.
    pub fn available(endpoints: &Endpoints<'_>) -> EndpointSet {
        let mut set = EndpointSet::default();
        set.fill_available(endpoints);
        set
    }

    /// Clears the set, then adds the available endpoints of a call (reusing the storage).
    #[inline]
    pub fn fill_available(&mut self, endpoints: &Endpoints<'_>) {
        self.clear();
        for endpoint in endpoints.available() {
            self.insert(endpoint.id());
        }
    }

    /// The set of `ids`.
    pub fn of(ids: &[EndpointId]) -> EndpointSet {
        let mut set = EndpointSet::default();
        for id in ids {
            set.insert(*id);
        }
        set
    }

    /// Adds `id`.
    #[inline]
    pub fn insert(&mut self, id: EndpointId) {
        let id = id.get();
        if id < 64 {
            self.low |= 1 << id;
        } else if !self.high.contains(&id) {
            self.high.push(id);
        }
    }
    /// Removes `id`.
    pub fn remove(&mut self, id: EndpointId) {
        let id = id.get();
        if id < 64 {
            self.low &= !(1 << id);
        } else {
            self.high.retain(|i| *i != id);
        }
    }
    /// Whether `id` is a member.
    pub fn contains(&self, id: EndpointId) -> bool {
        self.as_ref().contains(id)
    }
    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.low == 0 && self.high.is_empty()
    }
    /// Removes every member.
    pub fn clear(&mut self) {
        self.low = 0;
        self.high.clear();
    }
    /// Number of members.
    pub fn len(&self) -> u64 {
        u64::from(self.low.count_ones()) + self.high.len() as u64
    }
    /// Whether every member has an id below 64 (the set is its bitmask).
    pub fn is_small(&self) -> bool {
        self.high.is_empty()
    }
    /// The bitmask of members below 64.
    pub fn low_mask(&self) -> u64 {
        self.low
    }
    /// Borrowed.
    pub fn as_ref(&self) -> EndpointSetRef<'_> {
        EndpointSetRef {
            low: self.low,
            high: &self.high,
        }
    }
    /// Whether it shares a member with `other`.
    #[inline]
    pub fn intersects(&self, other: EndpointSetRef<'_>) -> bool {
        self.low & other.low != 0 || other.high.iter().any(|i| self.high.contains(i))
    }
    /// Becomes `a ∩ b`, reusing the storage.
    pub fn assign_intersection(&mut self, a: EndpointSetRef<'_>, b: &EndpointSet) {
        self.low = a.low & b.low;
        self.high.clear();
        self.high
            .extend(a.high.iter().filter(|i| b.high.contains(i)));
    }
    /// The `n`-th member: ids below 64 in increasing order, then the others as inserted.
    ///
    /// # Panics
    /// When `n >= len()`.
    pub fn nth(&self, mut n: usize) -> EndpointId {
        let mut low = self.low;
        while low != 0 {
            let index = low.trailing_zeros();
            if n == 0 {
                return EndpointId(index);
            }
            n -= 1;
            low &= low - 1;
        }
        EndpointId(self.high[n])
    }
    /// Members in [`EndpointSet::nth`] order.
    pub fn iter(&self) -> impl Iterator<Item = EndpointId> + '_ {
        (0..self.len() as usize).map(|n| self.nth(n))
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::EndpointsBuilder;

    use super::*;

    #[test]
    fn low_ids_in_order_then_high_ids_as_inserted() {
        let mut set =
            EndpointSet::of(&[EndpointId(70), EndpointId(3), EndpointId(65), EndpointId(0)]);
        set.insert(EndpointId(3));
        assert_eq!(set.len(), 4);
        let members: Vec<u32> = set.iter().map(EndpointId::get).collect();
        assert_eq!(members, [0, 3, 70, 65]);
        set.remove(EndpointId(70));
        assert!(!set.contains(EndpointId(70)) && set.contains(EndpointId(65)));
    }

    #[test]
    fn intersection_and_available() {
        let endpoints = EndpointsBuilder::new(4).unavailable(1).id(3, 90);
        let available = EndpointSet::available(&endpoints.view());
        let members: Vec<u32> = available.iter().map(EndpointId::get).collect();
        assert_eq!(members, [0, 2, 90]);
        let holders = EndpointSet::of(&[EndpointId(1), EndpointId(2), EndpointId(90)]);
        assert!(available.intersects(holders.as_ref()));
        let mut both = EndpointSet::default();
        both.assign_intersection(holders.as_ref(), &available);
        assert_eq!(both, EndpointSet::of(&[EndpointId(2), EndpointId(90)]));
    }
}
