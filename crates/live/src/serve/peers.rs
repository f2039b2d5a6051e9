//! Router replicas sharing their state live: `serve --replica-sync STRATEGY --peers
//! ADDR,...`, the strategies of the replay's [`routerlab_route::sync`] over HTTP between
//! `serve` processes.
//!
//! A change (a request routed, its first token, its finish) is posted to every peer's
//! `POST /routerlab/sync` as a JSON message: at once (`broadcast`; `shared` waits for the
//! peers' answers before the request goes on, so the next decision anywhere sees it), or in
//! batches every interval (`delta`: what changed since the last send, lost with a failed
//! send; `periodic`: the replica's in-flight counts per endpoint and every change a peer
//! has not yet had, so a failed send is repaired by the next). A peer adds the counts to
//! what its plugins see as in flight and, with scope `decisions`, tells its matcher
//! (`update`, `on_first_token`, `on_complete`) under a request id of the peer's own space.
//! Live, the network delays and loses: the replay's `sync_delay_ms` and `sync_loss` are not
//! serve's. A replica learns a peer from its first message; each one posts an empty
//! message to its `--peers` when it starts, so one address given either way is enough.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use routerlab_core::Phase;
use routerlab_policy_kit::LruMap;
use routerlab_route::{ReplicaSync, SyncScope, SyncStrategy};
use serde::{Deserialize, Serialize};

use super::Shared;
use super::plugins::Notice;
use super::routed::Routed;
use super::state::State;
use crate::http::{self, Body};

/// Peer requests a replica keeps in flight at once; the oldest past it is forgotten.
pub const MAX_PEER_REQUESTS: usize = 65_536;

/// The most changes one message carries.
pub const MAX_CHANGES: usize = 65_536;

/// The most peers a replica shares with; a message from one more is refused.
pub const MAX_PEERS: usize = 64;

/// Changes kept for one peer until they are sent (`delta`) or taken (`periodic`); past
/// it the oldest are dropped (a peer that stays away does not grow this replica's memory).
pub const MAX_WAITING: usize = 65_536;

/// The most bytes of changes one message carries (under a peer's 4 MiB body bound).
const MAX_MESSAGE_BYTES: usize = 3 << 20;

/// How the replica shares its state, and with whom.
#[derive(Debug, Clone)]
pub struct PeerSettings {
    /// The strategy, its scope and interval (delay and loss are the network's).
    pub sync: ReplicaSync,
    /// The other replicas, `host:port` each (more join by posting to this one).
    pub peers: Vec<String>,
}

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Kind {
    Routed,
    FirstToken,
    Finished,
}

/// What a peer needs of a routed request to tell its matcher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PeerRequest {
    pub(super) blocks: Vec<u64>,
    pub(super) block_size: u32,
    pub(super) prompt_len: u64,
    pub(super) output_tokens: Option<u64>,
    pub(super) session: u64,
    pub(super) parent: u64,
}

/// One change of a replica's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Change {
    pub(super) kind: Kind,
    /// The origin's number for the request.
    pub(super) seq: u64,
    /// The engine, by name.
    pub(super) endpoint: String,
    /// Its prompt tokens.
    pub(super) tokens: u64,
    /// With `routed`: the request.
    #[serde(default)]
    pub(super) request: Option<PeerRequest>,
}

/// A replica's in-flight requests at one engine (`periodic`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Count {
    pub(super) endpoint: String,
    pub(super) requests: u64,
    pub(super) tokens: u64,
}

/// What one replica posts to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Message {
    /// The sender's address.
    pub(super) origin: String,
    pub(super) changes: Vec<Change>,
    /// `periodic`: its in-flight counts, which replace the last ones it sent.
    #[serde(default)]
    pub(super) counts: Option<Vec<Count>>,
}

/// A peer's request as this replica keeps it.
#[derive(Default)]
pub(super) struct Known {
    pub(super) upstream: usize,
    pub(super) tokens: u64,
    pub(super) routed: Routed,
}

