"""Decodes what `routerlab engine --kv-events` publishes with vLLM's own message types.

The structs are vLLM's, copied field for field (`vllm_kv_events.py`). It subscribes
with pyzmq (libzmq), waits for the events of the requests the test sends, asks the
replay socket for everything from sequence 0 as vLLM's example subscriber does, and
prints one JSON object: what it decoded.

Usage: kv_events_check.py PUB_URL REPLAY_URL BATCHES_WANTED READY_FILE
"""

import json
import sys

import msgspec
import zmq

from vllm_kv_events import KVEventBatch


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
