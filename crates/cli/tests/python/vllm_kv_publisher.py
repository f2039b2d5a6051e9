"""Stands in for vLLM engines publishing KV events, with vLLM's own block keys.

It tokenizes each prompt with the Hugging Face `tokenizers` library (the library vLLM's
fast tokenizers are), adding special tokens as vLLM's completions API does, and hashes
the full blocks with vLLM's functions (`vllm/utils/hashing.py`, `hash_block_tokens` and
`init_none_hash` of `vllm/v1/core/kv_cache_utils.py`, `maybe_convert_block_hash` with
`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` on, as of vLLM 0.19), re-typed here. Then, for each
engine of the spec, it binds a socket on tcp://127.0.0.1:0, writes the URLs and keys to
READY_FILE as JSON, and once a subscriber is connected publishes one batch, sequence 0,
framed as vLLM's `ZmqEventPublisher` frames it: `BlockStored` of each of its prompts. It
stays up until its stdin closes.

Usage: vllm_kv_publisher.py SPEC_JSON READY_FILE, SPEC_JSON
{"tokenizer": PATH, "algo": NAME, "seed": STR, "block_size": N, "engines": [[PROMPT...]...]}
"""

import hashlib
import json
import os
import pickle
import sys
import time

import cbor2
import msgspec
import tokenizers
import xxhash
import zmq

from vllm_kv_events import BlockStored, KVEventBatch


def sha256(value):
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(value):
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def xxhash_pickle(value):
    return xxhash.xxh3_128_digest(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def xxhash_cbor(value):
    return xxhash.xxh3_128_digest(cbor2.dumps(value, canonical=True))


HASHES = {"sha256": sha256, "sha256_cbor": sha256_cbor, "xxhash": xxhash_pickle,
          "xxhash_cbor": xxhash_cbor}


def block_keys(hash_fn, none_hash, token_ids, block_size):
    """Each full block's hash, chained from its parent's; the first's parent NONE_HASH."""
    keys, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = tuple(token_ids[start:start + block_size])
        parent = hash_fn((parent if parent else none_hash, block, None))
        keys.append(int.from_bytes(parent, byteorder="big") & ((1 << 64) - 1))
    return keys


def main():
    spec = json.load(open(sys.argv[1]))
    ready = sys.argv[2]
    hash_fn = HASHES[spec["algo"]]
    none_hash = hash_fn(spec["seed"])
    tokenizer = tokenizers.Tokenizer.from_file(spec["tokenizer"])
    size = spec["block_size"]
    context = zmq.Context()
    engines = []
    for prompts in spec["engines"]:
        socket = context.socket(zmq.XPUB)
        socket.bind("tcp://127.0.0.1:0")
        events, keys = [], []
        for prompt in prompts:
            ids = tokenizer.encode(prompt, add_special_tokens=True).ids
            chain = block_keys(hash_fn, none_hash, ids, size)
            keys.append({"ids": ids, "keys": chain})
            events.append(BlockStored(
                block_hashes=chain, parent_block_hash=None,
                token_ids=ids[:len(chain) * size], block_size=size, lora_id=None,
                medium="GPU", lora_name=None))
        engines.append((socket, events, keys))
    with open(ready + ".tmp", "w") as out:
        json.dump({"urls": [s.getsockopt_string(zmq.LAST_ENDPOINT) for s, _, _ in engines],
                   "keys": [k for _, _, k in engines]}, out)
    os.rename(ready + ".tmp", ready)
    encoder = msgspec.msgpack.Encoder()
    for socket, events, _ in engines:
        if not socket.poll(30000):
            sys.exit("no subscriber came")
        assert socket.recv() == b"\x01"
        payload = encoder.encode(KVEventBatch(ts=time.time(), events=events))
        socket.send_multipart((b"", (0).to_bytes(8, "big"), payload))
    sys.stdin.read()


main()