/// What this replica knows of its peers' state.
#[derive(Default)]
pub(super) struct PeerBooks {
    /// Peer requests in flight, by their id here.
    pub(super) known: LruMap<Known>,
    /// Per upstream: the peers' requests and prompt tokens in flight, from their changes.
    pub(super) inflight: Vec<(u64, u64)>,
    /// Per origin: its last counts (`periodic`), when received, per upstream.
    pub(super) snapshots: HashMap<String, (u64, Vec<(u64, u64)>)>,
    /// The origins heard from, numbered from 1 for their requests' ids here.
    pub(super) origins: Vec<String>,
}

impl PeerBooks {
    /// The id here of `origin`'s request `seq`: its own space per origin.
    pub(super) fn id(&mut self, origin: &str, seq: u64) -> u64 {
        let n = match self.origins.iter().position(|o| o == origin) {
            Some(i) => i + 1,
            None => {
                self.origins.push(origin.to_owned());
                self.origins.len()
            }
        };
        ((n as u64) << 40) | (seq & ((1 << 40) - 1))
    }

    /// The peers' requests and tokens in flight at upstream `u`.
    pub(super) fn at(&self, u: usize) -> (u64, u64) {
        let mut at = self.inflight.get(u).copied().unwrap_or((0, 0));
        for (_, counts) in self.snapshots.values() {
            let (r, t) = counts.get(u).copied().unwrap_or((0, 0));
            at = (at.0 + r, at.1 + t);
        }
        at
    }
}

/// The sending side: the peers, and the changes waiting for the next send.
pub(super) struct Outbox {
    settings: PeerSettings,
    /// This replica's address, as peers reach it.
    me: String,
    peers: Vec<String>,
    /// Per peer: changes not yet sent (`delta`) or not yet received (`periodic`), at most
    /// [`MAX_WAITING`].
    waiting: HashMap<String, VecDeque<Change>>,
}

impl Outbox {
    pub(super) fn new(settings: PeerSettings, me: String) -> Outbox {
        Outbox {
            peers: settings.peers.clone(),
            settings,
            me,
            waiting: HashMap::new(),
        }
    }

    pub(super) fn sync(&self) -> &ReplicaSync {
        &self.settings.sync
    }

    /// Takes `peer` among the peers; `false` when it is new and there are enough already.
    fn join(&mut self, peer: &str) -> bool {
        if peer == self.me || self.peers.iter().any(|p| p == peer) {
            return true;
        }
        if self.peers.len() >= MAX_PEERS {
            return false;
        }
        self.peers.push(peer.to_owned());
        true
    }
}

/// The change `kind` of `routed` at the engine `endpoint`, as a peer gets it.
pub(super) fn change(kind: Kind, routed: &Routed, endpoint: &str, block_size: u32) -> Change {
    Change {
        kind,
        seq: routed.seq,
        endpoint: endpoint.to_owned(),
        tokens: routed.tokens(),
        request: (kind == Kind::Routed).then(|| PeerRequest {
            blocks: routed.hashes.clone(),
            block_size,
            prompt_len: routed.prompt.len() as u64,
            output_tokens: routed.output_tokens,
            session: routed.session,
            parent: routed.parent,
        }),
    }
}

/// Shares `change`: posted now (`broadcast`, `shared`; with `shared` the returned future
/// ends when every peer answered), or kept for the next send.
pub(super) async fn share(shared: &Arc<Shared>, change: Change) {
    let Some(outbox) = &shared.peers else {
        return;
    };
    let (strategy, peers, me) = {
        let mut outbox = lock(outbox);
        let strategy = outbox.sync().strategy;
        if strategy.is_periodic() {
            let peers = outbox.peers.clone();
            for peer in peers {
                let waiting = outbox.waiting.entry(peer).or_default();
                if waiting.len() >= MAX_WAITING {
                    waiting.pop_front();
                }
                waiting.push_back(change.clone());
            }
            return;
        }
        (strategy, outbox.peers.clone(), outbox.me.clone())
    };
    let message = Message {
        origin: me,
        changes: vec![change],
        counts: None,
    };
    let sends = peers
        .into_iter()
        .map(|peer| post(shared.clone(), peer, message.clone()));
    if strategy == SyncStrategy::Shared {
        futures_join(sends).await;
    } else {
        for send in sends {
            tokio::spawn(send);
        }
    }
}

