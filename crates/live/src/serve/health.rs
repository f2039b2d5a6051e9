//! Which engines are in the fleet: their metrics are scraped every interval, all at once,
//! each scrape bounded in time and size; an engine leaves the fleet only after a run of
//! failed scrapes and comes back only after a run of good ones, so one lost scrape does
//! not make the matcher forget what it learned of an engine (pingora's health checks keep
//! the same two thresholds). Answers count too, with the same thresholds: an engine whose
//! metrics look fine but that answers requests with 5xx, or breaks its answers off, leaves
//! as surely; it is given another chance by a good scrape ten seconds later.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::Request;

use super::Shared;
use crate::prom::{self, Scraped};

/// The most bytes of one engine's `/metrics` the router reads; a larger answer is a failed
/// scrape. vLLM's, histograms and all, is tens of kilobytes.
pub const MAX_SCRAPE_BYTES: usize = 4 << 20;

/// When an engine leaves the fleet and when it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthRule {
    /// Consecutive failed scrapes that take an engine out (at least 1).
    pub fails: u32,
    /// Consecutive good scrapes that bring it back (at least 1).
    pub passes: u32,
}

/// One engine's standing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Health {
    up: bool,
    /// The current run of results against the standing: failures while up, successes
    /// while down.
    run: u32,
}

impl Default for Health {
    /// In the fleet: engines are trusted until their scrapes say otherwise.
    fn default() -> Health {
        Health { up: true, run: 0 }
    }
}

impl Health {
    /// Whether the engine stands in the fleet.
    pub(super) fn up(&self) -> bool {
        self.up
    }

    /// Takes one result (a scrape, or an answer); returns the new standing when it changes.
    pub(super) fn observe(&mut self, ok: bool, rule: HealthRule) -> Option<bool> {
        if ok == self.up {
            self.run = 0;
            return None;
        }
        self.run += 1;
        let needed = if self.up { rule.fails } else { rule.passes };
        if self.run < needed.max(1) {
            return None;
        }
        self.up = ok;
        self.run = 0;
        Some(ok)
    }
}

/// Scrapes every engine each interval, in parallel; results are applied together once
/// every scrape of the round has answered or timed out.
pub(super) async fn scrape_loop(shared: Arc<Shared>) {
    let mut ticker = tokio::time::interval(shared.settings.metrics_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let names: Vec<String> = shared
            .lock()
            .await
            .upstreams
            .iter()
            .map(|u| u.name.clone())
            .collect();
        let mut round = tokio::task::JoinSet::new();
        for (u, name) in names.into_iter().enumerate() {
            let shared = shared.clone();
            round.spawn(async move { (u, scrape(&shared, &name).await) });
        }
        let mut results = Vec::with_capacity(round.len());
        while let Some(done) = round.join_next().await {
            if let Ok(result) = done {
                results.push(result);
            }
        }
        // In endpoint order, so the matcher hears of changes in a fixed order.
        results.sort_by_key(|(u, _)| *u);
        let now = shared.now_ns();
        let mut state = shared.lock().await;
        for (u, scraped) in results {
            state.scraped(u, scraped, now);
        }
    }
}

/// One engine's gauges, or `None` when it did not answer within the scrape timeout, did
/// not answer 2xx, or sent more than [`MAX_SCRAPE_BYTES`].
async fn scrape(shared: &Shared, name: &str) -> Option<Scraped> {
    let request = Request::get(format!("http://{name}/metrics"))
        .body(http_body_util::Full::new(Bytes::new()))
        .ok()?;
    let timeout: Duration = shared.settings.scrape_timeout;
    let whole = async {
        let response = shared.client.request(request).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let limited = http_body_util::Limited::new(response.into_body(), MAX_SCRAPE_BYTES);
        limited.collect().await.ok().map(|c| c.to_bytes())
    };
    let body = tokio::time::timeout(timeout, whole).await.ok()??;
    Some(prom::parse(&String::from_utf8_lossy(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_leaves_after_the_run_of_failures_and_returns_after_the_run_of_passes() {
        let rule = HealthRule {
            fails: 3,
            passes: 2,
        };
        let mut h = Health::default();
        // Two failures, then a success: the run is broken, still up.
        assert_eq!(h.observe(false, rule), None);
        assert_eq!(h.observe(false, rule), None);
        assert_eq!(h.observe(true, rule), None);
        assert_eq!(h.observe(false, rule), None);
        assert_eq!(h.observe(false, rule), None);
        assert_eq!(h.observe(false, rule), Some(false), "third in a row: out");
        assert_eq!(h.observe(false, rule), None, "already out");
        assert_eq!(h.observe(true, rule), None);
        assert_eq!(
            h.observe(false, rule),
            None,
            "a failure breaks the run of passes"
        );
        assert_eq!(h.observe(true, rule), None);
        assert_eq!(
            h.observe(true, rule),
            Some(true),
            "second pass in a row: back"
        );
    }

    #[test]
    fn thresholds_of_one_follow_every_scrape() {
        let rule = HealthRule {
            fails: 1,
            passes: 1,
        };
        let mut h = Health::default();
        assert_eq!(h.observe(false, rule), Some(false));
        assert_eq!(h.observe(true, rule), Some(true));
        // Zero is read as one, not as "never".
        let zero = HealthRule {
            fails: 0,
            passes: 0,
        };
        assert_eq!(h.observe(false, zero), Some(false));
    }
}
