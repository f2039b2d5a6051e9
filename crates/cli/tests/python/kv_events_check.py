"""Decodes what `routerlab engine --kv-events` publishes with vLLM's own message types.

The structs below are vLLM's (`vllm/distributed/kv_events.py`, as of vLLM 0.19: the
fields NVIDIA Dynamo 1.6.1's compatibility test pins, in order, with their defaults),
copied field for field: `EventBatch` an array (`array_like`), events maps tagged by
`type`. It subscribes with pyzmq (libzmq), waits for the events of the requests the test
sends, asks the replay socket for everything from sequence 0 as vLLM's example subscriber
does, and prints one JSON object: what it decoded.

Usage: kv_events_check.py PUB_URL REPLAY_URL BATCHES_WANTED READY_FILE
"""

import json
import sys
from typing import Any, Union

import msgspec
import zmq

ExternalBlockHash = Union[bytes, int]


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Union[int, None] = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base class for all KV cache-related events"""


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: Union[ExternalBlockHash, None]
    token_ids: list[int]
    block_size: int
    lora_id: Union[int, None]
    medium: Union[str, None]
    lora_name: Union[str, None]
    extra_keys: Union[list[Any], None] = None
    group_idx: Union[int, None] = None
    kv_cache_spec_kind: Union[str, None] = None
    kv_cache_spec_sliding_window: Union[int, None] = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: Union[str, None]
    group_idx: Union[int, None] = None
    kv_cache_spec_kind: Union[str, None] = None
    kv_cache_spec_sliding_window: Union[int, None] = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]


def summary(seq, batch):
    return {
        "seq": seq,
        "ts": batch.ts,
        "rank": batch.data_parallel_rank,
        "events": [
            {"type": type(e).__name__, **{f: getattr(e, f) for f in e.__struct_fields__}}
            for e in batch.events
        ],
    }


def main():
    pub_url, replay_url, wanted, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.connect(pub_url)
    sub.setsockopt_string(zmq.SUBSCRIBE, "")
    # The test sends its requests once this file exists (a PUB drops what it sends
    # before a subscriber is connected).
    sub.poll(200)
    open(ready, "w").close()
    live = []
    while len(live) < wanted:
        if not sub.poll(20000):
            break
        topic, seq_bytes, payload = sub.recv_multipart()
        assert topic == b"", topic
        assert len(seq_bytes) == 8, seq_bytes
        live.append(summary(int.from_bytes(seq_bytes, "big"), decoder.decode(payload)))
    replay = context.socket(zmq.REQ)
    replay.connect(replay_url)
    replay.send((0).to_bytes(8, "big"))
    replayed = []
    # A REQ socket takes one reply per request; a DEALER (with the empty delimiter a
    # REQ adds) takes the whole replay, as a router's subscriber does.
    first = replay.recv_multipart() if replay.poll(5000) else []
    dealer = context.socket(zmq.DEALER)
    dealer.connect(replay_url)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    end = None
    while dealer.poll(5000):
        empty, seq_bytes, payload = dealer.recv_multipart()
        assert empty == b""
        if not payload:
            end = int.from_bytes(seq_bytes, "big", signed=True)
            break
        replayed.append(summary(int.from_bytes(seq_bytes, "big"), decoder.decode(payload)))
    print(json.dumps({"live": live, "replayed": replayed, "end": end, "req_first": len(first)}))


main()
