//! The subscriber threads: one per engine, on its PUB socket, fetching gaps from its
//! replay socket (see the parent module).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{KvIndex, KvSubscription, MAX_MESSAGE_BYTES, MAX_QUEUED_MESSAGES};
use crate::LiveError;
use crate::kv_events::decode_batch;

/// How long a replay may take to answer.
const REPLAY_TIMEOUT_MS: i32 = 1000;
/// How long one gap's fetch from a replay socket may take in all, however many answers
/// keep coming; then the follower goes back to live batches.
const FETCH_DEADLINE: Duration = Duration::from_secs(5);
/// The most bytes of batches one gap's fetch keeps; a gap needing more starts the engine's
/// index over instead.
const MAX_FETCH_BYTES: usize = 64 << 20;
/// The longest gap (in batches) asked of a replay socket; a longer one starts over.
const MAX_FETCH_BATCHES: u64 = 65_536;
/// At most one message this often about one engine's events (the rest are counted).
const MESSAGE_EVERY: Duration = Duration::from_secs(10);

/// Connects to every subscription and starts its thread.
pub(super) fn subscribe(
    index: &Arc<KvIndex>,
    subscriptions: &[KvSubscription],
) -> Result<(), LiveError> {
    let context = zmq::Context::new();
    for (slot, subscription) in subscriptions.iter().enumerate() {
        let error = |e: zmq::Error| {
            LiveError::Settings(format!(
                "--kv-events {}={}: {e}",
                subscription.endpoint, subscription.url
            ))
        };
        let sub = Subscriber::open(&context, &subscription.url, slot).map_err(error)?;
        let replay = match &subscription.replay {
            Some(url) => {
                let dealer = context.socket(zmq::DEALER).map_err(error)?;
                dealer.set_maxmsgsize(MAX_MESSAGE_BYTES).map_err(error)?;
                dealer.set_rcvhwm(MAX_QUEUED_MESSAGES).map_err(error)?;
                dealer.set_rcvtimeo(REPLAY_TIMEOUT_MS).map_err(error)?;
                dealer.set_linger(0).map_err(error)?;
                dealer.connect(url).map_err(|e| {
                    LiveError::Settings(format!(
                        "--kv-events-replay {}={url}: {e}",
                        subscription.endpoint
                    ))
                })?;
                Some(dealer)
            }
            None => None,
        };
        let index = index.clone();
        std::thread::Builder::new()
            .name(format!("kv-events {}", subscription.endpoint))
            .spawn(move || index.follow(slot, sub, replay.as_ref()))
            .map_err(|e| LiveError::Settings(format!("--kv-events: cannot start: {e}")))?;
    }
    Ok(())
}

impl KvIndex {
    /// The subscriber of slot `slot`: applies each batch in order, recovering gaps.
    fn follow(&self, slot: usize, mut sub: Subscriber, replay: Option<&zmq::Socket>) {
        let name = &self.slots[slot].endpoint;
        let mut say = Throttled::default();
        loop {
            let frames = match sub.recv() {
                Received::Frames(frames) => frames,
                Received::Nothing => continue,
                Received::Reopened => {
                    self.lock(slot).1.reconnects += 1;
                    continue;
                }
            };
            let Some((seq, payload)) = sequenced(&frames[1..]) else {
                continue;
            };
            let last = self.lock(slot).0.last_seq;
            let mut missed = Vec::new();
            let gap = last.is_some_and(|last| seq > last + 1);
            let recovered = match last {
                Some(last) if seq > last + 1 => {
                    self.lock(slot).1.gaps += 1;
                    let wanted = last + 1..seq;
                    missed = replay.map_or_else(Vec::new, |r| fetch(r, wanted.clone()));
                    let complete = missed.len() as u64 == wanted.end - wanted.start;
                    if !complete {
                        say.line(|quiet| {
                            eprintln!(
                                "routerlab serve: KV events of {name}: batches {}..{} missed and not all replayed; its index starts over{quiet}",
                                wanted.start, wanted.end
                            );
                        });
                    }
                    complete
                }
                Some(last) if seq <= last => false,
                // Joining late: what came before, if the engine still keeps it all.
                None if seq > 0 => {
                    missed = replay.map_or_else(Vec::new, |r| fetch(r, 0..seq));
                    if missed.len() as u64 != seq {
                        missed.clear();
                    }
                    true
                }
                _ => true,
            };
            let mut guard = self.lock(slot);
            let (held, counts) = &mut *guard;
            if !recovered {
                held.blocks.clear();
                counts.lost += 1;
            } else if gap {
                counts.resynced += 1;
            }
            for (_, payload) in missed {
                match decode_batch(&payload) {
                    Ok(changes) => held.apply(changes),
                    Err(_) => counts.undecodable += 1,
                }
            }
            match decode_batch(payload) {
                Ok(changes) => held.apply(changes),
                Err(e) => {
                    if counts.undecodable == 0 {
                        eprintln!("routerlab serve: KV events of {name}: batch {seq}: {e}");
                    }
                    counts.undecodable += 1;
                }
            }
            counts.batches += 1;
            held.last_seq = Some(seq);
        }
    }
}

