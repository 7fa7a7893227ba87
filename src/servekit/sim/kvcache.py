"""KV capacity in blocks with an LRU prefix cache keyed by chained block hashes.

Only counts and the hashes of cached blocks are kept, never one object per
block, so a 3-million-token cache costs nothing until it fills with prefixes.
Simplification against vLLM: a sequence reserves all its blocks (prompt and
output) when it is admitted, so there is no preemption; a sequence that does
not fit waits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (stable across processes)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        out.append(parent)
    return out


@dataclass(slots=True)
class Allocation:
    """The blocks one sequence holds: shared cached blocks plus private ones."""

    hashes: list[int] = field(default_factory=list)
    private: int = 0
    cached_tokens: int = 0
    epoch: int = 0


class KvListener(Protocol):
    """Told what enters and leaves the prefix cache (the KV-event publisher, sim.kvevents)."""

    def stored(self, hashes: Sequence[int], parent: int | None, token_ids: Sequence[int]) -> None:
        """Consecutive blocks of one prompt entered the cache; ``parent`` precedes them."""

    def removed(self, hashes: Sequence[int]) -> None:
        """Cached blocks were evicted."""

    def cleared(self) -> None:
        """Every cached block is gone."""


class KvCache:
    """Block accounting for one engine."""

    listener: KvListener | None = None

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._active: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._private = 0
        self._epoch = 0

    @property
    def used_blocks(self) -> int:
        return len(self._active) + self._private

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks - len(self._evictable)

    def usage(self) -> float:
        """Fraction of blocks held by sequences (cached-but-free blocks do not count)."""
        return self.used_blocks / self.num_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(
        self,
        hashes: Sequence[int],
        prompt_len: int,
        total_len: int,
        token_ids: Sequence[int] = (),
    ) -> Allocation | None:
        """Reserve blocks for ``total_len`` tokens reusing cached prompt blocks; None if full.

        ``token_ids`` (the prompt's) are only read to tell a listener what it stored.
        """
        hits = self._count_hits(hashes, (prompt_len - 1) // self.block_size)
        need_total = self.blocks_for(total_len)
        fresh = need_total - hits
        reusable_evictable = sum(1 for h in hashes[:hits] if h in self._evictable)
        if fresh > self.free_blocks + len(self._evictable) - reusable_evictable:
            return None
        alloc = Allocation(cached_tokens=hits * self.block_size, epoch=self._epoch)
        for h in hashes[:hits]:
            self._take(h)
            alloc.hashes.append(h)
        self._evict(fresh - self.free_blocks)
        new: list[int] = []
        for n, h in enumerate(hashes[:need_total] if self.prefix_caching else ()):
            if n >= hits and h not in self._active and h not in self._evictable:
                self._active[h] = 1
                alloc.hashes.append(h)
                new.append(n)
        if new and self.listener is not None:
            self._tell_stored(hashes, new, token_ids)
        alloc.private = need_total - len(alloc.hashes)
        self._private += alloc.private
        return alloc

    def free(self, alloc: Allocation) -> None:
        """Return a sequence's blocks; its hashed blocks stay cached until evicted.

        Allocations made before a :meth:`reset` are ignored: their blocks are gone.
        """
        if alloc.epoch != self._epoch:
            return
        for h in alloc.hashes:
            left = self._active[h] - 1
            if left:
                self._active[h] = left
            else:
                del self._active[h]
                self._evictable[h] = None
        self._private -= alloc.private
        alloc.hashes = []
        alloc.private = 0

    def reset(self) -> None:
        """Drop everything (engine restart); older allocations become void."""
        self._epoch += 1
        self._active.clear()
        self._evictable.clear()
        self._private = 0
        if self.listener is not None:
            self.listener.cleared()

    def _tell_stored(self, hashes: Sequence[int], new: list[int], token_ids: Sequence[int]) -> None:
        """One ``stored`` per run of consecutive new blocks, as vLLM's BlockStored."""
        assert self.listener is not None
        size = self.block_size
        start = prev = new[0]
        for n in [*new[1:], -1]:
            if n == prev + 1:
                prev = n
                continue
            tokens = token_ids[start * size : (prev + 1) * size]
            if len(tokens) == (prev + 1 - start) * size:  # without the prompt, nothing to tell
                parent = hashes[start - 1] if start else None
                self.listener.stored(hashes[start : prev + 1], parent, tokens)
            start = prev = n

    def _count_hits(self, hashes: Sequence[int], limit: int) -> int:
        if not self.prefix_caching:
            return 0
        hits = 0
        for h in hashes[:limit]:
            if h not in self._active and h not in self._evictable:
                break
            hits += 1
        return hits

    def _take(self, h: int) -> None:
        if h in self._active:
            self._active[h] += 1
        else:
            del self._evictable[h]
            self._active[h] = 1

    def _evict(self, count: int) -> None:
        gone = [self._evictable.popitem(last=False)[0] for _ in range(max(0, count))]
        if gone and self.listener is not None:
            self.listener.removed(gone)
