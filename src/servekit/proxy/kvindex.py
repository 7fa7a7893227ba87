"""Which prefix blocks each engine holds, learned from its KV events.

The proxy never recomputes the engine's own block hashes: vLLM's depend on its
hash algorithm (``--prefix-caching-hash-algo``), the seed of its root hash
(``PYTHONHASHSEED``, random for xxhash) and the serialisation of each block,
all of which change between versions. ``BlockStored`` carries the token ids of
its blocks and the hash of the block before them, so the index keys each block
by its own chain over token ids (:func:`chain_keys`: the key of block *n* is a
hash of block *n-1*'s key and block *n*'s tokens) and keeps the engine's hash
only to translate ``parent_block_hash`` and ``BlockRemoved``. A prompt's keys,
computed from its token ids the same way, then match exactly the blocks the
engine would reuse for it, whatever hash function the engine runs.

Each index is bounded in bytes (its share of ``--kv-index-bytes``), not only in
blocks: a block costs what its two dict entries and its keys take, plus its
hash (:func:`block_bytes`; a hash is at most 64 bytes, :mod:`servekit.proxy.kvdecoder`),
and a store that would pass the bound empties the index first (an overflow,
counted): what it learns after is certain, so it never claims a block the
engine lacks.

Standard library only; the event stream is fed by :mod:`servekit.proxy.kvevents`.
"""

from __future__ import annotations

import enum
import sys
from collections import Counter, OrderedDict
from collections.abc import Sequence

from servekit.proxy.kvwire import Batch, Cleared, Hash, Removed, Stored

ROOT = 0
INDEX_BYTES = 512 << 20  # the default of --kv-index-bytes, all engines together
APPROX_BLOCKS = 1 << 17  # per engine: the proxy's own record of what it sent there
# A prompt's blocks keyed per block size: 512k tokens at vLLM's default 16, 32k at 1;
# the match of a longer prompt is read on its leading blocks.
MAX_PROMPT_BLOCKS = 1 << 15
# What one block holds besides its hash: its entries in ``_key_of`` and ``_held`` (each
# dict's share of its table, resized as it grows) and its chain key, an int. Measured
# with tracemalloc on CPython 3.11 at 70-110 bytes; tests/proxy/test_kv_events.py
# checks the account against tracemalloc.
BLOCK_OVERHEAD = 112


def block_bytes(engine_hash: Hash) -> int:
    """The memory one indexed block takes, its hash included."""
    return BLOCK_OVERHEAD + sys.getsizeof(engine_hash)


def chain_keys(token_ids: Sequence[int], block_size: int, parent: int = ROOT) -> list[int]:
    """Keys of the full blocks of ``token_ids``, chained from ``parent``.

    Python's hash of a tuple of ints is the same in every process (no string
    salt), and only this process compares keys anyway.
    """
    out: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        out.append(parent)
    return out


def prompt_keys(
    token_ids: Sequence[object], sizes: Sequence[int], max_blocks: int = MAX_PROMPT_BLOCKS
) -> dict[int, list[int]] | None:
    """Keys of the leading ``max_blocks`` blocks of a prompt, per block size; None when
    ``token_ids`` are not all ints (not a token-id prompt). Run in a parse worker for a
    long prompt (:mod:`servekit.proxy.parsepool`), so it takes only picklable values."""
    if not all(type(t) is int for t in token_ids):
        return None
    ids: Sequence[int] = token_ids  # type: ignore[assignment]  # checked just above
    return {size: chain_keys(ids[: size * max_blocks], size) for size in sizes}


class Feed(enum.Enum):
    """Where an engine's event stream stands; only LIVE is scored from the index."""

    OFF = "off"  # no --kv-events for this engine
    CONNECTING = "connecting"  # subscribed, publisher not reached yet
    LIVE = "live"
    GAP = "gap"  # events were lost and could not be replayed: index rebuilt from empty
    DOWN = "down"  # the publisher's connection dropped


