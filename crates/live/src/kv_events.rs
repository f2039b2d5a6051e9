//! vLLM's KV cache events, as `routerlab engine --kv-events` publishes them: what the
//! engine model stored and evicted, on a ZeroMQ PUB socket, in the frames and the
//! MessagePack shapes vLLM's `ZmqEventPublisher` sends (`vllm/distributed/kv_events.py`),
//! and its replay socket for a subscriber that missed some.
//!
//! Each message is three frames: the topic (vLLM's default, empty), the batch's sequence
//! number (8 bytes, big-endian, from 0) and the batch, a `KVEventBatch`: the array
//! `[ts, events, data_parallel_rank]` (`ts` in seconds since the epoch, rank 0), each event
//! a map tagged by `type`: `BlockStored {block_hashes, parent_block_hash, token_ids,
//! block_size, lora_id, medium, lora_name}` (the blocks one step computed of one prompt, in
//! chain order; the parent is the block before the first) and `BlockRemoved {block_hashes,
//! medium}` (evicted). Hashes are the engine model's block-chain hashes, `medium` is
//! `"GPU"`; `token_ids` is empty, as the simulated engine has no tokenizer.
//!
//! The replay socket (ROUTER) answers a request `[start]` (8 bytes, big-endian; sent from
//! a REQ socket, or a DEALER with an empty first frame) with each kept batch from `start`
//! on, `[seq, batch]`, then `[-1, ""]`; it keeps the last [`REPLAY_BATCHES`] (vLLM's
//! `buffer_steps`), at most [`REPLAY_BYTES`] of them. A request of any other shape is
//! ignored; one over 64 bytes closes the connection (libzmq's `ZMQ_MAXMSGSIZE`), so no
//! peer can make it allocate.

#[cfg(feature = "kv-events")]
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "kv-events")]
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::mpsc::{SyncSender, TrySendError};
#[cfg(feature = "kv-events")]
use std::time::Duration;

use routerlab_engine::KvEvent;
use serde::Serialize;

use crate::LiveError;

/// Batches the replay socket keeps (vLLM's `buffer_steps` default).
pub const REPLAY_BATCHES: usize = 10_000;
/// Bytes of batches it keeps at most (the oldest go first past either bound).
pub const REPLAY_BYTES: usize = 64 << 20;
/// Batches waiting to go out at most; past that one is dropped (counted), so the engine
/// model never waits for the socket.
#[cfg(feature = "kv-events")]
const QUEUE_BATCHES: usize = 4096;
/// The largest message a replay client may send.
#[cfg(feature = "kv-events")]
const MAX_REQUEST_BYTES: i64 = 64;
/// The replay's end marker: sequence number -1.
#[cfg(feature = "kv-events")]
const END_SEQ: [u8; 8] = (-1i64).to_be_bytes();

/// Where an engine publishes its KV events.
#[derive(Debug, Clone, PartialEq)]
pub struct KvEventsSettings {
    /// The PUB socket's endpoint (`tcp://127.0.0.1:5557`; port 0 for any free port).
    pub endpoint: String,
    /// The replay socket's, if any.
    pub replay: Option<String>,
}

/// One batch on the wire: an array, as vLLM's `EventBatch` (`array_like`).
#[derive(Serialize)]
struct WireBatch<'a>(f64, &'a [WireEvent], i32);

/// One event on the wire: a map tagged by `type`, as vLLM's `KVCacheEvent` (`tag=True`).
#[derive(Serialize, Debug, PartialEq)]
#[serde(tag = "type")]
enum WireEvent {
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
        lora_id: Option<u32>,
        medium: Option<&'static str>,
        lora_name: Option<String>,
    },
    BlockRemoved {
        block_hashes: Vec<u64>,
        medium: Option<&'static str>,
    },
}