/// Runs every future, concurrently, to its end.
async fn futures_join(
    sends: impl Iterator<Item = impl std::future::Future<Output = bool> + Send + 'static>,
) {
    let handles: Vec<_> = sends.map(tokio::spawn).collect();
    for handle in handles {
        let _ = handle.await;
    }
}

/// The peers `outbox` sends to.
pub(super) fn count(outbox: &std::sync::Mutex<Outbox>) -> u64 {
    lock(outbox).peers.len() as u64
}

fn lock(outbox: &std::sync::Mutex<Outbox>) -> std::sync::MutexGuard<'_, Outbox> {
    outbox
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Posts `message` to `peer`; whether it took it.
async fn post(shared: Arc<Shared>, peer: String, message: Message) -> bool {
    let Ok(body) = serde_json::to_vec(&message) else {
        return false;
    };
    let sent = shared.post(&peer, SYNC_PATH, None, Bytes::from(body)).await;
    matches!(sent, Ok(Ok(response)) if response.status().is_success())
}

/// Where peers post.
pub(super) const SYNC_PATH: &str = "/routerlab/sync";

/// Announces this replica to its peers, then (`delta`, `periodic`) sends what waits every
/// interval; a `periodic` message carries the replica's in-flight counts.
pub(super) async fn run(shared: Arc<Shared>) {
    let Some(outbox) = &shared.peers else {
        return;
    };
    let (me, peers, sync) = {
        let outbox = lock(outbox);
        (outbox.me.clone(), outbox.peers.clone(), *outbox.sync())
    };
    for peer in peers {
        let hello = Message {
            origin: me.clone(),
            changes: Vec::new(),
            counts: None,
        };
        tokio::spawn(post(shared.clone(), peer, hello));
    }
    if !sync.strategy.is_periodic() {
        return;
    }
    let mut ticks = tokio::time::interval(Duration::from_nanos(sync.interval_ns.max(1_000_000)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let counts = match sync.strategy {
            SyncStrategy::Periodic => Some(shared.lock().await.own_counts()),
            _ => None,
        };
        if sync.ttl_ns > 0 {
            shared
                .lock()
                .await
                .expire_peer_counts(sync.ttl_ns, shared.now_ns());
        }
        let batches: Vec<(String, Vec<Change>)> = {
            let mut outbox = lock(outbox);
            let peers = outbox.peers.clone();
            peers
                .into_iter()
                .map(|peer| {
                    let waiting = outbox.waiting.entry(peer.clone()).or_default();
                    let batch = first_batch(waiting);
                    // `delta`: sent once, whatever becomes of it. `periodic`: kept until
                    // the peer has taken it.
                    if sync.strategy == SyncStrategy::Delta {
                        waiting.drain(..batch.len());
                    }
                    (peer, batch)
                })
                .collect()
        };
        for (peer, changes) in batches {
            let sent = changes.len();
            let message = Message {
                origin: me.clone(),
                changes,
                counts: counts.clone(),
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let took = post(shared.clone(), peer.clone(), message).await;
                if took && sync.strategy == SyncStrategy::Periodic {
                    let Some(outbox) = &shared.peers else { return };
                    let mut outbox = lock(outbox);
                    if let Some(waiting) = outbox.waiting.get_mut(&peer) {
                        waiting.drain(..sent.min(waiting.len()));
                    }
                }
            });
        }
    }
}

/// The changes at the front of `waiting` one message may carry: at most [`MAX_CHANGES`]
/// and [`MAX_MESSAGE_BYTES`] of them, and at least one.
fn first_batch(waiting: &VecDeque<Change>) -> Vec<Change> {
    let mut bytes = 0;
    let mut batch = Vec::new();
    for change in waiting.iter().take(MAX_CHANGES) {
        bytes += serde_json::to_vec(change).map_or(0, |b| b.len() + 1);
        if bytes > MAX_MESSAGE_BYTES && !batch.is_empty() {
            break;
        }
        batch.push(change.clone());
    }
    batch
}