class EngineIndex:
    """The blocks one engine holds, and the health of its event stream."""

    def __init__(self, feed: Feed = Feed.OFF, max_bytes: int = INDEX_BYTES) -> None:
        self.feed = feed
        self.max_bytes = max_bytes
        self.nbytes = 0  # what the blocks held take (block_bytes each)
        self.overflows = 0  # times a store would have passed max_bytes: emptied first
        self.block_size: int | None = None
        self.last_seq: int | None = None
        self._key_of: dict[Hash, int] = {}
        self._held: Counter[int] = Counter()
        self.batches = 0
        self.gaps = 0
        self.bad = 0  # frames dropped
        self.oversized = 0  # of them, over the caps in bytes, events, blocks or token ids
        self.unanchored = 0  # blocks whose parent the index never saw

    @property
    def blocks(self) -> int:
        return len(self._key_of)

    def clear(self) -> None:
        self._key_of.clear()
        self._held.clear()
        self.nbytes = 0

    def expects(self, seq: int) -> bool:
        """True when ``seq`` follows the last batch applied (or nothing was seen yet)."""
        return self.last_seq is None or seq == self.last_seq + 1

    def apply(self, batch: Batch) -> None:
        """Apply one batch in order; a sequence number that went back means a new publisher."""
        if self.last_seq is not None and batch.seq <= self.last_seq:
            self.clear()  # the engine restarted: its cache is new
        self.last_seq = batch.seq
        self.batches += 1
        for event in batch.events:
            if isinstance(event, Stored):
                self._store(event)
            elif isinstance(event, Removed):
                self._remove(event.hashes)
            elif isinstance(event, Cleared):
                self.clear()

    def _store(self, event: Stored) -> None:
        parent = ROOT
        if event.parent is not None:
            found = self._key_of.get(event.parent)
            if found is None:
                self.unanchored += len(event.hashes)
                return
            parent = found
        if self.nbytes + sum(map(block_bytes, event.hashes)) > self.max_bytes:
            self.clear()  # a subset of the engine's blocks stays true; a superset would not
            self.overflows += 1
        self.block_size = event.block_size
        tokens = event.token_ids
        size = event.block_size
        for n, engine_hash in enumerate(event.hashes):
            chunk = tuple(tokens[n * size : (n + 1) * size])
            parent = hash((parent, chunk) if event.extra is None else (parent, chunk, event.extra))
            old = self._key_of.get(engine_hash)
            if old is not None:
                self._drop(old)
            elif self.nbytes + block_bytes(engine_hash) > self.max_bytes:
                return  # one event larger than the whole bound: its leading blocks only
            else:
                self.nbytes += block_bytes(engine_hash)
            self._key_of[engine_hash] = parent
            self._held[parent] += 1

    def _remove(self, hashes: Sequence[Hash]) -> None:
        for engine_hash in hashes:
            key = self._key_of.pop(engine_hash, None)
            if key is not None:
                self._drop(key)
                self.nbytes -= block_bytes(engine_hash)

    def _drop(self, key: int) -> None:
        left = self._held[key] - 1
        if left > 0:
            self._held[key] = left
        else:
            del self._held[key]

    def holds(self, key: int) -> bool:
        return key in self._held

    def matched(self, keys: Sequence[int]) -> int:
        """How many leading ``keys`` the engine holds (a prefix hit stops at the first miss)."""
        n = 0
        for key in keys:
            if key not in self._held:
                break
            n += 1
        return n


class SentRecord:
    """The approximate view: block keys of the prompts the proxy sent to one engine.

    Used when the engine's events are not live, as Dynamo's router does without
    events: an engine probably still holds what it was recently sent. With live
    events it covers the moment between sending a prompt and its ``BlockStored``
    (a burst of one prefix would otherwise spread before the first one lands):
    :meth:`sent_since` says whether a key was sent after a moment. Bounded, least
    recently sent first out.
    """

    def __init__(self, capacity: int = APPROX_BLOCKS) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[int, float] = OrderedDict()

    def add(self, keys: Sequence[int], now: float = 0.0) -> None:
        for key in keys:
            self._keys[key] = now
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()

    def sent_since(self, key: int, since: float) -> bool:
        sent = self._keys.get(key)
        return sent is not None and sent >= since

    def matched(self, keys: Sequence[int]) -> int:
        n = 0
        for key in keys:
            if key not in self._keys:
                break
            n += 1
        return n
