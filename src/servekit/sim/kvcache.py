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


class KvCache:
    """Block accounting for one engine."""

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

    def allocate(self, hashes: Sequence[int], prompt_len: int, total_len: int) -> Allocation | None:
        """Reserve blocks for ``total_len`` tokens reusing cached prompt blocks; None if full."""
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
        for h in hashes[hits:need_total] if self.prefix_caching else ():
            if h not in self._active and h not in self._evictable:
                self._active[h] = 1
                alloc.hashes.append(h)
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
        for _ in range(max(0, count)):
            self._evictable.popitem(last=False)