/// How long a receive waits before the subscriber looks at its connection's events.
const RECEIVE_WAIT_MS: i32 = 500;

/// One engine's PUB connection. ZeroMQ gives up on a connection a peer broke the protocol
/// on (a message past [`MAX_MESSAGE_BYTES`] is such a break) and does not make it again,
/// so the subscriber watches its socket's events and, when the connection is gone, opens
/// a fresh socket; the batches missed show as a gap.
struct Subscriber {
    context: zmq::Context,
    url: String,
    slot: usize,
    /// Sockets made so far: each one's monitor has a name of its own.
    made: u64,
    sub: zmq::Socket,
    events: zmq::Socket,
}

/// What one receive gave.
enum Received {
    Frames(Vec<Vec<u8>>),
    /// Nothing within [`RECEIVE_WAIT_MS`].
    Nothing,
    /// The connection was gone, and a fresh one is made.
    Reopened,
}

impl Subscriber {
    fn open(context: &zmq::Context, url: &str, slot: usize) -> Result<Subscriber, zmq::Error> {
        let (sub, events) = Subscriber::socket(context, url, slot, 0)?;
        Ok(Subscriber {
            context: context.clone(),
            url: url.to_owned(),
            slot,
            made: 1,
            sub,
            events,
        })
    }

    /// A SUB socket on `url` with the bounds, and the PAIR socket its events come to.
    fn socket(
        context: &zmq::Context,
        url: &str,
        slot: usize,
        made: u64,
    ) -> Result<(zmq::Socket, zmq::Socket), zmq::Error> {
        let sub = context.socket(zmq::SUB)?;
        sub.set_maxmsgsize(MAX_MESSAGE_BYTES)?;
        sub.set_rcvhwm(MAX_QUEUED_MESSAGES)?;
        sub.set_rcvtimeo(RECEIVE_WAIT_MS)?;
        sub.set_linger(0)?;
        sub.set_subscribe(b"")?;
        let monitor = format!("inproc://routerlab-kv-events-{slot}-{made}");
        sub.monitor(&monitor, zmq::SocketEvent::DISCONNECTED as i32)?;
        let events = context.socket(zmq::PAIR)?;
        events.connect(&monitor)?;
        sub.connect(url)?;
        Ok((sub, events))
    }

    fn recv(&mut self) -> Received {
        if let Ok(frames) = self.sub.recv_multipart(0) {
            return Received::Frames(frames);
        }
        let mut gone = false;
        while let Ok(event) = self.events.recv_multipart(zmq::DONTWAIT) {
            let id = event.first().and_then(|f| f.get(..2));
            gone |= id.is_some_and(|id| {
                u16::from_le_bytes([id[0], id[1]]) == zmq::SocketEvent::DISCONNECTED.to_raw()
            });
        }
        if !gone {
            return Received::Nothing;
        }
        match Subscriber::socket(&self.context, &self.url, self.slot, self.made) {
            Ok((sub, events)) => {
                self.made += 1;
                self.sub = sub;
                self.events = events;
                Received::Reopened
            }
            // Not now (out of file descriptors?): the next wait tries again.
            Err(_) => Received::Nothing,
        }
    }
}

/// Messages about one engine's events, at most one per [`MESSAGE_EVERY`]; the first
/// after a quiet spell says how many were held back.
#[derive(Default)]
struct Throttled {
    last: Option<Instant>,
    held_back: u64,
}

impl Throttled {
    /// Says `print`'s line now (given what to add about held-back lines) or counts it.
    fn line(&mut self, print: impl FnOnce(&str)) {
        if self.last.is_some_and(|at| at.elapsed() < MESSAGE_EVERY) {
            self.held_back += 1;
            return;
        }
        let quiet = match self.held_back {
            0 => String::new(),
            n => format!(
                " ({n} more such lines held back in the last {} s)",
                MESSAGE_EVERY.as_secs()
            ),
        };
        print(&quiet);
        self.last = Some(Instant::now());
        self.held_back = 0;
    }
}

