//! The three numberings a routed request meets, as types, so one is never passed for
//! another: a request's sequence number, an endpoint's position in a router's current
//! list, and an endpoint's stable index.

/// A request's sequence number: its 1-based position in the workload (or, live, in arrival
/// order), which is the id plugins see. Per-request arrays are indexed by
/// [`RequestSeq::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestSeq(pub u64);

impl RequestSeq {
    /// The request at 0-based `index`.
    pub fn of_index(index: usize) -> RequestSeq {
        RequestSeq(index as u64 + 1)
    }

    /// Its 0-based position.
    pub fn index(self) -> usize {
        (self.0 - 1) as usize
    }
}

/// A position in a router's current endpoint list: what a decision names, what the
/// endpoint table and the drivers' per-endpoint arrays are indexed by. It changes when an
/// endpoint before it leaves the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListPos(pub usize);

/// An endpoint's stable index: what plugins see as its `EndpointId`; never reused, so a
/// departed endpoint that comes back gets a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointIndex(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_are_one_based_positions() {
        assert_eq!(RequestSeq::of_index(0), RequestSeq(1));
        assert_eq!(RequestSeq(7).index(), 6);
        assert_eq!(RequestSeq::of_index(41).index(), 41);
    }
}