/// `events` as vLLM groups them: consecutive stores of one chain in one `BlockStored`,
/// consecutive removals in one `BlockRemoved`.
fn wire_events(events: &[KvEvent], block_size: u32) -> Vec<WireEvent> {
    let mut out: Vec<WireEvent> = Vec::new();
    for event in events {
        match (*event, out.last_mut()) {
            (
                KvEvent::Stored { hash, parent },
                Some(WireEvent::BlockStored { block_hashes, .. }),
            ) if parent.is_some() && block_hashes.last().copied() == parent => {
                block_hashes.push(hash)
            }
            (KvEvent::Removed { hash }, Some(WireEvent::BlockRemoved { block_hashes, .. })) => {
                block_hashes.push(hash)
            }
            (KvEvent::Stored { hash, parent }, _) => out.push(WireEvent::BlockStored {
                block_hashes: vec![hash],
                parent_block_hash: parent,
                token_ids: Vec::new(),
                block_size,
                lora_id: None,
                medium: Some("GPU"),
                lora_name: None,
            }),
            (KvEvent::Removed { hash }, _) => out.push(WireEvent::BlockRemoved {
                block_hashes: vec![hash],
                medium: Some("GPU"),
            }),
        }
    }
    out
}

/// The MessagePack of one batch of `events` at `ts` (seconds since the epoch).
pub fn encode_batch(ts: f64, events: &[KvEvent], block_size: u32) -> Vec<u8> {
    let events = wire_events(events, block_size);
    rmp_serde::to_vec_named(&WireBatch(ts, &events, 0)).expect("a batch always encodes")
}

/// What a subscriber takes from one event of a batch, on the GPU tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Blocks were stored.
    Stored {
        /// Their hashes, in chain order.
        hashes: Vec<u64>,
        /// Tokens a block.
        block_size: u32,
    },
    /// Blocks were evicted.
    Removed {
        /// Their hashes.
        hashes: Vec<u64>,
    },
    /// Everything was dropped (vLLM's prefix-cache reset).
    Cleared,
}

/// A block hash as vLLM sends it: an integer (the low 64 bits of its digest, by default),
/// or the digest's bytes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`), read here as the same
/// low 64 bits, so both give one key ([`crate::vllm_keys::event_key`]).
struct InHash(u64);

impl<'de> serde::Deserialize<'de> for InHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InHash, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = InHash;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a block hash (an integer or bytes)")
            }
            fn visit_u64<E>(self, v: u64) -> Result<InHash, E> {
                Ok(InHash(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<InHash, E> {
                Ok(InHash(v.cast_unsigned()))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<InHash, E> {
                Ok(InHash(crate::vllm_keys::event_key(v)))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(serde::Deserialize)]
struct InBatch(
    #[allow(dead_code)] f64,
    Vec<AnyEvent>,
    #[serde(default)]
    #[allow(dead_code)]
    Option<i64>,
);

/// An event in either of vLLM's layouts: a tagged array (`array_like`, up to vLLM 0.23) or
/// a map tagged by `type` (from 0.24).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum AnyEvent {
    Array(ArrayEvent),
    Map(InEvent),
}

impl AnyEvent {
    fn event(self) -> InEvent {
        match self {
            AnyEvent::Array(ArrayEvent(event)) | AnyEvent::Map(event) => event,
        }
    }
}

/// An event as a tagged array: its type's name, then its fields in declaration order, the
/// trailing defaults possibly left out. As each release declares them (its sdist's
/// `vllm/distributed/kv_events.py`): `BlockStored` is `[block_hashes, parent_block_hash,
/// token_ids, block_size, lora_id]` in 0.10, then `medium` (0.11), `lora_name` (0.14),
/// `extra_keys` (0.17), `group_idx` (0.20), `kv_cache_spec_kind` and
/// `kv_cache_spec_sliding_window` (0.22); `BlockRemoved` is `[block_hashes]`, then `medium`
/// (0.11) and `group_idx` (0.20). Fields past those read are skipped.
struct ArrayEvent(InEvent);

impl<'de> serde::Deserialize<'de> for ArrayEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ArrayEvent, D::Error> {
        use serde::de::{Error, IgnoredAny, SeqAccess};
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ArrayEvent;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a KV event as a tagged array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ArrayEvent, A::Error> {
                let tag: String = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let field = |n: usize| move || A::Error::invalid_length(n, &"more fields");
                let event = match tag.as_str() {
                    "BlockStored" => {
                        let block_hashes: Vec<InHash> = seq.next_element()?.ok_or_else(field(1))?;
                        let _parent: IgnoredAny = seq.next_element()?.ok_or_else(field(2))?;
                        let _tokens: IgnoredAny = seq.next_element()?.ok_or_else(field(3))?;
                        let block_size: u32 = seq.next_element()?.ok_or_else(field(4))?;
                        let _lora: Option<IgnoredAny> = seq.next_element()?;
                        let medium: Option<Option<String>> = seq.next_element()?;
                        InEvent::BlockStored {
                            block_hashes,
                            block_size,
                            medium: medium.flatten(),
                        }
                    }
                    "BlockRemoved" => {
                        let block_hashes: Vec<InHash> = seq.next_element()?.ok_or_else(field(1))?;
                        let medium: Option<Option<String>> = seq.next_element()?;
                        InEvent::BlockRemoved {
                            block_hashes,
                            medium: medium.flatten(),
                        }
                    }
                    "AllBlocksCleared" => InEvent::AllBlocksCleared {},
                    _ => InEvent::Other,
                };
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ArrayEvent(event))
            }
        }
        d.deserialize_seq(Visit)
    }
}

