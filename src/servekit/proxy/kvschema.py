"""The msgspec schema of vLLM's KV-event batches, for :mod:`servekit.proxy.kvwire`.

Decoding against it bounds what a frame can make the proxy do: a value of the
wrong type stops the decode where it stands, nothing nests deeper than the
events' own fields, an array longer than its cap is refused from its header
before its items are read, and ``extra_keys`` is kept as its bytes. Events come
in two forms, a map tagged by ``type`` (vLLM 0.11 and later) and an array whose
first item is that tag (older engines); a batch keeps its events as raw
msgpack, each decoded by the decoder of its form.

Needs msgspec; imported only when the kv-events policy decodes a frame (the
zipapp, which has aiohttp only, carries kvwire's types but not this).
"""

from typing import Annotated

import msgspec
from msgspec import Meta, Raw, Struct

# One batch is one scheduler step's blocks: at most --max-num-batched-tokens token ids
# (a 128k-token step is about 0.7 MB of msgpack); each cap leaves room for twice that,
# and a batch at the caps costs the loop about 0.1 s.
MAX_EVENTS = 16384
MAX_BLOCKS = 1 << 15  # blocks stored and removed, per batch
MAX_TOKENS = 1 << 18  # token ids, per batch

Hashes = Annotated[list[int | bytes], Meta(max_length=MAX_BLOCKS)]
Tokens = Annotated[list[int], Meta(max_length=MAX_TOKENS)]
NIL = Raw(b"\xc0")


class StoredMap(Struct, tag_field="type", tag="BlockStored"):
    block_hashes: Hashes
    token_ids: Tokens
    block_size: int
    parent_block_hash: int | bytes | None = None
    lora_id: int | str | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: Raw = NIL


class RemovedMap(Struct, tag_field="type", tag="BlockRemoved"):
    block_hashes: Hashes


class ClearedMap(Struct, tag_field="type", tag="AllBlocksCleared"):
    pass


class StoredArray(Struct, array_like=True, tag_field="type", tag="BlockStored"):
    block_hashes: Hashes
    parent_block_hash: int | bytes | None
    token_ids: Tokens
    block_size: int
    lora_id: int | str | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: Raw = NIL


class RemovedArray(Struct, array_like=True, tag_field="type", tag="BlockRemoved"):
    block_hashes: Hashes


class ClearedArray(Struct, array_like=True, tag_field="type", tag="AllBlocksCleared"):
    pass


class EventBatch(Struct, array_like=True):
    ts: float
    events: Annotated[list[Raw], Meta(max_length=MAX_EVENTS)]
    data_parallel_rank: int | None = None


STORED = (StoredMap, StoredArray)
REMOVED = (RemovedMap, RemovedArray)
BATCH = msgspec.msgpack.Decoder(EventBatch)
AS_MAP = msgspec.msgpack.Decoder(StoredMap | RemovedMap | ClearedMap)
AS_ARRAY = msgspec.msgpack.Decoder(StoredArray | RemovedArray | ClearedArray)
