"""vLLM's KV-event structs release by release, field for field as each release declares
them in `vllm/distributed/kv_events.py` (read from its sdist on PyPI): up to 0.23 an event
is a tagged array (`array_like=True`), from 0.24 a map tagged by `type`; the batch is an
array in every release.

    0.10  BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id)
          BlockRemoved(block_hashes)
    0.11  + medium (both)
    0.14  + lora_name (BlockStored)
    0.17  + extra_keys = None (BlockStored)
    0.20  + group_idx = None (both)
    0.22  + kv_cache_spec_kind = None, kv_cache_spec_sliding_window = None (BlockStored)
    0.24  events are maps
    0.26  + locality = None (BlockRemoved)

`python3 vllm_kv_event_releases.py OUT_DIR` writes, for each release, `RELEASE.msgpack`:
one batch of a stored chain of two blocks, a stored block on the CPU tier (from 0.11),
a removal and a reset, encoded with that release's own definitions.
"""

import os
import sys
from typing import Any, Union

import msgspec

RELEASES = ["0.10", "0.11", "0.14", "0.17", "0.20", "0.22", "0.24", "0.26"]


def structs(release):
    v = tuple(int(x) for x in release.split("."))
    array_like = v < (0, 24)

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Union[int, None] = None

    class KVCacheEvent(
        msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False, tag=True
    ):
        pass

    stored = [
        ("block_hashes", list[int]),
        ("parent_block_hash", Union[int, None]),
        ("token_ids", list[int]),
        ("block_size", int),
        ("lora_id", Union[int, None]),
    ]
    removed = [("block_hashes", list[int])]
    if v >= (0, 11):
        stored.append(("medium", Union[str, None]))
        removed.append(("medium", Union[str, None]))
    if v >= (0, 14):
        stored.append(("lora_name", Union[str, None]))
    if v >= (0, 17):
        stored.append(("extra_keys", Union[list[Any], None], None))
    if v >= (0, 20):
        stored.append(("group_idx", Union[int, None], None))
        removed.append(("group_idx", Union[int, None], None))
    if v >= (0, 22):
        stored.append(("kv_cache_spec_kind", Union[str, None], None))
        stored.append(("kv_cache_spec_sliding_window", Union[int, None], None))
    if v >= (0, 26):
        removed.append(("locality", Union[str, None], None))
    BlockStored = msgspec.defstruct("BlockStored", stored, bases=(KVCacheEvent,))
    BlockRemoved = msgspec.defstruct("BlockRemoved", removed, bases=(KVCacheEvent,))
    AllBlocksCleared = msgspec.defstruct("AllBlocksCleared", [], bases=(KVCacheEvent,))
    return EventBatch, BlockStored, BlockRemoved, AllBlocksCleared, v


def batch(release):
    EventBatch, BlockStored, BlockRemoved, AllBlocksCleared, v = structs(release)
    newer = {"medium": "GPU"} if v >= (0, 11) else {}
    if v >= (0, 14):
        newer["lora_name"] = None
    events = [
        BlockStored(
            block_hashes=[11, 12],
            parent_block_hash=None,
            token_ids=list(range(32)),
            block_size=16,
            lora_id=None,
            **newer,
        )
    ]
    if v >= (0, 11):
        cpu = dict(newer, medium="CPU")
        events.append(
            BlockStored(
                block_hashes=[13],
                parent_block_hash=12,
                token_ids=list(range(16)),
                block_size=16,
                lora_id=None,
                **cpu,
            )
        )
    removed_extra = {"medium": "GPU"} if v >= (0, 11) else {}
    if v >= (0, 20):
        removed_extra["group_idx"] = 0
    events.append(BlockRemoved(block_hashes=[11], **removed_extra))
    events.append(AllBlocksCleared())
    return msgspec.msgpack.encode(EventBatch(ts=1.5, events=events, data_parallel_rank=0))


if __name__ == "__main__":
    out = sys.argv[1]
    for release in RELEASES:
        with open(os.path.join(out, release + ".msgpack"), "wb") as f:
            f.write(batch(release))
