//! Load signals as the peers read them: the router's own in-flight count (always current;
//! ABI 1.2) or the engine's report (possibly stale). Peers differ exactly in which they
//! read, so each policy names its choice through these helpers.

use routerlab_core::EndpointStatus;

/// Requests the router sent `endpoint` that have not finished: the host's count (ABI 1.2),
/// or, from an older host, the engine's running plus waiting.
#[inline]
pub fn inflight(endpoint: &EndpointStatus<'_>) -> u64 {
    endpoint
        .inflight_requests()
        .unwrap_or_else(|| endpoint.running() + endpoint.waiting())
}

/// A finite score ordered by `f64::total_cmp`, so scores can go through
/// [`crate::pick_min`] (use `Score(-x)` for the largest).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::EndpointsBuilder;

    use super::*;

    #[test]
    fn the_hosts_count_wins_and_scores_order_totally() {
        let fleet = EndpointsBuilder::new(1).running(0, 4).waiting(0, 3);
        // The testing builder lends 1.2 statuses, whose router count (0 here) is read.
        assert_eq!(inflight(&fleet.view().get(0)), 0);
        assert!(Score(-1.5) < Score(0.0) && Score(2.0) > Score(1.0));
    }
}