#[derive(serde::Deserialize)]
#[serde(tag = "type")]
enum InEvent {
    BlockStored {
        block_hashes: Vec<InHash>,
        block_size: u32,
        #[serde(default)]
        medium: Option<String>,
    },
    BlockRemoved {
        block_hashes: Vec<InHash>,
        #[serde(default)]
        medium: Option<String>,
    },
    AllBlocksCleared {},
    #[serde(other)]
    Other,
}

/// Whether an event's `medium` is the GPU cache (absent: vLLM before offloading).
fn on_gpu(medium: Option<&str>) -> bool {
    medium.is_none_or(|m| m.eq_ignore_ascii_case("gpu"))
}

/// The GPU-tier changes in one `KVEventBatch` as vLLM (or `routerlab engine`) sends it,
/// its events in either layout; other tiers' events and unknown event types are skipped.
pub fn decode_batch(payload: &[u8]) -> Result<Vec<Change>, String> {
    let batch: InBatch = rmp_serde::from_slice(payload).map_err(|e| e.to_string())?;
    Ok(batch
        .1
        .into_iter()
        .map(AnyEvent::event)
        .filter_map(|event| match event {
            InEvent::BlockStored {
                block_hashes,
                block_size,
                medium,
            } if on_gpu(medium.as_deref()) => Some(Change::Stored {
                hashes: block_hashes.into_iter().map(|h| h.0).collect(),
                block_size,
            }),
            InEvent::BlockRemoved {
                block_hashes,
                medium,
            } if on_gpu(medium.as_deref()) => Some(Change::Removed {
                hashes: block_hashes.into_iter().map(|h| h.0).collect(),
            }),
            InEvent::AllBlocksCleared {} => Some(Change::Cleared),
            _ => None,
        })
        .collect())
}

/// A bound publisher: hand it each step's events with [`Publisher::publish`].
pub struct Publisher {
    queue: SyncSender<(f64, Vec<KvEvent>, bool)>,
    endpoint: String,
    replay: Option<String>,
    dropped: Arc<AtomicU64>,
}

#[cfg(feature = "kv-events")]
fn zmq_error(what: &str, endpoint: &str, e: zmq::Error) -> LiveError {
    LiveError::Settings(format!("--kv-events{what} {endpoint}: {e}"))
}

impl Publisher {
    /// Refused: this build has no ZeroMQ (the `kv-events` feature).
    #[cfg(not(feature = "kv-events"))]
    pub fn bind(_settings: &KvEventsSettings, _block_size: u32) -> Result<Publisher, LiveError> {
        Err(LiveError::WithoutKvEvents("--publish-kv-events"))
    }

