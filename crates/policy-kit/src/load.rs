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

/// The smallest and largest of `loads`; `None` when there are none.
#[inline]
pub fn range_of(loads: impl IntoIterator<Item = u64>) -> Option<(u64, u64)> {
    loads.into_iter().fold(None, |range, l| match range {
        None => Some((l, l)),
        Some((lo, hi)) => Some((lo.min(l), hi.max(l))),
    })
}

/// The bounded-load test of consistent hashing with bounded loads (KubeAI CHWBL, SGLang
/// `prefix_hash`): an endpoint may take one more request when nothing is in flight, or its
/// load is at most `factor · (total + 1) / endpoints`.
#[inline]
pub fn within_bound(load: u64, total: u64, endpoints: usize, factor: f64) -> bool {
    total == 0 || load as f64 <= factor * (total + 1) as f64 / endpoints.max(1) as f64
}

/// A key for the first `units` of a request's prompt (in the request's unit): the block
/// chain's hash at the block covering them, which names that whole prefix (0 for an empty
/// prompt). Hash-based peers key on a prompt's head; this is that key on the host's chain.
pub fn prefix_key(request: &routerlab_core::Request<'_>, units: u64) -> u64 {
    let hashes = request.block_hashes();
    let block = u64::from(request.block_size()).max(1);
    let blocks = units.div_ceil(block).clamp(1, hashes.len().max(1) as u64) as usize;
    hashes.get(blocks - 1).copied().unwrap_or(0)
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
    fn the_bound_and_the_prefix_key() {
        // 3 in flight over 2 endpoints: bound 1.25 · 4 / 2 = 2.5.
        assert!(within_bound(2, 3, 2, 1.25) && !within_bound(3, 3, 2, 1.25));
        assert!(within_bound(9, 0, 2, 1.25), "an idle fleet takes anything");
        let blocks = [11u64, 22, 33];
        let r = routerlab_core::testing::RequestBuilder::new(1)
            .block_size(16)
            .blocks(&blocks);
        assert_eq!(
            prefix_key(&r.view(), 20),
            22,
            "20 units end in the second block"
        );
        assert_eq!(
            prefix_key(&r.view(), 1000),
            33,
            "capped at the whole prompt"
        );
    }

    #[test]
    fn the_hosts_count_wins_and_scores_order_totally() {
        let fleet = EndpointsBuilder::new(1).running(0, 4).waiting(0, 3);
        // The testing builder lends 1.2 statuses, whose router count (0 here) is read.
        assert_eq!(inflight(&fleet.view().get(0)), 0);
        assert!(Score(-1.5) < Score(0.0) && Score(2.0) > Score(1.0));
    }
}
