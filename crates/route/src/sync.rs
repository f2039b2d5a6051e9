//! How router replicas share what each learns, and how stale each one's picture of the
//! others is when it decides.
//!
//! A replica's state is what passed through it: the requests it routed (with their block
//! chains), whose first token came, and which finished. The host keeps per endpoint the
//! requests and prompt tokens in flight (what a plugin reads as `inflight_requests` and
//! `inflight_prompt_tokens`); the matcher learns the same changes through `update`,
//! `on_first_token` and `on_complete`. A [`SyncStrategy`] says how one replica's changes
//! reach the others, and a [`SyncScope`] says what they carry:
//!
//! - `none`: each replica alone (no sharing at all);
//! - `periodic`: every interval each replica publishes a full snapshot of its state and
//!   reads its peers' latest ones (those at least the delay old). A failed read (`loss`)
//!   keeps the previous snapshot, and a snapshot older than the time to live is dropped; the
//!   next good read repairs everything, as a snapshot is the whole state. llm-d's
//!   cross-replica syncer works this way;
//! - `delta`: every interval each replica sends its peers the changes since its last send,
//!   which arrive after the delay; a lost batch (`loss`) is lost for good, so a peer may
//!   count a finished request in flight for ever;
//! - `broadcast`: each change is sent to every peer as it happens and arrives after the
//!   delay, each delivery lost with probability `loss` (Dynamo's best-effort replica sync of
//!   active sequences);
//! - `shared`: one store every replica reads and writes: each change is seen by the next
//!   decision of any replica.
//!
//! A peer's finish or first token for a request the replica never heard of is ignored, as
//! Dynamo's active-sequence tracker does. The [`Syncer`] decides what each replica knows
//! when; the driver applies what it hands back (the matcher's calls) and reads the peers'
//! in-flight counts from it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use routerlab_core::SeededRng;
use serde::{Deserialize, Serialize};

/// How one replica's changes reach the others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncStrategy {
    /// Each replica alone.
    #[default]
    None,
    /// A full snapshot published and read every interval.
    Periodic,
    /// The changes since the last send, every interval.
    Delta,
    /// Each change to every peer as it happens.
    Broadcast,
    /// One store every replica reads and writes.
    Shared,
}

impl SyncStrategy {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            SyncStrategy::None => "none",
            SyncStrategy::Periodic => "periodic",
            SyncStrategy::Delta => "delta",
            SyncStrategy::Broadcast => "broadcast",
            SyncStrategy::Shared => "shared",
        }
    }

    /// Whether it works on a schedule (an interval).
    pub fn is_periodic(self) -> bool {
        matches!(self, SyncStrategy::Periodic | SyncStrategy::Delta)
    }
}

/// What a sync carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncScope {
    /// The in-flight counts per endpoint only (what llm-d's syncer shares: per-endpoint
    /// state); each matcher still learns only its own picks.
    Loads,
    /// The counts and the decisions: the matcher learns its peers' picks, first tokens and
    /// finishes too (Dynamo's active sequences carry the request's block hashes).
    #[default]
    Decisions,
}

impl SyncScope {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            SyncScope::Loads => "loads",
            SyncScope::Decisions => "decisions",
        }
    }
}

/// How the replicas of a run share their state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSync {
    /// How.
    pub strategy: SyncStrategy,
    /// What.
    pub scope: SyncScope,
    /// Between publications (`periodic`, `delta`), ns.
    pub interval_ns: u64,
    /// From a send to its arrival (every strategy but `shared`), ns.
    pub delay_ns: u64,
    /// The chance a delivery (`broadcast`), a batch (`delta`) or a read (`periodic`) is lost.
    pub loss: f64,
    /// `periodic`: a peer's snapshot older than this is dropped; 0 keeps it until replaced.
    pub ttl_ns: u64,
}

/// llm-d's cross-replica publisher cadence (`defaultCrossReplicaSyncInterval`, 200 ms).
const LLMD_INTERVAL_NS: u64 = 200_000_000;
/// llm-d's syncers' peer-state expiry (`stateTTL` of the Redis syncer, `snapshotTTL` of the
/// Kubernetes one: 2 s each).
const LLMD_TTL_NS: u64 = 2_000_000_000;

impl ReplicaSync {
    /// No sharing.
    pub fn none() -> ReplicaSync {
        ReplicaSync::default()
    }