    /// Binds the sockets (reporting the endpoints as bound: a port 0 resolved) and starts
    /// the thread that sends; `block_size` is the engine's, in tokens.
    #[cfg(feature = "kv-events")]
    pub fn bind(settings: &KvEventsSettings, block_size: u32) -> Result<Publisher, LiveError> {
        let context = zmq::Context::new();
        let publisher = context
            .socket(zmq::PUB)
            .map_err(|e| zmq_error("", &settings.endpoint, e))?;
        publisher
            .bind(&settings.endpoint)
            .map_err(|e| zmq_error("", &settings.endpoint, e))?;
        let endpoint = last_endpoint(&publisher)?;
        let (router, replay) = match &settings.replay {
            Some(at) => {
                let router = context
                    .socket(zmq::ROUTER)
                    .map_err(|e| zmq_error("-replay", at, e))?;
                router
                    .set_maxmsgsize(MAX_REQUEST_BYTES)
                    .map_err(|e| zmq_error("-replay", at, e))?;
                router.bind(at).map_err(|e| zmq_error("-replay", at, e))?;
                let bound = last_endpoint(&router)?;
                (Some(router), Some(bound))
            }
            None => (None, None),
        };
        let (queue, batches) = std::sync::mpsc::sync_channel(QUEUE_BATCHES);
        let dropped = Arc::new(AtomicU64::new(0));
        std::thread::Builder::new()
            .name("kv-events".into())
            .spawn(move || send_loop(&publisher, router.as_ref(), &batches, block_size))
            .map_err(|e| LiveError::Settings(format!("--kv-events: cannot start: {e}")))?;
        Ok(Publisher {
            queue,
            endpoint,
            replay,
            dropped,
        })
    }

    /// The PUB socket's endpoint, as bound.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The replay socket's endpoint, as bound.
    pub fn replay_endpoint(&self) -> Option<&str> {
        self.replay.as_deref()
    }

    /// Queues one batch (never waits; a full queue drops it and counts it).
    pub fn publish(&self, events: Vec<KvEvent>) {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if let Err(TrySendError::Full(_)) = self.queue.try_send((ts, events, true)) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Numbers and keeps a batch for replay without sending it: what a subscriber that
    /// lost it sees (tests).
    #[cfg(all(test, feature = "kv-events"))]
    pub(crate) fn skip_live(&self, events: Vec<KvEvent>) {
        self.queue.send((0.0, events, false)).unwrap();
    }

    /// Batches dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("endpoint", &self.endpoint)
            .field("replay", &self.replay)
            .finish()
    }
}

#[cfg(feature = "kv-events")]
fn last_endpoint(socket: &zmq::Socket) -> Result<String, LiveError> {
    match socket.get_last_endpoint() {
        Ok(Ok(endpoint)) => Ok(endpoint),
        _ => Err(LiveError::Settings(
            "--kv-events: the socket cannot say where it is bound".into(),
        )),
    }
}

/// The batches sent and kept for replay, and the next one's sequence number.
#[cfg(feature = "kv-events")]
struct Outbox {
    kept: VecDeque<(u64, Vec<u8>)>,
    kept_bytes: usize,
    seq: u64,
}

#[cfg(feature = "kv-events")]
impl Outbox {
    fn send(
        &mut self,
        publisher: &zmq::Socket,
        ts: f64,
        events: &[KvEvent],
        block_size: u32,
        live: bool,
    ) {
        let payload = encode_batch(ts, events, block_size);
        let frames: [&[u8]; 3] = [b"", &self.seq.to_be_bytes(), &payload];
        // A PUB socket drops what a slow subscriber cannot take; it never blocks.
        if live {
            let _ = publisher.send_multipart(frames, zmq::DONTWAIT);
        }
        self.kept_bytes += payload.len();
        self.kept.push_back((self.seq, payload));
        while self.kept.len() > REPLAY_BATCHES || self.kept_bytes > REPLAY_BYTES {
            let Some((_, old)) = self.kept.pop_front() else {
                break;
            };
            self.kept_bytes -= old.len();
        }
        self.seq += 1;
    }
}

