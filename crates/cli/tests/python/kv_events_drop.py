"""Forwards engines' KV event streams, dropping some batches: a lossy network in between.

For each PUB_URL it subscribes there and republishes on a PUB socket of its own (bound to
any free port), every message as it came except the batches whose sequence number is in
DROP. It writes the URLs it publishes on, one a line in the order given, to READY_FILE
once all are bound and subscribed, then forwards until killed.

Usage: kv_events_drop.py READY_FILE DROP(comma-separated sequence numbers) PUB_URL...
"""

import sys

import zmq

ready, drop, inputs = sys.argv[1], {int(s) for s in sys.argv[2].split(",")}, sys.argv[3:]
context = zmq.Context()
poller = zmq.Poller()
pairs = {}
outputs = []
for url in inputs:
    sub = context.socket(zmq.SUB)
    sub.connect(url)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    pub = context.socket(zmq.PUB)
    pub.bind("tcp://127.0.0.1:*")
    outputs.append(pub.getsockopt_string(zmq.LAST_ENDPOINT))
    poller.register(sub, zmq.POLLIN)
    pairs[sub] = pub
with open(ready + ".tmp", "w") as f:
    f.write("\n".join(outputs) + "\n")
import os

os.rename(ready + ".tmp", ready)
while True:
    for sub, _ in poller.poll():
        frames = sub.recv_multipart()
        if len(frames) == 3 and int.from_bytes(frames[1], "big") in drop:
            continue
        pairs[sub].send_multipart(frames)
