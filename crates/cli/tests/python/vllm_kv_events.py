"""vLLM's KV-event message types, copied field for field.

The fields NVIDIA Dynamo 1.6.1's compatibility test pins, in order, with their defaults.
`EventBatch` is an array (`array_like`); events are maps tagged by `type`, vLLM's layout
from 0.24 (up to 0.23 each event was a tagged array: `vllm_kv_event_releases.py` has every
release's). Imported by the tests' Python scripts.
"""

from typing import Any, Union

import msgspec

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