/// Sends each queued batch with the next sequence number, and answers replay requests,
/// until the publisher is dropped.
#[cfg(feature = "kv-events")]
fn send_loop(
    publisher: &zmq::Socket,
    router: Option<&zmq::Socket>,
    batches: &Receiver<(f64, Vec<KvEvent>, bool)>,
    block_size: u32,
) {
    let mut out = Outbox {
        kept: VecDeque::new(),
        kept_bytes: 0,
        seq: 0,
    };
    loop {
        // Everything queued goes out before a replay request is answered.
        match batches.recv_timeout(Duration::from_millis(2)) {
            Ok((ts, events, live)) => {
                out.send(publisher, ts, &events, block_size, live);
                while let Ok((ts, events, live)) = batches.try_recv() {
                    out.send(publisher, ts, &events, block_size, live);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(router) = router else { continue };
        while router.poll(zmq::POLLIN, 0).is_ok_and(|n| n > 0) {
            let Ok(request) = router.recv_multipart(zmq::DONTWAIT) else {
                break;
            };
            let [client, empty, start] = &request[..] else {
                continue;
            };
            let Ok(start) = <[u8; 8]>::try_from(start.as_slice()) else {
                continue;
            };
            if !empty.is_empty() {
                continue;
            }
            let start = u64::from_be_bytes(start);
            for (at, payload) in out.kept.iter().filter(|(at, _)| *at >= start) {
                let frames: [&[u8]; 4] = [client, b"", &at.to_be_bytes(), payload];
                let _ = router.send_multipart(frames, 0);
            }
            let end: [&[u8]; 4] = [client, b"", &END_SEQ, b""];
            let _ = router.send_multipart(end, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The array layout (vLLM up to 0.23): a tagged array per event, fields in order, as
    /// short as the oldest release's and as long as the newest's; a truncated one is an
    /// error, not an event.
    #[test]
    fn tagged_array_events_decode() {
        let none: Option<u64> = None;
        let oldest = (
            "BlockStored",
            vec![1u64, 2],
            none,
            Vec::<u32>::new(),
            16u32,
            none,
        );
        let cpu = (
            "BlockStored",
            vec![3u64],
            Some(2u64),
            Vec::<u32>::new(),
            16u32,
            none,
            "CPU",
            none,
            none,
            Some(0u64),
            none,
            none,
        );
        let removed = ("BlockRemoved", vec![1u64], "GPU", Some(0u64));
        let batch = rmp_serde::to_vec(&(
            1.0f64,
            (
                oldest,
                cpu,
                removed,
                ("AllBlocksCleared",),
                ("Future", 1, 2),
            ),
        ))
        .unwrap();
        assert_eq!(
            decode_batch(&batch).unwrap(),
            [
                Change::Stored {
                    hashes: vec![1, 2],
                    block_size: 16
                },
                Change::Removed { hashes: vec![1] },
                Change::Cleared,
            ]
        );
        let short = rmp_serde::to_vec(&(1.0f64, (("BlockStored", vec![1u64], none),))).unwrap();
        assert!(decode_batch(&short).is_err());
    }

    #[test]
    fn stores_of_one_chain_group_and_removals_group() {
        let events = [
            KvEvent::Stored {
                hash: 1,
                parent: None,
            },
            KvEvent::Stored {
                hash: 2,
                parent: Some(1),
            },
            // Another chain's block, after a block this engine already held (7).
            KvEvent::Stored {
                hash: 9,
                parent: Some(7),
            },
            KvEvent::Removed { hash: 4 },
            KvEvent::Removed { hash: 5 },
        ];
        let wire = wire_events(&events, 16);
        assert_eq!(wire.len(), 3);
        assert!(matches!(
            &wire[0],
            WireEvent::BlockStored { block_hashes, parent_block_hash: None, block_size: 16, .. }
                if block_hashes == &[1, 2]
        ));
        assert!(matches!(
            &wire[1],
            WireEvent::BlockStored { block_hashes, parent_block_hash: Some(7), .. }
                if block_hashes == &[9]
        ));
        assert!(matches!(
            &wire[2],
            WireEvent::BlockRemoved { block_hashes, medium: Some("GPU") } if block_hashes == &[4, 5]
        ));
    }

    #[test]
    fn a_batch_is_an_array_of_time_events_and_rank_with_tagged_maps() {
        let bytes = encode_batch(1.5, &[KvEvent::Removed { hash: 3 }], 16);
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        let expected = serde_json::json!([
            1.5,
            [{"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU"}],
            0
        ]);
        assert_eq!(value, expected);
    }

    #[cfg(feature = "kv-events")]
    #[test]
    fn the_replay_socket_ignores_bad_requests_and_replays_from_the_start_asked() {
        let publisher = Publisher::bind(
            &KvEventsSettings {
                endpoint: "tcp://127.0.0.1:0".into(),
                replay: Some("tcp://127.0.0.1:0".into()),
            },
            16,
        )
        .unwrap();
        for hash in 0..3 {
            publisher.publish(vec![KvEvent::Removed { hash }]);
        }
        let context = zmq::Context::new();
        let ask = |frames: Vec<Vec<u8>>| {
            let dealer = context.socket(zmq::DEALER).unwrap();
            dealer.set_rcvtimeo(500).unwrap();
            dealer
                .connect(publisher.replay_endpoint().unwrap())
                .unwrap();
            dealer.send_multipart(frames, 0).unwrap();
            let mut replies = Vec::new();
            while let Ok(reply) = dealer.recv_multipart(0) {
                let end = reply.get(2).is_some_and(Vec::is_empty);
                replies.push(reply);
                if end {
                    break;
                }
            }
            replies
        };
        // Over the size limit: the connection is dropped, nothing comes back.
        assert!(ask(vec![Vec::new(), vec![0; 1024]]).is_empty());
        // Not [empty, 8 bytes]: ignored.
        assert!(ask(vec![vec![0; 8]]).is_empty());
        // From 1: batches 1 and 2, then the end marker.
        let replies = ask(vec![Vec::new(), 1u64.to_be_bytes().to_vec()]);
        let seqs: Vec<[u8; 8]> = replies
            .iter()
            .map(|r| <[u8; 8]>::try_from(r[1].as_slice()).unwrap())
            .collect();
        assert_eq!(
            seqs,
            [1u64.to_be_bytes(), 2u64.to_be_bytes(), END_SEQ],
            "{replies:?}"
        );
        assert_eq!(publisher.dropped(), 0);
    }

    #[test]
    fn what_is_published_decodes_back_and_other_tiers_are_skipped() {
        let events = [
            KvEvent::Stored {
                hash: u64::MAX,
                parent: None,
            },
            KvEvent::Removed { hash: 2 },
        ];
        let changes = decode_batch(&encode_batch(0.5, &events, 16)).unwrap();
        assert_eq!(
            changes,
            [
                Change::Stored {
                    hashes: vec![u64::MAX],
                    block_size: 16
                },
                Change::Removed { hashes: vec![2] }
            ]
        );
        // vLLM's offloading tier, an event type of a later vLLM, a two-element batch.
        let other = serde_json::json!([1.0, [
            {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": null,
             "token_ids": [], "block_size": 16, "lora_id": null, "medium": "CPU", "lora_name": null},
            {"type": "SomethingNew", "x": 1},
            {"type": "AllBlocksCleared"}
        ]]);
        let bytes = rmp_serde::to_vec_named(&other).unwrap();
        assert_eq!(decode_batch(&bytes).unwrap(), [Change::Cleared]);
        assert!(decode_batch(b"\xc1").is_err());
    }
}