    /// The preset named `name`: `llm-d` (its cross-replica syncer's defaults: a full
    /// snapshot of per-endpoint loads every 200 ms, peers' state expiring after 2 s) or
    /// `dynamo` (its replica sync: every active-sequence change broadcast at once).
    pub fn preset(name: &str) -> Option<ReplicaSync> {
        match name {
            "llm-d" => Some(ReplicaSync {
                strategy: SyncStrategy::Periodic,
                scope: SyncScope::Loads,
                interval_ns: LLMD_INTERVAL_NS,
                ttl_ns: LLMD_TTL_NS,
                ..ReplicaSync::default()
            }),
            "dynamo" => Some(ReplicaSync {
                strategy: SyncStrategy::Broadcast,
                scope: SyncScope::Decisions,
                ..ReplicaSync::default()
            }),
            _ => None,
        }
    }

    /// Whether the replicas share anything.
    pub fn is_on(&self) -> bool {
        self.strategy != SyncStrategy::None
    }

    /// Why these settings cannot be run by `replicas` replicas, if they cannot; the
    /// messages name the experiment keys (`sync_interval_ms` is `--sync-interval-ms`).
    pub fn check(&self, replicas: usize) -> Result<(), String> {
        let s = self.strategy;
        let problem = if !self.is_on() {
            (self.interval_ns > 0 || self.delay_ns > 0 || self.loss > 0.0 || self.ttl_ns > 0)
                .then(|| "sync_interval_ms, sync_delay_ms, sync_loss and sync_ttl_ms need a replica_sync strategy".to_owned())
        } else if replicas < 2 {
            Some(format!(
                "replica_sync {} needs 2 or more router_replicas, not {replicas}",
                s.name()
            ))
        } else if s.is_periodic() && self.interval_ns == 0 {
            Some(format!(
                "replica_sync {} needs a sync_interval_ms above 0",
                s.name()
            ))
        } else if !s.is_periodic() && self.interval_ns > 0 {
            Some(format!(
                "replica_sync {} sends each change as it happens: sync_interval_ms has no meaning",
                s.name()
            ))
        } else if s == SyncStrategy::Shared && (self.delay_ns > 0 || self.loss > 0.0) {
            Some("replica_sync shared is one store: it has no sync_delay_ms or sync_loss".into())
        } else if self.ttl_ns > 0 && s != SyncStrategy::Periodic {
            Some(
                "sync_ttl_ms is how long a periodic snapshot lasts: only for replica_sync periodic"
                    .into(),
            )
        } else if !(0.0..1.0).contains(&self.loss) {
            Some(format!(
                "sync_loss is a chance from 0 to below 1, not {}",
                self.loss
            ))
        } else {
            None
        };
        problem.map_or(Ok(()), Err)
    }
}

/// One change of a replica's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// It routed the request to the endpoint.
    Routed,
    /// The request's first token came.
    FirstToken,
    /// The request finished.
    Finished,
}

/// A change, where and when it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SyncEvent {
    /// When, ns.
    pub at_ns: u64,
    /// The replica it happened at.
    pub origin: usize,
    /// What.
    pub change: Change,
    /// The request (the driver's index).
    pub request: usize,
    /// The endpoint (the driver's slot).
    pub slot: usize,
    /// The request's prompt tokens.
    pub tokens: u64,
}

/// A change a replica now knows of its peer (its matcher is to learn it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The replica that learns it.
    pub to: usize,
    /// The change.
    pub event: SyncEvent,
}

/// What the sharing did over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SyncStats {
    /// Messages sent: a delivery (`broadcast`), a batch (`delta`), a read (`periodic`).
    pub messages: u64,
    /// Of them, lost.
    pub lost: u64,
    /// Changes that reached a peer.
    pub delivered: u64,
    /// Summed time from a change to its arrival at a peer, ns.
    pub lag_sum_ns: u128,
    /// The longest such time, ns.
    pub lag_max_ns: u64,
    /// Decisions taken.
    pub decisions: u64,
    /// Summed over decisions: per endpoint, the difference between the requests the peers
    /// had in flight and what the deciding replica believed they had.
    pub unseen_sum: u64,
}

impl SyncStats {
    /// Mean time from a change to its arrival at a peer, ms.
    pub fn mean_lag_ms(&self) -> f64 {
        match self.delivered {
            0 => 0.0,
            n => self.lag_sum_ns as f64 / n as f64 / 1e6,
        }
    }

