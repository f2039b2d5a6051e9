//! Requests sent to each endpoint in a sliding window of the decision clock: the router-side
//! QPS that production-stack's fallback routing reads (peers.md §1, `_qps_routing`).

use std::collections::VecDeque;

use routerlab_core::{EndpointId, Endpoints};

/// Arrivals per endpoint within the last `window_ns`.
#[derive(Debug, Clone)]
pub struct RateWindow {
    window_ns: u64,
    /// By endpoint id: `None` until the first request, then its recent arrival times.
    seen: Vec<Option<VecDeque<u64>>>,
}

impl RateWindow {
    /// A window of `window_ns` nanoseconds.
    pub fn new(window_ns: u64) -> RateWindow {
        RateWindow {
            window_ns: window_ns.max(1),
            seen: Vec::new(),
        }
    }

    /// A request was sent to `endpoint` at `now_ns`.
    pub fn record(&mut self, endpoint: EndpointId, now_ns: u64) {
        let i = endpoint.get() as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, None);
        }
        self.seen[i]
            .get_or_insert_with(VecDeque::new)
            .push_back(now_ns);
    }

    /// Requests per second to `endpoint` over the window ending at `now_ns`; `None` when it
    /// was never sent one.
    pub fn rate(&mut self, endpoint: EndpointId, now_ns: u64) -> Option<f64> {
        let window = self.window_ns;
        let times = self.seen.get_mut(endpoint.get() as usize)?.as_mut()?;
        while times
            .front()
            .is_some_and(|t| now_ns.saturating_sub(*t) > window)
        {
            times.pop_front();
        }
        Some(times.len() as f64 / (window as f64 / 1e9))
    }

    /// production-stack's QPS routing: the first available endpoint never sent a request,
    /// else the one with the lowest rate (the first of equals, in list order).
    pub fn least_busy(&mut self, endpoints: &Endpoints<'_>, now_ns: u64) -> Option<EndpointId> {
        let mut best: Option<(EndpointId, f64)> = None;
        for endpoint in endpoints.available() {
            let Some(rate) = self.rate(endpoint.id(), now_ns) else {
                return Some(endpoint.id());
            };
            if best.is_none_or(|(_, b)| rate < b) {
                best = Some((endpoint.id(), rate));
            }
        }
        best.map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::EndpointsBuilder;

    use super::*;

    #[test]
    fn unseen_endpoints_first_then_the_lowest_rate_in_the_window() {
        let second = 1_000_000_000;
        let mut rates = RateWindow::new(60 * second);
        let fleet = EndpointsBuilder::new(2);
        assert_eq!(rates.least_busy(&fleet.view(), 0), Some(EndpointId(0)));
        rates.record(EndpointId(0), 0);
        assert_eq!(rates.least_busy(&fleet.view(), 0), Some(EndpointId(1)));
        rates.record(EndpointId(1), 10 * second);
        rates.record(EndpointId(1), 20 * second);
        assert_eq!(
            rates.least_busy(&fleet.view(), 30 * second),
            Some(EndpointId(0))
        );
        // 70 s: endpoint 0's request left the window, endpoint 1 still has one.
        assert_eq!(rates.rate(EndpointId(0), 70 * second), Some(0.0));
        assert_eq!(
            rates.least_busy(&fleet.view(), 70 * second),
            Some(EndpointId(0))
        );
    }
}