/// `POST /routerlab/sync`: a peer's changes, applied to this replica's books and matcher.
pub(super) async fn receive(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let Some(outbox) = &shared.peers else {
        return http::error(
            StatusCode::NOT_FOUND,
            "this router shares no state (start it with --replica-sync)",
        );
    };
    let body = match http::read_body(request).await {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let message: Message = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            let e = e.to_string();
            return http::error(
                StatusCode::BAD_REQUEST,
                &format!("a sync message: {}", e.lines().next().unwrap_or("")),
            );
        }
    };
    if message.changes.len() > MAX_CHANGES {
        return http::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("a sync message carries at most {MAX_CHANGES} changes"),
        );
    }
    if message.origin.parse::<std::net::SocketAddr>().is_err() {
        return http::error(
            StatusCode::BAD_REQUEST,
            "a sync message's `origin` is the sender's host:port address",
        );
    }
    let scope = {
        let mut outbox = lock(outbox);
        if !outbox.join(&message.origin) {
            return http::error(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("this replica shares with {MAX_PEERS} peers already"),
            );
        }
        outbox.sync().scope
    };
    let now = shared.now_ns();
    let mut state = shared.lock().await;
    let periodic = message.counts.is_some();
    if let Some(counts) = &message.counts {
        state.peer_counts(&message.origin, counts, now);
    }
    for change in &message.changes {
        state.peer_change(
            &message.origin,
            change,
            scope == SyncScope::Decisions,
            !periodic,
            now,
        );
    }
    http::json(
        StatusCode::OK,
        &serde_json::json!({"applied": message.changes.len()}),
    )
}

/// What a replica does with its peers' messages, and what it sends them of its own.
impl State {
    /// This replica's own requests and prompt tokens in flight, per engine (what a
    /// `periodic` sync sends).
    pub(super) fn own_counts(&self) -> Vec<Count> {
        (self.upstreams.iter())
            .map(|u| Count {
                endpoint: u.name.clone(),
                requests: u.inflight,
                tokens: u.inflight_tokens,
            })
            .collect()
    }

    /// `origin`'s in-flight counts, received at `now_ns`: they replace its last ones.
    pub(super) fn peer_counts(&mut self, origin: &str, counts: &[Count], now_ns: u64) {
        let mut per = vec![(0, 0); self.upstreams.len()];
        for count in counts {
            if let Some(u) = self.upstreams.iter().position(|u| u.name == count.endpoint) {
                per[u] = (count.requests, count.tokens);
            }
        }
        self.peers
            .snapshots
            .insert(origin.to_owned(), (now_ns, per));
    }

    /// Drops the peers' counts older than `ttl_ns` at `now_ns`.
    pub(super) fn expire_peer_counts(&mut self, ttl_ns: u64, now_ns: u64) {
        (self.peers.snapshots).retain(|_, (at, _)| now_ns.saturating_sub(*at) <= ttl_ns);
    }

