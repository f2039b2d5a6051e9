//! Router replicas sharing their state in a timed replay: the sharing's clock runs with the
//! replay's, each replica's changes are recorded as they happen, and what reaches a replica
//! is told to its matcher (`update`, `on_first_token`, `on_complete`) before its next
//! decision. The peers' in-flight counts it believes are added to its own in what its
//! plugins see (`Fleet::load`).

use routerlab_route::sync::{Change, SyncEvent, Syncer};
use routerlab_route::{ListPos, Replicas};

use super::Sim;
use crate::SimError;

impl Sim<'_> {
    /// Starts the sharing, when the replicas share.
    pub(super) fn start_sync(&mut self, replicas: &Replicas) {
        let sync = *replicas.sync();
        if sync.is_on() {
            let slots = self.fleet.engines.len();
            let seed = self.settings.seed;
            let syncer = Syncer::new(sync, replicas.len(), slots, seed, self.origin_ns);
            self.fleet.sync = Some(Box::new(syncer));
        }
    }

    /// Replica `r` made `change` to request `index` at engine slot `pos` at `now`.
    pub(super) fn synced(&mut self, change: Change, index: usize, r: usize, pos: usize, now: u64) {
        if let Some(syncer) = &mut self.fleet.sync {
            syncer.record(SyncEvent {
                at_ns: now,
                origin: r,
                change,
                request: index,
                slot: pos,
                tokens: u64::from(self.feed.request(index).prompt_tokens),
            });
        }
    }

    /// Replica `r` is about to decide (for the count of what it had wrong).
    pub(super) fn sync_deciding(&mut self, r: usize) {
        if let Some(syncer) = &mut self.fleet.sync {
            syncer.deciding(r);
        }
    }

    /// Everything the sharing has due up to `now`, before the replay's event at `now`.
    pub(super) fn sync_until(&mut self, now: u64, replicas: &mut Replicas) -> Result<(), SimError> {
        let Some(syncer) = &mut self.fleet.sync else {
            return Ok(());
        };
        let mut told = Vec::new();
        syncer.advance(now, &mut told);
        for delivery in told {
            let event = delivery.event;
            // An endpoint no longer listed has nothing left to learn about.
            let Some(listed) = self.pos_of[event.slot] else {
                continue;
            };
            let data = self.data(event.request, now, None);
            let router = replicas.router_mut(delivery.to);
            let pos = ListPos(listed);
            match event.change {
                Change::Routed => router.learn(&data, pos),
                Change::FirstToken => router.first_token(&data, pos),
                Change::Finished => router.complete(&data, pos),
            }
            .map_err(self.plugin_error(event.request))?;
        }
        Ok(())
    }

    /// What the sharing did, for the report.
    pub(super) fn sync_report(&self) -> Option<routerlab_report::schema::SyncReport> {
        let syncer = self.fleet.sync.as_ref()?;
        let (config, stats) = (syncer.config(), syncer.stats());
        let ms = |ns: u64| ns as f64 / 1e6;
        Some(routerlab_report::schema::SyncReport {
            strategy: config.strategy.name().to_owned(),
            scope: config.scope.name().to_owned(),
            interval_ms: ms(config.interval_ns),
            delay_ms: ms(config.delay_ns),
            loss: config.loss,
            ttl_ms: ms(config.ttl_ns),
            messages: stats.messages,
            lost: stats.lost,
            delivered: stats.delivered,
            mean_lag_ms: routerlab_report::round6(stats.mean_lag_ms()),
            max_lag_ms: routerlab_report::round6(ms(stats.lag_max_ns)),
            mean_unseen_requests: routerlab_report::round6(stats.mean_unseen()),
        })
    }
}