    /// Mean, per decision, of the peers' in-flight requests the deciding replica had wrong.
    pub fn mean_unseen(&self) -> f64 {
        match self.decisions {
            0 => 0.0,
            n => self.unseen_sum as f64 / n as f64,
        }
    }
}

/// Per endpoint: prompt tokens and requests in flight.
type Counts = Vec<(u64, u64)>;

/// A peer's snapshot a replica read: when it was published, and its counts.
type Held = Option<(u64, Arc<Counts>)>;

/// One replica's published state.
#[derive(Debug)]
struct Snapshot {
    at_ns: u64,
    /// Its changes up to here (a sequence number into its log).
    upto: u64,
    counts: Arc<Counts>,
}

/// What each replica knows of its peers, and what is on its way.
pub struct Syncer {
    config: ReplicaSync,
    rng: SeededRng,
    /// Per replica: its own in-flight counts.
    own: Vec<Counts>,
    /// Per endpoint: every replica's in flight summed (requests).
    total: Vec<u64>,
    /// Per replica: what it believes its peers have in flight.
    view: Vec<Counts>,
    /// Per replica: its peers' requests it knows in flight (slot, tokens).
    known: Vec<HashMap<usize, (usize, u64)>>,
    /// `periodic`: per replica, its changes some peer has not had; `base` numbers the first.
    logs: Vec<VecDeque<SyncEvent>>,
    base: Vec<u64>,
    /// `periodic`: `cursor[q][p]`, the first change of `p` that `q` has not had.
    cursor: Vec<Vec<u64>>,
    /// `periodic`: per replica, its snapshots a reader may still take (newest last).
    published: Vec<VecDeque<Snapshot>>,
    /// `periodic`: `held[q][p]`, the snapshot of `p` that `q` last read.
    held: Vec<Vec<Held>>,
    /// `delta`: per replica, its changes since its last send.
    batch: Vec<Vec<SyncEvent>>,
    /// Scheduled publications: (time, replica).
    ticks: BinaryHeap<Reverse<(u64, usize)>>,
    /// Deliveries on their way: (time, order, receiver, change).
    queue: BinaryHeap<Reverse<(u64, u64, usize, SyncEvent)>>,
    order: u64,
    stats: SyncStats,
}

