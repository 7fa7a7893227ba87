"""The proxy's msgspec decoders of vLLM's KV-event batches, for :mod:`servekit.proxy.kvwire`.

Built from the one schema both sides use (:mod:`servekit.kvschema`), with the
proxy's caps put on the fields a publisher could make big. Decoding against it
bounds what a frame can make the proxy do: a value of the wrong type stops the
decode where it stands, nothing nests deeper than the events' own fields, an
array longer than its cap and a block hash longer than :data:`MAX_HASH_BYTES`
are refused from their headers before their items are read, and
``extra_keys`` is kept as its bytes. Events come in two forms, a map tagged by
``type`` (vLLM 0.11 and later) and an array whose first item is that tag
(older engines); a batch keeps its events as raw msgpack, each decoded by the
decoder of its form.

Needs msgspec; imported only when the kv-events policy decodes a frame (the
zipapp, which has aiohttp only, carries kvwire's types but not this).
"""

from typing import Annotated, Any

import msgspec
from msgspec import Meta, Raw

from servekit.kvschema import CLEARED, REMOVED, STORED, struct_types

# One batch is one scheduler step's blocks: at most --max-num-batched-tokens token ids
# (a 128k-token step is about 0.7 MB of msgpack); each cap leaves room for twice that,
# and a batch at the caps costs the loop about 0.1 s.
MAX_EVENTS = 16384
MAX_BLOCKS = 1 << 15  # blocks stored and removed, per batch
MAX_TOKENS = 1 << 18  # token ids, per batch
# vLLM's block hashes are sha256 digests (32 bytes), xxhash ones (8 or 16), or ints
# (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): a longer "hash" is refused, never indexed (a 4 MB
# one per BlockStored used to be kept as it came).
MAX_HASH_BYTES = 64

Hash = int | Annotated[bytes, Meta(max_length=MAX_HASH_BYTES)]
NIL = Raw(b"\xc0")
CAPS: dict[str, tuple[Any, Any]] = {
    "events": (Annotated[list[Raw], Meta(max_length=MAX_EVENTS)], None),
    "block_hashes": (Annotated[list[Hash], Meta(max_length=MAX_BLOCKS)], None),
    "parent_block_hash": (Hash | None, None),
    "token_ids": (Annotated[list[int], Meta(max_length=MAX_TOKENS)], None),
    "extra_keys": (Raw, NIL),  # read from its bytes (kvwire), never decoded
}
AS_MAPS = struct_types("read", "map", CAPS)
AS_ARRAYS = struct_types("read", "array", CAPS)
BATCH: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(AS_MAPS["EventBatch"])
AS_MAP: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    AS_MAPS[STORED] | AS_MAPS[REMOVED] | AS_MAPS[CLEARED]
)
AS_ARRAY: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    AS_ARRAYS[STORED] | AS_ARRAYS[REMOVED] | AS_ARRAYS[CLEARED]
)