/// `[sequence, payload]` of a message, when the sequence is 8 bytes.
fn sequenced(frames: &[Vec<u8>]) -> Option<(u64, &[u8])> {
    let [seq, payload] = frames else { return None };
    let seq = <[u8; 8]>::try_from(seq.as_slice()).ok()?;
    Some((u64::from_be_bytes(seq), payload))
}

/// The batches `wanted` asked of a replay socket, in order; fewer when it no longer has
/// them all, stops answering, takes longer than [`FETCH_DEADLINE`] in all, or would need
/// more than [`MAX_FETCH_BYTES`] (or the gap is longer than [`MAX_FETCH_BATCHES`]): the
/// caller then starts the engine's index over and follows live batches again.
fn fetch(replay: &zmq::Socket, wanted: std::ops::Range<u64>) -> Vec<(u64, Vec<u8>)> {
    if wanted.end - wanted.start > MAX_FETCH_BATCHES {
        return Vec::new();
    }
    // Late answers to an earlier request that timed out are not this one's.
    while replay.recv_multipart(zmq::DONTWAIT).is_ok() {}
    let frames: [&[u8]; 2] = [b"", &wanted.start.to_be_bytes()];
    if replay.send_multipart(frames, 0).is_err() {
        return Vec::new();
    }
    let deadline = Instant::now() + FETCH_DEADLINE;
    let (mut got, mut bytes) = (Vec::new(), 0usize);
    while Instant::now() < deadline && (got.len() as u64) < wanted.end - wanted.start {
        let Ok(reply) = replay.recv_multipart(0) else {
            break;
        };
        let Some((seq, payload)) = sequenced(reply.get(1..).unwrap_or_default()) else {
            break;
        };
        if payload.is_empty() {
            break;
        }
        if wanted.contains(&seq) && got.last().is_none_or(|(at, _)| *at + 1 == seq) {
            bytes += payload.len();
            if bytes > MAX_FETCH_BYTES {
                return Vec::new();
            }
            got.push((seq, payload.to_vec()));
        }
    }
    // Only a run from the first wanted counts.
    if got.first().is_some_and(|(at, _)| *at != wanted.start) {
        got.clear();
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_events::{KvEventsSettings, Publisher};
    use routerlab_engine::KvEvent;

    /// A replay socket that answers without end (the first wanted batch, again and
    /// again): the fetch gives up at its deadline with what it has, where it waited forever.
    #[test]
    fn a_replay_socket_that_never_stops_answering_is_left_at_the_deadline() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let context = zmq::Context::new();
        let router = context.socket(zmq::ROUTER).unwrap();
        router.bind("tcp://127.0.0.1:0").unwrap();
        let url = router.get_last_endpoint().unwrap().unwrap();
        let dealer = context.socket(zmq::DEALER).unwrap();
        dealer.set_rcvtimeo(REPLAY_TIMEOUT_MS).unwrap();
        dealer.set_linger(0).unwrap();
        dealer.connect(&url).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let answering = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                router.set_rcvtimeo(5_000).unwrap();
                let Ok(request) = router.recv_multipart(0) else {
                    return;
                };
                let identity = request[0].clone();
                while !stop.load(Ordering::Relaxed) {
                    let frames: [&[u8]; 4] = [&identity, b"", &5u64.to_be_bytes(), b"batch"];
                    let _ = router.send_multipart(frames, zmq::DONTWAIT);
                    std::thread::sleep(Duration::from_micros(50));
                }
            })
        };
        let started = Instant::now();
        let got = fetch(&dealer, 5..10);
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        answering.join().unwrap();
        assert!(took >= FETCH_DEADLINE, "{took:?}");
        assert!(took < FETCH_DEADLINE + Duration::from_secs(3), "{took:?}");
        assert_eq!(got, vec![(5, b"batch".to_vec())]);
    }

    #[test]
    fn a_gap_too_long_to_fetch_is_not_asked_for() {
        let context = zmq::Context::new();
        let dealer = context.socket(zmq::DEALER).unwrap();
        // Connected to nothing: a fetch that asked would wait out the answer's timeout.
        dealer.set_rcvtimeo(60_000).unwrap();
        dealer.set_linger(0).unwrap();
        let started = Instant::now();
        assert!(fetch(&dealer, 0..MAX_FETCH_BATCHES + 1).is_empty());
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn messages_are_throttled_and_say_how_many_were_held_back() {
        let mut said = Vec::new();
        let mut throttled = Throttled::default();
        for _ in 0..1000 {
            throttled.line(|quiet| said.push(quiet.to_owned()));
        }
        assert_eq!(said, [String::new()]);
        throttled.last = Some(Instant::now() - MESSAGE_EVERY);
        throttled.line(|quiet| said.push(quiet.to_owned()));
        assert_eq!(said[1], " (999 more such lines held back in the last 10 s)");
    }

    /// A publisher flooding batches past the size bound: each ends its connection instead
    /// of being queued (a subscriber queued gigabytes of them), and the index still takes
    /// the well-formed batch sent after the flood.
    #[test]
    fn a_flood_of_oversized_batches_is_not_queued_and_the_next_batch_applies() {
        use crate::kv_events::encode_batch;
        let context = zmq::Context::new();
        let publisher = context.socket(zmq::PUB).unwrap();
        // The test's own side queues little, so that the flood is the subscriber's to bear.
        publisher.set_sndhwm(4).unwrap();
        publisher.bind("tcp://127.0.0.1:0").unwrap();
        let url = publisher.get_last_endpoint().unwrap().unwrap();
        let index = KvIndex::start(
            &[KvSubscription {
                endpoint: "e".into(),
                url,
                replay: None,
            }],
            None,
        )
        .unwrap();
        let seq = std::cell::Cell::new(0u64);
        let send = |payload: &[u8]| {
            seq.set(seq.get() + 1);
            let frames: [&[u8]; 3] = [b"", &seq.get().to_be_bytes(), payload];
            publisher.send_multipart(frames, 0).unwrap();
        };
        let huge = vec![0x90u8; MAX_MESSAGE_BYTES as usize + 1];
        for _ in 0..64 {
            send(&huge);
        }
        wait_for("a batch after the flood", || {
            send(&encode_batch(0.0, &[stored(9)], 4));
            std::thread::sleep(Duration::from_millis(20));
            index.holds(0, 9)
        });
        assert_eq!(
            index.counts(0).undecodable,
            0,
            "no oversized batch was read"
        );
    }

    fn wait_for(what: &str, ok: impl Fn() -> bool) {
        for _ in 0..400 {
            if ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    fn stored(hash: u64) -> KvEvent {
        KvEvent::Stored { hash, parent: None }
    }

    /// A publisher (with a replay socket or not) and an index following it, subscribed.
    fn followed(replay: bool) -> (Publisher, Arc<KvIndex>) {
        let publisher = Publisher::bind(
            &KvEventsSettings {
                endpoint: "tcp://127.0.0.1:0".into(),
                replay: replay.then(|| "tcp://127.0.0.1:0".into()),
            },
            4,
        )
        .unwrap();
        let index = KvIndex::start(
            &[KvSubscription {
                endpoint: "e".into(),
                url: publisher.endpoint().into(),
                replay: publisher.replay_endpoint().map(str::to_owned),
            }],
            None,
        )
        .unwrap();
        // A PUB drops what it sends before the subscriber is connected: send until seen.
        wait_for("the subscription", || {
            publisher.publish(vec![stored(1)]);
            std::thread::sleep(Duration::from_millis(20));
            index.holds(0, 1)
        });
        (publisher, index)
    }

    #[test]
    fn the_index_follows_stores_and_evictions_and_recovers_a_gap_by_replay() {
        let (publisher, index) = followed(true);
        publisher.publish(vec![stored(2), KvEvent::Removed { hash: 1 }]);
        wait_for("batch 2", || index.holds(0, 2) && !index.holds(0, 1));
        assert_eq!(index.counts(0).gaps, 0);
        // Batches the subscriber never sees: sent while it is not connected is what a
        // slow subscriber loses too. Here: a publish straight into the replay buffer.
        publisher.skip_live(vec![stored(3)]);
        publisher.skip_live(vec![KvEvent::Removed { hash: 2 }]);
        publisher.publish(vec![stored(4)]);
        wait_for("the gap's recovery", || index.holds(0, 4));
        assert!(index.holds(0, 3), "the replayed store applied");
        assert!(!index.holds(0, 2), "the replayed removal applied");
        let counts = index.counts(0);
        assert_eq!(
            (counts.gaps, counts.resynced, counts.lost),
            (1, 1, 0),
            "{counts:?}"
        );
    }

    #[test]
    fn a_gap_that_cannot_be_replayed_empties_the_index() {
        let (publisher, index) = followed(false);
        publisher.skip_live(vec![stored(2)]);
        publisher.publish(vec![stored(3)]);
        wait_for("batch 3", || index.holds(0, 3));
        assert!(!index.holds(0, 1) && !index.holds(0, 2));
        assert_eq!(index.counts(0).lost, 1);
    }
}