impl Syncer {
    /// Sharing by `config` among `replicas` over `slots` endpoints, from `origin_ns`; the
    /// replicas publish at evenly staggered phases of the interval.
    pub fn new(
        config: ReplicaSync,
        replicas: usize,
        slots: usize,
        seed: u64,
        origin_ns: u64,
    ) -> Syncer {
        let mut ticks = BinaryHeap::new();
        if config.strategy.is_periodic() && config.interval_ns > 0 {
            for r in 0..replicas {
                let phase = u128::from(config.interval_ns) * r as u128 / replicas as u128;
                ticks.push(Reverse((origin_ns + phase as u64, r)));
            }
        }
        Syncer {
            config,
            // Its own stream: losses must not echo the balancer's or the arrivals' draws.
            rng: SeededRng::new(seed ^ 0x5359_4e43_4c4f_5353),
            own: vec![vec![(0, 0); slots]; replicas],
            total: vec![0; slots],
            view: vec![vec![(0, 0); slots]; replicas],
            known: vec![HashMap::new(); replicas],
            logs: vec![VecDeque::new(); replicas],
            base: vec![0; replicas],
            cursor: vec![vec![0; replicas]; replicas],
            published: (0..replicas).map(|_| VecDeque::new()).collect(),
            held: vec![vec![None; replicas]; replicas],
            batch: vec![Vec::new(); replicas],
            ticks,
            queue: BinaryHeap::new(),
            order: 0,
            stats: SyncStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ReplicaSync {
        &self.config
    }

    /// What the sharing did so far.
    pub fn stats(&self) -> SyncStats {
        self.stats
    }

    /// Room for endpoint slots up to `slots` (a scaled fleet's new ones).
    pub fn grow(&mut self, slots: usize) {
        for counts in self.own.iter_mut().chain(self.view.iter_mut()) {
            if counts.len() < slots {
                counts.resize(slots, (0, 0));
            }
        }
        if self.total.len() < slots {
            self.total.resize(slots, 0);
        }
    }

    /// What replica `r` believes its peers have in flight at `slot`: (prompt tokens,
    /// requests).
    pub fn peer_load(&self, r: usize, slot: usize) -> (u64, u64) {
        self.view[r].get(slot).copied().unwrap_or((0, 0))
    }

    /// Replica `r` is about to decide: counts how wrong its picture of its peers is.
    pub fn deciding(&mut self, r: usize) {
        self.stats.decisions += 1;
        let mut unseen = 0;
        for (slot, &total) in self.total.iter().enumerate() {
            let truth = total - self.own[r][slot].1;
            unseen += truth.abs_diff(self.view[r][slot].1);
        }
        self.stats.unseen_sum += unseen;
    }

    /// `event` happened at its origin; what must reach the peers is sent.
    pub fn record(&mut self, event: SyncEvent) {
        let own = &mut self.own[event.origin][event.slot];
        match event.change {
            Change::Routed => {
                own.0 += event.tokens;
                own.1 += 1;
                self.total[event.slot] += 1;
            }
            Change::Finished => {
                own.0 -= event.tokens;
                own.1 -= 1;
                self.total[event.slot] -= 1;
            }
            Change::FirstToken => {}
        }
        let peers = self.own.len();
        match self.config.strategy {
            SyncStrategy::None => {}
            SyncStrategy::Periodic => self.logs[event.origin].push_back(event),
            SyncStrategy::Delta => self.batch[event.origin].push(event),
            SyncStrategy::Broadcast | SyncStrategy::Shared => {
                for q in (0..peers).filter(|q| *q != event.origin) {
                    self.stats.messages += 1;
                    if self.lost() {
                        self.stats.lost += 1;
                    } else {
                        self.send(event.at_ns + self.config.delay_ns, q, event);
                    }
                }
            }
        }
    }

    /// Everything due up to and including `now`, in time order: publications, reads and
    /// arrivals. The changes a matcher is to learn are appended to `out`.
    pub fn advance(&mut self, now: u64, out: &mut Vec<Delivery>) {
        loop {
            let tick = self.ticks.peek().map(|Reverse((t, _))| *t);
            let arrival = self.queue.peek().map(|Reverse((t, ..))| *t);
            match (tick, arrival) {
                (Some(t), a) if t <= now && a.is_none_or(|a| t < a) => {
                    let Some(Reverse((t, r))) = self.ticks.pop() else {
                        unreachable!("peeked")
                    };
                    self.tick(t, r, out);
                    self.ticks.push(Reverse((t + self.config.interval_ns, r)));
                }
                (_, Some(a)) if a <= now => {
                    let Some(Reverse((at, _, to, event))) = self.queue.pop() else {
                        unreachable!("peeked")
                    };
                    self.deliver(at, to, event, true, out);
                }
                _ => return,
            }
        }
    }

    fn lost(&mut self) -> bool {
        self.config.loss > 0.0 && self.rng.unit_f64() < self.config.loss
    }

    fn send(&mut self, at: u64, to: usize, event: SyncEvent) {
        self.order += 1;
        self.queue.push(Reverse((at, self.order, to, event)));
    }

    /// Replica `r`'s publication at `now`.
    fn tick(&mut self, now: u64, r: usize, out: &mut Vec<Delivery>) {
        let peers = self.own.len();
        match self.config.strategy {
            SyncStrategy::Delta => {
                let batch = std::mem::take(&mut self.batch[r]);
                for q in (0..peers).filter(|q| *q != r) {
                    self.stats.messages += 1;
                    if self.lost() {
                        self.stats.lost += 1;
                        continue;
                    }
                    for event in &batch {
                        self.send(now + self.config.delay_ns, q, *event);
                    }
                }
            }
            SyncStrategy::Periodic => {
                let upto = self.base[r] + self.logs[r].len() as u64;
                self.published[r].push_back(Snapshot {
                    at_ns: now,
                    upto,
                    counts: Arc::new(self.own[r].clone()),
                });
                self.read_peers(now, r, out);
            }
            _ => {}
        }
    }

    /// `periodic`: replica `q` reads its peers' latest snapshots at `now`.
    fn read_peers(&mut self, now: u64, q: usize, out: &mut Vec<Delivery>) {
        let visible = now.saturating_sub(self.config.delay_ns);
        for p in (0..self.own.len()).filter(|p| *p != q) {
            // Older snapshots than the newest visible one are of no use to anyone later.
            while self.published[p].len() >= 2 && self.published[p][1].at_ns <= visible {
                self.published[p].pop_front();
            }
            let Some(snapshot) = self.published[p].front().filter(|s| s.at_ns <= visible) else {
                continue;
            };
            let (at, upto, counts) = (snapshot.at_ns, snapshot.upto, snapshot.counts.clone());
            self.stats.messages += 1;
            if self.lost() {
                self.stats.lost += 1;
                continue;
            }
            if self.held[q][p].as_ref().is_some_and(|(t, _)| *t >= at) {
                continue;
            }
            self.held[q][p] = Some((at, counts));
            while self.cursor[q][p] < upto {
                let event = self.logs[p][(self.cursor[q][p] - self.base[p]) as usize];
                self.cursor[q][p] += 1;
                self.deliver(now, q, event, false, out);
            }
            self.trim(p);
        }
        // Expired snapshots count no more; the rest make the picture.
        let ttl = self.config.ttl_ns;
        let view = &mut self.view[q];
        view.iter_mut().for_each(|c| *c = (0, 0));
        for held in self.held[q].iter_mut() {
            if ttl > 0 && held.as_ref().is_some_and(|(t, _)| now - t > ttl) {
                *held = None;
            }
            if let Some((_, counts)) = held {
                for (v, c) in view.iter_mut().zip(counts.iter()) {
                    v.0 += c.0;
                    v.1 += c.1;
                }
            }
        }
    }

    /// Drops the changes of `p` every peer has had.
    fn trim(&mut self, p: usize) {
        let low = (0..self.own.len())
            .filter(|q| *q != p)
            .map(|q| self.cursor[q][p])
            .min()
            .unwrap_or(self.base[p]);
        while self.base[p] < low {
            self.logs[p].pop_front();
            self.base[p] += 1;
        }
    }

    /// Replica `to` learns `event` at `now`; `counts` when the change itself moves its
    /// picture (not with snapshots, which carry the counts).
    fn deliver(
        &mut self,
        now: u64,
        to: usize,
        event: SyncEvent,
        counts: bool,
        out: &mut Vec<Delivery>,
    ) {
        let known = &mut self.known[to];
        let news = match event.change {
            Change::Routed => {
                known.insert(event.request, (event.slot, event.tokens));
                if counts {
                    let v = &mut self.view[to][event.slot];
                    v.0 += event.tokens;
                    v.1 += 1;
                }
                true
            }
            Change::FirstToken => known.contains_key(&event.request),
            Change::Finished => match known.remove(&event.request) {
                Some((slot, tokens)) => {
                    if counts {
                        let v = &mut self.view[to][slot];
                        v.0 = v.0.saturating_sub(tokens);
                        v.1 = v.1.saturating_sub(1);
                    }
                    true
                }
                None => false,
            },
        };
        if !news {
            return;
        }
        let lag = now - event.at_ns;
        self.stats.delivered += 1;
        self.stats.lag_sum_ns += u128::from(lag);
        self.stats.lag_max_ns = self.stats.lag_max_ns.max(lag);
        if self.config.scope == SyncScope::Decisions {
            out.push(Delivery { to, event });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn routed(at_ms: u64, origin: usize, request: usize, slot: usize) -> SyncEvent {
        SyncEvent {
            at_ns: at_ms * MS,
            origin,
            change: Change::Routed,
            request,
            slot,
            tokens: 100,
        }
    }

    fn finished(at_ms: u64, origin: usize, request: usize, slot: usize) -> SyncEvent {
        SyncEvent {
            change: Change::Finished,
            ..routed(at_ms, origin, request, slot)
        }
    }

    fn syncer(strategy: SyncStrategy, interval_ms: u64, delay_ms: u64, loss: f64) -> Syncer {
        let config = ReplicaSync {
            strategy,
            scope: SyncScope::Decisions,
            interval_ns: interval_ms * MS,
            delay_ns: delay_ms * MS,
            loss,
            ttl_ns: 0,
        };
        Syncer::new(config, 2, 2, 7, 0)
    }

    /// Advances to `ms`, returning what arrived as (receiver, request, change).
    fn at(s: &mut Syncer, ms: u64) -> Vec<(usize, usize, Change)> {
        let mut out = Vec::new();
        s.advance(ms * MS, &mut out);
        out.iter()
            .map(|d| (d.to, d.event.request, d.event.change))
            .collect()
    }

    #[test]
    fn a_broadcast_arrives_after_the_delay_and_a_finish_takes_it_back() {
        let mut s = syncer(SyncStrategy::Broadcast, 0, 30, 0.0);
        s.record(routed(10, 0, 1, 1));
        assert_eq!(at(&mut s, 39), []);
        assert_eq!(s.peer_load(1, 1), (0, 0));
        assert_eq!(at(&mut s, 40), [(1, 1, Change::Routed)]);
        assert_eq!(s.peer_load(1, 1), (100, 1));
        assert_eq!(
            s.peer_load(0, 1),
            (0, 0),
            "its own picks are not its peers'"
        );
        s.record(finished(50, 0, 1, 1));
        assert_eq!(at(&mut s, 80), [(1, 1, Change::Finished)]);
        assert_eq!(s.peer_load(1, 1), (0, 0));
        let stats = s.stats();
        assert_eq!((stats.messages, stats.lost, stats.delivered), (2, 0, 2));
        assert_eq!(stats.mean_lag_ms(), 30.0);
    }

    #[test]
    fn periodic_snapshots_are_read_at_the_readers_phase_once_the_delay_has_passed() {
        // Interval 100 ms over two replicas: replica 0 publishes at 0, 100, 200 …, replica 1
        // at 50, 150, 250 …; a read sees snapshots at least 20 ms old.
        let mut s = syncer(SyncStrategy::Periodic, 100, 20, 0.0);
        assert_eq!(at(&mut s, 0), []);
        s.record(routed(10, 0, 1, 0));
        // Replica 0's change is in its snapshot at 100; replica 1 reads it at 150.
        assert_eq!(at(&mut s, 149), []);
        assert_eq!(s.peer_load(1, 0), (0, 0));
        assert_eq!(at(&mut s, 150), [(1, 1, Change::Routed)]);
        assert_eq!(s.peer_load(1, 0), (100, 1));
        // Staleness: from 10 ms to 150 ms.
        assert_eq!(s.stats().mean_lag_ms(), 140.0);
        // A change of replica 1 at 160 is published at 250; replica 0 reads at 300.
        s.record(routed(160, 1, 2, 1));
        assert_eq!(at(&mut s, 299), []);
        assert_eq!(at(&mut s, 300), [(0, 2, Change::Routed)]);
        assert_eq!(s.peer_load(0, 1), (100, 1));
    }

    #[test]
    fn a_lost_delta_is_lost_for_good_and_a_lost_snapshot_is_repaired() {
        // Under the same loss, deltas miss changes for good; snapshots deliver every change
        // in the end, and the last good read leaves the picture exact.
        let run = |strategy| {
            let mut s = syncer(strategy, 100, 0, 0.5);
            for i in 0..40 {
                at(&mut s, i * 100 + 10);
                s.record(routed(i * 100 + 10, 0, i as usize, 0));
                at(&mut s, i * 100 + 160);
                s.record(finished(i * 100 + 160, 0, i as usize, 0));
            }
            at(&mut s, 10_000);
            (s.stats(), s.peer_load(1, 0))
        };
        let (delta, _) = run(SyncStrategy::Delta);
        let (full, left_full) = run(SyncStrategy::Periodic);
        assert!(delta.lost > 0 && full.lost > 0, "{delta:?} {full:?}");
        assert!(delta.delivered < 80, "{delta:?}");
        assert_eq!(full.delivered, 80, "{full:?}");
        assert_eq!(left_full, (0, 0));
    }

    #[test]
    fn shared_is_seen_by_the_next_decision_and_unseen_counts_what_was_missed() {
        let mut s = syncer(SyncStrategy::Shared, 0, 0, 0.0);
        s.record(routed(5, 1, 3, 0));
        assert_eq!(at(&mut s, 5), [(0, 3, Change::Routed)]);
        s.deciding(0);
        assert_eq!(s.stats().mean_unseen(), 0.0);
        let mut alone = syncer(SyncStrategy::None, 0, 0, 0.0);
        alone.record(routed(5, 1, 3, 0));
        alone.record(routed(6, 1, 4, 1));
        assert_eq!(at(&mut alone, 100), []);
        alone.deciding(0);
        alone.deciding(1);
        // Replica 0 missed its peer's two; replica 1 missed nothing.
        assert_eq!(alone.stats().unseen_sum, 2);
    }
}