    /// A peer's change: its in-flight counts move (with `counts`), and its matcher learns it
    /// (with `decisions`). A first token or finish of a request never heard of is ignored.
    pub(super) fn peer_change(
        &mut self,
        origin: &str,
        change: &Change,
        decisions: bool,
        counts: bool,
        now_ns: u64,
    ) {
        let id = self.peers.id(origin, change.seq);
        let Some(u) = self
            .upstreams
            .iter()
            .position(|u| u.name == change.endpoint)
        else {
            return;
        };
        if self.peers.inflight.len() < self.upstreams.len() {
            self.peers.inflight.resize(self.upstreams.len(), (0, 0));
        }
        let notice = match change.kind {
            Kind::Routed => {
                let Some(request) = &change.request else {
                    return;
                };
                let mut ids = Vec::new();
                self.interner.intern_all(&request.blocks, &mut ids);
                let routed = Routed {
                    seq: id,
                    arrival_ns: now_ns,
                    prompt: Vec::new(),
                    tokens: None,
                    hashes: request.blocks.clone(),
                    ids,
                    output_tokens: request.output_tokens,
                    // A peer's sessions and requests are numbered in its own space here.
                    session: match request.session {
                        0 => 0,
                        s => self.peers.id(origin, s),
                    },
                    parent: match request.parent {
                        0 => 0,
                        p => self.peers.id(origin, p),
                    },
                    phase: Phase::Whole,
                    adapter: None,
                    ends_session: false,
                };
                if self.peers.known.len() >= MAX_PEER_REQUESTS
                    && let Some((_, old)) = self.peers.known.pop_oldest()
                    && counts
                {
                    let at = &mut self.peers.inflight[old.upstream];
                    *at = (at.0.saturating_sub(1), at.1.saturating_sub(old.tokens));
                }
                if counts {
                    let at = &mut self.peers.inflight[u];
                    *at = (at.0 + 1, at.1 + change.tokens);
                }
                self.peers.known.remove(id);
                self.peers.known.touch_or_insert_with(id, || Known {
                    upstream: u,
                    tokens: change.tokens,
                    routed,
                });
                Notice::Learn
            }
            Kind::FirstToken if self.peers.known.contains(id) => Notice::FirstToken,
            Kind::Finished if self.peers.known.contains(id) => Notice::Complete,
            _ => return,
        };
        let (Some(known), Some(index)) = (self.peers.known.get(id), self.upstreams[u].index) else {
            return;
        };
        let routed = known.routed.clone();
        if matches!(notice, Notice::Complete) {
            let known = self.peers.known.remove(id).expect("known above");
            if counts {
                let at = &mut self.peers.inflight[known.upstream];
                *at = (at.0.saturating_sub(1), at.1.saturating_sub(known.tokens));
            }
        }
        if decisions {
            let data = routed.data(self.block_size, now_ns);
            if self
                .plugins_for(Phase::Whole)
                .notify(notice, &data, index)
                .is_err()
            {
                self.plugin_errors += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_origin_numbers_its_requests_in_a_space_of_its_own() {
        let mut books = PeerBooks::default();
        let (a1, b1, a2) = (books.id("a:1", 1), books.id("b:2", 1), books.id("a:1", 2));
        assert_ne!(a1, b1);
        assert_eq!(a2, a1 + 1);
        assert!(a1 >= 1 << 40, "never a local request's number");
    }

    fn routed(blocks: usize) -> Change {
        Change {
            kind: Kind::Routed,
            seq: 1,
            endpoint: "e:1".into(),
            tokens: 64,
            request: Some(PeerRequest {
                blocks: vec![u64::MAX; blocks],
                block_size: 128,
                prompt_len: 128 * blocks as u64,
                output_tokens: None,
                session: 0,
                parent: 0,
            }),
        }
    }

    #[test]
    fn a_message_carries_what_fits_a_peers_bound_and_at_least_one_change() {
        let small: VecDeque<Change> = (0..3).map(|_| routed(4)).collect();
        assert_eq!(first_batch(&small).len(), 3);
        // 200,000 hashes of 20 digits: 4 MB of JSON, alone past the bound.
        let big: VecDeque<Change> = [routed(200_000), routed(4)].into();
        assert_eq!(first_batch(&big).len(), 1);
        let behind: VecDeque<Change> = [routed(4), routed(200_000)].into();
        assert_eq!(
            first_batch(&behind).len(),
            1,
            "the big one waits for the next message"
        );
    }

    #[test]
    fn a_message_reads_back_as_written_and_unknown_fields_are_refused() {
        let message = Message {
            origin: "127.0.0.1:9".into(),
            changes: vec![Change {
                kind: Kind::Routed,
                seq: 3,
                endpoint: "e:1".into(),
                tokens: 64,
                request: Some(PeerRequest {
                    blocks: vec![1, 2],
                    block_size: 128,
                    prompt_len: 256,
                    output_tokens: Some(4),
                    session: 0,
                    parent: 0,
                }),
            }],
            counts: None,
        };
        let text = serde_json::to_string(&message).unwrap();
        assert!(text.contains("\"kind\":\"routed\""), "{text}");
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), message);
        assert!(
            serde_json::from_str::<Message>(r#"{"origin":"a","changes":[],"extra":1}"#).is_err()
        );
    }
}
